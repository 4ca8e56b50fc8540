"""What a captures directory holds and how it is kept within its size limit: the captures with
their sizes, pins and leases, and the removal of the oldest ones when the limit is reached.

Layer: adapter.capture (storage, beside captures_dir.py and image_store.py). Knows the
directory's layout and the bundle manifest; nothing of DAP or of recording.

Issue 33: nothing removed a capture, and nothing said how much they held. Now:

- A capture is a bundle directory of the captures directory (one with a manifest.json); the
  store (`.store/`, image_store.py) holds the program files they ran through, each once.
- Its size is the bytes of its own files; the store's files are counted once for the directory
  (and once per capture that names them, under "images", in listings). Files hard-linked
  between captures (before the store) are counted once too (by inode).
- `CAPTURE/.pinned` keeps a capture whatever the limit.
- `CAPTURE/.lease` is flock(2)ed, shared, by every session that looks at the capture (the one
  that recorded it, a replay) for as long as it does; the lock dies with the process, so a
  crashed session leaves no stale lease. A capture whose lease cannot be taken exclusively is
  in use and is never removed; the lease is held exclusively while it is being removed.
- The limit: the launch configuration's `capturesLimit`, else `ptdebug captures limit SIZE`'s
  (kept in `.store/settings.json`), else DEFAULT_LIMIT. `enforce` removes the oldest unpinned
  captures no one uses until the directory fits, then the store files no capture names.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import pathlib
import re
import shutil

from adapter.capture import image_store
from adapter.capture.bundle import CAPTURE_PRIVATE, BundleError, read_manifest

DEFAULT_LIMIT = 2 << 30
"""2 GiB: a few captures of a large inference service (libtorch_cpu.so alone is ~490 MB)."""
LEASE, PIN = CAPTURE_PRIVATE
SETTINGS = "settings.json"
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1000, "kib": 1 << 10, "m": 1 << 20, "mb": 10 ** 6,
          "mib": 1 << 20, "g": 1 << 30, "gb": 10 ** 9, "gib": 1 << 30, "t": 1 << 40,
          "tb": 10 ** 12, "tib": 1 << 40, "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30,
          "ti": 1 << 40}


class RetentionError(BundleError):
    """A capture cannot be pinned, removed or found, or a size is malformed; the text says
    which and why."""


def parse_size(text) -> int:
    """Bytes from `2GiB`, `500M`, `1.5 GB`, `1048576` (an int as it is). Raises RetentionError
    naming the text."""
    if type(text) is int:
        if text < 0:
            raise RetentionError(f"a size cannot be negative, got {text}")
        return text
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    unit = _UNITS.get(match.group(2).lower()) if match else None
    if unit is None:
        raise RetentionError(f"{text!r} is not a size (e.g. 2GiB, 500MB, 1048576)")
    return int(float(match.group(1)) * unit)


def show_size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# --- leases -------------------------------------------------------------------------------
class Lease:
    """A session's shared lock on one capture: while it is held, no one removes the capture."""

    def __init__(self, capture: str | os.PathLike):
        self.capture = pathlib.Path(capture)
        self._fd = os.open(self.capture / LEASE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            raise RetentionError(f"{self.capture}: being removed") from None

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _take_exclusive(capture: pathlib.Path) -> int | None:
    """An fd holding `capture`'s lease exclusively, or None when a session holds it."""
    try:
        fd = os.open(capture / LEASE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def in_use(capture: str | os.PathLike) -> bool:
    """Whether a session holds `capture`'s lease (no lease file: no one ever did)."""
    try:  # read-only: a listing of a directory one cannot write still tells
        fd = os.open(os.path.join(capture, LEASE), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False  # no lease file: no session ever held it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


# --- what the directory holds -------------------------------------------------------------
@dataclasses.dataclass
class CaptureInfo:
    name: str
    path: pathlib.Path
    created: str
    status: str
    own_bytes: int
    """Bytes of the capture's own files (a file hard-linked from an earlier capture: once, in
    the earliest)."""
    keys: set[str]
    """The store entries its images name."""
    image_bytes: int
    pinned: bool
    in_use: bool

    def as_json(self) -> dict:
        return {"name": self.name, "path": str(self.path), "created": self.created,
                "status": self.status, "bytes": self.own_bytes, "image_bytes": self.image_bytes,
                "images": sorted(self.keys), "pinned": self.pinned, "in_use": self.in_use}


def captures(directory: str | os.PathLike) -> list[CaptureInfo]:
    """The captures of `directory`, oldest first (by the manifest's `created`, then name)."""
    directory = pathlib.Path(directory)
    store = store_sizes(directory)
    seen: set[tuple[int, int]] = set()
    found = []
    for path in sorted(p for p in directory.iterdir() if not p.name.startswith(".")):
        if path.is_symlink() or not (path / "manifest.json").is_file():
            continue
        try:
            manifest = read_manifest(path)
        except BundleError:
            manifest = {}
        keys = image_store.stored_keys(manifest)
        found.append(CaptureInfo(
            path.name, path, manifest.get("created") or "", manifest.get("status") or "unreadable",
            _bytes(path, seen), keys, sum(store.get(k, 0) for k in keys),
            (path / PIN).exists(), in_use(path)))
    return sorted(found, key=lambda c: (c.created, c.name))


def _bytes(path: pathlib.Path, seen: set[tuple[int, int]]) -> int:
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def store_sizes(directory: str | os.PathLike) -> dict[str, int]:
    images = image_store.store_directory(directory) / "images"
    if not images.is_dir():
        return {}
    return {p.name: p.stat().st_size for p in images.iterdir()
            if not p.name.startswith(".") and p.is_file()}


def usage(directory: str | os.PathLike, found: list[CaptureInfo] | None = None) -> dict:
    """Bytes held: the captures' own files, the store's (each file once), and the store's
    files no capture names."""
    found = captures(directory) if found is None else found
    store = store_sizes(directory)
    named = set().union(*(c.keys for c in found)) if found else set()
    own = sum(c.own_bytes for c in found)
    store_bytes = sum(store.values())
    return {"captures": len(found), "capture_bytes": own, "store_bytes": store_bytes,
            "unreferenced_store_bytes": sum(n for k, n in store.items() if k not in named),
            "total_bytes": own + store_bytes}


# --- limits ---------------------------------------------------------------------------------
def configured_limit(directory: str | os.PathLike) -> int:
    """The limit `ptdebug captures limit` set for `directory`, else DEFAULT_LIMIT."""
    path = image_store.store_directory(directory) / SETTINGS
    try:
        limit = json.loads(path.read_text()).get("limit")
    except (OSError, ValueError, AttributeError):
        return DEFAULT_LIMIT
    return limit if type(limit) is int and limit >= 0 else DEFAULT_LIMIT


def set_limit(directory: str | os.PathLike, limit: int) -> None:
    store = image_store.store_directory(directory)
    store.mkdir(parents=True, exist_ok=True)
    tmp = store / (SETTINGS + ".tmp")
    tmp.write_text(json.dumps({"limit": limit}) + "\n")
    os.replace(tmp, store / SETTINGS)


def enforce(directory: str | os.PathLike, limit: int | None = None) -> dict:
    """Keep `directory` within `limit` bytes (None: its configured limit): remove the oldest
    captures that are neither pinned nor in use until it fits, then every store file no
    capture names. Returns {"removed": [names], "freed_bytes", "total_bytes", "limit",
    "over": bool (still over: what is left is pinned or in use)}."""
    directory = pathlib.Path(directory)
    limit = configured_limit(directory) if limit is None else limit
    removed = []
    with image_store.locked(directory, exclusive=True):
        found = captures(directory)
        before = total = usage(directory, found)["total_bytes"]
        for capture in found:
            if total <= limit:
                break
            if capture.pinned or capture.in_use:
                continue
            gone = _remove(capture, found)
            if gone is None:
                continue  # a session took it meanwhile
            removed.append(capture.name)
            found = [c for c in found if c is not capture]
            total -= gone
        _collect_store(directory, found)
        total = usage(directory)["total_bytes"]
    return {"removed": removed, "freed_bytes": before - total, "total_bytes": total,
            "limit": limit, "over": total > limit}


def _remove(capture: CaptureInfo, found: list[CaptureInfo]) -> int | None:
    """Remove one capture holding its lease exclusively; the bytes that frees (its own files,
    and the store files only it names), or None when a session holds it."""
    fd = _take_exclusive(capture.path)
    if fd is None:
        return None
    try:
        others = set().union(*(c.keys for c in found if c is not capture)) if found else set()
        store = store_sizes(capture.path.parent)
        gone = capture.own_bytes + sum(store.get(k, 0) for k in capture.keys - others)
        shutil.rmtree(capture.path)
    finally:
        os.close(fd)
    return gone


def _collect_store(directory: pathlib.Path, found: list[CaptureInfo]) -> int:
    """Remove the store's files no capture names (the caller holds the store lock,
    exclusively); also the temporary files of a put that crashed. Returns the bytes freed."""
    images = image_store.store_directory(directory) / "images"
    if not images.is_dir():
        return 0
    named = set().union(*(c.keys for c in found)) if found else set()
    freed = 0
    for path in images.iterdir():
        if path.name in named:
            continue
        freed += path.lstat().st_size
        path.unlink()
    return freed


def remove(directory: str | os.PathLike, capture: CaptureInfo, force: bool = False) -> int:
    """Remove one capture (a pinned one only with `force`; one in use never), and the store
    files it alone named. Returns the bytes freed. Raises RetentionError saying why not."""
    if capture.pinned and not force:
        raise RetentionError(f"{capture.name} is pinned (unpin it, or --force)")
    with image_store.locked(directory, exclusive=True):
        found = captures(directory)
        gone = _remove(capture, found)
        if gone is None:
            raise RetentionError(f"{capture.name} is in use by a debug session")
        _collect_store(pathlib.Path(directory), [c for c in found if c.path != capture.path])
    return gone


def pin(capture: CaptureInfo, pinned: bool) -> None:
    marker = capture.path / PIN
    if pinned:
        marker.touch()
    else:
        marker.unlink(missing_ok=True)
    capture.pinned = pinned


def find(directory: str | os.PathLike, name: str) -> CaptureInfo:
    """The capture called `name` in `directory` (its directory name, or a path to it).
    Raises RetentionError naming it."""
    wanted = pathlib.Path(name)
    for capture in captures(directory):
        if capture.name == name or (wanted.exists() and capture.path.resolve()
                                    == wanted.resolve()):
            return capture
    raise RetentionError(f"{name}: no such capture in {directory}")

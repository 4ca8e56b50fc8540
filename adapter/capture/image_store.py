"""The captures store: one content-addressed copy of every executable file a capture ran through,
shared by all the captures of a captures directory, and the way a capture leaves it (`pack`).

Layer: adapter.capture (storage, beside bundle.py and captures_dir.py). Knows the bundle's
manifest and the store's layout; nothing of DAP, of recording or of decoding.

Why (issue 33): each capture of a torch service copied `libtorch_cpu.so` (~490 MB) into its own
bundle, so two sessions held 978 MB. Now a capture's image entries name the store instead:

    CAPTURES/.store/images/KEY     read-only, KEY = bid-BUILDID-SIZE (an ELF with a GNU build-id)
                                   or sha256-HASH (anything else); put there once, by a reflink
                                   of the original where the file system has them (FICLONE),
                                   else by one copy
    CAPTURES/.store/lock           flock: shared while a capture puts files and rewrites its
                                   manifest, exclusive while retention.py removes files no
                                   capture references (so none is removed between the two)
    CAPTURES/CAPTURE/manifest.json images[i].file = "../.store/images/KEY", with the stored
                                   file's `file_size` and `file_mtime_ns`

pt_decoder/bundle_reader.py accepts exactly that form of reference and refuses a stored file
that changed. The store never hard-links the program's own file: a library rebuilt or copied
over in place would change the stored code under every capture (and the kernel refuses links
to another user's files, /usr/lib's, under protected_hardlinks); a reflink is copy-on-write, so
it is taken where the file system offers one. A file without a GNU build-id (a Go binary built
without `-ldflags=-B`) is hashed once per session to find its key. `pack` writes a self-contained copy of a capture (its images inside it) for
moving it to another machine.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import tempfile

from adapter.capture.bundle import (
    CAPTURE_PRIVATE,
    BundleError,
    file_stat,
    read_manifest,
    split_used_images,
)
from pt_decoder import bundle_reader

STORE = bundle_reader.STORE_DIRECTORY
PREFIX = bundle_reader.STORE_PREFIX
FICLONE = 0x40049409
"""ioctl(2) FICLONE (linux/fs.h, _IOW(0x94, 9, int)): share the source's blocks, copy-on-write
(btrfs, XFS with reflink, bcachefs); ext4 and tmpfs refuse with EOPNOTSUPP/EXDEV/EINVAL."""


class StoreError(BundleError):
    """An image could not be stored or a capture packed; the text says which and why."""


def store_directory(captures: str | os.PathLike) -> pathlib.Path:
    return pathlib.Path(captures) / STORE


@contextlib.contextmanager
def locked(captures: str | os.PathLike, exclusive: bool):
    """Hold the store's lock: shared to add files and references, exclusive to remove files."""
    store = store_directory(captures)
    (store / "images").mkdir(parents=True, exist_ok=True)
    fd = os.open(store / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield store
    finally:
        os.close(fd)  # releases the lock


def key_of(path: str, build_id: str | None = None) -> str:
    """The store key of the file at `path`: bid-BUILDID-SIZE where it has a GNU build-id
    (`build_id`, if the caller read it already), else sha256-HASH of its bytes."""
    size = os.stat(path).st_size
    build_id = build_id or bundle_reader.file_build_id(path)
    if build_id and bundle_reader.STORE_KEY.fullmatch(f"bid-{build_id}-{size}"):
        return f"bid-{build_id}-{size}"
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return f"sha256-{digest.hexdigest()}"


def clone_or_copy(source: str | os.PathLike, target: str | os.PathLike) -> str:
    """Write `target` with the bytes of `source`: a reflink where the file system shares
    blocks, else a copy. Returns "reflink" or "copy"."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        try:
            fcntl.ioctl(dst.fileno(), FICLONE, src.fileno())
            return "reflink"
        except OSError:
            pass
        shutil.copyfileobj(src, dst, 1 << 20)
    return "copy"


def put(captures: str | os.PathLike, path: str, build_id: str | None = None) -> tuple[str, int]:
    """Store the file at `path` (the caller holds the lock, shared). Returns (key, bytes the
    store grew by): 0 when the store had it already."""
    key = key_of(path, build_id)
    images = store_directory(captures) / "images"
    target = images / key
    try:
        if target.stat().st_size == os.stat(path).st_size:
            return key, 0
        target.unlink()  # a damaged entry (a crash mid-write cannot leave one: tmp + link)
    except FileNotFoundError:
        pass
    fd, tmp = tempfile.mkstemp(prefix=".put-", dir=images)
    os.close(fd)
    try:
        clone_or_copy(path, tmp)
        os.chmod(tmp, 0o444)
        try:
            os.link(tmp, target)  # never replaces one another session put meanwhile
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return key, target.stat().st_size


def store_images_in(bundle: str | os.PathLike, used_ips=None,
                    known: dict[tuple, str] | None = None) -> tuple[dict, int, list[str]]:
    """Move the bundle's references to the recorded program's files (absolute `file`s, as the
    recorder writes them) into the captures store of the directory holding the bundle: each
    file is put into the store once, and its entry names the store. `used_ips` (sorted
    executed addresses) limits this to the images holding such code; the others move to
    `unused_images`, as bundle.copy_images_in does. `known` caches (path, inode, size, mtime)
    -> key over a session. A file that changed since the capture (its recorded size, mtime
    and build-id) is not stored and stays referenced: the reader then refuses it, naming it.

    While this runs the manifest says "partial" (naming why). Returns (manifest, bytes the
    store grew by, warnings). Raises BundleError (an unreadable bundle) or OSError (a copy
    failed; the manifest is then as it was)."""
    root = pathlib.Path(bundle)
    captures = root.parent
    manifest = read_manifest(root)
    kept, unused = split_used_images(manifest, used_ips)
    referenced = [e for e in kept if os.path.isabs(e.get("file", ""))]
    if not referenced and len(kept) == len(manifest.get("images", [])):
        return manifest, 0, []
    status, reason = manifest.get("status"), manifest.get("partial_reason")
    added, warnings, keys = 0, [], {}
    with locked(captures, exclusive=False):
        _rewrite(root, {**manifest, "status": "partial", "partial_reason":
                        "putting the recorded program's files into the captures store (not "
                        "finished: the adapter ended first)"})
        try:
            for entry in referenced:
                key, grew = _store_one(captures, entry, known, warnings)
                if key is not None:
                    keys[id(entry)] = key
                    added += grew
        except OSError:
            _rewrite(root, manifest)  # as before: the originals are still referenced
            raise
        for entry in kept:
            key = keys.get(id(entry))
            if key is not None:
                entry["file"] = PREFIX + key
                entry.update(file_stat(store_directory(captures) / "images" / key))
        manifest = {**manifest, "images": kept, "status": status, "partial_reason": reason}
        if unused:
            manifest["unused_images"] = unused
        _rewrite(root, manifest)
    return manifest, added, warnings


def _store_one(captures: pathlib.Path, entry: dict, known: dict | None,
               warnings: list[str]) -> tuple[str | None, int]:
    """Put one referenced image into the store: (key, bytes added), or (None, 0) with a
    warning when the file changed since the capture."""
    original = entry["file"]
    try:
        bundle_reader.check_unchanged(original, entry, original, bundle_reader.file_build_id)
    except bundle_reader.ManifestError as exc:
        warnings.append(str(exc))
        return None, 0
    st = os.stat(original)
    cache = (original, st.st_ino, st.st_size, st.st_mtime_ns)
    key = (known or {}).get(cache)
    if key is not None and (store_directory(captures) / "images" / key).is_file():
        return key, 0
    key, grew = put(captures, original, entry.get("build_id"))
    if known is not None:
        known[cache] = key
    return key, grew


def stored_keys(manifest: dict) -> set[str]:
    """The store keys a manifest's images name."""
    return {e["file"][len(PREFIX):] for e in manifest.get("images") or ()
            if isinstance(e, dict) and str(e.get("file", "")).startswith(PREFIX)}


# --- leaving the store --------------------------------------------------------------------
PRIVATE = CAPTURE_PRIVATE


def pack(capture: str | os.PathLike, output: str | os.PathLike, force: bool = False) -> dict:
    """Write a self-contained copy of the bundle `capture` to `output`: every image it names
    in the store, or references by absolute path, is put into `output/images/` (a hard link to
    the store's read-only file where `output` is on the same file system, else a reflink or a
    copy), so it decodes on another machine, without the store. Refuses an existing `output`
    unless `force`, and an image that changed since the capture. Returns the new manifest.
    Raises StoreError naming what was wrong."""
    root, out = pathlib.Path(capture), pathlib.Path(output)
    manifest = read_manifest(root)
    _make_room(out, force)
    sources = {}
    for index, entry in enumerate(manifest.get("images") or ()):
        try:
            sources[index] = bundle_reader.image_file(root, entry, f"images[{index}]")
        except bundle_reader.ManifestError as exc:
            raise StoreError(str(exc)) from None
    shutil.copytree(root, out, ignore=shutil.ignore_patterns(*PRIVATE, "manifest.json*"))
    (out / "images").mkdir(exist_ok=True)
    for index, entry in enumerate(manifest.get("images") or ()):
        file = entry["file"]
        if not (file.startswith(PREFIX) or os.path.isabs(file)):
            continue
        name = f"images/{pathlib.Path(entry.get('path') or file).name[:60]}-{index}"
        _link_or_copy(sources[index], out / name)
        entry["file"] = name
        entry.update(file_stat(out / name))
    _rewrite(out, manifest)
    return manifest


def _make_room(out: pathlib.Path, force: bool) -> None:
    """Refuse an existing `out` unless `force`; with it, remove `out` if it is a bundle, an
    empty directory or a file (never a directory of something else)."""
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise StoreError(f"{out} exists; give --force to replace it")
    if out.is_symlink() or not out.is_dir():
        out.unlink()
    elif (out / "manifest.json").is_file() or not any(out.iterdir()):
        shutil.rmtree(out)
    else:
        raise StoreError(f"{out}: exists and is not a bundle; refusing to replace it")


def _link_or_copy(source: str, target: pathlib.Path) -> None:
    try:
        os.link(source, target)  # the store's files are read-only and never rewritten
    except OSError:
        clone_or_copy(source, target)
        shutil.copystat(source, target)


def _rewrite(root: pathlib.Path, manifest: dict) -> None:
    """Replace manifest.json at once (a temporary file and rename)."""
    tmp = root / "manifest.json.tmp"
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, root / "manifest.json")

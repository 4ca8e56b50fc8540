"""The trace bundle: one directory holding a recording, read by everything that decodes.

Layer: adapter.capture (storage). Every capture backend (intel_pt, stepper,
perf.data import) writes a bundle with `BundleWriter`; every reader (`ptdebug
decode`, the DAP recorder) opens one with `read_manifest` / `Bundle.open`.
This module knows the file layout only: not how a trace was made, nor how
PT is decoded.

Reading is checked in one place, pt_decoder/bundle_reader.py: the manifest's fields have
their types checked, and its files stay inside the bundle (an image may be referenced at its
recorded absolute path), are regular files, and are read without blocking and up to a bound.

Directory layout::

    BUNDLE/
      manifest.json        the index below (always valid JSON; rewritten atomically)
      streams/TID.pt       raw Intel PT packets of one thread (or CPU), in order
      images/NAME          copies of the executable files / memory snapshots
      sideband/NAME        optional: perf sideband records (PERF_RECORD_*), raw

manifest.json (format "ptdebug-bundle", version 1)::

    {
      "format": "ptdebug-bundle",   "version": 1,
      "status": "complete" | "partial",
      "partial_reason": null | "text saying why the recording stopped early",
      "backend": "stepper" | "intel_pt" | "perf.data",
      "created": "2026-12-02T10:00:00Z",
      "command": ["prog", "arg"] | null,     "pid": 1234 | null,
      "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 4},
      "timing": {                     # parameters a PT decoder needs for time
        "tsc_hz": 1000000000 | null,  # TSC packets count at this rate
        "tsc_source": "text",         # where the TSC values come from
        "mtc_freq": int | null, "nom_freq": int | null,
        "cpuid_0x15_eax": int | null, "cpuid_0x15_ebx": int | null,
        "cyc": bool, "cyc_thresh": int | null, "cycles_per_unit": text | null
      },
      "streams": [ {"tid": 1234, "pid": 1234, "cpu": null,
                    "file": "streams/1234.pt", "size": 4096} ],
      "images": [ {"path": "/usr/bin/prog",         # where it was on the recorded machine
                   "file": "images/prog-1a2b" | "/usr/bin/prog"  # relative = copied into
                         | "../.store/images/KEY",  # the bundle, absolute = referenced,
                                                    # ../.store = the captures store
                   "kind": "elf" | "file" | "snapshot",
                   "build_id": "hex" | null,
                   "load_address": 0x555555554000,  # virtual address of file byte `offset`
                   "offset": 0, "size": 8192,       # the mapped part of the file
                   "pid": 1234 | null,
                   "file_size": 8192, "file_mtime_ns": 1764...} ],  # optional: the file as
                                                    # it was, to tell it changed since
      "threads": [ {"tid": 1234, "pid": 1234, "comm": "prog"} ],
      "sideband": [ {"file": "sideband/perf.pevent", "kind": "perf-records",
                     "sample_type": int, ...} ],
      "symbol_maps": [ {"file": "symbols/perf-1234.map", "kind": "perf-map",  # optional:
                        "pid": 1234, "path": "/tmp/perf-1234.map"} ],  # JIT code's names
      "stats": { free-form numbers the backend measured }
    }

An image entry is one executable mapping: the decoder maps `size` bytes of
`file` from `offset` at `load_address` (libipt's pt_image_add_file model).
All integers are JSON numbers. Readers ignore keys they do not know.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
import pathlib
import shutil

from pt_decoder import bundle_reader

FORMAT = "ptdebug-bundle"
VERSION = 1
MANIFEST = "manifest.json"
CAPTURE_PRIVATE = (".lease", ".pinned")
"""Files a captures directory keeps in a capture's bundle directory (retention.py)."""


class BundleError(Exception):
    """A bundle is missing, unreadable or inconsistent; the text says which part."""


class BundleFileError(BundleError, OSError):
    """A file a manifest names is refused (outside the bundle, not a regular file, too large)
    or unreadable. An OSError too, so a reader's handling of unreadable files covers it."""


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def read_manifest(path: str | os.PathLike) -> dict:
    """The manifest of the bundle at `path`, every field a reader uses checked (the checks
    live in pt_decoder.bundle_reader, shared with `ptdebug decode`: a bundle is untrusted
    input). Raises BundleError naming the field that is wrong, on one line."""
    root = pathlib.Path(path)
    try:
        return bundle_reader.read_manifest(root)
    except FileNotFoundError:
        raise BundleError(f"{root}: no {MANIFEST}") from None
    except bundle_reader.ManifestError as exc:
        raise BundleError(str(exc)) from None


def validate(path: str | os.PathLike) -> list[str]:
    """Problems found in the bundle at `path` (an empty list when it is sound)."""
    root = pathlib.Path(path)
    try:
        manifest = read_manifest(root)
    except BundleError as exc:
        return [str(exc)]
    problems = []
    if manifest.get("status") not in ("complete", "partial"):
        problems.append(f"status {manifest.get('status')!r} is neither complete nor partial")
    if manifest.get("status") == "partial" and not manifest.get("partial_reason"):
        problems.append("partial bundle without a partial_reason")
    for key in ("family", "model"):
        if not isinstance(manifest.get("cpu", {}).get(key), int):
            problems.append(f"cpu.{key} missing")
    for stream in manifest.get("streams", []):
        f = resolve(root, stream.get("file", ""))
        if not f.is_file():
            problems.append(f"stream {stream.get('file')!r} missing")
        elif stream.get("size") is not None and f.stat().st_size != stream["size"]:
            problems.append(f"stream {stream['file']}: {f.stat().st_size} bytes, "
                            f"manifest says {stream['size']}")
    for image in manifest.get("images", []):
        for key in ("file", "load_address", "offset", "size"):
            if key not in image:
                problems.append(f"image {image.get('path')!r}: no {key}")
        f = resolve(root, image.get("file", ""))
        if not f.is_file():
            problems.append(f"image {image.get('file')!r} missing")
        elif f.stat().st_size < image.get("offset", 0) + image.get("size", 0):
            problems.append(f"image {image.get('file')}: shorter than offset+size")
    return problems


def resolve(root: str | os.PathLike, file: str) -> pathlib.Path:
    """Where a manifest `file` entry lives: relative to the bundle, or absolute."""
    p = pathlib.Path(file)
    return p if p.is_absolute() else pathlib.Path(root) / p


class Bundle:
    """A bundle opened for reading."""

    def __init__(self, root: pathlib.Path, manifest: dict):
        self.root = root
        self.manifest = manifest

    @classmethod
    def open(cls, path: str | os.PathLike) -> Bundle:
        root = pathlib.Path(path)
        return cls(root, read_manifest(root))

    @property
    def complete(self) -> bool:
        return self.manifest.get("status") == "complete"

    @property
    def streams(self) -> list[dict]:
        return list(self.manifest.get("streams", []))

    @property
    def images(self) -> list[dict]:
        return list(self.manifest.get("images", []))

    def stream_bytes(self, stream: dict) -> bytes:
        """The bytes of a stream entry: a regular file inside the bundle, read up to a bound.
        Raises BundleFileError naming the entry."""
        try:
            return bundle_reader.stream_bytes(self.root, stream,
                                              self._where("streams", stream))
        except bundle_reader.ManifestError as exc:
            raise BundleFileError(str(exc)) from None

    @property
    def symbol_maps(self) -> list[dict]:
        return list(self.manifest.get("symbol_maps", []))

    def symbol_map_path(self, entry: dict) -> pathlib.Path:
        """The file of a symbol-map entry: a regular file inside the bundle. Raises
        BundleFileError naming the entry."""
        try:
            return pathlib.Path(bundle_reader.symbol_map_file(
                self.root, entry, self._where("symbol_maps", entry)))
        except bundle_reader.ManifestError as exc:
            raise BundleFileError(str(exc)) from None

    def image_path(self, image: dict) -> pathlib.Path:
        """The file of an image entry: a regular file inside the bundle, or the recorded
        path of an image referenced there. Raises BundleFileError naming the entry."""
        try:
            return pathlib.Path(bundle_reader.image_file(self.root, image,
                                                         self._where("images", image)))
        except bundle_reader.ManifestError as exc:
            raise BundleFileError(str(exc)) from None

    def _where(self, key: str, entry: dict) -> str:
        for index, candidate in enumerate(self.manifest.get(key) or ()):
            if candidate is entry:
                return f"{key}[{index}]"
        return key


class BundleWriter:
    """Writes a bundle. The manifest is written at once with status "partial"
    ("recording in progress"), so a crash or a full disk leaves a bundle that
    says it is partial; `finish()` rewrites it (atomically, via rename)."""

    def __init__(self, path: str | os.PathLike, backend: str, cpu: dict, *,
                 timing: dict | None = None, command: list[str] | None = None,
                 pid: int | None = None, copy_images: bool = True):
        self.root = pathlib.Path(path)
        # a capture directory's lease and pin (adapter/capture/retention.py) are not the
        # bundle's: the lease is held (flock) from before the recorder writes here
        there = [p for p in self.root.iterdir() if p.name not in CAPTURE_PRIVATE] \
            if self.root.is_dir() else []
        if there:
            if not (self.root / MANIFEST).exists():
                raise BundleError(f"{self.root}: exists and is not a bundle; refusing to "
                                  "write into it")
            for p in there:
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        for sub in ("streams", "images", "sideband"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        self.copy_images = copy_images
        self.manifest = {
            "format": FORMAT, "version": VERSION,
            "status": "partial", "partial_reason": "recording in progress",
            "backend": backend, "created": _now(), "command": command, "pid": pid,
            "cpu": cpu, "timing": timing or {}, "streams": [], "images": [],
            "threads": [], "sideband": [], "stats": {},
        }
        self._streams: dict[int, tuple[object, dict]] = {}
        self._copied: dict[tuple[str, int, int], str] = {}
        self.write_manifest()

    # -- streams -------------------------------------------------------------------------

    def open_stream(self, tid: int, pid: int | None = None, cpu: int | None = None):
        """The binary file for thread `tid`'s PT packets (appended to as recorded)."""
        name = f"streams/{tid}.pt" if cpu is None else f"streams/cpu{cpu}-{tid}.pt"
        entry = {"tid": tid, "pid": pid, "cpu": cpu, "file": name, "size": 0}
        fh = open(self.root / name, "wb")  # noqa: SIM115 - closed by close()
        self._streams[tid] = (fh, entry)
        self.manifest["streams"].append(entry)
        return fh

    def add_stream_bytes(self, tid: int, data: bytes, pid: int | None = None,
                         cpu: int | None = None) -> None:
        fh = self._streams[tid][0] if tid in self._streams else self.open_stream(tid, pid, cpu)
        fh.write(data)

    # -- images --------------------------------------------------------------------------

    def add_image(self, path: str, load_address: int, offset: int, size: int, *,
                  build_id: str | None = None, kind: str = "elf",
                  pid: int | None = None) -> dict:
        """Record one executable mapping of file `path`; copies the file into the
        bundle once (when copy_images), else references it by absolute path."""
        file = path
        if self.copy_images:
            st = os.stat(path)
            key = (path, st.st_ino, st.st_size)
            if key not in self._copied:
                name = f"images/{pathlib.Path(path).name}-{_short_hash(path)}"
                shutil.copyfile(path, self.root / name)
                self._copied[key] = name
            file = self._copied[key]
        entry = {"path": path, "file": file, "kind": kind, "build_id": build_id,
                 "load_address": load_address, "offset": offset, "size": size, "pid": pid}
        if not self.copy_images:
            entry.update(file_stat(path))  # a reference: what it was, to tell a change
        self.manifest["images"].append(entry)
        return entry

    def add_snapshot(self, name: str, load_address: int, data: bytes, *,
                     pid: int | None = None, origin: str = "[anon]") -> dict:
        """Record a copy of memory (anonymous executable memory, the vDSO, JIT code)."""
        file = f"images/{name}"
        (self.root / file).write_bytes(data)
        entry = {"path": origin, "file": file, "kind": "snapshot", "build_id": None,
                 "load_address": load_address, "offset": 0, "size": len(data), "pid": pid}
        self.manifest["images"].append(entry)
        return entry

    def add_perf_map(self, pid: int, source: str | None = None) -> list[str]:
        """Copy process `pid`'s perf map (/tmp/perf-PID.map, written by JITs and by CPython
        3.12+ under `-X perf`) into the bundle, again at each call (it grows as code is
        compiled): the names of JIT code, which no image holds. Only the lines that parse are
        kept, from a regular file owned by the process's user or root (symbols.read_perf_map).
        Returns warnings (the file refused or partly read); nothing when there is no map."""
        from pt_decoder.errors import PtError
        from pt_decoder.image import perf_map_owners
        from pt_decoder.symbols import read_perf_map
        source = source or f"/tmp/perf-{pid}.map"
        if not os.path.lexists(source):
            return []
        try:
            entries, warnings = read_perf_map(source, perf_map_owners(source))
        except PtError as exc:
            return [str(exc)]
        file = f"symbols/perf-{pid}.map"
        (self.root / "symbols").mkdir(exist_ok=True)
        (self.root / file).write_text("".join(f"{start:x} {size:x} {name}\n"
                                              for start, size, name in entries))
        maps = self.manifest.setdefault("symbol_maps", [])
        if not any(m["file"] == file for m in maps):
            maps.append({"file": file, "kind": "perf-map", "pid": pid, "path": source})
        return warnings

    def add_thread(self, tid: int, pid: int | None, comm: str | None) -> None:
        if not any(t["tid"] == tid for t in self.manifest["threads"]):
            self.manifest["threads"].append({"tid": tid, "pid": pid, "comm": comm})

    def add_sideband(self, name: str, data: bytes, **info) -> None:
        (self.root / "sideband" / name).write_bytes(data)
        self.manifest["sideband"].append({"file": f"sideband/{name}", **info})

    # -- the manifest --------------------------------------------------------------------

    def write_manifest(self) -> None:
        """Writes manifest.json via a temporary file and rename, so a failed
        write (full disk) leaves the previous manifest intact."""
        for fh, entry in self._streams.values():
            if not fh.closed:
                fh.flush()
            entry["size"] = (self.root / entry["file"]).stat().st_size
        text = (json.dumps(self.manifest, indent=1) + "\n").encode()
        tmp = self.root / (MANIFEST + ".tmp")
        try:
            tmp.write_bytes(text)
            os.replace(tmp, self.root / MANIFEST)
        except OSError:
            tmp.unlink(missing_ok=True)
            # A full disk has no room for a second copy; overwrite the manifest in
            # place (its blocks are already allocated, and it stays small).
            with open(self.root / MANIFEST, "r+b") as f:
                f.write(text)
                f.truncate()

    def finish(self, partial_reason: str | None = None) -> dict:
        """Close the streams and write the final manifest: complete, or partial
        with the reason. Returns the manifest. A write failure here leaves the
        earlier (partial) manifest and raises OSError."""
        first_error = None
        for fh, _ in self._streams.values():
            try:
                fh.close()
            except OSError as exc:  # the last buffered bytes did not fit
                first_error = first_error or exc
        if first_error is not None and partial_reason is None:
            partial_reason = f"writing the trace failed: {first_error.strerror}"
        self.manifest["status"] = "partial" if partial_reason else "complete"
        self.manifest["partial_reason"] = partial_reason
        self.write_manifest()
        return self.manifest


def file_stat(path: str | os.PathLike) -> dict:
    """`file_size` and `file_mtime_ns` of an image file, as an image entry records them so
    that a reader can tell the file changed since (bundle_reader.check_unchanged); empty when
    the file cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return {}
    return {"file_size": st.st_size, "file_mtime_ns": st.st_mtime_ns}


def _short_hash(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()[:8]


def split_used_images(manifest: dict, used_ips) -> tuple[list[dict], list[dict]]:
    """(the manifest's images holding an address of `used_ips` (sorted; None: every image),
    the others followed by the manifest's `unused_images`)."""
    import bisect

    def runs_code(entry: dict) -> bool:
        if used_ips is None:
            return True
        start = entry.get("load_address", 0)
        i = bisect.bisect_left(used_ips, start)
        return i < len(used_ips) and used_ips[i] < start + entry.get("size", 0)

    kept, unused = [], list(manifest.get("unused_images") or [])
    for entry in manifest.get("images", []):
        (kept if runs_code(entry) else unused).append(entry)
    return kept, unused


def copy_images_in(path: str | os.PathLike, used_ips=None,
                   linked_from: dict[tuple, str] | None = None) -> dict:
    """Make the bundle at `path` self-contained: copy every image it references by absolute
    path into its `images/`, so it decodes after the recorded program's files are gone and
    the bundle has moved (a Go session's binary lives in a temporary build directory).

    `used_ips` (the sorted addresses the decoded trace executed) limits the copy to the images
    holding such code; the others move from `images` to `unused_images` (the decode never
    reads them, and a Python process maps tens of MB of libraries a window never enters).
    `linked_from` maps (path, inode, size, mtime) of an original to a copy made earlier
    (another capture of the session): the new copy is a hard link to it where the file system
    allows, and is added to it. While copying, the manifest says "partial" (naming why), so an
    adapter killed mid-copy leaves a bundle that says what it lacks; its entries switch to the
    copies only once they are all written. Returns the new manifest. Raises BundleError (an
    unreadable bundle) or OSError (a copy failed; the manifest is then as it was).
    """
    root = pathlib.Path(path)
    manifest = read_manifest(root)
    status, reason = manifest.get("status"), manifest.get("partial_reason")
    kept, unused = split_used_images(manifest, used_ips)
    referenced = [e for e in kept if pathlib.Path(e.get("file", "")).is_absolute()]
    if not referenced and len(kept) == len(manifest.get("images", [])):
        return manifest
    _rewrite_manifest(root, {**manifest, "status": "partial", "partial_reason":
                             "copying the recorded program's files into the bundle (not "
                             "finished: the adapter ended first)"})
    copies: dict[str, str] = {}
    try:
        for entry in referenced:
            original = entry["file"]
            if original in copies:
                continue
            st = os.stat(original)
            key = (original, st.st_ino, st.st_size, st.st_mtime_ns)
            name = f"images/{pathlib.Path(original).name}-{_short_hash(original)}"
            target = root / name
            target.parent.mkdir(exist_ok=True)
            earlier = (linked_from or {}).get(key)
            try:
                if earlier is None:
                    raise OSError("no earlier copy")
                target.unlink(missing_ok=True)
                os.link(earlier, target)
            except OSError:
                shutil.copyfile(original, target)
            copies[original] = name
            if linked_from is not None:
                linked_from[key] = str(target)
    except OSError:
        _rewrite_manifest(root, manifest)  # as before: the originals are still referenced
        raise
    for entry in kept:
        if entry.get("file") in copies:
            entry["file"] = copies[entry["file"]]
    manifest = {**manifest, "images": kept, "status": status, "partial_reason": reason}
    if unused:
        manifest["unused_images"] = unused
    _rewrite_manifest(root, manifest)
    return manifest


def _rewrite_manifest(root: pathlib.Path, manifest: dict) -> None:
    """Replace manifest.json at once (a temporary file and rename)."""
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=1) + "\n")
    os.replace(tmp, root / MANIFEST)

"""Reading a trace bundle that may be hostile: the one place where its manifest is checked and
its files are opened.

Layer: pt_decoder (no adapter imports): `ptdebug decode`/`dump` read bundles through it, and
adapter/capture/bundle.py (`read_manifest`, `Bundle`) for everyone else. The format itself is
documented in adapter/capture/bundle.py; this module knows what a reader needs of it.

A bundle is untrusted input (issue 17: malformed manifests gave AttributeError, TypeError or
RecursionError tracebacks, a stream `"file": "/dev/zero"` MemoryError, a FIFO a hang, and
`"../../etc/passwd"` was read). So:

- manifest.json must be a regular file of at most MAX_MANIFEST_BYTES, JSON nested at most
  MAX_DEPTH levels, and every field a reader uses has its type checked here (`check_manifest`);
  a wrong one is a ManifestError naming the field: `streams[0].file must be a string, got 5`.
- A stream's or sideband's `file` is a relative path that stays inside the bundle once links
  are resolved. An image's `file` is that too, or an absolute path equal to the entry's own
  recorded `path` or ending with it (`import --sysroot DIR`): a bundle recorded with
  --no-copy-images, or a DAP capture before its images were copied in, references the recorded
  program's files where they were, and says so this way; any other absolute or escaping path
  is refused.
- An image's `file` may also name the captures store beside the bundle (issue 33: a capture
  references the code it ran through one content-addressed store shared by every capture of the
  captures directory, adapter/capture/image_store.py): exactly `../.store/images/KEY`, KEY a
  build-id or content hash of the form STORE_KEY, where `.store` and `.store/images` are real
  directories (not links) and the file a regular file (not a link). Nothing else may leave the
  bundle.
- An image entry may record the file's `file_size` and `file_mtime_ns` when the capture was
  made; a file whose size differs, or whose mtime differs and whose build-id no longer is the
  recorded `build_id`, is refused as changed since the capture (`check_unchanged`), never
  decoded as if it were the code that ran.
- Every file is opened without blocking and must be a regular file (not a FIFO, a device, a
  directory), and is read up to a bound (`read_regular_file`).
"""
from __future__ import annotations

import itertools
import json
import os
import re
import stat

FORMAT = "ptdebug-bundle"
VERSION = 1
MANIFEST = "manifest.json"
MAX_MANIFEST_BYTES = 64 * 1024 * 1024
"""Largest manifest.json read (a recording of thousands of threads and images is a few MB)."""
MAX_DEPTH = 32
"""Deepest JSON nesting accepted in a manifest (the format nests four levels)."""
MAX_STREAM_BYTES = 1 << 40
"""Largest trace stream read (far beyond any recording; /dev/zero and friends are refused as
not regular files before this matters)."""
ADDRESS_LIMIT = 1 << 64
STORE_DIRECTORY = ".store"
"""The content-addressed image store, a sibling of the captures in a captures directory."""
STORE_KEY = re.compile(r"(?:bid-[0-9a-f]{8,80}-[0-9]{1,20}|sha256-[0-9a-f]{64})")
"""A store entry's name: `bid-BUILDID-SIZE` for an ELF file with a GNU build-id, else
`sha256-HASH` of its bytes."""
STORE_PREFIX = f"../{STORE_DIRECTORY}/images/"


class ManifestError(ValueError):
    """A bundle's manifest or one of its files is malformed or refused; the text names the
    bundle, the field and what is wrong, on one line."""


_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"{": 1, "[": 1, "}": -1, "]": -1}


def _depth(text: str) -> int:
    """How deeply JSON `text` nests, without parsing it (strings cut out, brackets counted)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)


def read_regular_file(path: str | os.PathLike, what: str, limit: int,
                      follow_links: bool = True) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes; opened
    without blocking (a FIFO never hangs) and, unless `follow_links`, not through a link.
    Raises ManifestError naming `what`."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ManifestError(f"{what}: cannot open {os.fspath(path)}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ManifestError(f"{what}: {os.fspath(path)} is not a regular file")
        if st.st_size > limit:
            raise ManifestError(f"{what}: {os.fspath(path)} has {st.st_size} bytes, more than "
                                f"the {limit} accepted")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 24, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            raise ManifestError(f"{what}: {os.fspath(path)} grew past {limit} bytes")
        return b"".join(chunks)
    except OSError as exc:
        raise ManifestError(f"{what}: cannot read {os.fspath(path)}: {exc.strerror}") from None
    finally:
        os.close(fd)


def read_manifest(root: str | os.PathLike) -> dict:
    """The checked manifest of the bundle directory `root`. Raises ManifestError naming the
    field, FileNotFoundError when `root` has no manifest.json (not a bundle)."""
    root = os.fspath(root)
    if not os.path.isdir(root):
        raise ManifestError(f"{root}: not a bundle directory")
    path = os.path.join(root, MANIFEST)
    if not os.path.lexists(path):
        raise FileNotFoundError(f"{root}: no {MANIFEST}")
    data = read_regular_file(path, path, MAX_MANIFEST_BYTES, follow_links=False)
    try:
        text = data.decode("utf-8")
        if (text.count("[") + text.count("{") > MAX_DEPTH) and _depth(text) > MAX_DEPTH:
            raise ManifestError(f"{path}: JSON nested deeper than {MAX_DEPTH} levels")
        manifest = json.loads(text)
    except (UnicodeDecodeError, ValueError) as exc:
        if isinstance(exc, ManifestError):
            raise
        raise ManifestError(f"{path}: not JSON: {exc}") from None
    except RecursionError:
        raise ManifestError(f"{path}: JSON nested too deeply") from None
    check_manifest(manifest, path)
    return manifest


# --- the fields a reader uses, and their types --------------------------------------------
_INT, _STR, _BOOL, _DICT, _LIST = "an integer", "a string", "a boolean", "an object", "an array"
_TOP = {"format": _STR, "version": _INT, "status": _STR, "partial_reason": _STR,
        "backend": _STR, "created": _STR, "pid": _INT, "command": _LIST, "cpu": _DICT,
        "timing": _DICT, "streams": _LIST, "images": _LIST, "unused_images": _LIST,
        "threads": _LIST, "sideband": _LIST, "symbol_maps": _LIST, "stats": _DICT,
        "warnings": _LIST}
_CPU = {"vendor": _STR, "family": _INT, "model": _INT, "stepping": _INT}
_TIMING = {"tsc_hz": _INT, "tsc_source": _STR, "mtc_freq": _INT, "nom_freq": _INT,
           "cpuid_0x15_eax": _INT, "cpuid_0x15_ebx": _INT, "cyc": _BOOL, "cyc_thresh": _INT,
           "cycles_per_unit": _STR}
_STREAM = {"tid": _INT, "pid": _INT, "cpu": _INT, "file": _STR, "size": _INT}
_IMAGE = {"path": _STR, "file": _STR, "kind": _STR, "build_id": _STR, "load_address": _INT,
          "offset": _INT, "size": _INT, "pid": _INT, "file_size": _INT, "file_mtime_ns": _INT}
_THREAD = {"tid": _INT, "pid": _INT, "comm": _STR}
_SIDEBAND = {"file": _STR, "kind": _STR}
_SYMBOL_MAP = {"file": _STR, "kind": _STR, "pid": _INT, "path": _STR}
_CHECKS = {_INT: lambda v: type(v) is int, _STR: lambda v: type(v) is str,
           _BOOL: lambda v: type(v) is bool, _DICT: lambda v: type(v) is dict,
           _LIST: lambda v: type(v) is list}


def _fields(where: str, value: dict, kinds: dict, required: tuple[str, ...] = ()) -> None:
    for key in required:
        if value.get(key) is None:
            raise ManifestError(f"{where}.{key} is required" if where else f"{key} is required")
    for key, kind in kinds.items():
        item = value.get(key)
        if item is not None and not _CHECKS[kind](item):
            name = f"{where}.{key}" if where else key
            raise ManifestError(f"{name} must be {kind}, got {_show(item)}")


def _show(value) -> str:
    text = json.dumps(value) if not isinstance(value, (dict, list)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def _range(name: str, value, low: int, high: int) -> None:
    if value is None:
        return
    if type(value) is not int:
        raise ManifestError(f"{name} must be an integer, got {_show(value)}")
    if not low <= value < high:
        raise ManifestError(f"{name} must be in {low}..{high - 1}, got {value}")


def check_manifest(manifest, path: str = MANIFEST) -> None:
    """Raise ManifestError (prefixed with `path`) naming the first field of `manifest` that a
    reader would trip over. A list or object field that is null becomes an empty one."""
    try:
        if type(manifest) is not dict:
            raise ManifestError(f"the manifest must be a JSON object, got {_show(manifest)}")
        if manifest.get("format") != FORMAT:
            raise ManifestError(f"not a ptdebug bundle (format={manifest.get('format')!r})")
        if manifest.get("version") != VERSION:
            raise ManifestError(f"bundle version {_show(manifest.get('version'))} is not "
                                f"supported (this ptdebug reads version {VERSION})")
        _fields("", manifest, _TOP)
        for key, kind in _TOP.items():  # null lists and objects read as empty ones
            if key in manifest and manifest[key] is None and kind in (_LIST, _DICT):
                manifest[key] = [] if kind == _LIST else {}
        for key, kinds in (("cpu", _CPU), ("timing", _TIMING)):
            _fields(key, manifest.get(key) or {}, kinds)
        cpu = manifest.get("cpu") or {}
        for key in [key for key, value in cpu.items() if value is None]:
            del cpu[key]  # readers take a missing key's default: so is null
        if cpu.get("family") and cpu.get("model") is None:
            raise ManifestError("cpu.model is required with cpu.family")
        for key in ("family", "model", "stepping"):
            _range(f"cpu.{key}", cpu.get(key), 0, 1 << 16)
        _range("timing.tsc_hz", (manifest.get("timing") or {}).get("tsc_hz"), 1, 1 << 48)
        for index, part in enumerate(manifest.get("command") or []):
            if type(part) is not str:
                raise ManifestError(f"command[{index}] must be a string, got {_show(part)}")
        for key, kinds, required in (("streams", _STREAM, ("file",)),
                                     ("images", _IMAGE, ("file", "load_address", "size")),
                                     ("unused_images", _IMAGE, ()),
                                     ("threads", _THREAD, ()), ("sideband", _SIDEBAND, ()),
                                     ("symbol_maps", _SYMBOL_MAP, ("file",))):
            for index, entry in enumerate(manifest.get(key) or []):
                where = f"{key}[{index}]"
                if type(entry) is not dict:
                    raise ManifestError(f"{where} must be an object, got {_show(entry)}")
                _fields(where, entry, kinds, required)
                if "offset" in entry and entry["offset"] is None:
                    entry["offset"] = 0  # readers take a missing offset as 0: so is null
                for number in ("tid", "pid", "cpu", "size", "offset", "file_size",
                               "file_mtime_ns"):
                    _range(f"{where}.{number}", entry.get(number), 0, 1 << 63)
                _range(f"{where}.load_address", entry.get("load_address"), 0, ADDRESS_LIMIT)
                if key == "images" and entry["load_address"] + (entry.get("size") or 0) \
                        > ADDRESS_LIMIT:
                    raise ManifestError(f"{where}: load_address + size is past 2^64")
    except ManifestError as exc:
        raise ManifestError(f"{path}: {exc}") from None


def bundle_file(root: str | os.PathLike, entry: dict, where: str,
                absolute_image: bool = False) -> str:
    """The path of the file a checked manifest entry names (`where`: `streams[0]`), refused
    with ManifestError when it leaves the bundle: a relative path must stay inside `root` once
    links are resolved; an absolute one is accepted only for an image (`absolute_image`) whose
    `file` is its own recorded `path` (referenced, not copied)."""
    root = os.fspath(root)
    file = entry["file"]
    if "\0" in file:
        raise ManifestError(f"{root}: {where}.file holds a NUL byte")
    if absolute_image and file.startswith(STORE_PREFIX):
        return store_file(root, file, where)
    if os.path.isabs(file):
        recorded = entry.get("path")
        if absolute_image and isinstance(recorded, str) and os.path.isabs(recorded) and (
                file == recorded or file.endswith(recorded)):  # at its path, or a --sysroot's
            return file
        raise ManifestError(f"{root}: {where}.file {file!r} is outside the bundle (an absolute "
                            "path is accepted only for an image referenced at its recorded "
                            "path)")
    inside = os.path.realpath(root)
    resolved = os.path.realpath(os.path.join(root, file))
    if os.path.commonpath([inside, resolved]) != inside or resolved == inside:
        raise ManifestError(f"{root}: {where}.file {file!r} is outside the bundle")
    return resolved


def store_file(root: str | os.PathLike, file: str, where: str) -> str:
    """The path of an image `file` that names the captures store beside bundle `root`
    (`../.store/images/KEY`): KEY must be a store key, `.store` and `.store/images` real
    directories and the entry a regular file, none of them a link. Raises ManifestError
    naming the entry, and saying so when the store or the entry is not there."""
    root = os.fspath(root)
    key = file[len(STORE_PREFIX):]
    if not STORE_KEY.fullmatch(key):
        raise ManifestError(f"{root}: {where}.file {file!r} is outside the bundle (a store "
                            "reference names ../.store/images/ and a build-id or sha256 key)")
    store = os.path.join(os.path.dirname(os.path.realpath(root)), STORE_DIRECTORY)
    path = os.path.join(store, "images", key)
    for part, kind in ((store, stat.S_ISDIR), (os.path.dirname(path), stat.S_ISDIR),
                       (path, stat.S_ISREG)):
        try:
            mode = os.lstat(part).st_mode
        except OSError:
            raise ManifestError(f"{root}: {where}.file: {key} is not in the captures store "
                                f"{store} (the store was removed, or the capture was moved "
                                "without `ptdebug captures pack`)") from None
        if not kind(mode):
            raise ManifestError(f"{root}: {where}.file: {part} is not a "
                                f"{'directory' if kind is stat.S_ISDIR else 'regular file'}")
    return path


def check_unchanged(path: str, entry: dict, where: str, build_id_of=None) -> None:
    """Refuse (ManifestError) an image file that changed since the capture: its size differs
    from the recorded `file_size`, or its mtime from `file_mtime_ns` while its build-id
    (`build_id_of(path)`, when the entry records one) is not the recorded `build_id` any more.
    An entry that records neither is not checked (bundles written before issue 33)."""
    size, mtime = entry.get("file_size"), entry.get("file_mtime_ns")
    if size is None and mtime is None:
        return
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ManifestError(f"{where}.file: cannot stat {path}: {exc.strerror}") from None
    if size is not None and st.st_size != size:
        raise ManifestError(f"{where}.file: {path} changed since the capture ({st.st_size} "
                            f"bytes, {size} when recorded): the code that ran is not there "
                            "any more")
    if mtime is None or st.st_mtime_ns == mtime:
        return
    recorded = entry.get("build_id")
    now = build_id_of(path) if recorded and build_id_of is not None else None
    if recorded and now == recorded:
        return  # touched or copied, the same build
    raise ManifestError(f"{where}.file: {path} changed since the capture (modified "
                        f"{_when(st.st_mtime_ns)}, recorded {_when(mtime)}"
                        + (f"; build-id {now}, recorded {recorded}" if recorded else "")
                        + "): the code that ran is not there any more")


def _when(ns: int) -> str:
    import datetime
    return datetime.datetime.fromtimestamp(ns / 1e9, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC")


def stream_bytes(root: str | os.PathLike, entry: dict, where: str = "stream") -> bytes:
    """The bytes of a checked manifest's stream entry (a regular file inside the bundle)."""
    path = bundle_file(root, entry, where)
    return read_regular_file(path, f"{os.fspath(root)}: {where}.file", MAX_STREAM_BYTES)


def image_file(root: str | os.PathLike, entry: dict, where: str = "image") -> str:
    """The path of a checked manifest's image entry, checked to be a regular file (so that
    mapping it neither blocks nor reads a device) and unchanged since the capture where the
    entry says how it was (`check_unchanged`)."""
    path = _regular(bundle_file(root, entry, where, absolute_image=True), root, where)
    check_unchanged(path, entry, f"{os.fspath(root)}: {where}", file_build_id)
    return path


def file_build_id(path: str) -> str | None:
    """The GNU build-id of the ELF file at `path`, or None (no note, not ELF, unreadable)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from .image import elf_build_id
    try:
        with open(path, "rb") as f:
            return elf_build_id(ELFFile(f))
    except (OSError, ELFError, ValueError):
        return None


def stream_file(root: str | os.PathLike, entry: dict, where: str = "stream") -> str:
    """The path of a checked manifest's stream entry (for a reader that maps it), checked to
    be a regular file inside the bundle."""
    return _regular(bundle_file(root, entry, where), root, where)


def symbol_map_file(root: str | os.PathLike, entry: dict, where: str = "symbol map") -> str:
    """The path of a checked manifest's symbol-map entry (a perf map copied in), checked to be
    a regular file inside the bundle."""
    return _regular(bundle_file(root, entry, where), root, where)


def _regular(path: str, root: str | os.PathLike, where: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ManifestError(f"{os.fspath(root)}: {where}.file: cannot open {path}: "
                            f"{exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ManifestError(f"{os.fspath(root)}: {where}.file: {path} is not a regular file")
    finally:
        os.close(fd)
    return path

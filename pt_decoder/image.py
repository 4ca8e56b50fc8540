"""The traced address space: which bytes of code lie at which address, and whose they are.

Layer: pt_decoder, under the instruction layer (insn.pyx reads code bytes from
`Image.sections`) and beside lines.py. Sources: ELF files at a load base
(`add_elf`, pyelftools), raw files or byte strings (`add_raw`), file mappings
as mmap(2) and trace bundles make them (`add_mapping`), memory copies
(`add_snapshot`), a live process (`from_process`: /proc/PID/maps for what is
mapped, the files themselves for file-backed code, /proc/PID/mem for anonymous
code and the vDSO, see proc(5)), and perf-map files for the names of
JIT-compiled code (`add_perf_map`). Symbols: `symbolize`, `find_symbol`
(symbols.py). Knows nothing of traces, decoding or the adapter.

Like libipt's `struct pt_image`, a later add wins where it overlaps earlier
bytes; `sections` is always sorted by address and free of overlaps, so a
decoder can bisect it and hold on to the byte buffers.
"""
from __future__ import annotations

import bisect
import copy
import dataclasses
import io
import os
import re
import threading
import weakref
from collections.abc import Iterable
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from .errors import ErrorCode, PtError
from .symbols import Symbol, SymbolTable, elf_function_symbols, read_perf_map

__all__ = ["Image", "Module", "Section", "Symbol"]

PF_X = 0x1  # ELF program header flag: segment is executable (System V gABI)


@dataclass(frozen=True)
class Section:
    """`data` is mapped at `vaddr`; `name` says where it came from (a file path,
    "[vdso]", "[anon]"...) and `offset` is the file offset of `data[0]` (0 for memory)."""

    vaddr: int
    data: bytes | memoryview
    name: str
    offset: int

    @property
    def end(self) -> int:
        return self.vaddr + len(self.data)


@dataclass(frozen=True)
class Module:
    """One loaded object, as a trace bundle's manifest records it.

    `kind` is "elf" (an ELF file, symbols and lines available), "raw" (a file
    or buffer without structure) or "snapshot" (bytes copied from a process,
    e.g. the vDSO or JIT code; `path` is the maps name such as "[vdso]").
    `load_address` is the lowest address the module occupies and `offset` the
    file offset mapped there; `base` is the load bias (ELF vaddr + base =
    runtime address; 0 for executables linked at their address); `build_id` is
    the GNU build-id in lower-case hex, or None.
    """

    path: str
    kind: str
    load_address: int
    size: int
    offset: int
    base: int
    build_id: str | None


def is_go_binary(path: str) -> bool:
    """Whether the ELF file at `path` was built by the Go toolchain: it has Go's line and
    function table (.gopclntab, kept by `-ldflags=-s -w` too). False for a file that is not ELF
    or cannot be read."""
    try:
        with open(path, "rb") as f:
            return ELFFile(f).get_section_by_name(".gopclntab") is not None
    except (OSError, ELFError, ValueError):
        return False


def elf_build_id(elf: ELFFile) -> str | None:
    """The NT_GNU_BUILD_ID note's bytes in hex, or None."""
    for segment in elf.iter_segments():
        if segment["p_type"] != "PT_NOTE":
            continue
        for note in segment.iter_notes():
            if note["n_type"] == "NT_GNU_BUILD_ID" and note["n_name"] == "GNU":
                return note["n_desc"]
    return None


def elf_identity(elf: ELFFile) -> str | None:
    """What names this exact binary, for caches of what is read from it: the GNU build-id
    (from a PT_NOTE segment or the .note.gnu.build-id section: Go's linker writes the section
    outside any PT_NOTE), else Go's build id (.note.go.buildid, "go:" + its text); None when
    it has neither."""
    found = elf_build_id(elf)
    if found:
        return found
    go = None
    for section in elf.iter_sections():
        if section["sh_type"] != "SHT_NOTE":
            continue
        for note in section.iter_notes():
            if note["n_name"] == "GNU" and note["n_type"] == "NT_GNU_BUILD_ID":
                return note["n_desc"]
            if note["n_name"] == "Go" and section.name == ".note.go.buildid":
                desc = note["n_desc"]
                go = "go:" + (desc.decode(errors="replace") if isinstance(desc, bytes)
                              else str(desc))
    return go


@dataclass(frozen=True)
class ElfLayout:
    """What opening an image reads of an ELF file's headers: its PT_LOAD segments
    (p_vaddr, p_offset, p_filesz, p_memsz, p_flags) and the ids naming it."""
    loads: tuple[tuple[int, int, int, int, int], ...]
    build_id: str | None
    identity: str | None
    """elf_identity's."""


_ELF_LAYOUTS_KEPT = 256
_elf_layouts: dict[tuple, ElfLayout] = {}
"""ElfLayout by (device, inode, size, mtime), oldest first: every capture opens the same
libraries, and pyelftools takes 10-30 ms to parse the headers of each (issue 33: 0.18 s of
the 0.2 s an onnxruntime request's capture took to open)."""
_elf_layouts_lock = threading.Lock()


def elf_layout(path: str) -> ElfLayout:
    """The ElfLayout of the file at `path`, read once while the file stays as it is.
    Raises PtError(BAD_FILE) if it cannot be read, PtError(BAD_IMAGE) if it is not ELF."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise PtError(ErrorCode.BAD_FILE, detail=f"cannot open {path}: {e.strerror}")
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)  # a hard link is the same file
    with _elf_layouts_lock:
        layout = _elf_layouts.get(key)
    if layout is not None:
        return layout
    elf, f = _open_elf(path)
    try:
        with f:
            loads = tuple((seg["p_vaddr"], seg["p_offset"], seg["p_filesz"], seg["p_memsz"],
                           seg["p_flags"]) for seg in elf.iter_segments()
                          if seg["p_type"] == "PT_LOAD")
            layout = ElfLayout(loads, elf_build_id(elf), elf_identity(elf))
    except ELFError as e:
        raise PtError(ErrorCode.BAD_IMAGE, detail=f"{path} is not an ELF file: {e}")
    with _elf_layouts_lock:
        _elf_layouts[key] = layout
        while len(_elf_layouts) > _ELF_LAYOUTS_KEPT:
            del _elf_layouts[next(iter(_elf_layouts))]
    return layout


def elf_load_bias(path: str, load_address: int, offset: int = 0) -> int | None:
    """Load bias of an ELF mapping: where its file offset `offset` is in memory
    (`load_address`), minus the virtual address the ELF gives that offset (the PT_LOAD
    segment that holds it). None for a file that is not ELF, cannot be read, or has no
    PT_LOAD segment holding `offset`."""
    try:
        loads = elf_layout(path).loads
    except PtError:
        return None
    for vaddr, lo, size, _, _ in loads:
        if lo <= offset < lo + max(size, 1):
            return load_address - (vaddr + offset - lo)
    return None


_SYMBOL_TABLES_KEPT = 16
_symbol_tables: dict[tuple, SymbolTable] = {}
"""The function symbols of files by (elf_identity, bias, end), oldest first: every capture of
a program holds its own copy of the executable, and reading a Go binary's symbols takes a
tenth of a second or more."""
_symbol_tables_lock = threading.Lock()


def _file_symbols(path: str, module: Module) -> SymbolTable:
    """The SymbolTable of the ELF file `path` mapped as `module`, read once per binary."""
    identity = elf_layout(path).identity
    end = module.load_address + module.size
    key = (identity, module.base, end) if identity else None
    with _symbol_tables_lock:
        table = _symbol_tables.get(key) if key else None
    if table is not None:
        named = copy.copy(table)  # the same arrays, named after this module's path
        named.module = module.path
        return named
    elf, f = _open_elf(path)
    with f:
        table = SymbolTable(elf_function_symbols(elf, module.base), module.path, end)
    if key:
        with _symbol_tables_lock:
            _symbol_tables[key] = table
            while len(_symbol_tables) > _SYMBOL_TABLES_KEPT:
                del _symbol_tables[next(iter(_symbol_tables))]
    return table


def _open_elf(path: str) -> tuple[ELFFile, object]:
    try:
        f = open(path, "rb")  # noqa: SIM115 - returned open, with the ELFFile reading it
    except OSError as e:
        raise PtError(ErrorCode.BAD_FILE, detail=f"cannot open {path}: {e.strerror}")
    try:
        return ELFFile(f), f
    except ELFError as e:
        f.close()
        raise PtError(ErrorCode.BAD_IMAGE, detail=f"{path} is not an ELF file: {e}")


class Image:
    """Code bytes by address, the modules they came from, and their symbols.

    `sections`: sorted, non-overlapping `Section`s. `modules`: one `Module` per
    added object, in the order added. `warnings`: what was skipped and why
    (an unreadable mapping, a malformed perf-map line).
    """

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self._starts: list[int] = []
        self.modules: list[Module] = []
        self.warnings: list[str] = []
        self.generation = 0
        """Incremented by every change of `sections`: a decoder's cache of decoded
        blocks is valid while the generation it was built at is current."""
        # (module, loader) pairs; a loader builds the SymbolTable on first use,
        # since reading a large .symtab with pyelftools takes a while.
        self._symbol_sources: list[tuple[Module, object]] = []
        self._symbol_tables: dict[int, SymbolTable] = {}
        self._perf_maps: list[SymbolTable] = []

    # -- bytes -----------------------------------------------------------

    def add_section(self, vaddr: int, data: bytes | memoryview, name: str,
                    offset: int = 0) -> None:
        """Map `data` at `vaddr`, overriding any earlier bytes it overlaps.

        Raises PtError(INVALID) for a negative address or one past 2^64.
        """
        if vaddr < 0 or vaddr + len(data) > 1 << 64:
            raise PtError(ErrorCode.INVALID, detail=f"section {name} at {vaddr:#x} is outside the address space")
        if not len(data):
            return
        new = Section(vaddr, data, name, offset)
        end = new.end
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0 or self.sections[i].end <= vaddr:
            i += 1
        j = i
        pieces = [new]
        while j < len(self.sections) and self.sections[j].vaddr < end:
            old = self.sections[j]
            view = memoryview(old.data)
            if old.vaddr < vaddr:  # only the first overlapped section can stick out left
                pieces.insert(0, Section(old.vaddr, view[: vaddr - old.vaddr], old.name, old.offset))
            if old.end > end:  # only the last can stick out right
                cut = end - old.vaddr
                pieces.append(Section(end, view[cut:], old.name, old.offset + cut))
            j += 1
        self.sections[i:j] = pieces
        self._starts[i:j] = [s.vaddr for s in pieces]
        self.generation += 1

    def section_at(self, addr: int) -> Section | None:
        """The section holding `addr`, or None if nothing is mapped there."""
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.sections[i].end:
            return self.sections[i]
        return None

    def read(self, addr: int, size: int) -> bytes | None:
        """Up to `size` bytes from `addr`, continuing into directly adjacent sections.

        Returns fewer than `size` bytes where the mapped memory ends, and None
        if `addr` itself is not mapped (libipt's -pte_nomap).
        """
        i = bisect.bisect_right(self._starts, addr) - 1
        if i < 0 or addr >= self.sections[i].end:
            return None
        out = bytearray()
        while size > 0 and i < len(self.sections):
            sec = self.sections[i]
            if sec.vaddr > addr:
                break
            chunk = bytes(memoryview(sec.data)[addr - sec.vaddr: addr - sec.vaddr + size])
            out += chunk
            addr += len(chunk)
            size -= len(chunk)
            i += 1
        return bytes(out)

    # -- sources ---------------------------------------------------------

    def add_raw(self, source: str | bytes | bytearray | memoryview, vaddr: int,
                offset: int = 0, size: int | None = None) -> Module:
        """Map `size` bytes (default: all) from `offset` of a file or buffer at `vaddr`.

        Raises PtError(BAD_FILE) if the file cannot be read, PtError(INVALID)
        if `offset` lies past its end.
        """
        if isinstance(source, str):
            try:
                with open(source, "rb") as f:
                    data = _read_part(f, offset, size)
                total = os.path.getsize(source)
            except OSError as e:
                raise PtError(ErrorCode.BAD_FILE, detail=f"cannot read {source}: {e.strerror}")
            name = source
        else:
            total = len(source)
            data = bytes(source[offset:] if size is None else source[offset: offset + size])
            name = "[raw]"
        if offset > total:
            raise PtError(ErrorCode.INVALID, detail=f"offset {offset:#x} is past the end of {name} ({total:#x} bytes)")
        self.add_section(vaddr, data, name, offset)
        module = Module(name, "raw", vaddr, len(data), offset, 0, None)
        self.modules.append(module)
        return module

    def add_elf(self, path: str, base: int = 0) -> Module:
        """Map the executable PT_LOAD segments of an ELF file at p_vaddr + `base`.

        `base` is the load bias of a PIE or shared object (0 for an executable
        linked at its address). Symbols come from .symtab and .dynsym.
        Raises PtError(BAD_FILE) if the file cannot be read, PtError(BAD_IMAGE)
        if it is not an ELF file or has no executable segment.
        """
        layout = elf_layout(path)  # (headers read once per file: ElfLayout)
        loads = layout.loads
        code = [s for s in loads if s[4] & PF_X and s[2]]
        if not code:
            raise PtError(ErrorCode.BAD_IMAGE, detail=f"{path} has no executable PT_LOAD segment")
        try:
            with open(path, "rb") as f:
                for vaddr, offset, filesz, _, _ in code:
                    self.add_section(vaddr + base, _read_part(f, offset, filesz), path, offset)
        except OSError as e:
            raise PtError(ErrorCode.BAD_FILE, detail=f"cannot read {path}: {e.strerror}")
        low = min(s[0] for s in loads)
        high = max(s[0] + s[3] for s in loads)
        first = min(loads, key=lambda s: s[0])
        module = Module(path, "elf", low + base, high - low, first[1], base, layout.build_id)
        self.modules.append(module)
        self._add_elf_symbols(module, path=path)
        return module

    def add_perf_map(self, path: str, owners: Iterable[int] | None = None, *,
                     any_owner: bool = False) -> int:
        """Add the symbols of a perf-map file (`/tmp/perf-PID.map`); returns how many.

        Later lines win over earlier ones for the same address, as a JIT that
        recompiles a function appends a new line. The file must be a regular file
        (not a link, a FIFO or a device) owned by one of `owners`; None means the
        user of process PID for a path /tmp/perf-PID.map, and root (symbols.read_perf_map);
        `any_owner`: no owner check (a bundle's copy, checked when it was copied in).
        Raises PtError(BAD_FILE) if the file cannot be read or is refused;
        malformed lines are skipped and named in `warnings`.
        """
        if owners is None and not any_owner:
            owners = perf_map_owners(path)
        entries, warnings = read_perf_map(path, owners)
        self.warnings.extend(warnings)
        self._perf_maps.append(SymbolTable(reversed(entries), path))
        return len(entries)

    @classmethod
    def from_process(cls, pid: int, perf_map: bool = True) -> Image:
        """The code of a live process, which should be stopped while this runs.

        Every executable mapping in /proc/PID/maps is added: a file-backed one
        maps the file's bytes (and the file's symbols), anonymous memory, the
        vDSO and files deleted since they were mapped are copied from
        /proc/PID/mem. [vsyscall] is skipped (the kernel emulates it and it
        cannot be read). With `perf_map`, /tmp/perf-PID.map is added if present.
        Raises PtError(BAD_FILE) if /proc/PID/maps cannot be read (no such
        process); a mapping that cannot be read is skipped and named in `warnings`.
        """
        image = cls()
        try:
            with open(f"/proc/{pid}/maps") as f:
                maps = f.read().splitlines()
        except OSError as e:
            raise PtError(ErrorCode.BAD_FILE, detail=f"cannot read /proc/{pid}/maps: {e.strerror}")
        mappings = []
        for line in maps:
            parts = line.split(None, 5)
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            mappings.append((lo, hi, parts[1], int(parts[2], 16), parts[5] if len(parts) > 5 else ""))
        try:
            mem = open(f"/proc/{pid}/mem", "rb", buffering=0)  # noqa: SIM115 - closed in the finally below
        except OSError as e:
            mem = None
            image.warnings.append(f"cannot open /proc/{pid}/mem: {e.strerror}")
        try:
            files: dict[str, list[tuple[int, int, str, int]]] = {}
            for lo, hi, perms, offset, name in mappings:
                if name.startswith("/"):
                    files.setdefault(name, []).append((lo, hi, perms, offset))
            for lo, hi, perms, offset, name in mappings:
                if "x" not in perms or name == "[vsyscall]":
                    continue
                if name.startswith("/") and os.path.isfile(name):
                    try:
                        image.add_mapping(name, lo, offset, hi - lo)
                    except PtError as e:
                        image.warnings.append(str(e))
                else:
                    image._map_process_memory(mem, pid, lo, hi, name or "[anon]")
        finally:
            if mem is not None:
                mem.close()
        # A module spans all of its file's mappings (headers, data), not only the code.
        for index, module in enumerate(image.modules):
            maps = files.get(module.path)
            if maps:
                low, high = min(m[0] for m in maps), max(m[1] for m in maps)
                image._replace_module(index, dataclasses.replace(
                    module, load_address=low, size=high - low, offset=min(maps)[3]))
        perf_map_path = f"/tmp/perf-{pid}.map"
        if perf_map and os.path.lexists(perf_map_path):
            try:
                image.add_perf_map(perf_map_path)
            except PtError as e:  # another user's file, a link, a FIFO: named, not read
                image.warnings.append(str(e))
        return image

    def add_mapping(self, path: str, vaddr: int, offset: int = 0, size: int | None = None) -> Module:
        """Map `size` bytes (default: to the end) of the file at `path` from `offset`
        at `vaddr`, as mmap(2) and a trace bundle's image entries do, and, if the
        file is an ELF, add its symbols at the load bias this mapping implies.

        Several mappings of one file make one Module spanning them all. Raises
        PtError(BAD_FILE) if the file cannot be read; a file that is not ELF is
        mapped as raw bytes (kind "raw") and named in `warnings`.
        """
        try:
            with open(path, "rb") as f:
                data = _read_part(f, offset, size)
        except OSError as e:
            raise PtError(ErrorCode.BAD_FILE, detail=f"cannot read {path} to map at {vaddr:#x}: {e.strerror}")
        self.add_section(vaddr, data, path, offset)
        end = vaddr + (len(data) if size is None else size)
        for index, module in enumerate(self.modules):
            if module.path == path:
                low, high = min(module.load_address, vaddr), max(module.load_address + module.size, end)
                grown = dataclasses.replace(module, load_address=low, size=high - low,
                                            offset=module.offset if module.load_address <= vaddr else offset)
                self._replace_module(index, grown)
                return grown
        base, build_id, kind = 0, None, "raw"
        try:
            elf, f = _open_elf(path)
            with f:
                build_id = elf_build_id(elf)
                for seg in elf.iter_segments():
                    if seg["p_type"] == "PT_LOAD" and seg["p_offset"] <= offset < seg["p_offset"] + max(seg["p_filesz"], 1):
                        # The file byte at `offset` sits at p_vaddr + (offset - p_offset)
                        # in the ELF's own addresses and at `vaddr` in memory.
                        base = vaddr - (seg["p_vaddr"] + offset - seg["p_offset"])
                        kind = "elf"
                        break
        except PtError as e:
            self.warnings.append(f"{path}: {e}; mapped as raw bytes without symbols")
        module = Module(path, kind, vaddr, end - vaddr, offset, base, build_id)
        self.modules.append(module)
        if kind == "elf":
            self._add_elf_symbols(module, path=path)
        return module

    def add_snapshot(self, data: bytes, vaddr: int, name: str = "[anon]") -> Module:
        """Map bytes copied from a process's memory (JIT code, the vDSO) at `vaddr`.
        If they are a whole ELF image, as the vDSO is, its symbols come with it."""
        self.add_section(vaddr, data, name, 0)
        build_id, base, elf_data = None, 0, None
        if data[:4] == b"\x7fELF":
            try:
                elf = ELFFile(io.BytesIO(data))
                build_id = elf_build_id(elf)
                loads = [s for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
                if loads:
                    base = vaddr - min(s["p_vaddr"] for s in loads)
                elf_data = data
            except ELFError as e:
                self.warnings.append(f"{name} at {vaddr:#x} looks like ELF but is not: {e}")
        module = Module(name, "snapshot", vaddr, len(data), 0, base, build_id)
        self.modules.append(module)
        if elf_data is not None:
            self._add_elf_symbols(module, data=elf_data)
        return module

    def _replace_module(self, index: int, module: Module) -> None:
        old = self.modules[index]
        self.modules[index] = module
        for k, (source, loader) in enumerate(self._symbol_sources):
            if source is old:
                self._symbol_sources[k] = (module, loader)
                self._symbol_tables.pop(k, None)  # size-0 symbols are bounded by the module

    def _map_process_memory(self, mem, pid: int, lo: int, hi: int, name: str) -> None:
        if mem is None:
            self.warnings.append(f"{name} at {lo:#x} skipped: /proc/{pid}/mem is not readable")
            return
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except OSError as e:
            self.warnings.append(f"cannot read {name} at {lo:#x}-{hi:#x} from /proc/{pid}/mem: {e.strerror}")
            return
        self.add_snapshot(data, lo, name)

    # -- symbols ---------------------------------------------------------

    def _add_elf_symbols(self, module: Module, path: str | None = None, data: bytes | None = None) -> None:
        def load() -> SymbolTable:
            if path is not None:
                return _file_symbols(path, module)
            else:
                entries = elf_function_symbols(ELFFile(io.BytesIO(data)), module.base)
            return SymbolTable(entries, module.path, module.load_address + module.size)

        self._symbol_sources.append((module, load))

    def _table(self, index: int) -> SymbolTable:
        table = self._symbol_tables.get(index)
        if table is None:
            table = self._symbol_sources[index][1]()
            self._symbol_tables[index] = table
        return table

    def symbolize(self, addr: int) -> Symbol | None:
        """The function holding `addr`: perf-map entries first (JIT code lives in
        anonymous memory), then the ELF symbols of the module mapped there; None
        if no symbol covers it."""
        for table in reversed(self._perf_maps):
            sym = table.lookup(addr)
            if sym is not None:
                return sym
        for index, (module, _) in enumerate(self._symbol_sources):
            if module.load_address <= addr < module.load_address + module.size:
                sym = self._table(index).lookup(addr)
                if sym is not None:
                    return sym
        return None

    def find_symbol(self, name: str) -> tuple[int, int, str] | None:
        """(address, size, module path) of the first function called `name`, or None."""
        for table in reversed(self._perf_maps):
            found = table.find(name)
            if found is not None:
                return found[0], found[1], table.module
        for index, (module, _) in enumerate(self._symbol_sources):
            found = self._table(index).find(name)
            if found is not None:
                return found[0], found[1], module.path
        return None

    def module_at(self, addr: int) -> Module | None:
        """The module whose address range holds `addr` (the latest added wins), or None."""
        for module in reversed(self.modules):
            if module.load_address <= addr < module.load_address + module.size:
                return module
        return None


class _FileBytes(bytearray):
    """Bytes read from a file, shared by every Image that maps the same part of the same
    file (a bytearray subclass only because bytes cannot be weakly referenced; never
    written after the read)."""


_shared_parts: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
"""(device, inode, size, mtime, offset, length) -> _FileBytes still held by some Image: an
adapter keeping one decoded bundle per capture held a copy of the interpreter's and its
libraries' code per capture (~70 MB each for Python, issue 17's soak); now they share one,
and it is freed with the last Image holding it."""
_shared_lock = threading.Lock()


def _read_part(f, offset: int, size: int | None) -> bytearray:
    """`size` bytes (None: all) of the open file `f` from `offset`, never more than the file
    holds: a size taken from a bundle's manifest may be anything, and read(size) allocates it
    up front (2^40 ran the decoder out of memory). The same part of an unchanged file read
    again, while an earlier read is still held, is that earlier read (not a copy)."""
    st = os.fstat(f.fileno())
    available = max(0, st.st_size - offset)
    length = available if size is None or size < 0 else min(size, available)  # as read(size)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, offset, length)
    with _shared_lock:
        data = _shared_parts.get(key)
    if data is not None:
        return data
    data = _FileBytes(length)
    f.seek(offset)
    got = f.readinto(data) or 0
    if got < length:  # the file shrank under us: what was read, not shared
        del data[got:]
        return data
    with _shared_lock:
        return _shared_parts.setdefault(key, data)


def perf_map_owners(path: str) -> set[int] | None:
    """Who may own a perf map: root and the user of process PID for /tmp/perf-PID.map (the
    process writes it); root and this process's user for any other path."""
    match = re.fullmatch(r"/tmp/perf-(\d+)\.map", os.path.abspath(path))
    if match is None:
        return {0, os.geteuid()}
    try:
        return {0, os.stat(f"/proc/{match.group(1)}").st_uid}
    except OSError:
        return {0}  # the process is gone: only root's file is trusted

"""Symbol tables: address -> function name, from ELF .symtab/.dynsym and perf-map files.

Layer: pt_decoder, beside image.py (which owns the address space and builds
one SymbolTable per loaded module). Knows ELF symbol tables (through
pyelftools) and the perf-map text format; knows nothing of traces, processes
or the adapter.

perf-map files (`/tmp/perf-PID.map`) are what CPython 3.12+ writes with
`-X perf` and what JITs (V8, the JVM agents, LuaJIT...) write: one
`START SIZE name` line per code region, START and SIZE in hex, the name to the
end of the line (it may hold spaces). See the Linux source,
tools/perf/Documentation/jit-interface.txt.
"""
from __future__ import annotations

import bisect
import errno
import os
import stat
import struct
from array import array
from collections.abc import Iterable
from typing import NamedTuple

from elftools.elf.elffile import ELFFile

from .errors import ErrorCode, PtError

PERF_MAP_MAX_BYTES = 64 * 1024 * 1024
"""Most of a perf-map file read (a large JIT's map is a few MB)."""


class Symbol(NamedTuple):
    """The function an address belongs to: `name`, `offset` of the address from
    the function's start, and `module` (the ELF path, "[vdso]", or the perf-map path)."""

    name: str
    offset: int
    module: str

    @property
    def display(self) -> str:
        """The name as a view shows it: C++ and Rust names demangled (pt_decoder/demangle.py);
        `name` stays the linkage name the symbol table holds."""
        from .demangle import demangle
        return demangle(self.name)


class SymbolTable:
    """The function symbols of one module at their runtime addresses.

    Sorted by start address. A symbol of size 0 (common for assembly labels)
    is taken to run to the next symbol's start, as `perf` and `gdb` do (ELF symbols
    come with that size worked out and bounded by their section: elf_function_symbols).
    Where several symbols share a start (aliases), the global one is kept.
    """

    def __init__(self, entries: Iterable[tuple[int, int, str]], module: str, limit: int = 0):
        """`entries`: (start, size, name) at runtime addresses; `limit`: the end of the
        module, bounding size-0 symbols (0: unbounded)."""
        by_start: dict[int, tuple[int, str]] = {}
        self._by_name: dict[str, tuple[int, int]] = {}
        for start, size, name in entries:
            if not name:
                continue
            self._by_name.setdefault(name, (start, size))
            old = by_start.get(start)
            # The first (global) name at an address wins; a later sized alias
            # only replaces a size-0 one.
            if old is None or (old[0] == 0 and size > 0):
                by_start[start] = (size, name)
        starts = sorted(by_start)
        self.module = module
        self.starts = array("Q", starts)
        self.ends = array("Q")
        self.names: list[str] = []
        for i, start in enumerate(starts):
            size, name = by_start[start]
            if size:
                end = start + size
            elif i + 1 < len(starts):
                end = starts[i + 1]
            else:
                end = limit if limit > start else start + 1
            self.ends.append(end)
            self.names.append(name)

    def __len__(self) -> int:
        return len(self.starts)

    def lookup(self, addr: int) -> Symbol | None:
        """The symbol whose range holds `addr`, or None."""
        i = bisect.bisect_right(self.starts, addr) - 1
        # A small symbol nested inside a large one ends before `addr`; the
        # enclosing one is a few entries back.
        for j in range(i, max(i - 8, -1), -1):
            if addr < self.ends[j]:
                return Symbol(self.names[j], addr - self.starts[j], self.module)
        return None

    def find(self, name: str) -> tuple[int, int] | None:
        """(start, size) of the symbol called `name`, or None."""
        return self._by_name.get(name)


def elf_function_symbols(elf: ELFFile, bias: int) -> list[tuple[int, int, str]]:
    """(start + bias, size, name) of every defined function in .symtab and .dynsym; global
    symbols first, then weak, then local, so that the strongest name of an address wins.

    A function is an STT_FUNC or STT_GNU_IFUNC symbol of an executable section (by type,
    never by name): section markers and linker labels (__GNU_EH_FRAME_HDR, _DYNAMIC,
    _GLOBAL_OFFSET_TABLE_, __bss_start, _end: STT_NOTYPE or STT_OBJECT, in data) name no
    code. Taken to run to the next symbol, a size-0 one of them named libpython's whole data
    (issue 35). A function of size 0 (an assembly label without `.size`) gets the size up to
    the next function's start or its section's end, whichever comes first, so that every
    entry has a nonzero size and none runs past the code it is in."""
    sections: dict[int, tuple[int, int] | None] = {}

    def code_section(shndx: int) -> tuple[int, int] | None:
        """(start, end) of section `shndx` when it holds code (SHF_EXECINSTR; in a separate
        debug file the code sections are kept as SHT_NOBITS headers, flags and all)."""
        if shndx not in sections:
            found = None
            if 0 < shndx < SHN_LORESERVE and shndx < elf.num_sections():
                header = elf.get_section(shndx).header
                if header["sh_flags"] & SHF_EXECINSTR:
                    found = (header["sh_addr"], header["sh_addr"] + header["sh_size"])
            sections[shndx] = found
        return sections[shndx]

    found: list[tuple[int, int, str, int, int]] = []  # value, size, name, rank, shndx
    for section_name in (".symtab", ".dynsym"):
        section = elf.get_section_by_name(section_name)
        if section is None or not hasattr(section, "iter_symbols"):
            continue
        for value, size, name, kind, bind, shndx in _symbols(elf, section):
            if kind not in (STT_FUNC, STT_GNU_IFUNC) or not name or code_section(shndx) is None:
                continue
            found.append((value, size, name, 0 if bind == STB_GLOBAL else 1 if bind == STB_WEAK else 2, shndx))
    starts: dict[int, list[int]] = {}
    for value, _size, _name, _rank, shndx in found:
        starts.setdefault(shndx, []).append(value)
    for values in starts.values():
        values.sort()
    ranked: tuple[list, list, list] = ([], [], [])  # global, weak, local
    for value, size, name, rank, shndx in found:
        if size == 0:
            values = starts[shndx]
            following = bisect.bisect_right(values, value)
            end = code_section(shndx)[1]
            if following < len(values):
                end = min(end, values[following])
            size = end - value
            if size <= 0:
                continue  # a label at the very end of its section: no code of its own
        ranked[rank].append((value + bias, size, name))
    return ranked[0] + ranked[1] + ranked[2]


# ELF symbol and section fields (System V gABI, "Symbol Table", "Sections"):
# st_info = bind << 4 | type; SHF_EXECINSTR marks a section holding machine instructions.
STT_FUNC, STT_GNU_IFUNC = 2, 10
STB_GLOBAL, STB_WEAK = 1, 2
SHN_UNDEF, SHN_LORESERVE, SHN_ABS = 0, 0xFF00, 0xFFF1
SHF_EXECINSTR = 0x4


def _symbols(elf: ELFFile, section):
    """(value, size, name, type, bind, shndx) of every symbol of a symbol section.

    ELF64 little-endian tables are read straight from their bytes (pyelftools
    parses each symbol through `construct`: most of a second on a large Go
    binary); anything else goes through pyelftools."""
    if elf.elfclass == 64 and elf.little_endian and section["sh_entsize"] == 24:
        strings = elf.get_section(section["sh_link"]).data()
        # Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, st_value u64, st_size u64
        for st_name, info, _other, shndx, value, size in struct.iter_unpack("<IBBHQQ", section.data()):
            end = strings.find(b"\0", st_name)
            name = strings[st_name: end if end >= 0 else len(strings)].decode("utf-8", "replace")
            yield value, size, name, info & 0xF, info >> 4, shndx
        return
    types = {"STT_FUNC": STT_FUNC, "STT_GNU_IFUNC": STT_GNU_IFUNC}
    binds = {"STB_GLOBAL": STB_GLOBAL, "STB_WEAK": STB_WEAK}
    for sym in section.iter_symbols():
        shndx = sym["st_shndx"]
        shndx = {"SHN_UNDEF": SHN_UNDEF, "SHN_ABS": SHN_ABS}.get(shndx, shndx if isinstance(shndx, int) else 0xFFFF)
        yield (sym["st_value"], sym["st_size"], sym.name, types.get(sym["st_info"]["type"], -1),
               binds.get(sym["st_info"]["bind"], 0), shndx)


def read_perf_map(path: str, owners: Iterable[int] | None = None) -> tuple[list[tuple[int, int, str]], list[str]]:
    """Parse a perf-map file into (start, size, name) entries.

    The file is untrusted (anyone can create /tmp/perf-PID.map): it is opened without
    following a symbolic link and without blocking (a FIFO there held `record --pid`, `watch`
    and a DAP disassemble forever), must be a regular file owned by one of `owners` (the
    target's user and root; None: anyone), and at most PERF_MAP_MAX_BYTES are read (the rest
    is named in the warnings).

    Returns (entries, warnings): a line that does not parse (a JIT may be
    writing the last one right now) is skipped and named in `warnings`.
    Raises PtError(BAD_FILE) if the file cannot be read or is refused.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        reason = "it is a symbolic link" if e.errno == errno.ELOOP else e.strerror
        raise PtError(ErrorCode.BAD_FILE, detail=f"cannot read perf map {path}: {reason}")
    warnings: list[str] = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PtError(ErrorCode.BAD_FILE, detail=f"perf map {path} is not a regular file; "
                                                     "not read")
        if owners is not None and st.st_uid not in set(owners):
            raise PtError(ErrorCode.BAD_FILE, detail=f"perf map {path} belongs to uid "
                                                     f"{st.st_uid}, not to the process's user "
                                                     "or root; not read")
        data = os.read(fd, PERF_MAP_MAX_BYTES + 1)
        while len(data) <= PERF_MAP_MAX_BYTES:
            more = os.read(fd, PERF_MAP_MAX_BYTES + 1 - len(data))
            if not more:
                break
            data += more
    except OSError as e:
        raise PtError(ErrorCode.BAD_FILE, detail=f"cannot read perf map {path}: {e.strerror}")
    finally:
        os.close(fd)
    if len(data) > PERF_MAP_MAX_BYTES:
        data = data[:data.rfind(b"\n", 0, PERF_MAP_MAX_BYTES) + 1]
        warnings.append(f"{path}: only the first {len(data)} bytes were read (the limit is "
                        f"{PERF_MAP_MAX_BYTES})")
    text = data.decode("utf-8", errors="replace")
    entries: list[tuple[int, int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split(None, 2)
        if not parts:
            continue
        try:
            start, size = int(parts[0], 16), int(parts[1], 16)
            name = parts[2].strip()
        except (ValueError, IndexError):
            warnings.append(f"{path}:{number}: not a 'START SIZE name' line: {line[:80]!r}")
            continue
        entries.append((start, size, name))
    return entries, warnings

"""Address <-> source line: DWARF .debug_line (pyelftools) and Go's pclntab.

Layer: pt_decoder, the top (history.py uses it to step by line). Reads ELF
files only; knows nothing of traces, processes or the adapter.

A `LineTable` is one sorted row table at runtime addresses (the module's load
bias already added). Row i covers [address[i], address[i+1]); an
end-of-sequence row covers nothing. Where several rows share an address, the
last one describes it (as llvm-symbolizer and addr2line read DWARF). Each
distinct (file, line) has a small integer *line id* (0: no line), which is
what the history stores per distinct IP and compares when stepping by line.

DWARF: the line-number program of DWARF v2-v5 (DWARF 5 spec §6.2; file
index 0 is the primary file from v5 on, 1-based before). is_stmt says where
a statement begins; a row with is_stmt false belongs to its line but is no
place to stop (gdb's rule since 10.1). Go: the runtime's own table
(`.gopclntab`, magic 0xfffffff0/1 for Go 1.18+; layout in Go's
src/runtime/symtab.go `pcHeader` and `_func`, encoding in src/cmd/internal/obj
pcln.go): per function a pc->file and a pc->line zig-zag varint table. It is
present in every Go binary, stripped or not, and gives function names too.
"""
from __future__ import annotations

import bisect
import os
import struct
import threading
from array import array
from collections.abc import Iterable
from typing import NamedTuple

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from ._dwarf_lines import LineProgramError, in_address_order
from ._history import assign_line_ids, go_function_rows, lookup_sorted
from .dwarf_line_units import UnsupportedLineUnit, line_units, run_unit
from .errors import ErrorCode, PtError

__all__ = ["LineRow", "LineTable"]

_TABLES_KEPT = 16
_tables: dict[tuple, LineTable] = {}
_tables_lock = threading.Lock()
"""LineTable.for_elf's tables by binary (_table_key), oldest first: a Go binary's pclntab
takes about a second to read, and every capture of a session (each bundle holding its own copy
of the executable) asks for the same one."""


def _table_key(elf: ELFFile, path: str, base: int, source: str) -> tuple:
    """The binary's build-id when it has one (the same binary under any path), else
    its path, size and mtime; with the bias and the line source asked for."""
    from .image import elf_identity
    build_id = elf_identity(elf)
    if build_id:
        return ("build-id", build_id, base, source)
    stat = os.stat(path)
    return (path, stat.st_size, stat.st_mtime_ns, base, source)

IS_STMT = 0x1
END_SEQUENCE = 0x2
PCLNTAB_GO118 = 0xFFFFFFF0
PCLNTAB_GO120 = 0xFFFFFFF1


class LineRow(NamedTuple):
    """One row of a line table: the instruction at `address` begins code of `file`:`line`."""

    address: int
    file: str
    line: int
    column: int
    is_stmt: bool


class LineTable:
    """Sorted rows address -> (file, line, column, is_stmt) for one or more modules.

    Build with `for_elf`, `for_image`, `merge` or `from_rows`. Queries:
    `lookup`, `row_at`, `addresses`, `statement_addresses`, `line_ids`,
    `line_key`, `function` (Go pclntab only).
    """

    def __init__(self, files: list[str], rows: Iterable[tuple[int, int, int, int, int]],
                 functions: _GoFunctions | None = None):
        """`rows`: (address, file id, line, column, flags) with flags IS_STMT/END_SEQUENCE,
        in sequence order. Use the classmethods; this is the common end of them."""
        self.files = list(files)
        """File id -> path."""
        rows = list(rows)
        columns = list(zip(*rows)) if rows else [(), (), (), (), ()]
        address, flags = array("Q", columns[0]), array("B", columns[4])
        # End rows first among equal addresses: a sequence that ends where the
        # next one starts must not hide the next one's first row. Go's rows
        # arrive in that order already; only sort when they are not.
        if not in_address_order(address, flags):
            rows = [r for _, r in sorted(enumerate(rows), key=lambda ir: (ir[1][0], not ir[1][4] & END_SEQUENCE, ir[0]))]
            columns = list(zip(*rows))
            address, flags = array("Q", columns[0]), array("B", columns[4])
        self._set_columns(address, array("I", columns[1]), array("I", columns[2]),
                          array("I", columns[3]), flags, functions)

    @classmethod
    def _from_columns(cls, files: list[str], address: array, file_id: array, line: array,
                      column: array, flags: array) -> LineTable:
        """A table from row columns already in table order (in_address_order)."""
        table = cls.__new__(cls)
        table.files = list(files)
        table._set_columns(address, file_id, line, column, flags, None)
        return table

    def _set_columns(self, address: array, file_id: array, line: array, column: array,
                     flags: array, functions: _GoFunctions | None) -> None:
        self.address = address
        self.file_id = file_id
        self.line = line
        self.column = column
        self.flags = flags
        line_id, stmt_line_id, keys = assign_line_ids(self.address, self.file_id, self.line, self.flags,
                                                      IS_STMT, END_SEQUENCE)
        self._keys: list[tuple[int, int] | None] = [None, *keys]
        self.line_id = line_id
        """Per row: the id of its (file, line); 0 for end rows and line 0."""
        self.stmt_line_id = stmt_line_id
        """Per row: its line id if a statement begins at its address, else the id of
        the last statement row before it in its sequence (the statement it continues)."""
        self._functions = functions

    # -- construction ----------------------------------------------------

    @classmethod
    def for_elf(cls, path: str, base: int = 0, source: str = "auto") -> LineTable:
        """The line table of an ELF file loaded with bias `base`.

        `source`: "dwarf" (.debug_line, or the separate debug file named by the
        build-id under /usr/lib/debug/.build-id), "pclntab" (Go), or "auto"
        (pclntab for a Go binary, else DWARF). Raises PtError(BAD_FILE) if the
        file cannot be read, PtError(BAD_IMAGE) if it is not ELF or holds no
        line information of the asked kind.
        """
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed by the `with f` below
        except OSError as e:
            raise PtError(ErrorCode.BAD_FILE, detail=f"cannot open {path}: {e.strerror}")
        with f:
            try:
                elf = ELFFile(f)
            except ELFError as e:
                raise PtError(ErrorCode.BAD_IMAGE, detail=f"{path} is not an ELF file: {e}")
            key = _table_key(elf, path, base, source)
            with _tables_lock:
                table = _tables.get(key)
            if table is None:
                table = cls._for_open_elf(elf, path, base, source)
                with _tables_lock:
                    _tables[key] = table
                    while len(_tables) > _TABLES_KEPT:
                        del _tables[next(iter(_tables))]
            return table

    @classmethod
    def _for_open_elf(cls, elf: ELFFile, path: str, base: int, source: str) -> LineTable:
        """for_elf's reading, uncached."""
        pcln = elf.get_section_by_name(".gopclntab")
        if source == "pclntab" or (source == "auto" and pcln is not None):
            if pcln is None:
                raise PtError(ErrorCode.BAD_IMAGE, detail=f"{path} has no .gopclntab (not a Go binary)")
            return cls._from_pclntab(elf, pcln.data(), base, path)
        if source not in ("auto", "dwarf"):
            raise PtError(ErrorCode.INVALID, detail=f"unknown line source {source!r}")
        if elf.get_section_by_name(".debug_line") is None and elf.get_section_by_name(".zdebug_line") is None:
            debug = _separate_debug_file(elf)
            if debug is None:
                raise PtError(ErrorCode.BAD_IMAGE, detail=f"{path} has no .debug_line and no separate debug file")
            return cls.for_elf(debug, base, "dwarf")
        return cls._from_dwarf(elf, base)

    @classmethod
    def for_image(cls, image, accept=None) -> LineTable:
        """One table for every ELF module of a pt_decoder.image.Image that has line
        information, each at its load bias; modules without any are left out, and so are
        those for which `accept(module)`, when given, is false (a caller that wants only the
        user's code skips the system libraries whose line tables take seconds to read)."""
        tables = []
        for module in image.modules:
            if module.kind != "elf" or (accept is not None and not accept(module)):
                continue
            try:
                tables.append(cls.for_elf(module.path, module.base))
            except PtError:
                continue
        return cls.merge(tables)

    @classmethod
    def merge(cls, tables: list[LineTable]) -> LineTable:
        """One table holding the rows of all `tables` (their modules must not overlap); the
        table itself when there is one (tables are never changed once built)."""
        if len(tables) == 1:
            return tables[0]
        files: list[str] = []
        file_index: dict[str, int] = {}
        rows = []
        functions = None
        for table in tables:
            remap = []
            for name in table.files:
                if name not in file_index:
                    file_index[name] = len(files)
                    files.append(name)
                remap.append(file_index[name])
            rows.extend(zip(table.address, (remap[i] for i in table.file_id), table.line,
                            table.column, table.flags))
            if table._functions is not None:
                functions = table._functions if functions is None else functions.merged(table._functions)
        return cls(files, rows, functions)

    @classmethod
    def from_rows(cls, rows: Iterable[LineRow | tuple], end: int | None = None) -> LineTable:
        """A one-sequence table from (address, file, line[, column, is_stmt]) rows in
        address order, ending at `end` (default: one past the last address)."""
        files: list[str] = []
        index: dict[str, int] = {}
        out = []
        last = 0
        for row in rows:
            address, file, line = row[0], row[1], row[2]
            column = row[3] if len(row) > 3 else 0
            stmt = row[4] if len(row) > 4 else True
            if file not in index:
                index[file] = len(files)
                files.append(file)
            out.append((address, index[file], line, column, IS_STMT if stmt else 0))
            last = address
        out.append((last + 1 if end is None else end, 0, 0, 0, END_SEQUENCE))
        return cls(files or [""], out)

    @classmethod
    def _from_dwarf(cls, elf: ELFFile, base: int) -> LineTable:
        """The DWARF line table: headers read here and programs run in C
        (dwarf_line_units, _dwarf_lines); pyelftools' line programs where that reader meets
        something it does not know (the same rows, 10-50x slower)."""
        try:
            return cls._from_dwarf_units(elf, base)
        except (UnsupportedLineUnit, LineProgramError):
            return cls._from_dwarf_pyelftools(elf, base)

    @classmethod
    def _from_dwarf_units(cls, elf: ELFFile, base: int) -> LineTable:
        dwarf = elf.get_dwarf_info()

        def section(descriptor) -> bytes | None:
            return None if descriptor is None else descriptor.stream.getvalue()

        def comp_dirs() -> dict[int, str]:
            found = {}
            for cu in dwarf.iter_CUs():
                attributes = cu.get_top_DIE().attributes
                if "DW_AT_stmt_list" in attributes:
                    found[attributes["DW_AT_stmt_list"].value] = _comp_dir(attributes)
            return found

        debug_line = section(dwarf.debug_line_sec)
        if not debug_line:
            raise PtError(ErrorCode.BAD_IMAGE, detail=f"{elf.stream.name} has an empty .debug_line")
        file_index: dict[str, int] = {}
        parts = []
        for unit in line_units(debug_line, section(dwarf.debug_str_sec),
                               section(getattr(dwarf, "debug_line_str_sec", None)),
                               dwarf.config.default_address_size, comp_dirs):
            ids = array("I", (file_index.setdefault(name, len(file_index)) for name in unit.files))
            parts.append(run_unit(debug_line, unit, base, ids))
        return cls._from_dwarf_parts(elf, list(file_index), parts)

    @classmethod
    def _from_dwarf_parts(cls, elf: ELFFile, files: list[str],
                          parts: list[tuple[array, ...]]) -> LineTable:
        """The table of both DWARF readers' rows: one part (address, file id, line, column,
        flags columns) per unit, put in table order sequence by sequence."""
        columns = _sequences_in_address_order(parts)
        if not columns[0]:
            raise PtError(ErrorCode.BAD_IMAGE, detail=f"{elf.stream.name} has an empty .debug_line")
        if not in_address_order(columns[0], columns[4]):
            # overlapping sequences (code the linker dropped, left at address 0): the
            # general row sort
            return cls(files or [""], zip(*columns))
        return cls._from_columns(files or [""], *columns)

    @classmethod
    def _from_dwarf_pyelftools(cls, elf: ELFFile, base: int) -> LineTable:
        dwarf = elf.get_dwarf_info()
        files: list[str] = []
        file_index: dict[str, int] = {}
        parts = []
        for cu in dwarf.iter_CUs():
            program = dwarf.line_program_for_CU(cu)
            if program is None:
                continue
            names = _dwarf_file_names(program, _comp_dir(cu.get_top_DIE().attributes))
            ids = []
            for name in names:
                if name not in file_index:
                    file_index[name] = len(files)
                    files.append(name)
                ids.append(file_index[name])
            first_file = 0 if program.header["version"] >= 5 else 1
            part = (array("Q"), array("I"), array("I"), array("I"), array("B"))
            for entry in program.get_entries():
                state = entry.state
                if state is None:
                    continue
                k = state.file - first_file
                flags = (IS_STMT if state.is_stmt else 0) | (END_SEQUENCE if state.end_sequence else 0)
                for column, value in zip(part, (state.address + base, ids[k] if 0 <= k < len(ids)
                                                else 0, state.line, state.column, flags)):
                    column.append(value)
            parts.append(part)
        return cls._from_dwarf_parts(elf, files, parts)

    @classmethod
    def _from_pclntab(cls, elf: ELFFile, data: bytes, base: int, path: str) -> LineTable:
        text_start = _raw_symbol_value(elf, b"runtime.text") or 0
        if not text_start:
            text = elf.get_section_by_name(".text")
            text_start = text["sh_addr"] if text is not None else 0
        functions = _GoFunctions(data, text_start, base, path)
        files, rows = functions.rows()
        return cls(files, rows, functions)

    # -- queries ---------------------------------------------------------

    def __len__(self) -> int:
        return len(self.address)

    def _row_index(self, addr: int) -> int:
        i = bisect.bisect_right(self.address, addr) - 1
        if i < 0 or self.flags[i] & END_SEQUENCE:
            return -1
        return i

    def row_at(self, addr: int) -> LineRow | None:
        """The row describing `addr` (None outside every sequence)."""
        i = self._row_index(addr)
        if i < 0:
            return None
        return LineRow(self.address[i], self.files[self.file_id[i]], self.line[i], self.column[i],
                       bool(self.flags[i] & IS_STMT))

    def lookup(self, addr: int) -> tuple[str, int] | None:
        """(file, line) of the instruction at `addr`; None where there is no line
        information (outside every sequence, or DWARF line 0)."""
        i = self._row_index(addr)
        if i < 0 or not self.line[i]:
            return None
        return self.files[self.file_id[i]], self.line[i]

    def line_key(self, line_id: int) -> tuple[str, int] | None:
        """(file, line) of a line id; None for 0. Raises IndexError for an unknown id."""
        key = self._keys[line_id]
        return None if key is None else (self.files[key[0]], key[1])

    @property
    def line_count(self) -> int:
        """How many line ids there are, 0 (no line) included."""
        return len(self._keys)

    def line_ids(self, ips: array, statements: bool = False) -> array:
        """The line id of every address in `ips` (an array('Q')), as array('I').

        With `statements`, an instruction of a non-statement row counts as part
        of the statement before it (how a debugger steps; see the header).
        Runs in C: a binary search per address against the row table.
        """
        return lookup_sorted(self.address, self.stmt_line_id if statements else self.line_id, ips)

    def _file_ids(self, file: str) -> set[int]:
        """Ids of the files that `file` names: the same path, or a path that ends
        with it at a '/' (a client may send a relative or differently rooted path)."""
        norm = os.path.normpath(file)
        exact = {i for i, name in enumerate(self.files) if name == norm}
        if exact:
            return exact
        tail = "/" + norm.lstrip("/")
        found = {i for i, name in enumerate(self.files) if name.endswith(tail) or norm.endswith("/" + name.lstrip("/"))}
        if not found:
            base = os.path.basename(norm)
            found = {i for i, name in enumerate(self.files) if os.path.basename(name) == base}
            if len({self.files[i] for i in found}) > 1:
                return set()  # ambiguous by basename alone
        return found

    def addresses(self, file: str, line: int) -> list[tuple[int, int]]:
        """The [start, end) address ranges whose instructions belong to `file`:`line`,
        sorted and merged where adjacent; [] if none (no such file or line)."""
        ids = self._file_ids(file)
        ranges: list[tuple[int, int]] = []
        n = len(self.address)
        for i in range(n - 1):
            if self.line[i] != line or self.file_id[i] not in ids or self.flags[i] & END_SEQUENCE:
                continue
            if self.address[i + 1] == self.address[i]:
                continue  # a later row at the same address describes it
            start, end = self.address[i], self.address[i + 1]
            if ranges and ranges[-1][1] == start:
                ranges[-1] = (ranges[-1][0], end)
            else:
                ranges.append((start, end))
        return ranges

    def statement_addresses(self, file: str, line: int) -> list[int]:
        """Addresses where a statement of `file`:`line` begins (is_stmt rows): where a
        breakpoint on that line goes. Sorted, without duplicates."""
        ids = self._file_ids(file)
        return sorted({self.address[i] for i in range(len(self.address))
                       if self.line[i] == line and self.file_id[i] in ids
                       and self.flags[i] & IS_STMT and not self.flags[i] & END_SEQUENCE})

    def function(self, addr: int) -> tuple[str, int] | None:
        """(name, entry address) of the Go function holding `addr`, from pclntab;
        None outside every function or for a DWARF-only table."""
        if self._functions is None:
            return None
        return self._functions.function(addr)


def _sequences_in_address_order(parts: list[tuple[array, ...]]) -> tuple[array, ...]:
    """The rows of every unit's columns (address, file id, line, column, flags), one
    sequence after the other in order of their first address: a unit's sequences are
    each in address order but the units and sequences come in the order the compiler and
    the linker wrote them."""
    sequences = []  # (first address, part, first row, end of the rows kept, end row)
    for p, part in enumerate(parts):
        address, flags = part[0], part[4]
        start = 0
        for i, flag in enumerate(flags):
            if flag & END_SEQUENCE:
                # less the rows that cover no instruction: those at the address where
                # their sequence ends, and so the whole of a sequence that ends where it
                # begins (GCC leaves both at functions it emptied or moved); sorted among
                # the other sequences such a row would stand first at the next one's start
                last = i
                while last > start and address[last - 1] == address[i]:
                    last -= 1
                if last > start:
                    sequences.append((address[start], p, start, last, i))
                start = i + 1
        if start < len(address):  # a unit whose last sequence has no end row
            sequences.append((address[start], p, start, len(address), None))
    sequences.sort(key=lambda s: (s[0], s[1], s[2]))
    out = (array("Q"), array("I"), array("I"), array("I"), array("B"))
    for _, p, start, end, end_row in sequences:
        for column, source in zip(out, parts[p]):
            column.extend(source[start:end])
            if end_row is not None:
                column.append(source[end_row])
    return out


def _comp_dir(attributes) -> str:
    """DW_AT_comp_dir of a compilation unit's top DIE (its attributes), "" without one."""
    return _text(attributes["DW_AT_comp_dir"].value) if "DW_AT_comp_dir" in attributes else ""


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _dwarf_file_names(program, comp_dir: str) -> list[str]:
    """Full paths of a line program's file table, in its own index order."""
    header = program.header
    version = header["version"]
    dirs = [_text(d) for d in header["include_directory"]]
    names = []
    for entry in header["file_entry"]:
        name = _text(entry.name)
        if not os.path.isabs(name):
            d = entry.dir_index
            if version >= 5:
                directory = dirs[d] if d < len(dirs) else comp_dir
            else:
                directory = comp_dir if d == 0 else (dirs[d - 1] if d - 1 < len(dirs) else "")
            if not os.path.isabs(directory):
                directory = os.path.join(comp_dir, directory)
            name = os.path.join(directory, name)
        names.append(os.path.normpath(name))
    return names


def _separate_debug_file(elf: ELFFile) -> str | None:
    """/usr/lib/debug/.build-id/xx/yyyy.debug for the ELF's GNU build-id, if installed."""
    from .image import elf_build_id  # image imports nothing from here: no cycle

    build_id = elf_build_id(elf)
    if not build_id:
        return None
    candidate = f"/usr/lib/debug/.build-id/{build_id[:2]}/{build_id[2:]}.debug"
    return candidate if os.path.isfile(candidate) else None


def _raw_symbol_value(elf: ELFFile, name: bytes) -> int | None:
    """st_value of the .symtab symbol called `name`, read straight from the section
    bytes (pyelftools' by-name lookup parses every symbol first: seconds on a big
    Go binary). ELF64 little-endian only; None if absent."""
    symtab, strtab = elf.get_section_by_name(".symtab"), elf.get_section_by_name(".strtab")
    if symtab is None or strtab is None or elf.elfclass != 64 or not elf.little_endian:
        return None
    strings = strtab.data()
    at = strings.find(b"\0" + name + b"\0")
    if at < 0:
        return None
    # Elf64_Sym: st_name u32, st_info u8, st_other u8, st_shndx u16, st_value u64, st_size u64
    for st_name, _info, _other, _shndx, value, _size in struct.iter_unpack("<IBBHQQ", symtab.data()):
        if st_name == at + 1:
            return value
    return None


class _GoFunctions:
    """The function table of a Go 1.18+ .gopclntab, at runtime addresses."""

    def __init__(self, data: bytes, text_start: int, base: int, path: str):
        if len(data) < 8:
            raise PtError(ErrorCode.BAD_IMAGE, detail=f"{path}: .gopclntab is truncated")
        magic, _, _, quantum, ptrsize = struct.unpack_from("<IBBBB", data, 0)
        if magic not in (PCLNTAB_GO118, PCLNTAB_GO120) or ptrsize not in (4, 8):
            raise PtError(ErrorCode.BAD_IMAGE,
                          detail=f"{path}: .gopclntab magic {magic:#x} is not Go 1.18 or later")
        word = "Q" if ptrsize == 8 else "I"
        (nfunc, _nfiles, header_text, name_off, cu_off, file_off, pc_off,
         func_off) = struct.unpack_from("<" + word * 8, data, 8)
        # Go 1.18-1.21 record the text start here; later versions leave 0 and
        # the runtime takes it from moduledata.text (the runtime.text symbol).
        text = header_text or text_start
        self.quantum = quantum
        self.data = data
        self.names = data[name_off:cu_off]
        self.cutab = data[cu_off:file_off]
        self.filetab = data[file_off:pc_off]
        self.pctab = data[pc_off:func_off]
        self.functab = memoryview(data)[func_off:]
        ftab = struct.unpack_from(f"<{2 * (nfunc + 1)}I", self.functab, 0)
        self.entries = array("Q", (text + base + ftab[2 * i] for i in range(nfunc + 1)))
        self.func_offsets = [ftab[2 * i + 1] for i in range(nfunc)]
        self._name_cache: dict[int, str] = {}
        self.path = path

    def merged(self, other: _GoFunctions) -> _GoFunctions:
        raise PtError(ErrorCode.NOT_SUPPORTED, detail="merging the tables of two Go binaries")

    def _cstring(self, buf: bytes, off: int) -> str:
        return buf[off: buf.index(b"\0", off)].decode("utf-8", "replace")

    def _func(self, i: int):
        # _func: entryOff u32, nameOff i32, args i32, deferreturn u32, pcsp u32,
        # pcfile u32, pcln u32, npcdata u32, cuOffset u32, ...
        (_entry, name_off, _args, _defer, _pcsp, pcfile, pcln, _npcdata,
         cu_offset) = struct.unpack_from("<IiiIIIIII", self.functab, self.func_offsets[i])
        return name_off, pcfile, pcln, cu_offset

    def function(self, addr: int) -> tuple[str, int] | None:
        i = bisect.bisect_right(self.entries, addr) - 1
        if i < 0 or i >= len(self.func_offsets):
            return None
        name = self._name_cache.get(i)
        if name is None:
            name = self._name_cache[i] = self._cstring(self.names, self._func(i)[0])
        return name, self.entries[i]

    def rows(self) -> tuple[list[str], list[tuple[int, int, int, int, int]]]:
        """Every function's rows (pc-value tables decoded in C), each function ended
        by an end-of-sequence row; in address order."""
        files: list[str] = []
        file_ids: dict[int, int] = {}  # filetab offset -> file id
        by_cu: dict[tuple[int, int], int] = {}  # (cu offset, file number) -> file id
        rows = []
        pctab = self.pctab
        for i in range(len(self.func_offsets)):
            entry = self.entries[i]
            _name, pcfile, pcln, cu_offset = self._func(i)
            if not pcln or not pcfile:
                continue
            try:
                pcs, fnos, lines, end = go_function_rows(pctab, pcfile, pcln, entry, self.quantum)
            except ValueError as e:
                raise PtError(ErrorCode.BAD_IMAGE, detail=f"{self.path}: function {i} of .gopclntab: {e}")
            for pc, fno, line in zip(pcs, fnos, lines):
                fid = 0
                if fno >= 0:
                    fid = by_cu.get((cu_offset, fno))
                    if fid is None:
                        name_at = struct.unpack_from("<I", self.cutab, 4 * (cu_offset + fno))[0]
                        fid = file_ids.get(name_at)
                        if fid is None:
                            fid = file_ids[name_at] = len(files)
                            files.append(self._cstring(self.filetab, name_at))
                        by_cu[(cu_offset, fno)] = fid
                rows.append((pc, fid, max(0, line), 0, IS_STMT))
            rows.append((end, 0, 0, 0, END_SEQUENCE))
        return files or [""], rows

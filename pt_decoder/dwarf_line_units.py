"""The units of a .debug_line section, read straight from its bytes: each unit's header (DWARF
5 spec §6.2.4; v2-v4 as in DWARF 4 §6.2.4) with its file table as full paths, and where its
line-number program lies. The program itself runs in C (_dwarf_lines.run_line_program).

Layer: pt_decoder, under lines.py. Reading the headers here rather than through pyelftools'
per-CU objects skips the compilation units' DIEs and abbreviation tables (3.6 s of pyenv's
libpython's 146 units), which DWARF 5 no longer needs: its directory 0 is the compilation
directory. A v2-v4 unit names its files relative to DW_AT_comp_dir, which only the unit's
DIE holds: `comp_dirs` supplies it, read by the caller from pyelftools when a v2-v4 unit is
found. Anything this reader does not know (a string form that needs .debug_str_offsets, a
version past 5) raises UnsupportedLineUnit, and the caller uses pyelftools for the file.
"""
from __future__ import annotations

import os
import struct
from array import array
from collections.abc import Callable, Iterator
from typing import NamedTuple

from ._dwarf_lines import run_line_program

__all__ = ["LineUnit", "UnsupportedLineUnit", "line_units", "run_unit"]

DW_LNCT_PATH = 1
DW_LNCT_DIRECTORY_INDEX = 2

# DW_FORM_* values of DWARF 5 §7.5.6 that a v5 directory or file entry can use
_FORM_BLOCK, _FORM_DATA1, _FORM_DATA2, _FORM_DATA4 = 0x09, 0x0B, 0x05, 0x06
_FORM_DATA8, _FORM_DATA16, _FORM_STRING, _FORM_STRP = 0x07, 0x1E, 0x08, 0x0E
_FORM_UDATA, _FORM_LINE_STRP = 0x0F, 0x1F


class UnsupportedLineUnit(ValueError):
    """A unit this reader cannot read; the caller falls back to pyelftools."""


class LineUnit(NamedTuple):
    """One unit of .debug_line: where its program lies and how to run it."""

    offset: int
    version: int
    files: list[str]
    """Full normalised paths, indexed by the program's file number minus `first_file`."""
    first_file: int
    """The number of files[0] in the program: 0 from DWARF 5 on, 1 before."""
    program_start: int
    program_end: int
    address_size: int
    minimum_instruction_length: int
    maximum_operations_per_instruction: int
    default_is_stmt: bool
    line_base: int
    line_range: int
    opcode_base: int
    standard_opcode_lengths: bytes


class _Reader:
    def __init__(self, data: bytes, pos: int, end: int):
        self.data, self.pos, self.end = data, pos, end

    def take(self, n: int) -> bytes:
        if self.pos + n > self.end:
            raise UnsupportedLineUnit(f"a header field at {self.pos:#x} runs past its unit")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def unsigned(self, n: int) -> int:
        return int.from_bytes(self.take(n), "little")

    def uleb(self) -> int:
        value = shift = 0
        while True:
            byte = self.unsigned(1)
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    def cstring(self) -> bytes:
        stop = self.data.find(b"\0", self.pos, self.end)
        if stop < 0:
            raise UnsupportedLineUnit(f"a string at {self.pos:#x} runs past its unit")
        out = self.data[self.pos:stop]
        self.pos = stop + 1
        return out


def _string_at(section: bytes | None, offset: int, name: str) -> bytes:
    if section is None or offset >= len(section):
        raise UnsupportedLineUnit(f"string offset {offset:#x} is outside {name}")
    stop = section.find(b"\0", offset)
    return section[offset:stop if stop >= 0 else len(section)]


def line_units(debug_line: bytes, debug_str: bytes | None, debug_line_str: bytes | None,
               default_address_size: int,
               comp_dirs: Callable[[], dict[int, str]]) -> Iterator[LineUnit]:
    """Every unit of `debug_line` in section order. `comp_dirs()`: unit offset -> the
    DW_AT_comp_dir of the compilation unit pointing at it, asked once, for v2-v4 only."""
    offset = 0
    dirs_of_units: dict[int, str] | None = None
    while offset < len(debug_line):
        (unit_length,) = struct.unpack_from("<I", debug_line, offset)
        reader = _Reader(debug_line, offset + 4, len(debug_line))
        offset_size = 4
        if unit_length == 0xFFFFFFFF:
            unit_length, offset_size = reader.unsigned(8), 8
        elif unit_length >= 0xFFFFFFF0:
            raise UnsupportedLineUnit(f"reserved unit length {unit_length:#x} at {offset:#x}")
        unit_end = reader.pos + unit_length
        if unit_length == 0 or unit_end > len(debug_line):
            raise UnsupportedLineUnit(f"the unit at {offset:#x} is {unit_length} bytes long, "
                                      f"past the section's {len(debug_line)}")
        reader.end = unit_end
        version = reader.unsigned(2)
        if not 2 <= version <= 5:
            raise UnsupportedLineUnit(f"the unit at {offset:#x} is DWARF version {version}")
        address_size = default_address_size
        if version >= 5:
            address_size = reader.unsigned(1)
            reader.unsigned(1)  # segment_selector_size
        header_length = reader.unsigned(offset_size)
        program_start = reader.pos + header_length
        minimum_instruction_length = reader.unsigned(1)
        max_ops = reader.unsigned(1) if version >= 4 else 1
        default_is_stmt = bool(reader.unsigned(1))
        (line_base,) = struct.unpack("b", reader.take(1))
        line_range = reader.unsigned(1)
        opcode_base = reader.unsigned(1)
        standard_opcode_lengths = reader.take(max(0, opcode_base - 1))
        if version >= 5:
            directories = [_text(e.get(DW_LNCT_PATH, b""))
                           for e in _v5_entries(reader, offset_size, debug_str, debug_line_str)]
            comp_dir = directories[0] if directories else ""
            names = []
            for e in _v5_entries(reader, offset_size, debug_str, debug_line_str):
                index = e.get(DW_LNCT_DIRECTORY_INDEX, 0)
                directory = directories[index] if index < len(directories) else comp_dir
                names.append(_full_path(_text(e.get(DW_LNCT_PATH, b"")), directory, comp_dir))
            first_file = 0
        else:
            directories = []
            while name := reader.cstring():
                directories.append(_text(name))
            entries = []
            while name := reader.cstring():
                index = reader.uleb()
                reader.uleb()  # mtime
                reader.uleb()  # length
                entries.append((_text(name), index))
            if dirs_of_units is None:
                dirs_of_units = comp_dirs()
            comp_dir = dirs_of_units.get(offset, "")
            names = [_full_path(name, comp_dir if index == 0 else
                                (directories[index - 1] if index - 1 < len(directories) else ""),
                                comp_dir)
                     for name, index in entries]
            first_file = 1
        if program_start > unit_end:
            raise UnsupportedLineUnit(f"the header of the unit at {offset:#x} runs past it")
        yield LineUnit(offset, version, names, first_file, program_start, unit_end, address_size,
                       minimum_instruction_length, max_ops, default_is_stmt, line_base,
                       line_range, opcode_base, standard_opcode_lengths)
        offset = unit_end


def _v5_entries(reader: _Reader, offset_size: int, debug_str: bytes | None,
                debug_line_str: bytes | None) -> list[dict[int, object]]:
    """A v5 directory or file-name table: its entry format, then its entries."""
    format_count = reader.unsigned(1)
    entry_format = [(reader.uleb(), reader.uleb()) for _ in range(format_count)]
    entries = []
    for _ in range(reader.uleb()):
        entry: dict[int, object] = {}
        for content_type, form in entry_format:
            if form == _FORM_STRING:
                value: object = reader.cstring()
            elif form == _FORM_LINE_STRP:
                value = _string_at(debug_line_str, reader.unsigned(offset_size), ".debug_line_str")
            elif form == _FORM_STRP:
                value = _string_at(debug_str, reader.unsigned(offset_size), ".debug_str")
            elif form == _FORM_UDATA:
                value = reader.uleb()
            elif form in (_FORM_DATA1, _FORM_DATA2, _FORM_DATA4, _FORM_DATA8):
                value = reader.unsigned({_FORM_DATA1: 1, _FORM_DATA2: 2, _FORM_DATA4: 4,
                                         _FORM_DATA8: 8}[form])
            elif form == _FORM_DATA16:
                value = reader.take(16)
            elif form == _FORM_BLOCK:
                value = reader.take(reader.uleb())
            else:
                raise UnsupportedLineUnit(f"form {form:#x} in a line table's entry format")
            entry[content_type] = value
        entries.append(entry)
    return entries


def _full_path(name: str, directory: str, comp_dir: str) -> str:
    if not os.path.isabs(name):
        if not os.path.isabs(directory):
            directory = os.path.join(comp_dir, directory)
        name = os.path.join(directory, name)
    return os.path.normpath(name)


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def run_unit(debug_line: bytes, unit: LineUnit, bias: int, file_ids: array) -> tuple[array, ...]:
    """The rows of `unit`'s program (_dwarf_lines.run_line_program): five columns, addresses
    plus `bias`, the program's file n as file_ids[n - unit.first_file]."""
    return run_line_program(
        debug_line, unit.program_start, unit.program_end, address_size=unit.address_size,
        minimum_instruction_length=unit.minimum_instruction_length,
        maximum_operations_per_instruction=unit.maximum_operations_per_instruction,
        default_is_stmt=unit.default_is_stmt, line_base=unit.line_base,
        line_range=unit.line_range, opcode_base=unit.opcode_base,
        standard_opcode_lengths=unit.standard_opcode_lengths, bias=bias, file_ids=file_ids,
        first_file=unit.first_file)

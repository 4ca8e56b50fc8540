"""pt_decoder's own DWARF line reader (dwarf_line_units + _dwarf_lines) against pyelftools'
line programs, row for row, on real binaries: gcc -gdwarf-2, -4 and -5 builds of the lines
fixture, a Go binary's DWARF, the running interpreter's libpython where it was built with
-g (pyenv's is), and libc's separate debug file where the debug package is installed. Then
the line-program state machine on hand-assembled programs (the opcodes no compiler here
emits), and bytes that end early or lie about their length."""
from __future__ import annotations

import glob
import os
import random
import sys
import sysconfig
from array import array

import pytest
from elftools.elf.elffile import ELFFile
from fixture_builds import build_c, build_go

from pt_decoder._dwarf_lines import LineProgramError, run_line_program
from pt_decoder.dwarf_line_units import UnsupportedLineUnit, line_units, run_unit
from pt_decoder.lines import LineTable, _separate_debug_file

BIAS = 0x5555_0000_0000


def _rows(table: LineTable) -> list[tuple]:
    return [(a, table.files[f], line, c, fl) for a, f, line, c, fl in
            zip(table.address, table.file_id, table.line, table.column, table.flags)]


def _assert_same_as_pyelftools(path) -> int:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        ours = LineTable._from_dwarf_units(elf, BIAS)
        theirs = LineTable._from_dwarf_pyelftools(elf, BIAS)
    assert len(ours) == len(theirs) > 0
    assert _rows(ours) == _rows(theirs)
    assert ours.line_id == theirs.line_id and ours.stmt_line_id == theirs.stmt_line_id
    return len(ours)


@pytest.mark.parametrize("flags", [("-gdwarf-2", "-O0"), ("-gdwarf-4", "-O2"),
                                   ("-gdwarf-5", "-O2"), ("-gdwarf-5", "-O0")])
def test_gcc_builds_read_the_same_as_pyelftools(tmp_path, flags):
    assert _assert_same_as_pyelftools(build_c("lines_demo.c", tmp_path, *flags)) > 10


def test_a_go_binarys_dwarf_reads_the_same_as_pyelftools(tmp_path):
    assert _assert_same_as_pyelftools(build_go("lines_demo.go", tmp_path)) > 1000


def _libpython() -> str | None:
    name = sysconfig.get_config_var("INSTSONAME") or ""
    for directory in (sysconfig.get_config_var("LIBDIR") or "", os.path.dirname(sys.executable)):
        path = os.path.join(directory, name)
        if name and os.path.isfile(path):
            return path
    return None


def _unit_rows_pyelftools(dwarf, cu) -> tuple[list[str], list[tuple]]:
    from pt_decoder.lines import _comp_dir, _dwarf_file_names
    program = dwarf.line_program_for_CU(cu)
    names = _dwarf_file_names(program, _comp_dir(cu.get_top_DIE().attributes))
    first = 0 if program.header["version"] >= 5 else 1
    rows = []
    for entry in program.get_entries():
        state = entry.state
        if state is not None:
            k = state.file - first
            rows.append((state.address, names[k] if 0 <= k < len(names) else None, state.line,
                         state.column, (1 if state.is_stmt else 0) | (2 if state.end_sequence else 0)))
    return names, rows


def test_large_system_tables_read_the_same_as_pyelftools():
    """The tables that made exports wait: a -g libpython (~620k rows), libc's debug file.
    pyelftools takes 15-20 s for each whole table, so it reads a spread of 12 units and
    those are compared row for row; ours builds the whole table."""
    candidates = []
    libpython = _libpython()
    if libpython:
        with open(libpython, "rb") as f:
            if ELFFile(f).get_section_by_name(".debug_line") is not None:
                candidates.append(libpython)
    libc = next(iter(glob.glob("/usr/lib/x86_64-linux-gnu/libc.so.6")), None)
    if libc:
        with open(libc, "rb") as f:
            debug = _separate_debug_file(ELFFile(f))
        if debug:
            candidates.append(debug)
    if not candidates:
        pytest.skip("neither a -g libpython nor libc's debug file (libc6-dbg) on this machine")
    for path in candidates:
        with open(path, "rb") as f:
            elf = ELFFile(f)
            table = LineTable._from_dwarf_units(elf, 0)
            assert len(table) > 10_000, path
            dwarf = elf.get_dwarf_info()
            units = {u.offset: u for u in line_units(
                dwarf.debug_line_sec.stream.getvalue(), dwarf.debug_str_sec.stream.getvalue(),
                dwarf.debug_line_str_sec.stream.getvalue() if dwarf.debug_line_str_sec else None,
                8, dict)}
            cus = list(dwarf.iter_CUs())
            for cu in cus[::max(1, len(cus) // 12)]:
                if "DW_AT_stmt_list" not in cu.get_top_DIE().attributes:
                    continue
                names, expected = _unit_rows_pyelftools(dwarf, cu)
                unit = units[cu.get_top_DIE().attributes["DW_AT_stmt_list"].value]
                if unit.version >= 5:
                    assert unit.files == names, path
                debug_line = dwarf.debug_line_sec.stream.getvalue()
                columns = run_unit(debug_line, unit, 0,
                                   array("I", range(1, len(unit.files) + 1)))
                ours = [(a, unit.files[f - 1] if f else None, line, c, fl)
                        for a, f, line, c, fl in zip(*columns)]
                assert ours == expected, (path, unit.offset)


# -- the state machine on hand-assembled programs ------------------------------------------

OPCODE_BASE = 13
LENGTHS = bytes([0, 1, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1])


def _run(program: bytes, lengths: bytes = LENGTHS, opcode_base: int = OPCODE_BASE,
         max_ops: int = 1) -> list[tuple]:
    columns = run_line_program(program, 0, len(program), address_size=8,
                               minimum_instruction_length=1,
                               maximum_operations_per_instruction=max_ops,
                               default_is_stmt=True, line_base=-5, line_range=14,
                               opcode_base=opcode_base, standard_opcode_lengths=lengths,
                               bias=0x100, file_ids=array("I", [7, 8, 9]), first_file=1)
    return list(zip(*columns))


def _set_address(address: int) -> bytes:
    return bytes([0, 9, 2]) + address.to_bytes(8, "little")


END = bytes([0, 1, 1])


def test_each_standard_opcode():
    program = (_set_address(0x1000)
               + bytes([3, 9])              # advance_line +9 -> 10
               + bytes([1])                 # copy: row 0x1000 line 10
               + bytes([9, 0x10, 0x00])     # fixed_advance_pc 16 -> 0x1010
               + bytes([5, 4])              # set_column 4
               + bytes([4, 2])              # set_file 2 -> file id 8
               + bytes([6])                 # negate_stmt
               + bytes([1])                 # copy: row 0x1010, not a statement
               + bytes([8])                 # const_add_pc: (255-13)//14 = 17 -> 0x1021
               + bytes([6, 7, 10, 11])      # negate_stmt again, then three flag-only opcodes
               + bytes([2, 3])              # advance_pc 3 -> 0x1024
               + bytes([12, 5])             # set_isa 5 (operand skipped)
               + bytes([OPCODE_BASE + 5 + 14 * 2])  # special: line +0, address +2 -> 0x1026
               + bytes([0, 2, 4, 1])        # set_discriminator 1: no row
               + bytes([0, 4, 0x80, 1, 2, 3])  # an unknown extended opcode, skipped by length
               + bytes([2, 4]) + END)       # end_sequence at 0x102a
    assert _run(program) == [
        (0x1100, 7, 10, 0, 1),
        (0x1110, 8, 10, 4, 0),
        (0x1126, 8, 10, 4, 1),
        (0x112A, 8, 10, 4, 2),
    ]


def test_an_opcode_this_reader_does_not_know_is_skipped_by_its_operand_count():
    lengths = LENGTHS + bytes([2])  # opcode 13 takes two ULEB operands
    program = _set_address(0x40) + bytes([13, 0x81, 0x01, 7, 1]) + END
    assert _run(program, lengths, opcode_base=14) == [(0x140, 7, 1, 0, 1), (0x140, 7, 1, 0, 2)]


def test_the_state_resets_after_each_sequence():
    program = (_set_address(0x10) + bytes([3, 4, 4, 3, 1]) + bytes([2, 1]) + END
               + _set_address(0x20) + bytes([1]) + bytes([2, 1]) + END)
    rows = _run(program)
    assert rows[2] == (0x120, 7, 1, 0, 1)  # file 1 and line 1 again


def test_a_file_number_outside_the_table_is_file_id_0():
    program = _set_address(0x10) + bytes([4, 40, 1]) + END
    assert _run(program)[0][1] == 0


@pytest.mark.parametrize("program,why", [
    (bytes([2]), "LEB128"),                               # advance_pc with no operand
    (bytes([2, 0x80, 0x80]), "LEB128"),                   # an operand that never ends
    (bytes([0, 9, 2, 1, 2]), "extended opcode"),          # set_address cut short
    (bytes([9, 1]), "fixed_advance_pc"),
])
def test_a_program_cut_short_is_an_error_that_says_where(program, why):
    with pytest.raises(LineProgramError, match=why):
        _run(program)


def test_random_bytes_never_crash_the_reader():
    rng = random.Random(1729)
    for _ in range(3000):
        program = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
        try:
            rows = _run(program)
        except LineProgramError:
            continue
        assert all(flags in (0, 1, 2) for *_, flags in rows)


def test_a_header_that_lies_about_its_length_is_refused():
    unit = (12).to_bytes(4, "little") + (5).to_bytes(2, "little") + bytes([8, 0])
    unit += (200).to_bytes(4, "little") + bytes(2)
    with pytest.raises(UnsupportedLineUnit):
        list(line_units(unit, None, None, 8, dict))
    with pytest.raises(UnsupportedLineUnit, match="version 7"):
        list(line_units((2).to_bytes(4, "little") + (7).to_bytes(2, "little"), None, None, 8, dict))

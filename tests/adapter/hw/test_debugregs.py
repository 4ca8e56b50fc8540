"""Table tests for adapter.hw.debugregs against the SDM Vol. 3B §17.2 bit layout.

The expected DR7 values are worked out by hand from Figure 17-2 (Ln at bit
2n, R/Wn at 16+4n, LENn at 18+4n; LEN 00B=1, 01B=2, 11B=4, 10B=8 bytes).
"""
from __future__ import annotations

import pytest

from adapter.hw.debugregs import (
    Access,
    DebugRegisterError,
    Slot,
    aligned_pieces,
    check_breakpoint,
    clear_dr7_slot,
    decode_dr7,
    dr6_single_step,
    dr6_triggered,
    dr7_with_slot,
    encode_dr7,
)

# (slots, DR7) -- each row checked by hand against SDM Figure 17-2.
DR7_TABLE = [
    ([], 0x0),
    ([Slot(0, 0x1000, 1, Access.EXECUTE)], 0x0000_0001),             # L0, RW0=00, LEN0=00
    ([Slot(0, 0x1000, 1, Access.WRITE)], 0x0001_0001),               # RW0=01
    ([Slot(0, 0x1000, 2, Access.WRITE)], 0x0005_0001),               # LEN0=01
    ([Slot(0, 0x1000, 4, Access.WRITE)], 0x000d_0001),               # LEN0=11 (what gdb writes for `watch int`)
    ([Slot(0, 0x1000, 8, Access.WRITE)], 0x0009_0001),               # LEN0=10: 8 bytes is 10B, not 11B
    ([Slot(1, 0x1000, 8, Access.READ_WRITE)], 0x00b0_0004),          # L1, RW1=11, LEN1=10
    ([Slot(2, 0x1000, 1, Access.READ_WRITE)], 0x0300_0010),          # L2, RW2=11, LEN2=00
    ([Slot(3, 0x1000, 4, Access.WRITE)], 0xd000_0040),               # L3, RW3=01, LEN3=11
    ([Slot(0, 0x1000, 8, Access.WRITE), Slot(1, 0x1008, 8, Access.WRITE),
      Slot(2, 0x1010, 8, Access.WRITE), Slot(3, 0x1018, 8, Access.WRITE)], 0x9999_0055),
]


@pytest.mark.parametrize("slots,dr7", DR7_TABLE)
def test_encode_dr7_matches_the_sdm_layout(slots, dr7):
    assert encode_dr7(slots) == dr7


@pytest.mark.parametrize("slots,dr7", DR7_TABLE)
def test_decode_dr7_inverts_encode(slots, dr7):
    addresses = [0, 0, 0, 0]
    for s in slots:
        addresses[s.index] = s.address
    assert decode_dr7(dr7, addresses) == slots


def test_decode_ignores_control_bits_and_reads_global_enables():
    # LE|GE|bit10|GD set, G1 instead of L1.
    dr7 = 0x00b0_0008 | 0x0700 | (1 << 13)
    assert decode_dr7(dr7, [0, 0x2000, 0, 0]) == [Slot(1, 0x2000, 8, Access.READ_WRITE)]


def test_dr7_with_slot_and_clear_touch_one_register_only():
    base = encode_dr7([Slot(0, 0x1000, 4, Access.WRITE), Slot(2, 0x3000, 8, Access.READ_WRITE)])
    replaced = dr7_with_slot(base, Slot(2, 0x3000, 1, Access.EXECUTE))
    assert replaced == encode_dr7([Slot(0, 0x1000, 4, Access.WRITE), Slot(2, 0x3000, 1, Access.EXECUTE)])
    assert clear_dr7_slot(base, 2) == encode_dr7([Slot(0, 0x1000, 4, Access.WRITE)])
    assert clear_dr7_slot(base, 1) == base


@pytest.mark.parametrize("address,length,access,message", [
    (0x1001, 2, Access.WRITE, "not aligned to 2 bytes"),
    (0x1002, 4, Access.WRITE, "not aligned to 4 bytes"),
    (0x1004, 8, Access.READ_WRITE, "not aligned to 8 bytes"),
    (0x1000, 3, Access.WRITE, "length 3 is not a debug-register length"),
    (0x1000, 16, Access.WRITE, "length 16 is not a debug-register length"),
    (0x1000, 8, Access.EXECUTE, "execute breakpoint covers one instruction"),
    (0x1000, 1, Access.IO, "I/O breakpoints"),
    (-1, 1, Access.WRITE, "not a 64-bit linear address"),
])
def test_check_breakpoint_rejects_what_the_sdm_forbids(address, length, access, message):
    with pytest.raises(DebugRegisterError, match=message):
        check_breakpoint(address, length, access)


@pytest.mark.parametrize("address,length", [(0x1000, 1), (0x1001, 1), (0x1002, 2), (0x1004, 4), (0x1008, 8)])
def test_check_breakpoint_accepts_aligned_data_breakpoints(address, length):
    check_breakpoint(address, length, Access.WRITE)
    check_breakpoint(address, length, Access.READ_WRITE)


def test_execute_breakpoints_need_no_alignment():
    check_breakpoint(0x401237, 1, Access.EXECUTE)


def test_register_index_outside_dr0_dr3_is_rejected():
    with pytest.raises(DebugRegisterError, match="DR4 is not a breakpoint address register"):
        encode_dr7([Slot(4, 0x1000, 1, Access.WRITE)])
    with pytest.raises(DebugRegisterError, match="DR1 given twice"):
        encode_dr7([Slot(1, 0x1000, 1, Access.WRITE), Slot(1, 0x2000, 1, Access.WRITE)])


@pytest.mark.parametrize("dr6,hit,step", [
    (0xffff0ff0, [], False),            # the architectural reset value of DR6
    (0xffff0ff1, [0], False),
    (0xffff0ffa, [1, 3], False),
    (0xffff4ff0, [], True),             # BS
    (0xffff4ff4, [2], True),
])
def test_dr6_status_bits(dr6, hit, step):
    assert dr6_triggered(dr6) == hit
    assert dr6_single_step(dr6) == step


@pytest.mark.parametrize("address,length,pieces", [
    (0x1000, 1, [(0x1000, 1)]),
    (0x1000, 8, [(0x1000, 8)]),
    (0x1000, 32, [(0x1000, 8), (0x1008, 8), (0x1010, 8), (0x1018, 8)]),
    (0x1000, 24, [(0x1000, 8), (0x1008, 8), (0x1010, 8)]),
    (0x1000, 3, [(0x1000, 2), (0x1002, 1)]),
    (0x1001, 7, [(0x1001, 1), (0x1002, 2), (0x1004, 4)]),
    (0x1004, 8, [(0x1004, 4), (0x1008, 4)]),
    (0x1003, 32, [(0x1003, 1), (0x1004, 4), (0x1008, 8), (0x1010, 8), (0x1018, 8), (0x1020, 2),
                  (0x1022, 1)]),
])
def test_aligned_pieces_cover_exactly_with_aligned_pieces(address, length, pieces):
    got = aligned_pieces(address, length)
    assert got == pieces
    assert sum(n for _, n in got) == length
    assert all(a % n == 0 for a, n in got)

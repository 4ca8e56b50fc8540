"""x86-64 debug registers DR0-DR3, DR6 and DR7: pure bit arithmetic.

Role: encode and decode the debug-control register DR7 and the debug-status
register DR6, and state the alignment rules of a data or instruction
breakpoint, exactly as the Intel SDM Vol. 3B, Chapter 17 ("Debug, Branch
Profile, TSC, and Intel Resource Director Technology Features"), section 17.2
("Debug Registers") describes them. AMD64 APM Vol. 2 §13.1.1 describes the
same layout.

Layer: adapter.hw, mechanism only. No syscalls, no state, no policy: which
register a watch takes, which threads it covers and what Linux accepts on top
of the hardware rules live in adapter.watchpoints. This module may not know
about perf, ptrace or processes.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

NUM_ADDRESS_REGISTERS = 4
"""DR0-DR3: the only four breakpoint address registers (SDM §17.2.1)."""

MAX_LENGTH = 8
"""The widest single breakpoint on x86-64: LEN = 10B means 8 bytes (SDM §17.2.4)."""


class Access(enum.IntEnum):
    """The R/Wn field of DR7, two bits per register (SDM §17.2.4, Table 17-1 area).

    00B break on instruction execution only; 01B on data writes only;
    10B on I/O reads or writes (only with CR4.DE = 1, never reachable from user
    space); 11B on data reads or writes but not instruction fetches. There is
    no read-only encoding: x86 cannot break on reads alone.
    """
    EXECUTE = 0b00
    WRITE = 0b01
    IO = 0b10
    READ_WRITE = 0b11


# The LENn field of DR7 (SDM §17.2.4): 00B 1 byte, 01B 2 bytes, 11B 4 bytes,
# and 10B 8 bytes (on Intel 64 / AMD64 in 64-bit mode; "undefined" on older
# 32-bit processors). 8 is encoded as 10B, not 11B: the table is not monotonic.
_LEN_FIELD = {1: 0b00, 2: 0b01, 8: 0b10, 4: 0b11}
_FIELD_LEN = {v: k for k, v in _LEN_FIELD.items()}

# DR7 bit positions (SDM §17.2.4, Figure 17-2 "Debug Registers").
DR7_LOCAL_EXACT = 1 << 8       # LE
DR7_GLOBAL_EXACT = 1 << 9      # GE
DR7_RESERVED_ONE = 1 << 10     # bit 10 reads as 1
DR7_RTM = 1 << 11              # RTM debugging
DR7_GENERAL_DETECT = 1 << 13   # GD
_DR7_RW_SHIFT = 16             # R/W0 at bits 16-17, R/W1 at 20-21, ...
_DR7_LEN_SHIFT = 18            # LEN0 at bits 18-19, LEN1 at 22-23, ...

# DR6 bit positions (SDM §17.2.3, Figure 17-2).
DR6_B_MASK = 0b1111            # B0-B3: breakpoint condition n was met
DR6_BD = 1 << 13               # debug-register access detected (GD)
DR6_BS = 1 << 14               # single step (TF)
DR6_BT = 1 << 15               # task switch
DR6_RTM = 1 << 16              # cleared (active low) by an RTM debug exception


class DebugRegisterError(ValueError):
    """A breakpoint that no debug register can express (length, alignment, kind)."""


@dataclass(frozen=True)
class Slot:
    """One enabled debug register: its index (0-3), address, length and access."""
    index: int
    address: int
    length: int
    access: Access


def check_breakpoint(address: int, length: int, access: Access) -> None:
    """Raise DebugRegisterError unless one debug register can hold this breakpoint.

    SDM §17.2.5 ("Breakpoint Field Recognition"): a data breakpoint of length
    2, 4 or 8 must be aligned on a word, doubleword or quadword boundary (the
    processor ignores the low address bits, so an unaligned address would
    silently watch other bytes). An instruction breakpoint must have LEN = 00B
    (1 byte) "otherwise, undefined behavior will result" (§17.2.4).
    """
    if not 0 <= address < (1 << 64):
        raise DebugRegisterError(f"address {address:#x} is not a 64-bit linear address")
    if access == Access.IO:
        raise DebugRegisterError("I/O breakpoints need CR4.DE and ring 0; not available from user space")
    if access == Access.EXECUTE:
        if length != 1:
            raise DebugRegisterError(
                f"an execute breakpoint covers one instruction (LEN=00B, SDM §17.2.4); length {length} given")
        return
    if length not in _LEN_FIELD:
        raise DebugRegisterError(
            f"length {length} is not a debug-register length: 1, 2, 4 or 8 bytes (SDM §17.2.4)")
    if address % length:
        raise DebugRegisterError(
            f"address {address:#x} is not aligned to {length} bytes; a {length}-byte watch must be "
            f"{length}-byte aligned (SDM §17.2.5)")


def dr7_enable_bits(index: int) -> int:
    """The Ln bit of register `index` (bits 0, 2, 4, 6; SDM §17.2.4).

    Ln (local) is what Linux and debuggers set for per-thread breakpoints; Gn
    (global, bits 1, 3, 5, 7) survives task switches in a kernel without
    per-task debug state, which user-space debuggers never want.
    """
    _check_index(index)
    return 1 << (2 * index)


def encode_dr7(slots: list[Slot]) -> int:
    """DR7 for these enabled slots: Ln, R/Wn and LENn per slot; every other bit 0.

    Execute slots encode LEN = 00B (SDM §17.2.4). Raises DebugRegisterError if
    a slot breaks check_breakpoint or two slots name the same register.
    """
    value = 0
    seen: set[int] = set()
    for slot in slots:
        _check_index(slot.index)
        if slot.index in seen:
            raise DebugRegisterError(f"DR{slot.index} given twice")
        seen.add(slot.index)
        check_breakpoint(slot.address, slot.length, slot.access)
        length_field = 0b00 if slot.access == Access.EXECUTE else _LEN_FIELD[slot.length]
        value |= dr7_enable_bits(slot.index)
        value |= int(slot.access) << (_DR7_RW_SHIFT + 4 * slot.index)
        value |= length_field << (_DR7_LEN_SHIFT + 4 * slot.index)
    return value


def decode_dr7(dr7: int, addresses: list[int] | tuple[int, ...]) -> list[Slot]:
    """The enabled slots of a DR7 value (Ln or Gn set), given DR0-DR3.

    The inverse of encode_dr7 for the fields it writes; bits 8-15 (LE, GE,
    RTM, GD) are ignored because they do not describe a breakpoint.
    """
    if len(addresses) != NUM_ADDRESS_REGISTERS:
        raise DebugRegisterError(f"need DR0-DR3, got {len(addresses)} addresses")
    slots = []
    for index in range(NUM_ADDRESS_REGISTERS):
        if not (dr7 >> (2 * index)) & 0b11:
            continue
        access = Access((dr7 >> (_DR7_RW_SHIFT + 4 * index)) & 0b11)
        length = _FIELD_LEN[(dr7 >> (_DR7_LEN_SHIFT + 4 * index)) & 0b11]
        slots.append(Slot(index, addresses[index], length, access))
    return slots


def dr7_with_slot(dr7: int, slot: Slot) -> int:
    """DR7 with register slot.index set to `slot`, the other registers unchanged."""
    return clear_dr7_slot(dr7, slot.index) | encode_dr7([slot])


def clear_dr7_slot(dr7: int, index: int) -> int:
    """DR7 with register `index` disabled and its R/W and LEN fields zeroed."""
    _check_index(index)
    mask = 0b11 << (2 * index)
    mask |= 0b1111 << (_DR7_RW_SHIFT + 4 * index)
    return dr7 & ~mask


def dr6_triggered(dr6: int) -> list[int]:
    """Indices of the breakpoint conditions that were met (B0-B3; SDM §17.2.3).

    Bn may be set for a register that is not enabled in DR7 if its condition
    matched; callers intersect with the enabled slots, as the SDM advises.
    """
    return [i for i in range(NUM_ADDRESS_REGISTERS) if dr6 & (1 << i)]


def dr6_single_step(dr6: int) -> bool:
    """BS: the debug exception came from single-stepping (EFLAGS.TF; SDM §17.2.3)."""
    return bool(dr6 & DR6_BS)


def aligned_pieces(address: int, length: int) -> list[tuple[int, int]]:
    """Cover [address, address+length) exactly with naturally aligned 1/2/4/8-byte pieces.

    Greedy from the low end, taking at each step the largest power of two that
    is aligned at the current address and fits (SDM §17.2.5 alignment): this
    gives the fewest pieces for an exact cover. The caller decides whether the
    number of pieces fits the free registers.
    """
    if length <= 0:
        raise DebugRegisterError(f"length {length} must be positive")
    pieces = []
    pos, end = address, address + length
    while pos < end:
        size = MAX_LENGTH
        while size > 1 and (pos % size or pos + size > end):
            size //= 2
        pieces.append((pos, size))
        pos += size
    return pieces


def _check_index(index: int) -> None:
    if not 0 <= index < NUM_ADDRESS_REGISTERS:
        raise DebugRegisterError(f"DR{index} is not a breakpoint address register (DR0-DR3 only)")

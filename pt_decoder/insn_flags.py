"""Bits of the per-instruction flags column of the decoded history.

Layer: pt_decoder, shared by the instruction layer (insn.pyx sets them) and
the history (history.py indexes them). Pure constants; knows about nothing.
One byte per instruction; an instruction may carry several bits.
"""
from __future__ import annotations

CALL = 0x01
"""A near call (direct or indirect)."""
RETURN = 0x02
"""A near return."""
CONDITIONAL = 0x04
"""A conditional branch (Jcc, JCXZ, LOOP*)."""
TAKEN = 0x08
"""The branch was taken (conditional taken, or any unconditional transfer)."""
INDIRECT = 0x10
"""The target came from a register or memory (TIP-resolved)."""
SPECULATIVE = 0x20
"""Executed inside a TSX transaction that had not yet committed."""
FAR = 0x40
"""A far transfer: syscall/sysret, interrupt, exception, far call/return."""
RESUMED = 0x80
"""The first instruction after a gap or after tracing was enabled."""

"""The instruction that wrote, at a data-breakpoint stop of a Go program: a debug-register write
watch traps after the writing instruction has run (a trap-class debug exception, Intel SDM
Vol. 3B §18.2.4, "Debug Control Register (DR7)" R/W bits, and §18.3.1.2 "Data Memory and I/O
Breakpoint Exception Conditions"), so the thread's pc is the next instruction's, which is on the
next line when the write ended its line (issue 34: line 48 shown for the write on line 47).

`write_site(pid, pc)` decodes the function holding `pc` from its entry (x86 instructions cannot
be decoded backwards with certainty) and takes the instruction that ends at `pc`; its line comes
from the binary's line table. A repeated string instruction (`rep movs`/`rep stos`) traps
between its iterations with the pc still on itself: then it is the writer.

Layer: adapter.golang. Reads the process's code through /proc/PID/mem, with the bytes a
debugger planted replaced by the caller's `originals` (Delve's INT3s); knows nothing of DAP.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

MAX_FUNCTION = 1 << 20
"""Bytes decoded at most from a function's entry (a Go function is far smaller)."""


@dataclass(frozen=True)
class WriteSite:
    """Where the write was: the instruction, its function and source line."""
    address: int
    function: str
    file: str
    line: int
    shown_line: int | None
    """The line of the pc the thread stopped at (what a debugger's stack shows)."""

    @property
    def where(self) -> str:
        return f"{self.function} at {os.path.basename(self.file)}:{self.line}"


def write_site(pid: int, pc: int,
               originals: Callable[[int, int], dict[int, int]] | None = None
               ) -> WriteSite | None:
    """The instruction that ran before `pc` in process `pid` (a Go program), with its line;
    None when it cannot be told (no line table, no function at `pc`, `pc` at a function's
    entry: a call or a jump got there, not a write in sequence). Raises OSError when the
    process's memory cannot be read."""
    from adapter.hw.mappings import load_bias
    from pt_decoder.errors import PtError
    from pt_decoder.lines import LineTable
    exe = os.readlink(f"/proc/{pid}/exe")
    try:
        table = LineTable.for_elf(exe, load_bias(pid, exe))
    except PtError:
        return None
    found = table.function(pc)
    if found is None or not found[1] < pc < found[1] + MAX_FUNCTION:
        return None
    name, entry = found
    writer = _instruction_before(_code(pid, entry, pc + 16, originals), entry, pc)
    located = table.lookup(writer) if writer is not None else None
    if located is None:
        return None
    shown = table.lookup(pc)
    return WriteSite(writer, name, located[0], located[1], shown[1] if shown else None)


def _code(pid: int, start: int, end: int, originals) -> bytes:
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(start)
        code = bytearray(mem.read(end - start))
    for address, byte in (originals(start, len(code)) if originals else {}).items():
        if start <= address < start + len(code):
            code[address - start] = byte
    return bytes(code)


def _instruction_before(code: bytes, entry: int, pc: int) -> int | None:
    """The address of the instruction that ends at `pc`, decoding from `entry`; `pc` itself
    for a repeated string instruction there."""
    import capstone
    decoder = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    before = None
    for address, size, mnemonic, _ in decoder.disasm_lite(code, entry):
        if address == pc:
            return pc if mnemonic.startswith("rep") else before
        if address > pc:
            return None  # `pc` is inside an instruction: not reached in sequence
        before = address if address + size == pc else None
    return None

"""Whose SIGTRAP is this: ptdebug's own, to be dropped, or the program's, to be delivered.

Role: the one classifier of the SIGTRAPs a traced thread stops with, from the stop's siginfo
(PTRACE_GETSIGINFO). Getting it wrong either way harms the program: one of ptdebug's own traps
delivered at release kills it (SIGTRAP's default action: CI saw the recorder's single step and
a leaked gate breakpoint do so), and one of the program's dropped loses a stop its debugger
armed. The recorder's stepper, its cleanup and Target's interrupt and detach paths all ask here.

What each si_code means (<asm-generic/siginfo.h>, arch/x86/kernel/traps.c):
- TRAP_PERF (6): a perf event opened with sigtrap. ptdebug's recorder opens its breakpoints
  without sig_data (hw.perf exec_trap_attr, write_trap_attr); the data breakpoints ptdebug arms
  for the program's debugger carry one (features/writer_trap.py), and are the program's.
- TRAP_HWBKPT (4): a debug-register hit armed through ptrace; only the tracer arms those, and
  ptdebug is the tracer.
- TRAP_TRACE (2), TRAP_BRKPT (1): the end of a PTRACE_SINGLESTEP (TRAP_BRKPT when the step was a
  system call, reported on the way out); ptdebug's only when it had just stepped the thread.
- SI_KERNEL (0x80): an INT3 (do_int3_user); ptdebug's when it planted the byte.

Layer: adapter.hw, mechanism only.
"""
from __future__ import annotations

from adapter.hw import ptrace as pt
from adapter.hw.perf import TRAP_PERF

TRAP_BRKPT, TRAP_TRACE, TRAP_HWBKPT = 1, 2, 4
SI_KERNEL = 0x80


def recorders_perf_trap(info: pt.SigInfo) -> bool:
    """A perf breakpoint of ptdebug's recorder (no sig_data)."""
    return info.si_code == TRAP_PERF and not pt.perf_data(info)


def programs_perf_trap(info: pt.SigInfo) -> bool:
    """A perf breakpoint armed for the program's debugger (it carries a sig_data): the
    program's to see."""
    return info.si_code == TRAP_PERF and bool(pt.perf_data(info))


def breakpoint_hit_of_ours(info: pt.SigInfo) -> bool:
    """A breakpoint ptdebug armed on the thread, seen at an interrupt or detach: a recorder's
    perf breakpoint or a debug register armed through ptrace."""
    return recorders_perf_trap(info) or info.si_code == TRAP_HWBKPT


def single_step_end(info: pt.SigInfo) -> bool:
    """The end of a PTRACE_SINGLESTEP (ptdebug's when it had just stepped the thread)."""
    return info.si_code in (TRAP_TRACE, TRAP_BRKPT)


def int3_hit(info: pt.SigInfo) -> bool:
    """An INT3 ran (ptdebug's when it planted the byte at RIP - 1)."""
    return info.si_code == SI_KERNEL

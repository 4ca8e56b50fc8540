"""Breakpoints a dead debugger left in a program it attached to: the INT3 (0xCC) bytes it
planted in the program's code, which the program would run into next and die of SIGTRAP.

`put_back(pid)` holds every thread (adapter/hw/hold.py), finds each byte of an
executable file-backed mapping that reads 0xCC where the mapped file holds something else, writes
the file's byte back through /proc/PID/mem, moves a thread that already trapped on one of them
back onto the instruction (its SIGTRAP is dropped), and lets every thread go untraced.

Why the file is the truth: code of a file mapping is not rewritten at run time by the programs
ptdebug attaches to (Go binaries, CPython and the shared libraries they load), so a byte that
differs there is a debugger's. Only 0xCC bytes are put back, so nothing else is ever changed.
A thread that the debugger held on a breakpoint when it died runs its INT3 as soon as the kernel
lets it go, before anyone else can act: that one is beyond repair (docs/go.md).

Layer: adapter.hw. Knows nothing of DAP or of which debugger planted the bytes.
"""
from __future__ import annotations

import dataclasses
import os
import signal
import stat
import time

from adapter.hw import hold, procfs
from adapter.hw import ptrace as pt

INT3 = 0xCC
TRACER_GONE_WAIT_S = 1.0
"""How long to wait for the dead debugger to let go of the threads (its exit detaches them)."""


@dataclasses.dataclass
class PutBack:
    """What put_back did."""
    addresses: list[int]
    """Where a planted INT3 was replaced by the file's byte."""
    rewound: list[int]
    """Threads that had trapped on one of them: moved back onto the instruction."""
    threads: int
    """How many threads were held."""


def put_back(pid: int) -> PutBack | None:
    """Put the file's bytes back under every INT3 left in `pid`'s code, with its threads held,
    and let them go untraced. None when a tracer still holds it (the debugger lives on: its
    bytes are its own). Raises OSError (PtraceError) when the process cannot be held."""
    if not _wait_untraced(pid):
        return None
    try:
        held = hold.hold_all(pid)
    except hold.TracedElsewhere:  # another tracer took a thread meanwhile: its bytes now
        return None
    restored: list[int] = []
    rewound: list[int] = []
    try:
        restored = _restore_code(pid)
        planted = set(restored)
        for tid, status in held.items():
            if status is not None and status.stopped and not status.event \
                    and status.stop_signal == signal.SIGTRAP:
                regs = pt.getregs(tid)
                if regs.rip - 1 in planted:
                    regs.rip -= 1  # run the program's own instruction now in place
                    pt.setregs(tid, regs)
                    held[tid] = None  # its SIGTRAP is the planted byte's: not delivered
                    rewound.append(tid)
    finally:
        hold.let_go(held)
    return PutBack(restored, rewound, len(held))


def _wait_untraced(pid: int) -> bool:
    """A debugger that died has its threads let go as its exit completes: wait for that.
    False when one is still traced after TRACER_GONE_WAIT_S."""
    deadline = time.monotonic() + TRACER_GONE_WAIT_S
    while any(_tracer(tid) for tid in _threads(pid)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def _threads(pid: int) -> list[int]:
    try:
        return pt.threads_of(pid)
    except OSError:
        return []


def _tracer(tid: int) -> int:
    try:
        return pt.tracer_of(tid)
    except OSError:
        return 0


def _restore_code(pid: int) -> list[int]:
    """Write the file's byte over each INT3 of an executable file mapping the file does not
    hold; returns the addresses."""
    restored = []
    mappings = procfs.maps(pid)
    with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
        for m in mappings:
            if "x" not in m.perms or not m.path.startswith("/"):
                continue
            path = m.path
            low, high = m.start, m.end
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # deleted since it was mapped: its bytes are unknown
            try:
                found = os.fstat(fd)
                if not stat.S_ISREG(found.st_mode) or found.st_ino != m.inode:
                    continue  # not the file that is mapped (replaced since): not the truth
                in_file = os.pread(fd, high - low, m.offset)
            finally:
                os.close(fd)
            mem.seek(low)
            in_memory = mem.read(len(in_file))
            start = in_memory.find(INT3)
            while start != -1:
                if in_file[start] != INT3:
                    mem.seek(low + start)
                    mem.write(in_file[start:start + 1])
                    restored.append(low + start)
                start = in_memory.find(INT3, start + 1)
    return restored

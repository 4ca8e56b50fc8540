"""Record a program's true instruction path by single-stepping it under ptrace.

Test helper (tests only, ctypes, Linux x86-64): runs a program to a function
(an int3 planted at it), single-steps until another function, and returns
every instruction address on the way plus the process's image at the end.
Signals the program gets on the way are passed on (their handlers are
stepped too). About 10,000 steps a second on these VMs: keep windows small.
ptrace(2), waitpid(2); struct user_regs_struct from <sys/user.h>.
"""
from __future__ import annotations

import ctypes
import os
import signal

PTRACE_TRACEME, PTRACE_PEEKTEXT, PTRACE_POKETEXT, PTRACE_CONT = 0, 1, 4, 7
PTRACE_KILL, PTRACE_SINGLESTEP, PTRACE_GETREGS, PTRACE_SETREGS = 8, 9, 12, 13
RIP = 16                                    # index of rip in user_regs_struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


class Regs(ctypes.Structure):
    _fields_ = [("r", ctypes.c_ulonglong * 27)]


def _ptrace(req: int, pid: int, addr: int = 0, data: int = 0) -> int:
    ctypes.set_errno(0)
    res = _libc.ptrace(req, pid, ctypes.c_void_p(addr), ctypes.c_void_p(data))
    err = ctypes.get_errno()
    if res == -1 and err:
        raise OSError(err, "ptrace(%d, %d): %s" % (req, pid, os.strerror(err)))
    return res


def _regs(pid: int) -> Regs:
    regs = Regs()
    _ptrace(PTRACE_GETREGS, pid, 0, ctypes.addressof(regs))
    return regs


def _wait(pid: int) -> int:
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) or os.WIFSIGNALED(status):
        raise RuntimeError("the traced program ended before the window closed (status %#x)" % status)
    return os.WSTOPSIG(status)


def record(argv: list[str], begin: int, end: int, max_steps: int = 200_000, image_of_process=None):
    """(path, image): the addresses executed from `begin` up to (not including) `end`;
    image_of_process(pid) is called at `end`, while the process still exists."""
    pid = os.fork()
    if pid == 0:                                           # the child: be traced, run the program
        try:
            _ptrace(PTRACE_TRACEME, 0)
            os.execv(argv[0], argv)
        finally:
            os._exit(127)
    path: list[int] = []
    try:
        _wait(pid)                                         # stopped at exec
        word = _ptrace(PTRACE_PEEKTEXT, pid, begin) & 0xFFFFFFFFFFFFFFFF
        _ptrace(PTRACE_POKETEXT, pid, begin, (word & ~0xFF) | 0xCC)
        _ptrace(PTRACE_CONT, pid)
        if _wait(pid) != signal.SIGTRAP:
            raise RuntimeError("did not stop at the window's first instruction")
        regs = _regs(pid)
        if regs.r[RIP] != begin + 1:
            raise RuntimeError("stopped at %#x, not at the breakpoint %#x" % (regs.r[RIP], begin))
        regs.r[RIP] = begin
        _ptrace(PTRACE_SETREGS, pid, 0, ctypes.addressof(regs))
        _ptrace(PTRACE_POKETEXT, pid, begin, word)
        pending = 0
        rip = begin
        while rip != end:
            if len(path) >= max_steps:
                raise RuntimeError("window longer than %d instructions" % max_steps)
            if not pending:
                path.append(rip)
            _ptrace(PTRACE_SINGLESTEP, pid, 0, pending)
            sig = _wait(pid)
            # a signal-delivery stop: hand the signal over with the next step
            pending = 0 if sig == signal.SIGTRAP else sig
            rip = _regs(pid).r[RIP]
        image = image_of_process(pid) if image_of_process else None
        return path, image
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except OSError:
            pass

"""System calls made by a thread of another process, on ptdebug's behalf: the thread, held by
the calling thread in a ptrace stop, is moved onto a `syscall` instruction (0F 05, Intel SDM
Vol. 2B "SYSCALL") of its own code with the call's number and arguments in its registers
(x86-64 System V: RAX, then RDI RSI RDX R10 R8 R9; syscall(2)), single-stepped over it, and
given its registers back.

The thread may have been stopped inside a system call of its own (a futex wait...): its saved
registers then hold -ERESTART* in RAX and the call's number in ORIG_RAX. The injected calls run
with ORIG_RAX = -1, so the kernel restarts nothing for them; the saved registers put back make
it restart the thread's own call when the thread is let go, as after any ptrace stop
(ptrace(2), "Syscall-stops"; arch/x86/kernel/signal.c, arch_do_signal_or_restart).

Any two bytes 0F 05 in an executable mapping are a `syscall` when executed from their first
byte, whatever instruction they belong to: none is added to the program.

Layer: adapter.hw. Mechanism only: which calls to make, and why, is the caller's.
"""
from __future__ import annotations

import ctypes
import signal

from adapter.hw import procfs
from adapter.hw import ptrace as pt

SYSCALL = b"\x0f\x05"
ARGUMENT_REGISTERS = ("rdi", "rsi", "rdx", "r10", "r8", "r9")
NO_SYSCALL = (1 << 64) - 1
"""ORIG_RAX = -1: not in a system call (nothing for the kernel to restart)."""


class RemoteSyscallError(OSError):
    """The thread could not make the calls (it ended, or stopped otherwise than asked)."""


def syscall_instruction(pid: int) -> int:
    """The address of the bytes 0F 05 in an executable mapping of `pid`. Raises
    RemoteSyscallError when there is none."""
    mappings = procfs.maps(pid)
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        for m in mappings:
            if "x" not in m.perms or m.path == "[vsyscall]":
                continue
            low, high = m.start, m.end
            mem.seek(low)
            try:
                code = mem.read(high - low)
            except OSError:
                continue
            found = code.find(SYSCALL)
            if found != -1:
                return low + found
    raise RemoteSyscallError(f"no syscall instruction in the code of process {pid}")


class RemoteThread:
    """Thread `tid` of process `pid`, held in a ptrace stop by the calling thread, making
    system calls for it: `with RemoteThread(tid, pid) as thread: thread.call(...)`; its
    registers are put back at the end of the block. Raises RemoteSyscallError (or PtraceError)
    when the thread cannot make them."""

    def __init__(self, tid: int, pid: int):
        self.tid = tid
        self.pid = pid
        self.address = syscall_instruction(pid)
        self.saved = pt.getregs(tid)
        self.withheld: list[int] = []
        """Signals that stopped the thread before a call ran: sent again at the end."""

    def __enter__(self) -> RemoteThread:
        return self

    def __exit__(self, *exc) -> None:
        pt.setregs(self.tid, self.saved)
        for sig in self.withheld:  # the thread gets them once it is let go
            pt.tgkill(self.pid, self.tid, sig)

    def call(self, number: int, *arguments: int) -> int:
        """The call's result: its return value, or a negative errno."""
        regs = pt.Regs.from_buffer_copy(self.saved)
        regs.rax, regs.orig_rax, regs.rip = number, NO_SYSCALL, self.address
        for name, value in zip(ARGUMENT_REGISTERS, arguments):
            setattr(regs, name, value & NO_SYSCALL)
        pt.setregs(self.tid, regs)
        while True:
            pt.singlestep(self.tid)
            status = pt.waitpid(self.tid)
            if status is None or status.gone:
                raise RemoteSyscallError(f"thread {self.tid} ended during a system call")
            if status.stopped and not status.event and status.stop_signal != signal.SIGTRAP:
                self.withheld.append(status.stop_signal)  # came before the step: step again
                continue
            after = pt.getregs(self.tid)
            if after.rip != self.address + len(SYSCALL):
                raise RemoteSyscallError(
                    f"thread {self.tid} stopped at {after.rip:#x}, not after the system call "
                    f"at {self.address:#x} ({status.describe()})")
            return ctypes.c_int64(after.rax).value

    def write(self, address: int, data: bytes) -> None:
        """Write `data` into the process's memory (one the thread mapped, say)."""
        with open(f"/proc/{self.pid}/mem", "r+b", buffering=0) as mem:
            mem.seek(address)
            mem.write(data)


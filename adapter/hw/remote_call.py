"""Calling a function inside another process, on one of its threads, with ptdebug's own ptrace:
what a debugger's `call` does, touching only the one thread and giving it back exactly as it was.

Layer: adapter.hw. Mechanism only: which process, which function and why are the caller's
(adapter.python.inject uses it to run code in a Python process attached by pid).

How (x86-64 System V ABI; ptrace(2)):
- Only the chosen thread is stopped (PTRACE_SEIZE + PTRACE_INTERRUPT); the others run on, so a
  lock the called function needs is let go by whoever holds it.
- The thread is used only where it waits in a system call of the WAITING_SYSCALLS kind (poll,
  accept, recv, sleep...). Such a call was entered through a C function call, so every vector
  register is dead there, and C code that blocks in it holds no lock of the program's (CPython
  lets the GIL go around each of them). A thread stopped in its own computation, or waiting on a
  futex (inside a lock or a condition variable the called code could need, the GIL's included),
  is let go untouched and another moment or thread is tried.
- Its general registers and its whole XSAVE area (PTRACE_GETREGSET NT_X86_XSTATE, in the
  kernel's own size: gdb 13 writes another size back and fails with "Couldn't write extended
  state status" on this machine's kernel, killing the process) are saved first and put back at
  the end, byte for byte.
- A call: arguments in RDI RSI RDX RCX R8 R9, RAX 0 (no vector arguments for a variadic
  callee), ORIG_RAX -1 so the kernel restarts nothing on its behalf, RSP below the red zone
  (128 bytes) and below any bytes pushed for it, 16-byte aligned at the call, and a return
  address of RETURN_TRAP, below the lowest address Linux maps (vm.mmap_min_addr, 64 KiB by
  default): the callee's `ret` faults there, and the SIGSEGV stop with RIP == RETURN_TRAP is
  the call's end. No byte of the program's code is written.
- The saved registers put back make the kernel restart the thread's own system call when it
  is let go (rax -ERESTART*, orig_rax the call's number: arch_do_signal_or_restart), as after
  any ptrace stop. Signals that came for the thread meanwhile are sent to it again.
"""
from __future__ import annotations

import signal
import time

from adapter.hw import procfs
from adapter.hw import ptrace as pt

RETURN_TRAP = 0x50D0
"""Where a called function returns to: never mapped (below vm.mmap_min_addr)."""
RED_ZONE = 128
"""Bytes below RSP a leaf function may use without moving RSP (the ABI's red zone)."""
NO_SYSCALL = (1 << 64) - 1
ARGUMENT_REGISTERS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
STOP_TIMEOUT = 2.0
"""How long a thread may take to stop after PTRACE_INTERRUPT (it stops at once unless it is in
an uninterruptible sleep: disk I/O, a page fault on a network file)."""

WAITING_SYSCALLS = {
    0: "read", 7: "poll", 23: "select", 34: "pause", 35: "nanosleep", 43: "accept",
    45: "recvfrom", 47: "recvmsg", 61: "wait4", 128: "rt_sigtimedwait", 230: "clock_nanosleep",
    232: "epoll_wait", 247: "waitid", 270: "pselect6", 271: "ppoll", 281: "epoll_pwait",
    288: "accept4", 441: "epoll_pwait2",
}
"""System calls a thread waits in, with no lock of its program held, where code may be run on
it (by number, x86-64)."""


class RemoteCallError(OSError):
    """The call could not be made, or the thread did not come back from it as it should."""


class ThreadBusy(RemoteCallError):
    """The thread is not waiting in one of WAITING_SYSCALLS now: it was let go untouched."""


def waiting_syscall(pid: int, tid: int) -> str | None:
    """The name of the WAITING_SYSCALLS call thread `tid` waits in now, from
    /proc/PID/task/TID/syscall (no stop: a hint to choose a thread, checked again once it is
    held); None when it runs or waits in another call."""
    try:
        number = procfs.syscall(pid, tid).number
    except (OSError, ValueError):
        return None
    return WAITING_SYSCALLS.get(number) if number is not None else None


class HeldThread:
    """Thread `tid` of process `pid`, stopped by ptrace and held by the calling Python thread
    (ptrace answers only the thread that attached), waiting in one of WAITING_SYSCALLS:
    `with HeldThread(pid, tid) as held: held.call(address, ...)`. Its registers are put back
    and it is let go at the end of the block. Raises ThreadBusy when it is not waiting in such
    a call (it is let go at once), RemoteCallError or PtraceError when it cannot be held."""

    def __init__(self, pid: int, tid: int):
        self.pid = pid
        self.tid = tid
        self.withheld: list[int] = []
        """Signals that came for the thread while it was held: sent again when it is let go."""
        pt.seize(tid)
        try:
            self._wait_for_interrupt_stop()
            self.saved = pt.getregs(tid)
            self.syscall = WAITING_SYSCALLS.get(self.saved.orig_rax) \
                if self.saved.orig_rax != NO_SYSCALL else None
            if self.syscall is None:
                raise ThreadBusy(f"thread {tid} of process {pid} is not waiting in a system "
                                 f"call ptdebug may run code from")
            self.saved_xstate = pt.getxstate(tid)
        except BaseException:
            self._let_go()
            raise
        self._stack_top = (self.saved.rsp - RED_ZONE) & ~0xF
        """Lowest byte pushed so far: the called functions' stack starts below it."""

    def __enter__(self) -> HeldThread:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _wait_for_interrupt_stop(self) -> None:
        pt.interrupt(self.tid)
        deadline = time.monotonic() + STOP_TIMEOUT
        while True:
            status = pt.waitpid(self.tid, pt.WALL | pt.WNOHANG)
            if status is None:
                if time.monotonic() > deadline:
                    raise RemoteCallError(f"thread {self.tid} did not stop within "
                                          f"{STOP_TIMEOUT:g} s (an uninterruptible wait)")
                time.sleep(0.0005)
                continue
            if status.gone:
                raise RemoteCallError(f"thread {self.tid} ended: {status.describe()}")
            if status.event == pt.EVENT_STOP:
                return
            if status.stopped and not status.event:
                # a signal for the thread came first: kept for it, and the stop asked for
                # (still pending) follows
                self.withheld.append(status.stop_signal)
            pt.cont(self.tid)

    def push(self, data: bytes) -> int:
        """Put `data` on the thread's stack, below the red zone and what was pushed before;
        returns its address. It lives until the thread is let go."""
        self._stack_top = (self._stack_top - len(data)) & ~0xF
        with pt.Memory(self.tid) as memory:
            memory.write(self._stack_top, data)
        return self._stack_top

    def call(self, function: int, *arguments: int) -> int:
        """Call the function at `function` with up to six integer or pointer arguments;
        returns RAX. Waits as long as the function runs (the caller bounds the whole)."""
        if len(arguments) > len(ARGUMENT_REGISTERS):
            raise ValueError("at most six arguments are passed in registers")
        regs = pt.Regs.from_buffer_copy(self.saved)
        sp = self._stack_top - 8                  # RSP % 16 == 8 at entry, as after a call
        with pt.Memory(self.tid) as memory:
            memory.write(sp, RETURN_TRAP.to_bytes(8, "little"))
        regs.rsp, regs.rip, regs.rax, regs.orig_rax = sp, function, 0, NO_SYSCALL
        for name, value in zip(ARGUMENT_REGISTERS, arguments):
            setattr(regs, name, value & NO_SYSCALL)
        pt.setregs(self.tid, regs)
        pt.cont(self.tid)
        while True:
            status = pt.waitpid(self.tid)
            if status is None or status.gone:
                raise RemoteCallError(f"thread {self.tid} ended during the call at "
                                      f"{function:#x}")
            if status.event:
                pt.cont(self.tid)                  # a group stop's event: not ours to keep
                continue
            after = pt.getregs(self.tid)
            if status.stop_signal == signal.SIGSEGV and after.rip == RETURN_TRAP:
                return after.rax
            if status.stop_signal in (signal.SIGSEGV, signal.SIGBUS, signal.SIGILL,
                                      signal.SIGFPE):
                raise RemoteCallError(
                    f"the call at {function:#x} faulted ({signal.Signals(status.stop_signal).name}"
                    f" at {after.rip:#x}) in thread {self.tid}")
            self.withheld.append(status.stop_signal)
            pt.cont(self.tid)

    def release(self) -> None:
        """Registers and vector state back as they were, the thread let go, its signals sent
        again."""
        try:
            pt.setregs(self.tid, self.saved)
            pt.setxstate(self.tid, self.saved_xstate)
        finally:
            self._let_go()

    def _let_go(self) -> None:
        try:
            pt.detach(self.tid)
        except pt.PtraceError:
            pass                                   # it ended
        for sig in self.withheld:
            pt.tgkill(self.pid, self.tid, sig)
        self.withheld = []


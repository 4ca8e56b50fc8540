"""A thin ctypes wrapper over ptrace(2), waitpid(2) and the tracee's memory.

Layer: adapter.hw (mechanism only). One function per ptrace request, named
after the request, raising `PtraceError(errno, request, tid)` on failure;
nothing here decides *what* to trace (that is adapter.capture.stepper's and
adapter.watchpoints' job). x86-64 Linux only.

References: ptrace(2) and waitpid(2) man pages (request numbers, the
"PTRACE_SEIZE stop" model, the status word layout), <sys/user.h> for
`struct user_regs_struct` and `offsetof(struct user, u_debugreg)`.

Memory is read and written through /proc/TID/mem (pread/pwrite): a tracer
may write into read-only text mappings that way (the kernel uses FOLL_FORCE,
proc(5)), and one pread replaces many PTRACE_PEEKDATA calls.
"""
from __future__ import annotations

import ctypes
import dataclasses
import errno as _errno
import os

from adapter.hw import procfs

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
SYS_ptrace = 101  # x86-64 syscall number

# Requests, from <sys/ptrace.h> / <linux/ptrace.h> (ptrace(2)).
PTRACE_TRACEME = 0
PTRACE_PEEKDATA = 2
PTRACE_PEEKUSER = 3
PTRACE_POKEDATA = 5
PTRACE_POKEUSER = 6
PTRACE_CONT = 7
PTRACE_KILL = 8
PTRACE_SINGLESTEP = 9
PTRACE_GETREGS = 12
PTRACE_SETREGS = 13
PTRACE_ATTACH = 16
PTRACE_DETACH = 17
PTRACE_SYSCALL = 24
PTRACE_SETOPTIONS = 0x4200
PTRACE_GETEVENTMSG = 0x4201
PTRACE_GETSIGINFO = 0x4202
PTRACE_GETREGSET = 0x4204
PTRACE_SETREGSET = 0x4205
PTRACE_SEIZE = 0x4206
PTRACE_INTERRUPT = 0x4207
PTRACE_LISTEN = 0x4208
PTRACE_GETSIGMASK = 0x420A
PTRACE_SETSIGMASK = 0x420B

# Options (PTRACE_SETOPTIONS / the data of PTRACE_SEIZE).
O_TRACESYSGOOD = 0x1
O_TRACEFORK = 0x2
O_TRACEVFORK = 0x4
O_TRACECLONE = 0x8
O_TRACEEXEC = 0x10
O_TRACEVFORKDONE = 0x20
O_TRACEEXIT = 0x40
O_TRACESECCOMP = 0x80
O_EXITKILL = 0x100000

# Events in bits 16..23 of a stop status (ptrace(2), "PTRACE_EVENT stops").
EVENT_FORK = 1
EVENT_VFORK = 2
EVENT_CLONE = 3
EVENT_EXEC = 4
EVENT_VFORK_DONE = 5
EVENT_EXIT = 6
EVENT_SECCOMP = 7
EVENT_STOP = 128

WALL = 0x40000000  # __WALL: wait for clone children (threads) too
WNOHANG = os.WNOHANG

# offsetof(struct user, u_debugreg) on x86-64 (<sys/user.h>): DR0..DR7 follow
# as 8-byte words; PTRACE_PEEKUSER/POKEUSER address DRn at this + 8 * n.
DEBUGREG_OFFSET = 848

_REG_NAMES = ("r15", "r14", "r13", "r12", "rbp", "rbx", "r11", "r10", "r9", "r8",
              "rax", "rcx", "rdx", "rsi", "rdi", "orig_rax", "rip", "cs", "eflags",
              "rsp", "ss", "fs_base", "gs_base", "ds", "es", "fs", "gs")


class Regs(ctypes.Structure):
    """`struct user_regs_struct` (x86-64), field for field."""
    _fields_ = [(name, ctypes.c_uint64) for name in _REG_NAMES]

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in _REG_NAMES}


class SigInfo(ctypes.Structure):
    """The head of `siginfo_t` (128 bytes): the fields every signal has, plus
    si_addr (the union's first word, the fault address for SIGSEGV/SIGTRAP)."""
    _fields_ = [("si_signo", ctypes.c_int32), ("si_errno", ctypes.c_int32),
                ("si_code", ctypes.c_int32), ("_pad", ctypes.c_int32),
                ("si_addr", ctypes.c_uint64), ("_rest", ctypes.c_uint8 * 104)]


class PtraceError(OSError):
    """A ptrace request failed: carries the errno, the request name and the thread."""

    def __init__(self, err: int, request: str, tid: int):
        super().__init__(err, f"ptrace({request}, {tid}): {os.strerror(err)}")
        self.request = request
        self.tid = tid


_REQUEST_NAMES = {v: k for k, v in globals().items() if k.startswith("PTRACE_")}


def _ptrace(request: int, tid: int, addr: int = 0, data=0) -> int:
    """The raw system call (not glibc's wrapper: PEEK* write their word into
    *data, so -1 is never a valid result and errno need not be cleared)."""
    res = _libc.syscall(SYS_ptrace, ctypes.c_long(request), ctypes.c_long(tid),
                        ctypes.c_void_p(addr), data if not isinstance(data, int)
                        else ctypes.c_void_p(data))
    if res < 0:
        raise PtraceError(ctypes.get_errno(), _REQUEST_NAMES.get(request, str(request)), tid)
    return res


# --- attaching and detaching ---------------------------------------------------------------

def seize(tid: int, options: int = 0) -> None:
    """PTRACE_SEIZE: trace `tid` without stopping it; `interrupt` stops it."""
    _ptrace(PTRACE_SEIZE, tid, 0, options)


def attach(tid: int) -> None:
    """PTRACE_ATTACH: trace `tid` and send it SIGSTOP (the old model; prefer seize)."""
    _ptrace(PTRACE_ATTACH, tid)


def interrupt(tid: int) -> None:
    """PTRACE_INTERRUPT: stop a seized thread; it reports a PTRACE_EVENT_STOP."""
    _ptrace(PTRACE_INTERRUPT, tid)


def detach(tid: int, sig: int = 0) -> None:
    """PTRACE_DETACH: let the (stopped) thread go, delivering `sig` if non-zero."""
    _ptrace(PTRACE_DETACH, tid, 0, sig)


def listen(tid: int) -> None:
    """PTRACE_LISTEN: let a seized thread in group-stop stay stopped for job control
    while the tracer is told when it is continued (ptrace(2), "PTRACE_LISTEN")."""
    _ptrace(PTRACE_LISTEN, tid)


def setoptions(tid: int, options: int) -> None:
    _ptrace(PTRACE_SETOPTIONS, tid, 0, options)


def geteventmsg(tid: int) -> int:
    """PTRACE_GETEVENTMSG: the new thread id of a CLONE event, the exit status of EXIT..."""
    out = ctypes.c_ulong(0)
    _ptrace(PTRACE_GETEVENTMSG, tid, 0, ctypes.byref(out))
    return out.value


# --- resuming ------------------------------------------------------------------------------

def cont(tid: int, sig: int = 0) -> None:
    _ptrace(PTRACE_CONT, tid, 0, sig)


def singlestep(tid: int, sig: int = 0) -> None:
    """PTRACE_SINGLESTEP: run one instruction (sets TF, SDM Vol. 3B §17.3.1.4).
    With a signal, the kernel builds the frame and stops at the handler's first
    instruction."""
    _ptrace(PTRACE_SINGLESTEP, tid, 0, sig)


def syscall(tid: int, sig: int = 0) -> None:
    """PTRACE_SYSCALL: run to the next system-call entry or exit."""
    _ptrace(PTRACE_SYSCALL, tid, 0, sig)


def kill(tid: int) -> None:
    _ptrace(PTRACE_KILL, tid)


# --- registers -----------------------------------------------------------------------------

def getregs(tid: int, regs: Regs | None = None) -> Regs:
    regs = regs if regs is not None else Regs()
    _ptrace(PTRACE_GETREGS, tid, 0, ctypes.byref(regs))
    return regs


def setregs(tid: int, regs: Regs) -> None:
    _ptrace(PTRACE_SETREGS, tid, 0, ctypes.byref(regs))


NT_X86_XSTATE = 0x202
"""The regset of the XSAVE area (x87, SSE, AVX, AVX-512, AMX...: every register state the
kernel saves for the thread), <elf.h>."""
XSTATE_MAX = 1 << 16
"""Room for the largest XSAVE area (11,008 bytes with AMX tiles); the kernel says how much it
wrote."""


class _IoVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def getxstate(tid: int) -> bytes:
    """PTRACE_GETREGSET NT_X86_XSTATE: the thread's whole extended register state, in the
    kernel's own XSAVE layout and size, to be given back unchanged with `setxstate`."""
    buf = ctypes.create_string_buffer(XSTATE_MAX)
    iov = _IoVec(ctypes.addressof(buf), XSTATE_MAX)
    _ptrace(PTRACE_GETREGSET, tid, NT_X86_XSTATE, ctypes.byref(iov))
    return buf.raw[:iov.len]


def setxstate(tid: int, state: bytes) -> None:
    """PTRACE_SETREGSET NT_X86_XSTATE with bytes `getxstate` returned (the kernel checks the
    header; bytes of another size or layout are refused with EFAULT/EINVAL, which is what
    gdb 13 meets on kernels whose XSAVE area it does not know)."""
    buf = ctypes.create_string_buffer(state, len(state))
    iov = _IoVec(ctypes.addressof(buf), len(state))
    _ptrace(PTRACE_SETREGSET, tid, NT_X86_XSTATE, ctypes.byref(iov))


def peekuser(tid: int, offset: int) -> int:
    """PTRACE_PEEKUSER: one word of `struct user` (the debug registers live at
    DEBUGREG_OFFSET + 8 * n)."""
    out = ctypes.c_ulong(0)
    _ptrace(PTRACE_PEEKUSER, tid, offset, ctypes.byref(out))
    return out.value


def pokeuser(tid: int, offset: int, value: int) -> None:
    _ptrace(PTRACE_POKEUSER, tid, offset, value & 0xFFFFFFFFFFFFFFFF)


def getsiginfo(tid: int) -> SigInfo:
    info = SigInfo()
    _ptrace(PTRACE_GETSIGINFO, tid, 0, ctypes.byref(info))
    return info


def perf_data(info: SigInfo) -> int:
    """si_perf_data of a perf event's SIGTRAP (si_code TRAP_PERF): the event's sig_data (the
    word after si_addr in the sigfault union, <asm-generic/siginfo.h>)."""
    return int.from_bytes(bytes(info._rest[0:8]), "little")


def getsigmask(tid: int) -> int:
    """The stopped thread's blocked-signal mask (bit N-1: signal N)."""
    mask = ctypes.c_uint64()
    _ptrace(PTRACE_GETSIGMASK, tid, 8, ctypes.byref(mask))
    return mask.value


def setsigmask(tid: int, mask: int) -> None:
    _ptrace(PTRACE_SETSIGMASK, tid, 8, ctypes.byref(ctypes.c_uint64(mask)))


# --- memory --------------------------------------------------------------------------------

def peekdata(tid: int, addr: int) -> int:
    out = ctypes.c_ulong(0)
    _ptrace(PTRACE_PEEKDATA, tid, addr, ctypes.byref(out))
    return out.value


def pokedata(tid: int, addr: int, value: int) -> None:
    _ptrace(PTRACE_POKEDATA, tid, addr, value & 0xFFFFFFFFFFFFFFFF)


class Memory:
    """The tracee's address space through /proc/TID/mem, opened once."""

    def __init__(self, tid: int):
        self.tid = tid
        self._fd = os.open(f"/proc/{tid}/mem", os.O_RDWR)

    def read(self, addr: int, size: int) -> bytes:
        """Up to `size` bytes at `addr` (fewer where the mapping ends);
        raises OSError(EIO) where nothing is mapped."""
        return os.pread(self._fd, size, addr)

    def read_u64(self, addr: int) -> int:
        data = os.pread(self._fd, 8, addr)
        if len(data) != 8:
            raise OSError(_errno.EIO, f"cannot read 8 bytes at {addr:#x} in {self.tid}")
        return int.from_bytes(data, "little")

    def write(self, addr: int, data: bytes) -> None:
        written = os.pwrite(self._fd, data, addr)
        if written != len(data):
            raise OSError(_errno.EIO, f"short write at {addr:#x} in {self.tid}")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# --- waiting -------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class WaitStatus:
    """A decoded waitpid(2) status word (see ptrace(2), "Stopped states")."""
    tid: int
    raw: int

    @property
    def exited(self) -> bool:
        return os.WIFEXITED(self.raw)

    @property
    def exit_code(self) -> int:
        return os.WEXITSTATUS(self.raw)

    @property
    def killed(self) -> bool:
        return os.WIFSIGNALED(self.raw)

    @property
    def term_signal(self) -> int:
        return os.WTERMSIG(self.raw)

    @property
    def stopped(self) -> bool:
        return os.WIFSTOPPED(self.raw)

    @property
    def stop_signal(self) -> int:
        return os.WSTOPSIG(self.raw)

    @property
    def event(self) -> int:
        """The PTRACE_EVENT_* of an event stop, else 0."""
        return (self.raw >> 16) & 0xFF

    @property
    def gone(self) -> bool:
        return self.exited or self.killed

    def describe(self) -> str:
        if self.exited:
            return f"thread {self.tid} exited with status {self.exit_code}"
        if self.killed:
            return f"thread {self.tid} was killed by signal {self.term_signal}"
        if self.event:
            return f"thread {self.tid} stopped at ptrace event {self.event}"
        return f"thread {self.tid} stopped by signal {self.stop_signal}"


def waitpid(tid: int = -1, flags: int = WALL) -> WaitStatus | None:
    """waitpid(2) with __WALL; None when WNOHANG is given and nothing changed."""
    while True:
        try:
            pid, status = os.waitpid(tid, flags)
        except InterruptedError:
            continue
        if pid == 0:
            return None
        return WaitStatus(pid, status)


def waitpid_or_signal(tid: int, flags: int = WALL) -> WaitStatus | None:
    """waitpid(2) that a signal handled meanwhile cuts short: None then, with nothing
    collected. os.waitpid runs the Python handler and waits again (PEP 475), and a handler
    that raises to end the wait may do so just after waitpid collected a stop, which is then
    lost (the stepper's watchdog: adapter/capture/stepper.py)."""
    status = ctypes.c_int(0)
    pid = _libc.waitpid(tid, ctypes.byref(status), flags)
    if pid == -1:
        err = ctypes.get_errno()
        if err == _errno.EINTR:
            return None
        raise ChildProcessError(err, os.strerror(err))
    if pid == 0:
        return None
    return WaitStatus(pid, status.value)


def tgkill(pid: int, tid: int, sig: int) -> None:
    """tgkill(2): signal `sig` to thread `tid` of process `pid` (a signal a tracer held back,
    sent again to the thread it was meant for)."""
    _libc.syscall(234, pid, tid, sig)  # 234: tgkill on x86-64


def threads_of(pid: int) -> list[int]:
    """The thread ids of a process, from /proc/PID/task."""
    return procfs.tasks(pid)


def tracer_of(tid: int) -> int:
    """TracerPid from /proc/TID/status (0 when nobody traces it)."""
    return procfs.status(tid).tracer_pid

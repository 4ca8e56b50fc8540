"""The one reader of /proc for a process or thread: stat, status, maps, the task list and the
system call it sleeps in, parsed into typed results (proc(5) gives each format).

Layer: adapter.hw (mechanism: what the kernel shows of a process; no policy, no DAP). Every
module of the adapter reads these files through here. pt_decoder (image.Image.from_process)
keeps its own read of /proc/PID/maps: it may not import the adapter. Each function raises
OSError (FileNotFoundError for a process or thread that is not there) when the file cannot be
read; what a caller makes of that stays with the caller.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


def _path(pid: int, tid: int | None, name: str) -> str:
    return f"/proc/{pid}/{name}" if tid is None else f"/proc/{pid}/task/{tid}/{name}"


# --- /proc/PID/stat ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Stat:
    """/proc/PID/stat: the command name (field 2) and the fields after it, as text (field 3,
    the state, is fields[0]: proc(5) numbers them from 1)."""

    comm: str
    fields: tuple[str, ...]

    def field(self, number: int) -> str:
        """Field `number` of proc(5) (3 and above). Raises IndexError past the end."""
        return self.fields[number - 3]

    @property
    def state(self) -> str:
        """Field 3: R, S, D, T (stopped), t (tracing stop), Z (zombie), X..."""
        return self.fields[0]

    @property
    def ppid(self) -> int:
        """Field 4: the parent's pid."""
        return int(self.fields[1])

    @property
    def start_time(self) -> str:
        """Field 22: when it started, in clock ticks after boot, as the kernel wrote it (a pid
        alone can be reused; pid and start time cannot)."""
        return self.fields[19]

    @property
    def processor(self) -> int:
        """Field 39: the CPU it last ran on."""
        return int(self.fields[36])


def parse_stat(data: bytes) -> Stat:
    """A /proc/PID/stat text. The command name may hold spaces and parentheses: it ends at
    the last ')'."""
    text = data.decode("ascii", "replace")
    open_, close = text.find("("), text.rfind(")")
    return Stat(text[open_ + 1:close], tuple(text[close + 2:].split()))


def stat(pid: int, tid: int | None = None) -> Stat:
    """/proc/PID/stat (or the stat of thread `tid` of `pid`; /proc/TID/stat works as well for
    any thread). Raises OSError."""
    with open(_path(pid, tid, "stat"), "rb") as f:
        return parse_stat(f.read())


# --- /proc/PID/status -------------------------------------------------------------------------
@dataclass(frozen=True)
class Status:
    """/proc/PID/status: `Name: value` lines, the values as text."""

    fields: dict[str, str]

    def number(self, name: str) -> int | None:
        """A decimal field's first number (Tgid, TracerPid, PPid...); None when absent."""
        value = self.fields.get(name)
        return int(value.split()[0]) if value else None

    def mask(self, name: str) -> int:
        """A hexadecimal mask (SigPnd, SigBlk, SigCgt, CapEff...); 0 when absent."""
        value = self.fields.get(name)
        return int(value.split()[0], 16) if value else 0

    @property
    def tgid(self) -> int | None:
        """The thread group (the process) the thread is in."""
        return self.number("Tgid")

    @property
    def tracer_pid(self) -> int:
        """The pid of the ptrace tracer; 0 when nobody traces it."""
        return self.number("TracerPid") or 0


def parse_status(text: str) -> Status:
    fields = {}
    for line in text.splitlines():
        name, colon, value = line.partition(":")
        if colon and name not in fields:
            fields[name] = value.strip()
    return Status(fields)


def status(pid: int, tid: int | None = None) -> Status:
    """/proc/PID/status (or thread `tid`'s of `pid`). Raises OSError."""
    with open(_path(pid, tid, "status")) as f:
        return parse_status(f.read())


# --- /proc/PID/maps ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Mapping:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    """rwxp / rwxs letters, '-' where one is missing."""
    offset: int
    """The file offset mapped at `start`."""
    inode: int
    """The mapped file's inode (0 for anonymous memory)."""
    path: str
    """The file, or the kernel's name ([heap], [stack], [vdso]...); "" for anonymous memory.
    Bytes that are not UTF-8 are kept as os.fsdecode keeps them."""

    @property
    def span(self) -> str:
        """The address range as the kernel writes it ("7f0000000000-7f0000001000")."""
        return f"{self.start:08x}-{self.end:08x}"


def parse_maps(data: bytes) -> list[Mapping]:
    out = []
    for line in data.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 5:
            continue
        start, end = fields[0].split(b"-")
        out.append(Mapping(int(start, 16), int(end, 16), fields[1].decode(),
                           int(fields[2], 16), int(fields[4]),
                           os.fsdecode(fields[5].strip()) if len(fields) == 6 else ""))
    return out


def maps(pid: int) -> list[Mapping]:
    """Every mapping of process `pid`, in address order. Raises OSError."""
    with open(f"/proc/{pid}/maps", "rb") as f:
        return parse_maps(f.read())


def file_mappings(pid: int) -> list[Mapping]:
    """The named mappings of `pid` (a file's, or the kernel's [heap], [vdso]...; anonymous ones
    left out), in address order. Raises OSError."""
    return [m for m in maps(pid) if m.path]


# --- /proc/PID/task ---------------------------------------------------------------------------
def tasks(pid: int) -> list[int]:
    """The thread ids of process `pid`, sorted. Raises OSError (FileNotFoundError: no such
    process)."""
    return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))


def pids() -> list[int]:
    """Every process id /proc lists now."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


# --- /proc/PID/syscall ------------------------------------------------------------------------
@dataclass(frozen=True)
class Syscall:
    """/proc/PID/syscall: the system call the (stopped or sleeping) thread is in."""

    number: int | None
    """The system call's number; -1 when blocked outside one; None while it runs."""
    arguments: tuple[int, ...] = ()
    stack_pointer: int | None = None
    pc: int | None = None

    @property
    def running(self) -> bool:
        """The thread runs: the kernel cannot say which call it is in."""
        return self.number is None


def parse_syscall(text: str) -> Syscall:
    words = text.split()
    if not words or words[0] == "running":
        return Syscall(None)
    values = [int(w, 0) for w in words]
    if len(values) < 3:
        return Syscall(values[0])
    return Syscall(values[0], tuple(values[1:-2]), values[-2], values[-1])


def syscall(pid: int, tid: int | None = None) -> Syscall:
    """/proc/PID/syscall (or thread `tid`'s of `pid`). Raises OSError (reading it needs the
    right to ptrace the process)."""
    with open(_path(pid, tid, "syscall")) as f:
        return parse_syscall(f.read())

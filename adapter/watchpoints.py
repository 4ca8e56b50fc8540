"""Hardware watchpoints on a process: the policy over x86's four debug registers.

Role: turn "watch these bytes of process PID for writes / accesses /
execution" into debug-register breakpoints on every thread of the target,
including threads it creates later, and turn each trigger into a `Hit` (IP,
TID, time, user registers, user call chain, old and new value).

Two mechanisms, one policy (validation and register allocation are shared):
- `PerfWatcher`, for a process ptdebug does not trace: perf_event_open(2)
  PERF_TYPE_BREAKPOINT events. The target never stops; the kernel writes a
  sample per hit into a ring we read. New threads are covered by `inherit`:
  a per-thread event is copied into every thread that thread clones (threads
  only, `inherit_thread`: a fork()ed child is another process). The kernel
  refuses to mmap an inherited per-task (cpu = -1) event, so each (thread,
  CPU) pair gets an event and the events of one watch on one CPU share a ring
  (PERF_EVENT_IOC_SET_OUTPUT), as `perf record -p` does. To close the race
  between listing /proc/PID/task and opening the events (a thread created by
  a not-yet-armed thread would be missed, one created by an armed thread
  would be armed twice), all threads are held in a ptrace interrupt-stop
  while the events are opened (PTRACE_SEIZE + PTRACE_INTERRUPT, no signal
  the target can see), then released. Polling /proc/PID/task instead would
  miss a new thread's first writes; PTRACE_O_TRACECLONE would stop the
  target at every clone for as long as the watch lives.
- `adapter.watch_traced`, when ptdebug is itself the ptrace tracer: the same
  requests written into DR0-DR3/DR7 with PTRACE_POKEUSER, so a hit stops the
  thread (SIGTRAP, DR6 says which register) while its bytes are read.

Linux facts this policy encodes (arch/x86/kernel/hw_breakpoint.c): x86 has no
read-only breakpoint (HW_BREAKPOINT_R alone is EINVAL) and no read-write-
execute one; an execute breakpoint must be given bp_len = sizeof(long); data
breakpoints are 1, 2, 4 or 8 bytes, naturally aligned (SDM Vol. 3B §17.2.5).
A region of 16, 24 or 32 bytes (8-aligned) is split into 8-byte registers.

Layer: adapter feature. Uses adapter.hw (debugregs, perf, ptrace) for the
mechanism; knows nothing of symbols (adapter.commands.watch symbolises hits), DAP,
sessions or the other features.
"""
from __future__ import annotations

import dataclasses
import enum
import errno
import os
import select
from typing import TYPE_CHECKING

from adapter.hw import debugregs, hold, perf, procfs, ptrace

if TYPE_CHECKING:  # typing.Self is Python 3.11+; annotations are not evaluated here
    from typing_extensions import Self

NUM_REGISTERS = debugregs.NUM_ADDRESS_REGISTERS


class Access(str, enum.Enum):
    """What a watch catches: writes, reads and writes, or execution."""
    WRITE = "w"
    READ_WRITE = "rw"
    EXECUTE = "x"


PERF_TYPE = {Access.WRITE: perf.HW_BREAKPOINT_W, Access.READ_WRITE: perf.HW_BREAKPOINT_RW,
              Access.EXECUTE: perf.HW_BREAKPOINT_X}
DR_ACCESS = {Access.WRITE: debugregs.Access.WRITE, Access.READ_WRITE: debugregs.Access.READ_WRITE,
              Access.EXECUTE: debugregs.Access.EXECUTE}


class WatchError(Exception):
    """A watch that cannot be set, with a stable `code` and a message naming what was wrong.

    Codes: bad_access, bad_length, unaligned, unmapped, no_process, permission,
    no_register, busy, traced.
    """

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True)
class WatchRequest:
    """The bytes [address, address + length) and what to catch there."""
    address: int
    length: int
    access: Access = Access.WRITE

    def describe(self) -> str:
        return f"{self.access.value} {self.address:#x}+{self.length}"


@dataclasses.dataclass
class Watch:
    """An armed request: its id, the pieces (one debug register each)."""
    id: int
    request: WatchRequest
    pieces: list[tuple[int, int]]
    previous: bytes | None = None
    """The watched bytes as last read: the `old` value of the next hit."""


@dataclasses.dataclass
class Hit:
    """One trigger of a watch, on thread `tid`.

    `ip` is where the thread was when the debug exception was taken: for a
    data watch the instruction after the access (a trap, SDM §17.3.1.2), for
    an execute watch the watched instruction itself (a fault). `old`/`new`
    are the watched bytes before and after (None where they could not be
    told apart: several hits of one watch read in one batch by the perf
    mechanism, or an execute watch). With the perf mechanism `new` is read
    by ptdebug within about a millisecond of the hit, the thread running on.
    `exact` is True when the hitting thread was held in a ptrace-stop while
    `new` was read (the ptrace mechanism; another thread may still have
    written in between, as no all-stop is done). `time_ns` is CLOCK_MONOTONIC:
    the kernel's sample time with perf, the moment ptdebug saw the stop with ptrace.
    """
    watch: Watch
    tid: int
    pid: int
    ip: int
    time_ns: int
    address: int
    regs: dict[str, int]
    callchain: tuple[int, ...]
    old: bytes | None
    new: bytes | None
    exact: bool = False


@dataclasses.dataclass(frozen=True)
class LostHits:
    """Hits the kernel did not report (ring full or sampling throttled)."""
    count: int
    reason: str


SAME_STORE_NS = 1_000_000
"""Samples of one watch, thread and IP closer than this are one store seen by several
registers (a 32-byte store into a 32-byte watch: four), not several writes."""


def one_per_store(hits: list) -> list:
    """The hits of `hits` less the repeats of one store: a store wider than one register (a
    32-byte AVX store into a 32-byte watch) matches several registers and perf reports each."""
    kept: list = []
    for hit in hits:
        if not any(k.watch is hit.watch and k.tid == hit.tid and k.ip == hit.ip
                   and abs(k.time_ns - hit.time_ns) < SAME_STORE_NS for k in kept[-4:]):
            kept.append(hit)
    return kept


def plan(request: WatchRequest) -> list[tuple[int, int]]:
    """The (address, length) pieces, one debug register each, or WatchError.

    1, 2, 4 and 8 bytes take one register and must be naturally aligned;
    16, 24 and 32 bytes at an 8-aligned address take two to four 8-byte
    registers. An execute watch is one instruction (length 1).
    """
    if not isinstance(request.access, Access):
        raise WatchError("bad_access", f"access {request.access!r}: use w, rw or x (x86 has no "
                         "read-only watchpoint: the debug registers cannot break on reads alone)")
    address, length = request.address, request.length
    if request.access == Access.EXECUTE:
        if length != 1:
            raise WatchError("bad_length", f"an execute watch covers one instruction: length must be 1, "
                             f"not {length}")
        return [(address, 1)]
    if length in (1, 2, 4, 8):
        try:
            debugregs.check_breakpoint(address, length, DR_ACCESS[request.access])
        except debugregs.DebugRegisterError as exc:
            code = "unaligned" if "aligned" in str(exc) else "bad_length"
            raise WatchError(code, str(exc)) from None
        return [(address, length)]
    if length in (16, 24, 32):
        if address % 8:
            raise WatchError("unaligned", f"address {address:#x} is not 8-byte aligned; a {length}-byte "
                             f"region is split into 8-byte registers, each 8-byte aligned (SDM §17.2.5)")
        return debugregs.aligned_pieces(address, length)
    if length > 32:
        raise WatchError("bad_length", f"length {length} is more than the 32 bytes the four debug "
                         "registers can cover (4 x 8 bytes)")
    raise WatchError("bad_length", f"length {length}: a watch is 1, 2, 4 or 8 bytes, or 16, 24 or 32 "
                     "bytes at an 8-byte aligned address")


def check_mapped(pid: int, address: int, length: int, access: Access) -> None:
    """WatchError unless [address, address+length) lies in mappings of `pid` (/proc/PID/maps),
    executable ones for an execute watch."""
    pos, end = address, address + length
    for m in _mappings(pid):
        if m.start <= pos < m.end:
            if access == Access.EXECUTE and "x" not in m.perms:
                raise WatchError("unmapped", f"address {address:#x} is in a non-executable mapping "
                                 f"({m.span} {m.perms}) of process {pid}")
            pos = m.end
            if pos >= end:
                return
    raise WatchError("unmapped", f"address {pos:#x} is not mapped in process {pid} (see /proc/{pid}/maps)")


def _mappings(pid: int) -> list[procfs.Mapping]:
    try:
        return procfs.maps(pid)
    except FileNotFoundError:
        raise WatchError("no_process", f"no process {pid}") from None
    except PermissionError:
        raise WatchError("permission", f"permission denied reading /proc/{pid}/maps: watch a process "
                         "of your own user, or run as root") from None


def check_readable(pid: int) -> None:
    """WatchError(no_process / permission) unless `pid` exists and its maps can be read."""
    _mappings(pid)


def require_process(pid: int) -> None:
    if pid <= 0 or not os.path.isdir(f"/proc/{pid}/task"):
        raise WatchError("no_process", f"no process {pid}")


class RegisterSlots:
    """Which of the four registers each armed watch holds: the shared allocation policy."""

    def __init__(self):
        self.watches: dict[int, Watch] = {}
        self._next_id = 1

    def in_use(self) -> int:
        return sum(len(w.pieces) for w in self.watches.values())

    def reserve(self, request: WatchRequest, pieces: list[tuple[int, int]]) -> Watch:
        if self.in_use() + len(pieces) > NUM_REGISTERS:
            held = "; ".join(f"watch {w.id}: {w.request.describe()} ({len(w.pieces)} register"
                             f"{'s' if len(w.pieces) > 1 else ''})" for w in self.watches.values())
            raise WatchError("no_register", f"{request.describe()} needs {len(pieces)} debug register"
                             f"{'s' if len(pieces) > 1 else ''} but only {NUM_REGISTERS - self.in_use()} "
                             f"of the four are free; in use: {held}")
        watch = Watch(self._next_id, request, pieces)
        self._next_id += 1
        self.watches[watch.id] = watch
        return watch

    def release(self, watch: Watch) -> None:
        self.watches.pop(watch.id, None)

    def slots(self) -> list[tuple[int, Watch, int, int]]:
        """(register index, watch, address, length) in a stable order."""
        out, index = [], 0
        for watch in self.watches.values():
            for address, length in watch.pieces:
                out.append((index, watch, address, length))
                index += 1
        return out


def read_watched(mem_fd: int, watch: Watch) -> bytes | None:
    try:
        data = os.pread(mem_fd, watch.request.length, watch.request.address)
    except OSError:
        return None
    return data if len(data) == watch.request.length else None


def open_memory(pid: int) -> int:
    try:
        return os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise WatchError("no_process", f"no process {pid}") from None
    except PermissionError:
        raise WatchError("permission", f"permission denied opening /proc/{pid}/mem: watch a process of "
                         "your own user, or run as root") from None


def watch_error_from_os(exc: OSError, pid: int, request: WatchRequest, held: str) -> WatchError:
    if exc.errno == errno.ENOSPC:
        return WatchError("busy", f"the debug registers of process {pid} are taken by another tool "
                          f"(a debugger or another watch){held}; the kernel said ENOSPC")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return WatchError("permission", f"permission denied watching process {pid}: perf_event_open needs "
                          "ptrace access to the target (same user, or root / CAP_PERFMON), "
                          f"kernel.perf_event_paranoid = {_paranoid()}")
    if exc.errno == errno.ESRCH:
        return WatchError("no_process", f"no process {pid}")
    if exc.errno == errno.EMFILE:
        return WatchError("busy", f"out of file descriptors arming {request.describe()} in process {pid}: "
                          "one perf event per thread and CPU is needed; raise `ulimit -n`")
    if exc.errno == errno.EINVAL:
        return WatchError("bad_length", f"the kernel refused {request.describe()} (EINVAL): x86 "
                          "breakpoints are 1/2/4/8 bytes, aligned, write, read-write or execute")
    return WatchError("busy", f"could not arm {request.describe()} in process {pid}: {exc}")


def _paranoid() -> str:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def online_cpus() -> list[int]:
    """CPUs listed in /sys/devices/system/cpu/online ("0-3,6")."""
    with open("/sys/devices/system/cpu/online") as f:
        text = f.read().strip()
    cpus = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


class _Frozen:
    """All threads of `pid` held in a ptrace stop for the duration of a `with`
    (adapter/hw/hold.py), so that no thread can be cloned while the caller works. If the
    target is already traced (by a debugger, or by ptdebug's own stepper) the freeze is
    impossible (EPERM): `held` is False and the caller arms the running target, where a thread
    cloned during the few milliseconds of arming could be missed or armed twice.
    """

    def __init__(self, pid: int):
        self.pid = pid
        self.stopped: dict[int, ptrace.WaitStatus | None] = {}
        """tid -> the stop it reported (its signal is delivered again at the release)."""
        self.held = True

    def __enter__(self) -> Self:
        try:
            self.stopped = hold.hold_all(self.pid)
        except hold.TracedElsewhere:
            self.held = False
        except FileNotFoundError:
            raise WatchError("no_process", f"no process {self.pid}") from None
        return self

    def __exit__(self, *exc) -> None:
        hold.let_go(self.stopped)
        self.stopped = {}


def live_threads(pid: int) -> list[int]:
    try:
        return ptrace.threads_of(pid)
    except FileNotFoundError:
        raise WatchError("no_process", f"no process {pid}") from None


class PerfWatcher:
    """Watches on a process ptdebug does not trace, through perf breakpoint events.

    Use as a context manager; `close()` closes every event (the kernel then
    removes the breakpoint from every thread, inherited copies included),
    so the target is left exactly as it was.
    """

    def __init__(self, pid: int, ring_pages: int = 16, wakeup: str = "each"):
        """`wakeup`: "each" wakes the reader at every hit, so each hit (and the
        watched bytes) is read at once. "batch" wakes it only when half a ring is
        full: less cost per hit for the target (no wakeup per hit), but hits and
        values are read only as often as the caller's poll timeout.
        """
        require_process(pid)
        if wakeup not in ("each", "batch"):
            raise ValueError(f"wakeup must be 'each' or 'batch', not {wakeup!r}")
        self.pid = pid
        self.ring_pages = ring_pages
        self.wakeup = wakeup
        self.registers = RegisterSlots()
        self._mem_fd = open_memory(pid)
        self._cpus = online_cpus()
        self._rings: dict[tuple[int, int], perf.RingBuffer] = {}  # (watch id, cpu) -> ring
        self._fds: dict[int, list[int]] = {}         # watch id -> event fds
        self._event_watch: dict[int, Watch] = {}     # perf event id -> watch
        self._poll = select.poll()

    # -- arming -------------------------------------------------------------------------------

    def add(self, request: WatchRequest, *, signal_thread: int | None = None) -> Watch:
        """Arm `request` on every thread; WatchError (nothing left armed) if it cannot be.

        With `signal_thread` (a sig_data value; a handler must be installed in the target
        first, SIGTRAP's default action ends the process) the hitting thread also gets a
        synchronous SIGTRAP carrying it (perf_event_attr.sigtrap and sig_data)."""
        pieces = plan(request)
        require_process(self.pid)
        check_mapped(self.pid, request.address, request.length, request.access)
        watch = self.registers.reserve(request, pieces)
        fds: list[int] = []
        try:
            with _Frozen(self.pid) as frozen:
                tids = list(frozen.stopped) if frozen.held else live_threads(self.pid)
                for tid in tids:
                    for address, length in pieces:
                        for cpu in self._cpus:
                            fd = self._open(request, address, length, tid, cpu,
                                            signal_thread)
                            if fd is not None:
                                fds.append(fd)
                                self._attach(fd, cpu, watch)
            if not fds:
                raise WatchError("no_process", f"no process {self.pid} (all its threads exited)")
        except BaseException as exc:
            self._close_watch_events(watch.id, fds)
            self.registers.release(watch)
            if isinstance(exc, OSError) and not isinstance(exc, ptrace.PtraceError):
                held = "".join(f"; ptdebug holds {w.request.describe()}"
                               for w in self.registers.watches.values())
                raise watch_error_from_os(exc, self.pid, request, held) from None
            if isinstance(exc, ptrace.PtraceError) and exc.errno == errno.EPERM:
                raise WatchError("permission", f"permission denied: cannot ptrace process {self.pid} "
                                 "to arm every thread (same user, or root)") from None
            raise
        watch.previous = read_watched(self._mem_fd, watch) if request.access != Access.EXECUTE else None
        self._fds[watch.id] = fds
        return watch

    def _open(self, request, address, length, tid, cpu, signal_thread=None) -> int | None:
        # Linux wants an execute breakpoint's bp_len to be sizeof(long)
        # (hw_breakpoint.c, arch_build_bp_info); the register itself gets LEN=00B.
        bp_len = 8 if request.access == Access.EXECUTE else length
        wakeup_bytes = self.ring_pages * perf.PAGE_SIZE // 2 if self.wakeup == "batch" else 0
        attr = perf.breakpoint_attr(address, bp_len, PERF_TYPE[request.access], inherit=True,
                                    wakeup_bytes=wakeup_bytes)
        if signal_thread is not None:
            # The kernel takes `sigtrap` only with remove_on_exec (set with threads_only).
            attr.flags |= perf.FLAG_SIGTRAP | perf.FLAG_REMOVE_ON_EXEC
            attr.sig_data = signal_thread
        try:
            return perf.perf_event_open(attr, tid, cpu)
        except OSError as exc:
            if exc.errno == errno.ESRCH:
                return None  # this thread exited meanwhile
            raise

    def _attach(self, fd: int, cpu: int, watch: Watch) -> None:
        # One ring per (watch, CPU): an inherited per-task event cannot be
        # mmap'd (perf_mmap refuses cpu == -1 with inherit), and SET_OUTPUT
        # only joins events of the same CPU. Per watch, so that removing one
        # never touches another's ring.
        ring = self._rings.get((watch.id, cpu))
        if ring is None:
            self._rings[(watch.id, cpu)] = perf.RingBuffer(fd, self.ring_pages)
            self._poll.register(fd, select.POLLIN)
        else:
            perf.set_output(fd, ring.fd)
        self._event_watch[perf.event_id(fd)] = watch

    def _close_watch_events(self, watch_id: int, fds: list[int]) -> None:
        for key in [k for k in self._rings if k[0] == watch_id]:
            ring = self._rings.pop(key)
            self._poll.unregister(ring.fd)
            ring.close()
        for fd in fds:
            os.close(fd)
        self._event_watch = {k: v for k, v in self._event_watch.items() if v.id != watch_id}

    def remove(self, watch: Watch) -> None:
        """Disarm one watch: its events are closed on every thread."""
        self._close_watch_events(watch.id, self._fds.pop(watch.id, []))
        self.registers.release(watch)

    # -- hits ---------------------------------------------------------------------------------

    def poll(self, timeout_s: float | None) -> list[Hit | LostHits]:
        """The hits reported since the last call, waiting up to `timeout_s` for one (None: forever)."""
        if not self._rings:
            return []
        if not any(r.pending() for r in self._rings.values()):
            try:
                self._poll.poll(None if timeout_s is None else int(timeout_s * 1000))
            except InterruptedError:
                pass
        records = []
        for ring in self._rings.values():
            records.extend(ring.read())
        records.sort(key=lambda r: getattr(r, "time_ns", 0))
        return self._to_hits(records)

    def _to_hits(self, records) -> list[Hit | LostHits]:
        out: list[Hit | LostHits] = []
        batch: dict[int, list[Hit]] = {}
        for rec in records:
            if isinstance(rec, perf.Lost):
                out.append(LostHits(rec.count, rec.reason))
                continue
            watch = self._event_watch.get(rec.event_id)
            if watch is None:
                continue  # a sample of a watch removed meanwhile
            hit = Hit(watch, rec.tid, rec.pid, rec.ip, rec.time_ns, rec.bp_addr, rec.regs,
                      rec.callchain, None, None)
            batch.setdefault(watch.id, []).append(hit)
            out.append(hit)
        for hits in batch.values():
            watch = hits[0].watch
            if watch.request.access == Access.EXECUTE:
                continue
            # The target ran on since these hits: the bytes read now are the
            # value after the last of them; the ones between are not known.
            new = read_watched(self._mem_fd, watch)
            hits[0].old = watch.previous
            hits[-1].new = new
            watch.previous = new
        return out

    def read_now(self, watch: Watch) -> bytes | None:
        """The watched bytes now, remembered as the `old` value of the next hit (read while
        the hitting thread is held, they are its write's result)."""
        data = read_watched(self._mem_fd, watch)
        if data is not None:
            watch.previous = data
        return data

    def alive(self) -> bool:
        return os.path.isdir(f"/proc/{self.pid}/task")

    def event_count(self) -> int:
        """Open perf events (for tests: all closed after close())."""
        return sum(len(f) for f in self._fds.values())

    def _close_all(self) -> None:
        for watch_id, fds in list(self._fds.items()):
            self._close_watch_events(watch_id, fds)
        self._fds.clear()

    def close(self) -> None:
        self._close_all()
        self.registers.watches.clear()
        if self._mem_fd >= 0:
            os.close(self._mem_fd)
            self._mem_fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

"""The ptrace recorder: records the instruction flow of one thread on machines
without Intel PT, stopping the thread only where the flow cannot be known from
the code.

Layer: adapter.capture (a capture backend). It drives adapter.hw.ptrace and
the debug registers, predicts paths with adapter.capture.blocks, and hands
the executed instruction addresses to the PT writer (stepper_pt.py) that turns
them into real Intel PT packets in a bundle. It knows nothing of DAP, sessions
or how a trace is decoded.

How it stays fast (docs/recording.md has the full argument):
  * from a known state it walks the code (direct jumps and calls followed,
    returns followed when its own shadow stack proves where they go) to the
    first instruction whose outcome needs registers: a conditional branch, an
    indirect branch, an unproven return, a system call;
  * it arms a debug-register execute breakpoint there (SDM Vol. 3B §17.2.4:
    an instruction breakpoint is a fault, taken before the instruction runs)
    and lets the thread run: one stop per such instruction instead of one per
    instruction;
  * at the stop it *performs* the branch itself from the real registers
    (blocks.perform: RFLAGS for Jcc, the stack for RET, the operand for
    indirect JMP/CALL) instead of single-stepping it, and walks on.
Debug registers are per thread, so the other threads of the process run free
and untraced and no code byte is ever patched. Anything it cannot perform it
single-steps. A signal arriving mid-path is located on the predicted path and
recorded as an asynchronous transfer to the handler.
"""
from __future__ import annotations

import dataclasses
import errno
import os
import signal
import threading
import time
from array import array

from adapter.capture import blocks
from adapter.hw import perf, procfs, traps
from adapter.hw import ptrace as pt
from adapter.hw.exec_breakpoints import BreakpointError, ExecBreakpoints
from adapter.hw.signals import alarm_ticks, signals_held

SIGTRAP = signal.SIGTRAP
# x86-64 system-call numbers the recorder must treat specially (asm/unistd_64.h).
SYS_RT_SIGRETURN, SYS_EXECVE, SYS_EXIT, SYS_EXIT_GROUP, SYS_EXECVEAT = 15, 59, 60, 231, 322
SYS_RT_SIGPROCMASK = 14
MASK_CHANGES = frozenset({SYS_RT_SIGPROCMASK, SYS_RT_SIGRETURN})
"""System calls after which the thread's signal mask is read again (_trap_blocked)."""
# -ERESTARTSYS, -ERESTARTNOINTR, -ERESTARTNOHAND, -ERESTART_RESTARTBLOCK (linux/errno.h)
RESTART_ERRORS = frozenset({-512, -513, -514, -516})
RF = 1 << 16   # RFLAGS.RF: suppresses an instruction breakpoint for one instruction
MAX_WALK = 1 << 16   # a straight path longer than this ends in a stop anyway (jmp-only loops)


class RecordError(Exception):
    """Recording could not start or went wrong; the text says what and why."""


class EndRequest:
    """A request from outside the loop to close the window before the next instruction the
    recorder looks at: from a signal handler (the DAP session saw the thread stop in its
    debugger, or write a watched buffer) or from the Python probe (the thread reached a
    breakpoint's line). The window
    it closes is complete, not partial: it ended where the user's debugger took over. The
    first reason given wins."""

    def __init__(self):
        self.reason: str | None = None
        self._held_since: float | None = None
        self._held_for = 0.0

    def end(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason

    # A window on a Python line waits for its thread to run the line (Target.run_thread_to,
    # with a timeout). When the debugger stops the program meanwhile (another thread's stop,
    # a pause), the thread runs the line only after the user continues: that wait is the
    # user's, and does not count against the timeout.
    def hold_wait(self) -> None:
        """The program is stopped for the user: the wait clock stands still."""
        if self._held_since is None:
            self._held_since = time.monotonic()

    def resume_wait(self) -> None:
        """The program runs again: the wait clock goes on."""
        if self._held_since is not None:
            self._held_for += time.monotonic() - self._held_since
            self._held_since = None

    def wait_clock(self) -> float:
        """Monotonic seconds less the time the program was held for the user."""
        now = time.monotonic()
        held = self._held_for + (now - self._held_since if self._held_since is not None else 0)
        return now - held


@dataclasses.dataclass
class EndCondition:
    """When a recording stops (the first that holds wins)."""
    count: int | None = None          # after this many instructions
    until: int | None = None          # before executing this address
    until_spec: str | None = None     # a symbol or address text for `until`, resolved in the target
    until_return: bool = False        # when the trigger function returns
    duration_ms: float | None = None  # after this long (checked at stops and by a watchdog)
    time_bound_s: float | None = None  # a safety bound: the window closes after this long
    # whatever else it waits for (a DAP window: the debugger is away meanwhile), said as such
    stop_at: frozenset = frozenset()  # before executing any of these (a debugger's breakpoints)
    end_at: dict = dataclasses.field(default_factory=dict)  # address -> reason: the window
    # closes before it runs (a Go goroutine parking: runtime.gopark's entry)
    request: EndRequest | None = None  # when asked (checked at stops and by the watchdog)


@dataclasses.dataclass
class Recording:
    """What the recorder saw, before it becomes PT: every executed instruction
    address in order, plus where the flow was interrupted and the clock."""
    tid: int
    ips: array = dataclasses.field(default_factory=lambda: array("Q"))
    end_ip: int | None = None           # where execution continues after the last insn
    # (index into ips of the first instruction after an asynchronous transfer,
    #  the interrupted address): signal handlers entered mid-path
    async_events: list = dataclasses.field(default_factory=list)
    stamps: list = dataclasses.field(default_factory=list)   # (index, monotonic ns)
    ptw: list = dataclasses.field(default_factory=list)      # (index, value)
    # index into ips of an indirect call whose callee ran unrecorded (the debugger's tracer)
    # -> the callee's address; the next instruction recorded is the call's return address
    untraced: dict = dataclasses.field(default_factory=dict)
    stops: int = 0
    single_steps: int = 0
    threads_created: list = dataclasses.field(default_factory=list)
    reason: str = ""                    # why it ended
    partial_reason: str | None = None   # set when it ended before the end condition
    started_ns: int = 0
    ended_ns: int = 0


class _DebugRegisters:
    """The four instruction-breakpoint slots of one thread (hw.exec_breakpoints:
    perf breakpoint events that give their slots back when cleared, or the
    debug registers through ptrace where perf refuses). Slots are reused
    least-recently-armed first; an address already armed costs nothing, which
    keeps loops free of register writes.

    The slots are shared with whatever else holds breakpoints in the thread: a
    data breakpoint of the DAP session is a perf breakpoint event per thread
    (adapter.watchpoints) taking 1-4 of them. The kernel gives a thread four in
    all (arch/x86 hw_breakpoint slot accounting: ENOSPC beyond), so the
    recorder counts the slots it can still open (`free_slots`) and uses only
    those; `usable` is how many it uses (0: every instruction is stepped)."""

    def __init__(self, tid: int, reserved: int | None = None, held: int = 0):
        self.tid = tid
        # `held`: registers the caller knows other breakpoints take in this thread (a DAP
        # session's data breakpoints). The kernel's slot count can miss them: in a debugpy
        # session (kernel 6.18) the threads created after a watch was armed carry it by
        # `inherit` and hit it, yet perf opened four more breakpoints on them; the
        # recorder's then never fired (not installed in the hardware: "lost the flow").
        free = min(free_slots(tid), 4 - held)
        # fewer than four: perf events only (a ptrace write would take a slot of its own
        # until the thread exits); none that perf sees, and none known held: the ptrace
        # way may still reuse the DRn another tracer left (ExecBreakpoints "auto")
        ptrace_may_reuse = free == 0 and not held
        self.regs = ExecBreakpoints(tid, "auto" if free == 4 or ptrace_may_reuse else "perf")
        self.usable = 4 if ptrace_may_reuse else free
        self.slots: list[int] = [0, 0, 0, 0]
        self._order = list(range(self.usable))
        self.armed: set[int] = set()
        self.writes = 0
        self.reserved = None
        """The --until address while it keeps slot 3 for itself (all four slots free)."""
        if reserved is not None and self.usable == 4:  # the --until address keeps slot 3
            try:
                self._write_slot(3, reserved)
            except BreakpointError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                self.usable, self._order = 0, []  # every slot taken: the recorder steps
            else:
                self._order.remove(3)
                self.reserved = reserved

    def _write_slot(self, slot: int, addr: int) -> None:
        old = self.slots[slot]
        self.regs.set(slot, addr)
        self.writes += 1
        self.armed.discard(old)
        self.slots[slot] = addr
        self.armed.add(addr)

    def arm(self, addr: int) -> None:
        """Raises NoFreeSlot when another tool holds every slot (the recorder then steps)."""
        if addr in self.armed:
            return
        if not self._order:
            raise NoFreeSlot(f"thread {self.tid}: every debug-register slot is taken")
        slot = self._order.pop(0)
        self._order.append(slot)
        try:
            self._write_slot(slot, addr)
        except BreakpointError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            self.usable = 0  # taken by another tool after all: step from here on
            self._order = []
            raise NoFreeSlot(str(exc)) from None

    def arm_only(self, addr: int) -> None:
        """Arm `addr` and move the other slots the recorder uses to PROBE_ADDRESS (never
        executed), so that code run unrecorded stops only there. Raises NoFreeSlot."""
        self.arm(addr)
        for slot in self._order:
            if self.slots[slot] not in (0, addr, PROBE_ADDRESS):  # 0: never opened, stays so
                self._write_slot(slot, PROBE_ADDRESS)

    def hit(self, regs) -> int | None:
        """The armed address this SIGTRAP stop came from (an instruction
        breakpoint is a fault: RIP is on it)."""
        return regs.rip if regs.rip in self.armed else None

    def lift(self, addr: int) -> None:
        """Nothing to do: RFLAGS.RF lets the instruction at a breakpoint run once."""

    def replant(self, addr: int) -> None:
        pass

    def clear(self) -> None:
        """Disarm all four and give the slots back (a thread that is gone is no error)."""
        self.regs.clear()
        self.slots = [0, 0, 0, 0]
        self.armed = set()


OTHER_BREAKPOINT_SLOTS = 0
"""Debug registers other breakpoints are known to hold in every thread of the target, for a
ThreadRecorder not told otherwise: set by the DAP recorder process (one recording each,
adapter.features.record_breakpoints) to what the session's data breakpoints hold."""


class NoFreeSlot(Exception):
    """No debug-register slot can be armed in the thread (data breakpoints hold them)."""


PROBE_ADDRESS = 0x1000
"""Where `free_slots` opens its probing breakpoints: user space, never executed (page 1 is
never mapped, vm.mmap_min_addr), and only while the thread is stopped anyway."""


def free_slots(tid: int) -> int:
    """How many instruction breakpoints perf can open on thread `tid` now (0-4): the slots
    no other breakpoint event (a data breakpoint's, another tool's) holds. 4 where perf
    refuses breakpoints for another reason (an old kernel, perf_event_paranoid): the
    ptrace way is used then, as before."""
    fds = []
    try:
        for _ in range(4):
            try:
                fds.append(perf.perf_event_open(perf.exec_trap_attr(PROBE_ADDRESS), tid))
            except OSError as exc:
                if exc.errno == errno.ENOSPC:
                    break
                return 4
        return len(fds)
    finally:
        for fd in fds:
            os.close(fd)


class _Int3Breakpoints:
    """Breakpoints as INT3 bytes written into the code (SDM Vol. 2A, INT3: a
    trap, so RIP is one past it when the thread stops). A stop costs about half
    a debug-register stop in a VM (#BP is not intercepted by the hypervisor,
    #DB is) and planting costs one write, so every block end found stays
    planted until the recording ends: the recorder never executes a planted
    instruction natively (it performs it, or lifts the byte to step it).
    Only for a process with this one thread: another thread reaching a planted
    byte would die of SIGTRAP. A new thread makes the recorder lift all of
    them and continue with debug registers (see ThreadRecorder._on_clone)."""

    def __init__(self, tid: int, mem: pt.Memory, reserved: int | None = None):
        self.tid = tid
        self.mem = mem
        self.original: dict[int, bytes] = {}
        self.armed = self.original.keys()  # a live view: the walker stops at all of them
        self.writes = 0
        if reserved is not None:
            self.arm(reserved)

    def arm(self, addr: int) -> None:
        if addr in self.original:
            return
        self.original[addr] = self.mem.read(addr, 1)
        self.mem.write(addr, b"\xcc")
        self.writes += 1

    def lift(self, addr: int) -> None:
        if addr in self.original:
            self.mem.write(addr, self.original[addr])

    def replant(self, addr: int) -> None:
        if addr in self.original:
            self.mem.write(addr, b"\xcc")

    def hit(self, regs) -> int | None:
        """The planted address this SIGTRAP stop came from (RIP moved back onto it)."""
        addr = regs.rip - 1
        if addr in self.original:
            regs.rip = addr
            return addr
        return None

    def patch_read(self, addr: int, data: bytes) -> bytes:
        """Code bytes as the program wrote them (planted bytes replaced back)."""
        if not self.original:
            return data
        out = None
        for i in range(len(data)):
            orig = self.original.get(addr + i)
            if orig is not None:
                out = out or bytearray(data)
                out[i] = orig[0]
        return bytes(out) if out is not None else data

    def clear(self) -> None:
        for addr, orig in list(self.original.items()):
            try:
                self.mem.write(addr, orig)
            except OSError:
                pass  # the process is gone
        self.original.clear()


WATCHDOG_PERIOD_S = 0.25
"""The watchdog's tick: a wait that two of them interrupt looks at the thread."""


class _Watchdog:
    """SIGALRM every `period` s while recording, so that a wait for the thread's next stop
    (ThreadRecorder._wait with `tick`) looks up when the thread has not stopped for a period:
    a blocking system call, a path that left the prediction, a duration that ran out while the
    thread sleeps. The wait then raises Tick, and the recorder interrupts the thread.

    The handler only interrupts the wait (waitpid returns EINTR, ptrace.waitpid_or_signal);
    the decision is the wait's own, taken where nothing was collected. A handler that raised
    did so wherever the main thread was: in the recorder's own work ("the recorder failed:
    Tick", CI, the 3.10 attribution test), or just after waitpid had collected a stop, which
    was then lost and the recorder waited for it for ever (stop 22's CI timeout)."""

    class Tick(Exception):
        pass

    def __init__(self, period: float):
        self.period = period
        self.active = False
        self._ticks = None

    def _handler(self, signum, frame):
        pass  # its work is done: the wait in progress returned EINTR

    def __enter__(self):
        # Python runs signal handlers in the main thread only: a recording driven
        # from another thread has no watchdog (duration and off-path checks then
        # happen at stops only; docs/recording.md says so).
        self.active = threading.current_thread() is threading.main_thread()
        if self.active:
            self._ticks = alarm_ticks(self.period, self._handler)
            self._ticks.__enter__()
        return self

    def __exit__(self, *exc):
        if self._ticks is not None:
            self._ticks.__exit__(None, None, None)
            self._ticks = None


HOME_GRACE_S = 1.0
"""How long a window's hold waits, after the window, for the thread to run what it held again
(ThreadRecorder._bring_home)."""
POLL_SPINS = 64
"""Non-blocking waits before ThreadRecorder._poll sleeps between them (a single step takes a
few microseconds; a sleeping system call, up to the grace)."""


def _thread_state(tid: int) -> str:
    """The state letter of /proc/TID/stat ("t": stopped by the tracer); "" if gone."""
    try:
        return procfs.stat(tid).state[:1]
    except (OSError, IndexError):
        return ""


def _signal_set(tid: int, field: str) -> int:
    """A signal set of /proc/TID/status (`field`: SigPnd, SigBlk...) as a mask; 0 if gone."""
    try:
        return procfs.status(tid).mask(field)
    except OSError:
        return 0


def pending_signals(tid: int) -> int:
    """SigPnd: signals queued for this thread."""
    return _signal_set(tid, "SigPnd")


def blocked_signals(tid: int) -> int:
    """SigBlk: the thread's signal mask."""
    return _signal_set(tid, "SigBlk")


def caught_signals(pid: int) -> int:
    """The SigCgt mask of /proc/PID/status: signals with a handler installed."""
    return procfs.status(pid).mask("SigCgt")


def _signed(v: int) -> int:
    return v - (1 << 64) if v >> 63 else v


def _pending_restart(regs) -> int | None:
    """The SYSCALL the kernel will run again when the thread resumes (stopped inside an
    interrupted system call: ORIG_RAX its number, RAX -ERESTART*), or None."""
    if _signed(regs.orig_rax) >= 0 and _signed(regs.rax) in RESTART_ERRORS:
        return regs.rip - 2
    return None


class ThreadRecorder:
    """Records one ptrace-stopped thread from where it stands now until the end
    condition. The thread must be stopped (in a ptrace-stop) when `run` is
    called and is left stopped, with every debug register cleared, when it
    returns (unless it exited)."""

    def __init__(self, tid: int, pid: int, end: EndCondition, *,
                 predict_returns: bool = True, ptw_probe=None, max_instructions: int = 50_000_000,
                 entry_rsp: int | None = None, return_address: int | None = None,
                 breakpoints: str = "dr", withheld_signals: frozenset = frozenset(),
                 held_slots: int | None = None, hold=None, untraced_calls=None):
        """`breakpoints`: "dr" (debug registers; any process) or "int3" (planted
        bytes; faster, only for a process whose one thread is this one, traced
        with PTRACE_O_TRACECLONE so that a new thread is noticed).
        `withheld_signals`: signals not delivered to the thread in the window
        (Go's SIGURG: adapter/golang/recording.py says why that is safe).
        `hold`: what keeps the recorded work on this thread for the window (a Go goroutine
        locked to it: adapter/golang/thread_lock.GoroutineLock), told of every stop
        (`at_stop(regs)`), of the addresses in its `visits` (address -> callable(regs), each
        once, before the instruction there runs), asked how far its stack moved
        (`stack_moved()`, for --until-return), and given back when the window ends where
        `home(regs)` holds (`release(regs)`; the thread is stepped, unrecorded, until it does,
        at most HOME_GRACE_S, else `abandon(why)`).
        `untraced_calls(target, regs) -> bool`: whether the callee an indirect call just
        reached at `target` runs unrecorded, to its return (a debugger's tracer in a Python
        window: adapter/python/debugger_code.py). The call is kept in `Recording.untraced`;
        with debug registers only (none free: the callee is recorded)."""
        if breakpoints not in ("dr", "int3"):
            raise ValueError(f"breakpoints must be 'dr' or 'int3', not {breakpoints!r}")
        self.tid = tid
        self.pid = pid
        self.end = end
        self.held_slots = OTHER_BREAKPOINT_SLOTS if held_slots is None else held_slots
        """Debug registers other breakpoints hold in the thread (data breakpoints): the
        recorder uses at most the others."""
        self.mem = pt.Memory(tid)
        self.mode = breakpoints
        self.bp = None
        self.code = blocks.CodeCache(self._read_code)
        self.walker = blocks.Walker(self.code, predict_returns)
        self.ptw_probe = ptw_probe
        self.hold = hold
        self.untraced_calls = untraced_calls
        self.withheld_signals = withheld_signals
        self.withheld = 0
        """How many withheld signals reached the thread (and were not delivered)."""
        self._last_ptw = None
        self.budget_total = min(end.count if end.count is not None else max_instructions,
                                max_instructions)
        self.entry_rsp = entry_rsp
        self.return_address = return_address
        self.rec = Recording(tid)
        self.alive = True
        self.running = False
        """True between resuming the thread and seeing it stop again."""
        self.stepping = False
        """Whether the last resume was a single step (its SIGTRAP is the recorder's own)."""
        self.regs_written = False
        """Whether the recorder has set the thread's registers since its last
        stop (an INT3 stop leaves RIP one past the byte until it does)."""
        self.exit_status: pt.WaitStatus | None = None
        """How the thread ended, when the recorder saw it end."""
        self.pending_signal = 0
        """A signal the thread was stopped for while being brought to a stop for
        cleanup: to be delivered when it is let go."""
        self._trap_blocked = False
        """The thread blocks SIGTRAP (_read_trap_mask): debug registers are not run to."""
        self._visits = dict(hold.visits) if hold is not None else {}
        """The hold's addresses not visited yet."""
        self._stop_before = frozenset(end.stop_at | end.end_at.keys() | self._visits.keys())
        """end.stop_at, end.end_at and the visits: built once, and again when a visit is made,
        not at every stop (_walk_stops is read at each)."""
        self._deadline: int | None = None
        """When the window closes by time (CLOCK_MONOTONIC ns; run() sets it), and why."""
        self._deadline_reason = ""
        self._watchdog: _Watchdog | None = None
        """The run's watchdog (its ticks cut `_wait(tick=True)` short)."""
        self.stops_seen = 0
        """Stops collected (the manifest's `stops`: single steps among them)."""
        self.while_running = None
        """Called each time the thread is resumed, before its next stop is waited for: work
        that fits while the thread runs (record.py encodes the path so far: live_encoding.py).
        It must not raise, nor touch the thread."""

    # -- helpers ----------------------------------------------------------------------------

    def _read_code(self, addr: int, size: int) -> bytes:
        data = self.mem.read(addr, size)
        return self.bp.patch_read(addr, data) if self.mode == "int3" and self.bp else data

    def _read_u64(self, addr: int) -> int:
        return self.mem.read_u64(addr)

    def _write_u64(self, addr: int, value: int) -> None:
        self.mem.write(addr, value.to_bytes(8, "little"))

    def _stamp(self, regs) -> None:
        rec = self.rec
        rec.stamps.append((len(rec.ips), time.monotonic_ns()))
        if self.hold is not None:
            self.hold.at_stop(regs)
        if self.ptw_probe is not None:
            value = self.ptw_probe(regs)
            if value is not None and value != self._last_ptw:
                if rec.ptw and rec.ptw[-1][0] == len(rec.ips):
                    rec.ptw.pop()  # nothing ran since (a signal came first): one value
                rec.ptw.append((len(rec.ips), value))
                self._last_ptw = value

    def _setregs(self, regs) -> None:
        pt.setregs(self.tid, regs)
        self.regs_written = True

    def _wait(self, tick: bool = False) -> pt.WaitStatus:
        """The thread's next stop. `tick`: cut short with _Watchdog.Tick at the second of the
        watchdog's ticks in this one wait, when the thread has not stopped for a whole period
        (the callers catch it); the time the recorder spends between two waits does not
        count. Nothing but a count on the way to a stop: the wait is on every stop's path."""
        self.regs_written = False  # before the wait: a stop collected is never mistaken
        watchdog = self._watchdog
        if tick and watchdog is not None and watchdog.active:
            ticks = 0
            while (status := pt.waitpid_or_signal(self.tid)) is None:
                ticks += 1  # a signal handled (the watchdog's tick, as a rule) ended the wait
                # (at once when the window's time is up: a thread asleep in a system call
                # is interrupted within one tick of its deadline, not two)
                if ticks == 2 or (self._deadline is not None
                                  and time.monotonic_ns() >= self._deadline):
                    raise _Watchdog.Tick()
        else:
            status = pt.waitpid(self.tid)
        self.running = False
        self.stops_seen += 1
        return status

    def _cont(self, sig: int = 0) -> None:
        self.running = True
        self.stepping = False
        pt.cont(self.tid, sig)
        if self.while_running is not None:
            self.while_running()

    def _step(self, sig: int = 0) -> None:
        self.running = True
        self.stepping = True
        pt.singlestep(self.tid, sig)
        if self.while_running is not None:
            self.while_running()

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> Recording:
        rec = self.rec
        end = self.end
        rec.started_ns = time.monotonic_ns()
        deadline, self._deadline_reason = _deadline(end, rec.started_ns)
        self._deadline = deadline
        if self.mode == "int3":
            self.bp = _Int3Breakpoints(self.tid, self.mem, end.until)
        else:
            self.bp = _DebugRegisters(self.tid, end.until, self.held_slots)
            self._read_trap_mask()  # stopped inside a signal handler, say
        shadow: list[blocks.ShadowEntry] = []
        regs = pt.getregs(self.tid)
        watchdog = self._watchdog = _Watchdog(WATCHDOG_PERIOD_S)
        try:
            with watchdog:
                try:
                    self._loop(regs, shadow, deadline)
                except pt.PtraceError as exc:
                    if exc.errno != errno.ESRCH:
                        raise
                    # killed between its stop and our request (SIGKILL wakes a
                    # stopped tracee): collect how it ended
                    status = self._wait()
                    if not status.gone:
                        raise
                    self._gone(status)
            if self.alive:
                # the thread stands where the recording ended: give it the registers
                # the recorder holds (a rewound INT3 hit, a branch performed last)
                self._setregs(regs)
        finally:
            rec.ended_ns = time.monotonic_ns()
            with signals_held():
                if self.alive and self.running:
                    # left early (an exception, Ctrl-C) while the thread ran: stop it so
                    # that its breakpoints can be cleared and it can be detached
                    self._stop_for_cleanup()
                if self.alive:
                    self._settle()
                # also when the thread is gone: the perf events of its debug-register
                # slots are the recorder's own file descriptors and stay open otherwise
                # (a target killed mid-recording leaked four per recording)
                self.bp.clear()
                if self.alive and self.hold is not None:
                    self._bring_home()
                self.mem.close()
        rec.stops = self.stops_seen
        return rec

    def _finish(self, reason: str, end_ip: int | None, partial: str | None = None) -> None:
        self.rec.reason = reason
        self.rec.end_ip = end_ip
        self.rec.partial_reason = partial

    def _loop(self, regs, shadow, deadline) -> None:
        rec = self.rec
        ips = rec.ips
        end = self.end
        Kind = blocks.Kind
        pos = regs.rip
        while True:
            # -- at `pos` with `regs` exact: end conditions first --------------------------
            if len(ips) >= self.budget_total:
                return self._finish(f"recorded {len(ips)} instructions", pos,
                                    None if end.count is not None and
                                    end.count <= self.budget_total else
                                    f"stopped at the limit of {self.budget_total} instructions")
            if end.until is not None and pos == end.until:
                return self._finish(f"reached {pos:#x}", pos)
            if pos in end.stop_at:
                return self._finish(f"reached the breakpoint at {pos:#x}", pos)
            if deadline is not None and time.monotonic_ns() >= deadline:
                return self._finish(self._deadline_reason, pos)
            if pos in end.end_at:
                return self._finish(end.end_at[pos], pos)
            self._stamp(regs)
            if self._visits and pos in self._visits:
                self._visits.pop(pos)(regs)
                self._stop_before = frozenset(end.stop_at | end.end_at.keys()
                                              | self._visits.keys())
            if end.request is not None and end.request.reason is not None:
                # asked to close here (the probe may have just asked, at this stop): a sample
                # taken now says what the last instruction recorded left standing (the
                # Python line the thread has reached), and describes it
                if rec.ptw and rec.ptw[-1][0] == len(ips):
                    _, value = rec.ptw.pop()
                    if rec.ptw and rec.ptw[-1][0] == len(ips) - 1:
                        rec.ptw.pop()
                    if ips:
                        rec.ptw.append((len(ips) - 1, value))
                return self._finish(end.request.reason, pos)
            # forget calls whose frames are gone (a longjmp, a Go stack switch)
            while shadow and shadow[-1].slot is not None and shadow[-1].slot < regs.rsp:
                shadow.pop()
            ins = self.code.insn(pos)
            kind = ins.kind
            step = kind in (Kind.OTHER, Kind.UNDECODABLE)
            start = None
            if kind == Kind.SYSCALL:
                nr = regs.rax
                if nr in (SYS_EXIT, SYS_EXIT_GROUP):
                    ips.append(pos)
                    return self._finish("the target is exiting", None,
                                        "the target called exit before the end condition")
                if nr in (SYS_EXECVE, SYS_EXECVEAT):
                    return self._finish("the target calls execve", pos,
                                        "the target called execve before the end condition")
                # rt_sigreturn: the kernel restores the interrupted state; with planted
                # bytes a system call is stepped (it cannot resume on its own INT3); one
                # that changes the signal mask is stepped so that the mask is read after it
                step = nr in MASK_CHANGES or self.mode == "int3"
                start = ins.next
            elif kind == Kind.PLAIN:
                # where the trigger, a signal or a single step left us: just walk on,
                # resuming past any breakpoint armed right here
                regs.eflags |= RF
                start = pos
            elif not step:
                old_rsp = regs.rsp
                try:
                    new = blocks.perform(ins, regs, self._read_u64, self._write_u64)
                except (blocks.EmulationError, OSError):
                    step = True
                else:
                    ips.append(pos)
                    if kind == Kind.RET:
                        if end.until_return and new == self.return_address \
                                and regs.rsp == self.entry_rsp + 8 + self._stack_moved():
                            self._setregs(regs)
                            return self._finish("the trigger function returned", new)
                        top = shadow[-1] if shadow else None
                        if top is not None and (top.slot == old_rsp or
                                                (top.slot is None and top.ret == new)):
                            shadow.pop()
                    elif kind == Kind.CALL_INDIRECT:
                        if self.untraced_calls is not None and self.mode == "dr" \
                                and self.untraced_calls(new, regs):
                            ran = self._run_untraced(regs, deadline)
                            if ran == "gone":
                                return
                            if ran:
                                pos = regs.rip  # the return address: the loop goes on there
                                continue
                        shadow.append(blocks.ShadowEntry(ins.next, regs.rsp))
                    regs.eflags &= ~RF  # an armed address at the target must fire
                    pos = start = new
            if start is not None and not step and self._no_slot():
                # no debug register to run to: step the instruction (a performed branch
                # is done: the loop goes on at its target)
                if kind in (Kind.SYSCALL, Kind.PLAIN):
                    step = True
                else:
                    continue
            if start is not None and not step:
                # walk to the next instruction that needs the registers
                saved_shadow = list(shadow)
                origin = (start, regs.rsp, regs.rbp)
                armed = self.bp.armed if kind != Kind.PLAIN else set(self.bp.armed) - {pos}
                stops = self._walk_stops
                if stops:  # the walk ends before one (pos is not one: checked above)
                    armed = set(armed) | stops
                budget = self.budget_total - len(ips) - (kind == Kind.SYSCALL)
                walk = self.walker.walk(start, regs.rsp, regs.rbp, shadow, armed,
                                        min(budget, MAX_WALK))
                if kind == Kind.SYSCALL:
                    if not walk.ips:
                        # RF stays set across the system call (the kernel returns with
                        # IRET), which would hide a breakpoint right after it: step it
                        shadow[:] = saved_shadow
                        step = True
                    else:
                        ips.append(pos)
                        regs.eflags |= RF  # resume at the syscall past its own breakpoint
                elif not walk.ips and walk.stop == pos:
                    continue  # the next stop is where we are: no need to run
            if step:
                regs.eflags |= RF
                self._setregs(regs)
                ips.append(pos)
                if self._step_over(regs) is not None:
                    return
                if kind == Kind.SYSCALL and nr in MASK_CHANGES and self.mode == "dr":
                    self._read_trap_mask()
                pos = regs.rip
                continue
            try:
                self.bp.arm(walk.stop)
            except NoFreeSlot:
                # another tool took the last slot: from here every instruction is
                # stepped; the walk is undone (nothing of it ran)
                shadow[:] = saved_shadow
                if kind == Kind.SYSCALL:
                    ips.pop()
                    regs.eflags &= ~RF
                self._setregs(regs)
                continue
            restart_at = pos if kind == Kind.SYSCALL else _pending_restart(regs)
            self._setregs(regs)
            if self._run_to(walk, origin, saved_shadow, shadow, regs, deadline,
                            restart_at) is not None:
                return
            pos = regs.rip

    def _run_untraced(self, regs, deadline):
        """Run the callee an indirect call just reached (regs at its first instruction, the
        return address on the stack) unrecorded, until it returns to its caller. Returns True
        with regs at the return address, False when no debug register can be armed (nothing
        ran: the callee is recorded instead), or "gone" when the recording ended in the
        callee (asked to close, its duration spent, the thread gone)."""
        tid = self.tid
        target = regs.rip
        ret = self._read_u64(regs.rsp)
        back_rsp = regs.rsp + 8
        if self._no_slot():
            return False
        try:
            self.bp.arm_only(ret)
        except NoFreeSlot:
            return False
        rec = self.rec
        call = len(rec.ips) - 1
        rec.untraced[call] = target
        self._setregs(regs)
        self._cont()
        while True:
            # a callee that runs long (a debugger suspending the thread in its tracer, say) is
            # interrupted now and then: the window may have to close meanwhile
            status = self._next_stop()
            if status.gone:
                return self._gone(status)
            if status.event:
                # our interrupt (or a group-stop): the window closes here if it must
                request = self.end.request
                reason = request.reason if request is not None else None
                if reason is None and deadline is not None and time.monotonic_ns() >= deadline:
                    reason = self._deadline_reason
                if reason is not None:
                    pt.getregs(tid, regs)
                    self._finish(reason, target)  # the last instruction: the call into it
                    return "gone"
                self._cont()
                continue
            pt.getregs(tid, regs)
            sig = status.stop_signal
            hit = self.bp.hit(regs) if sig == SIGTRAP else None
            if hit == ret and regs.rsp == back_rsp:
                return True
            if hit is not None:
                # the return address reached by a deeper call, or another armed address: on
                regs.eflags |= RF
                self._setregs(regs)
                self._cont()
                continue
            if sig in self.withheld_signals:
                self.withheld += 1
                sig = 0
            self._cont(sig)  # a signal for the callee: delivered as without ptdebug

    def _stack_moved(self) -> int:
        """How far the hold's stack moved since the window began (a Go stack grown by copying:
        every frame at the same distance from its top), 0 without a hold."""
        return self.hold.stack_moved() if self.hold is not None else 0

    def _no_slot(self) -> bool:
        """No debug register can be run to: data breakpoints (or another tool) hold every
        slot, or the thread blocks SIGTRAP (_trap_blocked)."""
        return self.mode == "dr" and (self.bp.usable == 0 or self._trap_blocked)

    def _read_trap_mask(self) -> None:
        """Whether the thread blocks SIGTRAP now (SigBlk). A perf breakpoint's SIGTRAP is a
        signal like any other: while it is blocked the hit is reported late, where the
        thread unblocks it, past the instruction it was for; the recorder took it for a
        signal from elsewhere and delivered it, and the program died of SIGTRAP (Go's
        newosproc blocks every signal around clone: seen 2026-12-03 as a goroutine locked
        to the recorded thread made that thread start Ms). A single step's trap is forced
        past the mask, so the thread is stepped while it blocks SIGTRAP."""
        self._trap_blocked = bool(blocked_signals(self.tid) & (1 << (SIGTRAP - 1)))

    @property
    def _walk_stops(self) -> frozenset:
        """Addresses a walk ends before besides the armed ones: a debugger's breakpoints, and
        the --until address when it has no slot of its own (fewer than four free)."""
        end = self.end
        stops = self._stop_before
        if end.until is not None and self.mode == "dr" and self.bp.reserved is None:
            return stops | {end.until}
        return stops

    def _next_stop(self) -> pt.WaitStatus:
        """The running thread's next stop, a new thread it made let go meanwhile
        (_on_clone); with no stop for two watchdog ticks, the thread is interrupted to look
        where it is (the stop of that interrupt, or of what came first)."""
        while True:
            try:
                status = self._wait(tick=True)
            except _Watchdog.Tick:
                pt.interrupt(self.tid)
                status = self._wait_for_interrupt()
            if status.gone or status.event != pt.EVENT_CLONE:
                return status
            self._on_clone()
            self._cont()

    def _run_to(self, walk, origin, saved_shadow, shadow, regs, deadline, restart_at=None):
        """Continue the thread until it stops at walk.stop, handling what comes
        in between. Returns "gone" when recording must end (the reason is set)."""
        rec = self.rec
        tid = self.tid
        self._cont()
        while True:
            status = self._next_stop()
            if status.gone:
                return self._gone(status)
            pt.getregs(tid, regs)
            sig = status.stop_signal
            hit = self.bp.hit(regs) if sig == SIGTRAP and not status.event else None
            if hit is None and status.event == pt.EVENT_STOP and self._int3_trap_queued(regs):
                # the INT3 ran but our interrupt was reported before its SIGTRAP:
                # resuming reports the SIGTRAP at once (nothing runs in between)
                self._cont()
                continue
            if hit is not None and hit == walk.stop:
                rec.ips.extend(walk.ips)
                return None
            where = self._locate(walk, regs.rip)
            if where is None and restart_at is not None and regs.rip == restart_at:
                # the kernel restarted the interrupted system call (RIP rewound onto the
                # SYSCALL when resumed): it runs again from here, nothing of the walk ran
                shadow[:] = saved_shadow
                if hit is not None or status.event:
                    return None
                return self._deliver(sig, regs)
            if where == 0 and _pending_restart(regs) is not None:
                restart_at = _pending_restart(regs)
            if hit is not None and where is not None:
                # another armed address on the path: an ordinary stop there
                rec.ips.extend(walk.ips[:where])
                shadow[:] = saved_shadow
                if where:
                    self.walker.walk(*origin, shadow, frozenset(), where)
                return None
            if where is None:
                rec.ips.extend(walk.ips)
                self._finish("lost the flow", regs.rip,
                             f"the thread was found at {regs.rip:#x}, off the path the "
                             f"recorder predicted to {walk.stop:#x}")
                return "gone"
            if status.event:
                # our interrupt (or a group-stop): the thread is at ips[where]
                if deadline is not None and time.monotonic_ns() >= deadline:
                    rec.ips.extend(walk.ips[:where])
                    self._finish(self._deadline_reason, regs.rip)
                    return "gone"
                request = self.end.request
                if request is not None and request.reason is not None:
                    rec.ips.extend(walk.ips[:where])
                    self._finish(request.reason, regs.rip)
                    return "gone"
                self._cont()
                continue
            # a signal arrived on the way
            rec.ips.extend(walk.ips[:where])
            shadow[:] = saved_shadow  # rebuild the shadow stack as it was at that point
            if where:
                self.walker.walk(*origin, shadow, frozenset(), where)
            return self._deliver(sig, regs)

    def _on_clone(self) -> None:
        """The recorded thread created a thread. With planted INT3 bytes that
        thread would die on one: lift them all, let the new thread go
        (detached), and continue with debug registers, which are per thread."""
        new = pt.geteventmsg(self.tid)
        if self.mode == "int3":
            self.bp.clear()
            self.mode = "dr"
            self.bp = _DebugRegisters(self.tid, self.end.until, self.held_slots)
        self.rec.threads_created.append(new)
        self._let_new_thread_go(new)

    @staticmethod
    def _let_new_thread_go(new: int) -> None:
        while True:  # the new thread reports its first stop (PTRACE_EVENT_STOP)
            status = pt.waitpid(new)
            if status.gone or status.stopped:
                break
        if not status.gone:
            try:
                pt.detach(new)
            except pt.PtraceError:
                pass

    # -- after the window -------------------------------------------------------------------

    def _bring_home(self) -> None:
        """Give the hold back where `home` says the thread runs what was held: at once when it
        does (the usual case: the window ended in the goroutine), else after stepping the
        thread on, unrecorded, through the scheduler until it does (the window ended while
        the goroutine waited and the locked thread slept: the lock can only be given back
        by the goroutine's own thread, running it; thread_lock.py says why). Breakpoints are
        cleared by now. The stepping ends after HOME_GRACE_S (the goroutine waits for
        something that does not come): the hold is then abandoned, and says so."""
        hold = self.hold
        tid = self.tid
        try:
            regs = pt.getregs(tid)
            deadline = time.monotonic_ns() + int(HOME_GRACE_S * 1e9)
            while not hold.home(regs):
                if not self._step_unrecorded(regs, deadline):
                    if self.alive:
                        hold.abandon(f"it was waiting, not back on thread {tid} "
                                     f"{HOME_GRACE_S:g} s after the window")
                    return
            hold.release(regs)
        except pt.PtraceError as exc:
            if exc.errno != errno.ESRCH:
                hold.abandon(f"ptrace: {exc}")
            self.alive = False

    def _step_unrecorded(self, regs, deadline: int) -> bool:
        """One instruction on, not recorded (signals delivered as they come, withheld ones
        not). False when the deadline passed first (the thread is stopped again, where it
        was, a system call it slept in to be restarted by the kernel) or the thread ended."""
        tid = self.tid
        sig = 0
        while True:
            self._step(sig)
            sig = 0
            status = self._poll(deadline)
            if status is None:
                pt.interrupt(tid)
                status = self._wait_for_interrupt()
                if not status.gone:
                    pt.getregs(tid, regs)
                    return False
            if status.gone:
                self.alive = False
                self.exit_status = status
                return False
            if status.event:
                if status.event == pt.EVENT_CLONE:
                    self._let_new_thread_go(pt.geteventmsg(tid))
                continue
            pt.getregs(tid, regs)
            if status.stop_signal == SIGTRAP:
                return True
            if status.stop_signal in self.withheld_signals:
                self.withheld += 1
            else:
                sig = status.stop_signal

    def _poll(self, deadline: int) -> pt.WaitStatus | None:
        """The thread's next stop, None if none came before `deadline` (polled: no watchdog
        runs after the window; a step usually ends within microseconds, a system call it
        steps into may sleep)."""
        spins = 0
        while True:
            status = pt.waitpid(self.tid, pt.WALL | pt.WNOHANG)
            if status is not None:
                self.running = False
                return status
            if time.monotonic_ns() >= deadline:
                return None
            spins += 1
            if spins > POLL_SPINS:
                time.sleep(0.001)

    def _locate(self, walk, rip) -> int | None:
        """Index in walk.ips of the instruction at `rip` (not yet executed), or
        len(ips) when rip is the stop; None when rip is not on the path."""
        if rip == walk.stop:
            return len(walk.ips)
        try:
            return walk.ips.index(rip)
        except ValueError:
            return None

    def _deliver(self, sig: int, regs):
        """Deliver a signal that interrupted the path: with a handler installed,
        a single step with the signal stops at the handler's first instruction
        (the kernel builds the frame first), recorded as an asynchronous
        transfer; otherwise the signal goes through and the loop continues."""
        rec = self.rec
        interrupted = regs.rip
        if sig in self.withheld_signals:
            self.withheld += 1
            return None  # the loop resumes the thread without it
        if caught_signals(self.pid) & (1 << (sig - 1)):
            self._step(sig)
            rec.single_steps += 1
            status = self._wait()
            if status.gone:
                return self._gone(status)
            pt.getregs(self.tid, regs)
            rec.async_events.append((len(rec.ips), interrupted))
            if self.mode == "dr":
                self._read_trap_mask()  # a handler runs with its sa_mask blocked (Go's: all)
            return None
        self._cont(sig)
        try:
            status = self._wait(tick=True)
        except _Watchdog.Tick:
            # the signal was ignored and the thread ran on: stop it and say where it went
            pt.interrupt(self.tid)
            status = self._wait_for_interrupt()
        if status.gone:
            return self._gone(status)
        pt.getregs(self.tid, regs)
        return None if regs.rip == interrupted else self._lost(regs, interrupted)

    def _lost(self, regs, interrupted):
        self._finish("lost the flow", regs.rip,
                     f"after a signal at {interrupted:#x} the thread stopped at {regs.rip:#x}")
        return "gone"

    def _step_over(self, regs):
        """Single-step one instruction; returns None to continue, else "gone"."""
        rec = self.rec
        at = regs.rip
        self.bp.lift(at)
        self._step()
        rec.single_steps += 1
        while True:
            try:
                status = self._wait(tick=True)
            except _Watchdog.Tick:
                continue  # a blocking system call being stepped: its end ends the step
            if status.gone:
                return self._gone(status)
            if status.event:
                if status.event == pt.EVENT_CLONE:
                    self._on_clone()
                self._step()
                continue
            break
        self.bp.replant(at)
        pt.getregs(self.tid, regs)
        if status.stop_signal != SIGTRAP:
            # the instruction raised a signal (a fault) or one arrived: deliver it
            if status.stop_signal in self.withheld_signals and regs.rip != at:
                self.withheld += 1
                return None  # arrived after the step: it ran, and the signal is not delivered
            rec.ips.pop()  # a faulting instruction did not complete
            return self._deliver(status.stop_signal, regs)
        return None

    def _stop_for_cleanup(self) -> None:
        """Bring a thread left running (an exception, Ctrl-C) to a ptrace-stop.
        A signal it stopped for is kept for its release (pending_signal), a
        breakpoint hit of ours is dropped (an INT3 one noted for _settle)."""
        tid = self.tid
        try:
            self.regs_written = False
            status = pt.waitpid(tid, pt.WALL | pt.WNOHANG)  # a stop not collected yet
            if status is None and _thread_state(tid) == "t":
                # stopped already (a resume request that failed): one more look for a
                # report that raced this, else nothing to collect
                status = pt.waitpid(tid, pt.WALL | pt.WNOHANG)
                if status is None:
                    self.running = False
                    return
            if status is None:
                pt.interrupt(tid)
                status = pt.waitpid(tid)
            if status.gone:
                self.alive = False
                return
            self.running = False
            if status.event:
                return
            sig = status.stop_signal
            regs = pt.getregs(tid)
            ours = regs.rip - 1 in self.bp.armed if self.mode == "int3" else \
                regs.rip in self.bp.armed
            if sig == SIGTRAP and not ours and self.stepping:
                # the end of the recorder's single step, reported before the interrupt was
                # acted on: kept, it was delivered on release and killed the program
                # (SIGTRAP's default action; seen in CI after a SIGTERM mid-window)
                ours = traps.single_step_end(pt.getsiginfo(tid))
            if not (sig == SIGTRAP and ours):  # a hit of ours is undone by _settle
                self.pending_signal = sig
        except (pt.PtraceError, ChildProcessError):
            self.alive = False

    def _int3_trap_queued(self, regs) -> bool:
        """The thread ran a planted INT3 (RIP one past it) whose SIGTRAP is
        still queued, not yet reported."""
        return self.mode == "int3" and regs.rip - 1 in self.bp.armed and \
            bool(pending_signals(self.tid) & (1 << (SIGTRAP - 1)))

    def _settle(self) -> None:
        """Before planted bytes are restored: a thread stopped by one of them
        has its RIP one byte past it; put it back on the instruction, as if the
        byte had never been there (a SIGTRAP still queued for it is dropped when
        the thread is detached, target.Target._drain_breakpoint_traps). Decided
        from what the kernel says (the stop's siginfo, SigPnd), not from where
        the recorder's own bookkeeping was when an exception cut it short."""
        if self.mode != "int3":
            return
        try:
            regs = pt.getregs(self.tid)
            if self.regs_written or regs.rip - 1 not in self.bp.armed:
                return
            info = pt.getsiginfo(self.tid)
            stopped_by_int3 = info.si_signo == SIGTRAP and traps.int3_hit(info)
            if stopped_by_int3 or self._int3_trap_queued(regs):
                regs.rip -= 1
                self._setregs(regs)
        except pt.PtraceError as exc:
            if exc.errno != errno.ESRCH:
                raise
            self.alive = False

    def _wait_for_interrupt(self) -> pt.WaitStatus:
        while True:
            status = self._wait()
            if status.gone or status.event == pt.EVENT_STOP or status.stopped:
                return status

    def _gone(self, status: pt.WaitStatus) -> str:
        self.alive = False
        self.exit_status = status
        what = (f"exited with status {status.exit_code}" if status.exited
                else f"was killed by signal {status.term_signal}")
        self._finish(f"the target {what}", None,
                     f"the target {what} before the end condition")
        return "gone"


def _deadline(end: EndCondition, started_ns: int) -> tuple[int | None, str]:
    """(When the window closes by time, CLOCK_MONOTONIC ns, or None; the end reason then):
    the sooner of `duration_ms` (the window's own length) and `time_bound_s` (its safety
    bound)."""
    ends = []
    if end.duration_ms is not None:
        ends.append((started_ns + int(end.duration_ms * 1e6), f"recorded for {end.duration_ms:g} ms"))
    if end.time_bound_s is not None:
        ends.append((started_ns + int(end.time_bound_s * 1e9),
                     f"time bound of {end.time_bound_s:g} s reached"))
    return min(ends) if ends else (None, "")


def single_step_path(tid: int, *, count: int | None = None, until: int | None = None,
                     until_rsp: int | None = None, collapse_rep=None) -> tuple[array, str]:
    """The reference the recorder is checked and measured against: plain
    PTRACE_SINGLESTEP of every instruction from where the stopped thread
    stands, logging each RIP, until `count` instructions, or until RIP ==
    `until` (and RSP == `until_rsp` when given). `collapse_rep(ip)` says
    whether ip is a REP string instruction, whose iterations single-step as
    separate steps but are one instruction in PT. Returns (ips, why it ended)."""
    ips = array("Q")
    regs = pt.Regs()
    pt.getregs(tid, regs)
    last = None
    while True:
        rip = regs.rip
        if until is not None and rip == until and (until_rsp is None or regs.rsp == until_rsp):
            return ips, "reached the end address"
        if not (rip == last and collapse_rep is not None and collapse_rep(rip)):
            if count is not None and len(ips) >= count:
                return ips, "count"
            ips.append(rip)
        last = rip
        pt.singlestep(tid)
        status = pt.waitpid(tid)
        if status.gone:
            return ips, status.describe()
        if status.stop_signal != SIGTRAP:
            pt.singlestep(tid, status.stop_signal)
            status = pt.waitpid(tid)
            if status.gone:
                return ips, status.describe()
        pt.getregs(tid, regs)

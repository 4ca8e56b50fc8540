"""The process a recording traces: launched or attached, its threads, the
trigger that starts the recording, and letting it go cleanly.

Layer: adapter.capture (used by the stepper backend). It owns every ptrace
attachment of a recording, so that whatever goes wrong, `release()` leaves
every thread running, untraced and with its debug registers cleared. The
trigger is an execute breakpoint in a debug-register slot of every thread
(hw.exec_breakpoints; no code byte is patched, SDM Vol. 3B §17.2.4); the
first thread that reaches it becomes the recorded thread. It knows nothing
of PT or bundles.
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import threading
import time

from adapter.hw import perf, procfs, traps
from adapter.hw import ptrace as pt
from adapter.hw.exec_breakpoints import DR7_OFFSET, ExecBreakpoints
from adapter.hw.signals import alarm_ticks, signals_held

ADDR_NO_RANDOMIZE = 0x0040000  # personality(2) flag
GIVE_UP_TICK_S = 0.02
"""How often run_thread_to looks whether to give up (its timeout, the caller's stop request)."""
AT_ENTRY = 9  # auxv key of the program's entry point (getauxval(3))


class TargetError(Exception):
    """The target cannot be traced, found or resolved; the text says why and what to do."""


def _describe_seize_error(exc: pt.PtraceError, pid: int) -> str:
    if exc.errno == errno.ESRCH:
        return f"no process or thread {pid} (it is not running)"
    if exc.errno == errno.EPERM:
        tracer = 0
        try:
            tracer = pt.tracer_of(pid)
        except OSError:
            pass
        if tracer:
            return (f"not permitted to trace {pid}: it is already traced by process {tracer} "
                    "(a debugger or another recorder); detach that one first")
        return (f"not permitted to trace {pid}: run ptdebug as the process's user with "
                "kernel.yama.ptrace_scope <= 1 and the target as its descendant, or give "
                "ptdebug CAP_SYS_PTRACE (see `ptdebug doctor`)")
    return f"cannot trace {pid}: {os.strerror(exc.errno)}"


class Target:
    """The traced process. `threads` maps tid -> "stopped" | "running"."""

    def __init__(self, pid: int, launched: _Child | None):
        self.pid = pid
        self.launched = launched
        self.threads: dict[int, str] = {}
        self.triggers: dict[int, ExecBreakpoints] = {}
        """The threads with the trigger breakpoint armed (slot 0)."""
        self.exit_status: pt.WaitStatus | None = None
        self._pending: dict[int, int] = {}  # tid -> signal to deliver when it resumes
        self._ever: set[int] = set()  # every thread id we traced (to reap their exits)

    # -- getting hold of it -----------------------------------------------------------------

    @classmethod
    def launch(cls, argv: list[str], env: dict | None = None, cwd: str | None = None,
               no_aslr: bool = False, output_fd: int | None = None) -> Target:
        """Start `argv` stopped at its first instruction after execve, seized
        (so PTRACE_INTERRUPT works) and killed if ptdebug dies (EXITKILL).
        `no_aslr` starts it with address-space randomisation off
        (personality(2) ADDR_NO_RANDOMIZE), so that two runs use the same addresses.
        `output_fd`: where the program's stdout and stderr go (default: ours)."""
        # fork + exec by hand: the child stops itself before exec so that it can
        # be seized (subprocess would wait for the exec that the stop delays).
        child = os.fork()
        if child == 0:  # the child: nothing here may return into the caller's code
            try:
                if cwd is not None:
                    os.chdir(cwd)
                if output_fd is not None:
                    os.dup2(output_fd, 1)
                    os.dup2(output_fd, 2)
                if no_aslr:
                    libc = ctypes.CDLL(None, use_errno=True)
                    libc.personality(libc.personality(0xFFFFFFFF) | ADDR_NO_RANDOMIZE)
                os.kill(os.getpid(), signal.SIGSTOP)
                os.execvpe(argv[0], argv, env if env is not None else os.environ)
            finally:
                os._exit(127)
        _, status = os.waitpid(child, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            raise TargetError(f"{argv[0]!r} ended before it could be traced")
        proc = _Child(child)
        target = cls(proc.pid, proc)
        try:
            pt.seize(proc.pid, pt.O_TRACEEXEC | pt.O_TRACECLONE | pt.O_EXITKILL)
        except pt.PtraceError as exc:
            os.kill(child, signal.SIGKILL)
            proc.wait()
            raise TargetError(_describe_seize_error(exc, proc.pid)) from None
        target.threads[proc.pid] = "running"
        os.kill(proc.pid, signal.SIGCONT)
        while True:  # run to the exec stop
            st = pt.waitpid(proc.pid)
            if st.gone:
                proc.status = st.raw
                raise TargetError(f"{argv[0]!r} could not be executed "
                                  f"({st.describe()}; is it a program on PATH?)")
            if st.event == pt.EVENT_EXEC:
                target.threads[proc.pid] = "stopped"
                return target
            pt.cont(proc.pid, 0 if st.event or st.stop_signal in
                    (signal.SIGSTOP, signal.SIGCONT, signal.SIGTRAP) else st.stop_signal)

    @classmethod
    def attach(cls, pid: int | None = None, tid: int | None = None) -> Target:
        """Seize a running process (every thread, following new ones) or one
        thread, and stop what was seized."""
        if tid is not None:
            tgid = tgid_of(tid)
            target = cls(tgid, None)
            target._seize(tid, 0)
            target._interrupt_and_wait(tid)
            return target
        if not os.path.isdir(f"/proc/{pid}"):
            raise TargetError(f"no process {pid} (it is not running)")
        if tgid_of(pid) != pid:
            raise TargetError(f"{pid} is a thread of process {tgid_of(pid)}: use --tid {pid}")
        target = cls(pid, None)
        try:
            seen = set()
            while True:  # threads may start while we attach: repeat until none are new
                new = [t for t in _threads(pid) if t not in seen]
                if not new:
                    break
                for t in new:
                    seen.add(t)
                    try:
                        target._seize(t, pt.O_TRACECLONE)
                    except TargetError:
                        if t == pid or os.path.isdir(f"/proc/{pid}/task/{t}"):
                            raise
            for t in list(target.threads):
                target._interrupt_and_wait(t)
        except BaseException:
            target.release()
            raise
        return target

    def _seize(self, tid: int, options: int) -> None:
        try:
            pt.seize(tid, options)
        except pt.PtraceError as exc:
            raise TargetError(_describe_seize_error(exc, tid)) from None
        self.threads[tid] = "running"

    def _interrupt_and_wait(self, tid: int) -> pt.WaitStatus | None:
        """Stop a running traced thread; returns the stop (None if it is gone)."""
        try:
            pt.interrupt(tid)
        except pt.PtraceError:
            self.threads.pop(tid, None)
            return None
        while True:
            st = pt.waitpid(tid)
            if st.gone:
                self.threads.pop(tid, None)
                return None
            self.threads[tid] = "stopped"
            if st.event == pt.EVENT_STOP:
                return st
            # a signal-delivery stop raced the interrupt: keep the signal for later, unless it
            # is a trap of ptdebug's own breakpoints (a trigger, run_thread_to's watch): kept,
            # it would be delivered at the detach (after _drain_breakpoint_traps met a queued
            # trap) and kill the program
            self._pending[tid] = 0 if st.event or self._ours(tid, st) else st.stop_signal
            pt.cont(tid)

    # -- addresses --------------------------------------------------------------------------

    def resolve(self, spec: str) -> int:
        """An address from `spec`: a number (0x...), or a function symbol of the
        program or its libraries. For a launched program whose libraries are not
        loaded yet, it runs to the program's entry point first."""
        try:
            return int(spec, 0)
        except ValueError:
            pass
        found = self._find_symbol(spec)
        if found is None and self.launched is not None:
            self.run_to(self.entry_point())
            found = self._find_symbol(spec)
        if found is None:
            raise TargetError(f"no function named {spec!r} in process {self.pid} or the "
                              "libraries it has loaded (check the spelling; Go functions "
                              "are package.Name, e.g. main.work)")
        return found

    def _find_symbol(self, name: str) -> int | None:
        return find_symbol(self.pid, name)

    def entry_point(self) -> int:
        with open(f"/proc/{self.pid}/auxv", "rb") as f:
            data = f.read()
        for i in range(0, len(data) - 15, 16):
            key = int.from_bytes(data[i:i + 8], "little")
            if key == AT_ENTRY:
                return int.from_bytes(data[i + 8:i + 16], "little")
        raise TargetError(f"process {self.pid} has no AT_ENTRY in its auxv")

    # -- running to an address --------------------------------------------------------------

    def _set_trigger(self, tid: int, addr: int | None) -> None:
        try:
            if addr is None:
                bps = self.triggers.pop(tid, None)
                if bps is not None:
                    bps.clear()
            else:
                bps = self.triggers.setdefault(tid, ExecBreakpoints(tid))
                bps.set(0, addr)
        except pt.PtraceError as exc:
            if exc.errno != errno.ESRCH:
                raise

    def run_to(self, addr: int, timeout: float | None = None) -> int:
        """Let every thread run until one reaches `addr`; returns that thread,
        stopped there. The other threads keep running (traced). Raises
        TargetError if the process ends first or `timeout` seconds pass."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for tid, state in list(self.threads.items()):
            if state == "stopped":
                self._set_trigger(tid, addr)
                sig = self._pending.pop(tid, 0)
                pt.cont(tid, sig)
                self.threads[tid] = "running"
        try:
            while True:
                st = pt.waitpid(-1, pt.WALL | pt.WNOHANG)
                if st is None:
                    if deadline is not None and time.monotonic() > deadline:
                        raise TargetError(f"no thread reached {addr:#x} within {timeout:g} s"
                                          f"{self._whereabouts()}")
                    time.sleep(0.001)
                    continue
                tid = st.tid
                if st.gone:
                    self.threads.pop(tid, None)
                    if tid == self.pid or not self.threads:
                        self.exit_status = st
                        self.threads.clear()
                        raise TargetError(f"the target ended before reaching {addr:#x} "
                                          f"({st.describe().replace(f'thread {tid}', 'it')})")
                    continue
                if tid not in self.threads:  # a new thread, reported before its creator's event
                    self.threads[tid] = "stopped"
                    self._set_trigger(tid, addr)
                    pt.cont(tid)
                    self.threads[tid] = "running"
                    continue
                if st.event == pt.EVENT_CLONE:
                    new = pt.geteventmsg(tid)
                    pt.cont(tid)
                    if new not in self.threads:
                        self.threads[new] = "new"
                    continue
                if st.event == pt.EVENT_STOP and self.threads.get(tid) == "new":
                    self._set_trigger(tid, addr)
                    pt.cont(tid)
                    self.threads[tid] = "running"
                    continue
                if st.event:
                    pt.cont(tid)
                    continue
                sig = st.stop_signal
                if sig == signal.SIGTRAP and pt.getregs(tid).rip == addr:
                    self.threads[tid] = "stopped"
                    self._set_trigger(tid, None)
                    return tid
                pt.cont(tid, sig)
        finally:
            self._disarm_others()

    def run_thread_to(self, tid: int, watched: int, arrived, *, what: str,
                      timeout: float | None = None, stop_asked=lambda: None,
                      size: int = 8, clock=time.monotonic) -> pt.Regs:
        """Let thread `tid` (stopped) run on its own until `arrived(regs)` is true; returns its
        registers, the thread stopped there. `arrived` is asked after each write to the `size`
        bytes at `watched` (a perf data breakpoint; the thread runs at full speed between
        them). Signals of the program's are delivered to the thread. Raises
        TargetError naming `what` ("score (service.py:30)") when the thread ends, `timeout`
        passes on `clock` (EndRequest.wait_clock: it stands still while the user holds the
        program) or `stop_asked()` returns a reason; the thread is stopped (and traced) then.
        OSError when the data breakpoint cannot be armed (the four debug registers are taken).

        Each write stops the thread for as long as the recorder takes to look (while it may
        hold a lock the program's other threads wait for: CPython's GIL), so the wait for the
        stop blocks in waitpid; a SIGALRM tick (main thread only) checks the timeout and
        `stop_asked` and interrupts the thread to give up."""
        given_up: list[str] = []
        deadline = None if timeout is None else clock() + timeout

        def give_up_if_asked(*_) -> None:
            why = stop_asked()
            if why is None and deadline is not None and clock() > deadline:
                why = f"the thread did not come to {what} within {timeout:g} s"
            elif why is not None:
                why = f"{why}, before the thread ran {what}"
            if why is not None and not given_up:
                given_up.append(why)
                try:  # (the tracer thread: this handler runs on it) -> an event stop
                    pt.interrupt(tid)
                except pt.PtraceError:
                    pass

        ticking = threading.current_thread() is threading.main_thread()
        fd = None
        sig = 0
        ticks = contextlib.ExitStack()  # the SIGALRM ticks, once they are set up
        try:
            sig = self._pending.pop(tid, 0)
            # the event and its descriptor together: a Ctrl-C between the two left the write
            # trap armed on a thread let go, which then died of SIGTRAP (hw/signals.py)
            with signals_held():
                fd = perf.perf_event_open(perf.write_trap_attr(watched, size), tid)
            if ticking:
                ticks.enter_context(alarm_ticks(GIVE_UP_TICK_S, give_up_if_asked))
            while True:
                pt.cont(tid, sig)
                self.threads[tid] = "running"
                sig = 0
                st = pt.waitpid(tid) if ticking else self._poll_stop(tid, give_up_if_asked)
                if st.gone:
                    self.threads.pop(tid, None)
                    raise TargetError(f"the thread ended before it ran {what} "
                                      f"({st.describe().replace(f'thread {tid}', 'it')})")
                self.threads[tid] = "stopped"
                if given_up:
                    if not st.event:
                        sig = st.stop_signal if not self._own_trap(tid, watched) else 0
                    raise TargetError(given_up[0])
                if st.event:
                    continue  # a group-stop: resume as it was
                if st.stop_signal != signal.SIGTRAP or not self._own_trap(tid, watched):
                    sig = st.stop_signal  # the program's: delivered as it resumes
                    continue
                regs = pt.getregs(tid)
                if arrived(regs):
                    return regs
        finally:
            ticks.close()
            if fd is not None:
                os.close(fd)
            if sig:
                self._pending[tid] = sig

    @staticmethod
    def _poll_stop(tid: int, check) -> pt.WaitStatus:
        """The next stop of `tid`, polled (off the main thread, where no SIGALRM comes):
        `check()` between polls."""
        while True:
            st = pt.waitpid(tid, pt.WALL | pt.WNOHANG)
            if st is not None:
                return st
            check()
            time.sleep(0.0002)

    @staticmethod
    def _ours(tid: int, st: pt.WaitStatus) -> bool:
        """Whether `tid`'s signal-delivery stop `st` is a SIGTRAP of a breakpoint ptdebug armed
        on it (hw/traps.py says which are)."""
        if st.stop_signal != signal.SIGTRAP:
            return False
        return traps.breakpoint_hit_of_ours(pt.getsiginfo(tid))

    @staticmethod
    def _own_trap(tid: int, watched: int) -> bool:
        """Whether the SIGTRAP `tid` stopped with is run_thread_to's data breakpoint (a
        recorder's perf trap whose si_addr is the watched address). Another perf trap (a
        data breakpoint of the program's debugger: adapter/features/writer_trap.py) or a
        trap of the program's own is the program's, and delivered."""
        info = pt.getsiginfo(tid)
        return traps.recorders_perf_trap(info) and info.si_addr == watched

    def _whereabouts(self) -> str:
        """Where the traced threads are, for a message ("; thread 12 at 0x4a5b6c")."""
        places = []
        for tid in list(self.threads)[:4]:
            stop = self._interrupt_and_wait(tid) if self.threads[tid] == "running" else True
            if stop is not None:
                try:
                    places.append(f"thread {tid} at {pt.getregs(tid).rip:#x}")
                except pt.PtraceError:
                    pass
        return f" ({', '.join(places)})" if places else ""

    def _disarm_others(self) -> None:
        """Clear the trigger breakpoint in every thread still armed (stopping
        running ones for the moment it takes)."""
        for tid in list(self.triggers):
            if tid not in self.threads:
                self.triggers.pop(tid).clear()  # gone: only the fd is left to close
                continue
            if self.threads[tid] == "running":
                if self._interrupt_and_wait(tid) is None:
                    self.triggers.pop(tid).clear()
                    continue
                self._set_trigger(tid, None)
                pt.cont(tid, self._pending.pop(tid, 0))
                self.threads[tid] = "running"
            else:
                self._set_trigger(tid, None)

    # -- letting go -------------------------------------------------------------------------

    def keep_signal(self, tid: int, sig: int) -> None:
        """A signal the stopped thread `tid` was stopped for: delivered when it is let go."""
        self._pending[tid] = sig

    def keep_only(self, keep: int, follow_clones: bool = False) -> None:
        """Detach every thread but `keep`, which stays stopped and traced; its
        future threads are reported (to be let go) only with `follow_clones`."""
        for tid in list(self.threads):
            if tid != keep:
                self._detach(tid)
        pt.setoptions(keep, (pt.O_EXITKILL if self.launched else 0) |
                      (pt.O_TRACECLONE if follow_clones else 0))

    def _detach(self, tid: int) -> None:
        self._ever.add(tid)
        state = self.threads.get(tid)
        if state in ("running", "new") and self._interrupt_and_wait(tid) is None:
            return
        try:
            self._set_trigger(tid, None)
            # DR7 = 0 disables anything armed through ptrace; the address
            # registers are not written: each write would make the kernel hold
            # that slot until the thread exits (hw/exec_breakpoints.py)
            pt.pokeuser(tid, DR7_OFFSET, 0)
            self._drain_breakpoint_traps(tid)
            pt.detach(tid, self._pending.pop(tid, 0))
        except pt.PtraceError as exc:
            if exc.errno != errno.ESRCH:
                raise
        self.threads.pop(tid, None)
        self.triggers.pop(tid, None)

    def _drain_breakpoint_traps(self, tid: int) -> None:
        """A breakpoint hit whose SIGTRAP is still queued (the thread was stopped
        by our interrupt first) would kill the thread once detached: let it
        reach its signal-delivery stop, where PTRACE_DETACH discards it.

        A SIGTRAP the thread blocks (a perf trap obeys the mask: one that came while the
        program ran its own SIGTRAP handler, as ptdebug's data breakpoints do while
        debugpy holds the thread in it) is never delivered while blocked, and waiting
        for it hung the recorder: the mask is lifted for that one stop (PTRACE_SETSIGMASK)
        and put back. A trap that is not ptdebug's recorder's (a perf trap with a
        sig_data: the program's debugger's data breakpoint) is delivered at detach."""
        trap = 1 << (signal.SIGTRAP - 1)
        for _ in range(4):
            if not _pending_signals(tid) & trap:
                return
            mask = pt.getsigmask(tid)
            if mask & trap:
                pt.setsigmask(tid, mask & ~trap)
            try:
                # a signal in hand goes with it (delivered first: its handler's frame
                # keeps the interrupted RIP; the queued SIGTRAP then stops at once)
                pt.cont(tid, self._pending.pop(tid, 0))
                st = pt.waitpid(tid)
                if st.gone:
                    return
                if not st.event and st.stop_signal == signal.SIGTRAP:
                    info = pt.getsiginfo(tid)
                    if mask & trap and traps.programs_perf_trap(info):
                        self._pending[tid] = signal.SIGTRAP  # the program's own
                    return  # in its signal-delivery stop: PTRACE_DETACH with 0 drops it
                if not st.event:
                    self._pending[tid] = st.stop_signal  # another signal: delivered at detach
            finally:
                if mask & trap and tid in self.threads:
                    try:
                        pt.setsigmask(tid, mask)
                    except pt.PtraceError:
                        pass

    def release(self) -> None:
        """Every traced thread: debug registers cleared, detached, running. That
        includes threads the kernel attached for us (PTRACE_O_TRACECLONE) that
        were created after we last looked."""
        me = os.getpid()
        for _ in range(50):
            for tid in list(self.threads):
                try:
                    self._detach(tid)
                except pt.PtraceError:
                    self.threads.pop(tid, None)
            try:
                unseen = [t for t in pt.threads_of(self.pid) if _tracer(t) == me]
            except OSError:
                unseen = []
            if not unseen:
                break
            for tid in unseen:
                self.threads[tid] = "new"
                self._ever.add(tid)
        # reap traced threads that died meanwhile (their exits are reported to us)
        for tid in sorted(self._ever):
            try:
                st = pt.waitpid(tid, pt.WALL | pt.WNOHANG)
            except ChildProcessError:
                continue
            if st is not None and self.launched is not None and tid == self.launched.pid \
                    and st.gone:
                self.launched.status = st.raw   # keep the program's exit status

    def wait_launched(self, timeout: float | None = None) -> int | None:
        """For a launched program, wait for it to end; its exit code (or -signal)."""
        if self.launched is None:
            return None
        return self.launched.wait(timeout)


class _Child:
    """A launched program, reaped by waitpid(2) (it is our child)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.status: int | None = None

    def wait(self, timeout: float | None = None) -> int | None:
        """Exit code (or -signal) once it has ended; None on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.status is None:
            try:
                pid, status = os.waitpid(self.pid, 0 if deadline is None else os.WNOHANG)
            except ChildProcessError:
                return None
            if pid and (os.WIFEXITED(status) or os.WIFSIGNALED(status)):
                self.status = status
            elif deadline is not None:
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.005)
        return os.waitstatus_to_exitcode(self.status)


def _tracer(tid: int) -> int:
    try:
        return pt.tracer_of(tid)
    except OSError:
        return 0


def _pending_signals(tid: int) -> int:
    """SigPnd of /proc/TID/status: signals queued for this thread."""
    try:
        return procfs.status(tid).mask("SigPnd")
    except OSError:
        return 0


def _threads(pid: int) -> list[int]:
    try:
        return pt.threads_of(pid)
    except FileNotFoundError:
        raise TargetError(f"no process {pid} (it is not running)") from None


def find_symbol(pid: int, name: str) -> int | None:
    """The address of function `name` in process `pid`'s program, libraries or perf map."""
    from pt_decoder.image import Image
    found = Image.from_process(pid, perf_map=True).find_symbol(name)
    return None if found is None else found[0]


def tgid_of(tid: int) -> int:
    """The process (thread group) of thread `tid`. Raises TargetError when it is not running."""
    try:
        tgid = procfs.status(tid).tgid
    except FileNotFoundError:
        raise TargetError(f"no process or thread {tid} (it is not running)") from None
    if tgid is None:
        raise TargetError(f"cannot read /proc/{tid}/status")
    return tgid

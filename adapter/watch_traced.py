"""The ptrace mechanism of the watchpoint feature: DR0-DR7 of threads ptdebug traces.

Role: when ptdebug is itself the ptrace tracer (the stepper, or `ptdebug watch
--mechanism ptrace`), watches go straight into the debug registers with
PTRACE_POKEUSER at offsetof(struct user, u_debugreg), and a hit stops the
thread that made it (SIGTRAP; DR6 says which register, SDM Vol. 3B §17.2.3),
so the watched bytes are read while it is held. `DebugRegisterWatcher` is the
register side for any tracer; `TracedWatchSession` is a tracer of its own.

Layer: adapter feature, beside adapter.watchpoints, whose policy (validation,
register allocation, Hit) it shares. Uses adapter.hw.ptrace and
adapter.hw.debugregs; knows nothing of perf, DAP or the other features.
"""
from __future__ import annotations

import contextlib
import errno
import os
import signal
import struct
import time

from adapter.hw import debugregs, ptrace
from adapter.watchpoints import (
    DR_ACCESS,
    Access,
    Hit,
    RegisterSlots,
    Watch,
    WatchError,
    WatchRequest,
    check_mapped,
    live_threads,
    open_memory,
    plan,
    read_watched,
    require_process,
    watch_error_from_os,
)

_DR7_OFFSET = ptrace.DEBUGREG_OFFSET + 7 * 8
_DR6_OFFSET = ptrace.DEBUGREG_OFFSET + 6 * 8


class DebugRegisterWatcher:
    """The same watches written into DR0-DR3/DR7 of threads ptdebug traces (stop at hit).

    Every call that touches a thread's registers needs that thread in a
    ptrace-stop; the tracer that owns the stops (TracedWatchSession, or the
    stepper) calls `apply(tid)` on each thread after a change and on each new
    thread (Linux clears a clone child's debug registers). Registers go
    through PTRACE_POKEUSER at offsetof(struct user, u_debugreg): Linux turns
    them into the same hw_breakpoint slots perf uses, so a fifth is refused.
    """

    def __init__(self, pid: int):
        require_process(pid)
        self.pid = pid
        self.registers = RegisterSlots()
        self._mem_fd = open_memory(pid)

    def add(self, request: WatchRequest, stopped_tids: list[int]) -> Watch:
        """Arm `request` on these stopped threads; WatchError and nothing changed if it cannot be."""
        pieces = plan(request)
        check_mapped(self.pid, request.address, request.length, request.access)
        watch = self.registers.reserve(request, pieces)
        done = []
        try:
            for tid in stopped_tids:
                done.append(tid)
                self.apply(tid)
        except (OSError, debugregs.DebugRegisterError) as exc:
            self.registers.release(watch)
            for tid in done:
                try:
                    self.apply(tid)
                except OSError:
                    pass
            if isinstance(exc, OSError):
                raise watch_error_from_os(exc, self.pid, request, "") from None
            raise WatchError("bad_length", str(exc)) from None
        watch.previous = read_watched(self._mem_fd, watch) if request.access != Access.EXECUTE else None
        return watch

    def remove(self, watch: Watch, stopped_tids: list[int]) -> None:
        self.registers.release(watch)
        for tid in stopped_tids:
            self.apply(tid)

    def apply(self, tid: int) -> None:
        """Write every armed slot into thread `tid` (stopped): DR7 off, addresses, DR7 on.

        DR7 is cleared first because Linux re-validates an enabled register's
        length and alignment when its address changes.
        """
        slots = [debugregs.Slot(index, address, length, DR_ACCESS[watch.request.access])
                 for index, watch, address, length in self.registers.slots()]
        ptrace.pokeuser(tid, _DR7_OFFSET, 0)
        for slot in slots:
            ptrace.pokeuser(tid, ptrace.DEBUGREG_OFFSET + 8 * slot.index, slot.address)
        ptrace.pokeuser(tid, _DR7_OFFSET, debugregs.encode_dr7(slots))

    def clear(self, tid: int) -> None:
        """Disable every register of `tid` (stopped)."""
        ptrace.pokeuser(tid, _DR7_OFFSET, 0)

    def hit_at_stop(self, tid: int) -> Hit | None:
        """The Hit if thread `tid`'s SIGTRAP stop came from one of our registers, else None.

        DR6's B0-B3 say which register fired (SDM §17.2.3); Linux shows ptrace
        users a virtual DR6 holding only their own registers' bits. It is
        cleared afterwards (the processor never clears it, §17.2.3).
        """
        dr6 = ptrace.peekuser(tid, _DR6_OFFSET)
        slots = {index: (watch, address) for index, watch, address, _ in self.registers.slots()}
        fired = [i for i in debugregs.dr6_triggered(dr6) if i in slots]
        if not fired:
            return None
        ptrace.pokeuser(tid, _DR6_OFFSET, 0)
        watch, address = slots[fired[0]]
        regs = ptrace.getregs(tid).as_dict()
        old, new = None, None
        if watch.request.access != Access.EXECUTE:
            old, new = watch.previous, read_watched(self._mem_fd, watch)
            watch.previous = new
        chain = _frame_pointer_chain(self._mem_fd, regs["rip"], regs["rbp"])
        return Hit(watch, tid, self.pid, regs["rip"], time.clock_gettime_ns(time.CLOCK_MONOTONIC),
                   address, regs, chain, old, new, exact=True)

    def take_stale_trap(self, tid: int) -> bool:
        """Whether `tid` has a trap of ours that no current watch claims (DR6 B0-B3 set:
        Linux's virtual DR6 holds only this tracer's bits), clearing DR6 if so. Such a trap
        belongs to a watch removed since it fired; its SIGTRAP must never reach the target,
        whose default action for it is to die."""
        try:
            dr6 = ptrace.peekuser(tid, _DR6_OFFSET)
        except ptrace.PtraceError:
            return False
        if not debugregs.dr6_triggered(dr6):
            return False
        ptrace.pokeuser(tid, _DR6_OFFSET, 0)
        return True

    def close(self) -> None:
        self.registers.watches.clear()
        if self._mem_fd >= 0:
            os.close(self._mem_fd)
            self._mem_fd = -1


def _frame_pointer_chain(mem_fd: int, ip: int, rbp: int, limit: int = 64) -> tuple[int, ...]:
    """IP then the return addresses found by following saved frame pointers, as perf's user
    callchain does; stops at the first frame that does not look like one."""
    chain = [ip]
    for _ in range(limit):
        if rbp == 0 or rbp % 8:
            break
        try:
            frame = os.pread(mem_fd, 16, rbp)
        except OSError:
            break
        if len(frame) < 16:
            break
        next_rbp, ret = struct.unpack("<QQ", frame)
        if ret == 0:
            break
        chain.append(ret)
        if next_rbp <= rbp:  # the stack grows down: a caller's frame is always above
            break
        rbp = next_rbp
    return tuple(chain)


class ProcessExited(Exception):
    """The traced process ended while a TracedWatchSession waited."""


class TracedWatchSession:
    """ptdebug as the tracer of every thread of `pid`, with DebugRegisterWatcher watches.

    A hit stops the thread that hit (the others run on) until `resume(hit)`.
    New threads are attached by PTRACE_O_TRACECLONE and armed at their first
    stop. `close()` stops everything, clears the registers and detaches: the
    target runs on as if never traced.
    """

    def __init__(self, pid: int):
        require_process(pid)
        self.pid = pid
        self.watcher = DebugRegisterWatcher(pid)
        self.threads: set[int] = set()
        self._running: set[int] = set()
        self._new: set[int] = set()
        try:
            self._attach_all()
        except BaseException:
            self.close()
            raise

    def _attach_all(self) -> None:
        tried: set[int] = set()  # a thread that exits stays listed a moment: try it once
        while True:
            fresh = [t for t in live_threads(self.pid) if t not in tried]
            if not fresh:
                return
            tried.update(fresh)
            for tid in fresh:
                try:
                    ptrace.seize(tid, ptrace.O_TRACECLONE)
                except ptrace.PtraceError as exc:
                    if exc.errno == errno.ESRCH:
                        continue
                    if exc.errno == errno.EPERM:
                        tracer = ptrace.tracer_of(tid)
                        if tracer:
                            raise WatchError("traced", f"process {self.pid} is already traced by "
                                             f"process {tracer}; use the perf mechanism") from None
                        raise WatchError("permission", f"permission denied: cannot ptrace process "
                                         f"{self.pid} (same user, or root)") from None
                    raise
                self.threads.add(tid)
                ptrace.interrupt(tid)
                self._wait_stop(tid)

    def _wait_stop(self, tid: int) -> None:
        status = ptrace.waitpid(tid, ptrace.WALL)
        if status.gone:
            self.threads.discard(tid)

    def add(self, request: WatchRequest) -> Watch:
        """Arm on every thread (each is stopped for the pokes, then resumed as it was)."""
        with self._all_stopped():
            return self.watcher.add(request, sorted(self.threads))

    def remove(self, watch: Watch) -> None:
        with self._all_stopped():
            self.watcher.remove(watch, sorted(self.threads))

    @contextlib.contextmanager
    def _all_stopped(self, resume: bool = True):
        """Every running thread interrupted and in a ptrace-stop for the `with` body,
        then (with `resume`) let go again."""
        was_running = sorted(self._running)
        for tid in was_running:
            try:
                ptrace.interrupt(tid)
            except ptrace.PtraceError:
                pass  # exited meanwhile: its exit is reaped below
        for tid in was_running:
            self._drain_until_stopped(tid)
        try:
            yield
        finally:
            if resume:
                for tid in was_running:
                    if tid in self.threads:
                        self._cont(tid)

    def _swallow_pending_trap(self, tid: int) -> None:
        """A hit that fired just before our interrupt: the kernel reported the interrupt
        stop first (job-control traps come before queued signals) and the hit's SIGTRAP is
        still queued. Let the thread reach that signal's stop (no user code runs before a
        queued signal is dequeued) so that detaching drops it."""
        deliver = 0
        for _ in range(8):
            try:
                ptrace.cont(tid, deliver)
                status = ptrace.waitpid(tid, ptrace.WALL)
            except (ptrace.PtraceError, ChildProcessError):
                return
            if status.gone or (status.stop_signal == signal.SIGTRAP and not status.event):
                return
            deliver = 0 if status.event else status.stop_signal  # another signal: pass it on

    def _drain_until_stopped(self, tid: int) -> None:
        """Wait until `tid` is in a ptrace-stop. A signal met first is passed on (the
        interrupt stop follows); a hit met first is dropped, since the watches are
        being changed or removed."""
        while True:
            status = ptrace.waitpid(tid, ptrace.WALL)
            self._running.discard(tid)
            if status.gone:
                self.threads.discard(tid)
                return
            if status.event == ptrace.EVENT_STOP:
                return
            if status.event == ptrace.EVENT_CLONE:
                child = ptrace.geteventmsg(tid)
                if child not in self.threads:
                    self._new.add(child)
                return
            if status.stop_signal == signal.SIGTRAP and self.watcher.hit_at_stop(tid) is not None:
                return
            ptrace.cont(tid, status.stop_signal)  # pass the signal on; the interrupt follows

    def start(self) -> None:
        """Let every stopped thread run (after the first add)."""
        for tid in sorted(self.threads - self._running):
            self._cont(tid)

    def _cont(self, tid: int, sig: int = 0) -> None:
        try:
            ptrace.cont(tid, sig)
            self._running.add(tid)
        except ptrace.PtraceError as exc:
            if exc.errno != errno.ESRCH:
                raise
            self.threads.discard(tid)

    def wait_hit(self, wake_signals: frozenset[int] = frozenset()) -> Hit | None:
        """Block until a watch fires; the hitting thread stays stopped until `resume(hit)`.

        With `wake_signals` (which the caller keeps blocked, with SIGCHLD, through
        pthread_sigmask), the wait is sigwaitinfo(2) on them and SIGCHLD, which the
        kernel sends the tracer at every tracee stop: one of them arriving returns
        None, at a point where every stop reaped so far is accounted for. (A
        signal handler raising out of waitpid could lose a stop just reaped and
        leave that thread stopped.) Raises ProcessExited when the last thread is gone.
        """
        waiting_for = frozenset(wake_signals) | {signal.SIGCHLD}
        while True:
            if not self.threads:
                raise ProcessExited(f"process {self.pid} exited")
            if not wake_signals:
                status = ptrace.waitpid(-1, ptrace.WALL)
            else:
                status = ptrace.waitpid(-1, ptrace.WALL | ptrace.WNOHANG)
                if status is None:
                    info = signal.sigwaitinfo(waiting_for)
                    if info.si_signo != signal.SIGCHLD:
                        return None
                    continue
            tid = status.tid
            if tid not in self.threads and tid not in self._new:
                if status.stopped and status.event == ptrace.EVENT_STOP:
                    self._new.add(tid)  # a new thread's first stop can come before the CLONE event
                else:
                    continue
            self._running.discard(tid)
            if status.gone:
                self.threads.discard(tid)
                self._new.discard(tid)
                continue
            if status.event == ptrace.EVENT_CLONE:
                child = ptrace.geteventmsg(tid)
                if child not in self.threads:  # its first stop may have come already
                    self._new.add(child)
                self._cont(tid)
            elif tid in self._new and status.event == ptrace.EVENT_STOP:
                self._new.discard(tid)
                self.threads.add(tid)
                self.watcher.apply(tid)
                self._cont(tid)
            elif status.event == ptrace.EVENT_STOP and status.stop_signal != signal.SIGTRAP:
                # A group-stop (SIGSTOP, SIGTSTP...): the thread stays stopped for job
                # control, as it would untraced, and is told to us when continued.
                ptrace.listen(tid)
                self._running.add(tid)
            elif status.event == ptrace.EVENT_STOP:
                self._cont(tid)  # a stray interrupt stop: keep running
            elif status.stop_signal == signal.SIGTRAP:
                hit = self.watcher.hit_at_stop(tid)
                if hit is not None:
                    return hit
                # ours but stale (its watch was removed meanwhile): drop it; else the
                # target's own SIGTRAP (int3 in its code...), passed on
                self._cont(tid, 0 if self.watcher.take_stale_trap(tid) else signal.SIGTRAP)
            else:
                self._cont(tid, status.stop_signal)

    def resume(self, hit: Hit) -> None:
        if hit.tid in self.threads:
            self._cont(hit.tid)

    def close(self) -> None:
        """Stop every thread, clear its debug registers and detach it."""
        try:
            with self._all_stopped(resume=False):
                for tid in sorted(self.threads):
                    trap_pending = self.watcher.take_stale_trap(tid)
                    try:
                        self.watcher.clear(tid)
                    except ptrace.PtraceError:
                        pass
                    if trap_pending:
                        self._swallow_pending_trap(tid)
                    try:
                        ptrace.detach(tid)
                    except ptrace.PtraceError:
                        pass
                self.threads.clear()
            for tid in sorted(self._new):  # attached by TRACECLONE, its first stop not yet seen
                self._new.discard(tid)
                try:
                    status = ptrace.waitpid(tid, ptrace.WALL)
                except ChildProcessError:
                    continue  # exited and reaped already
                if not status.gone:
                    try:
                        ptrace.detach(tid)
                    except ptrace.PtraceError:
                        pass
        finally:
            self.watcher.close()

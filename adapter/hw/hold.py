"""Every thread of a process held in a ptrace stop, and let go again: the one mechanism for
the places that must stop a whole process for a moment (arming data breakpoints without a
thread cloned in between, adapter/watchpoints.py; putting back a dead debugger's INT3 bytes,
adapter/hw/left_breakpoints.py).

PTRACE_SEIZE sends nothing to the target; PTRACE_INTERRUPT stops a thread at its next chance
(a blocking system call is restarted transparently); PTRACE_DETACH lets it go, delivering the
signal it was stopped for when that was a signal-delivery stop (ptrace(2)). /proc/PID/task is
read again until every listed thread is held, so no thread can be cloned meanwhile.

Layer: adapter.hw. Knows nothing of what the caller does with the held threads.
"""
from __future__ import annotations

import errno

from adapter.hw import ptrace as pt


class TracedElsewhere(Exception):
    """A thread of the process has another tracer (a debugger, a recorder): it cannot be held,
    and nothing is."""


def hold_all(pid: int) -> dict[int, pt.WaitStatus | None]:
    """Seize and interrupt every thread of `pid`; tid -> the stop it reported (an interrupt
    stop, a group stop, or a signal-delivery stop that came first). A thread that exits stays
    listed a moment: each is tried once. Raises TracedElsewhere, or the error met, with every
    thread it had held let go; FileNotFoundError when there is no such process."""
    held: dict[int, pt.WaitStatus | None] = {}
    tried: set[int] = set()
    seized: list[int] = []  # this pass's, interrupted and not waited for yet
    try:
        while True:
            fresh = [tid for tid in pt.threads_of(pid) if tid not in tried]
            if not fresh:
                return held
            tried.update(fresh)
            seized = []
            for tid in fresh:
                try:
                    pt.seize(tid)
                except pt.PtraceError as exc:
                    if exc.errno == errno.ESRCH:
                        continue  # it ended meanwhile
                    if exc.errno == errno.EPERM and pt.tracer_of(tid) != 0:
                        raise TracedElsewhere(f"thread {tid} has another tracer") from exc
                    raise
                seized.append(tid)
                try:
                    pt.interrupt(tid)
                except pt.PtraceError as exc:
                    if exc.errno != errno.ESRCH:
                        raise
                    seized.remove(tid)  # it ended between the two calls
            for tid in seized:
                _collect_stop(tid, held)
            seized = []
    except BaseException:
        # Threads seized in this pass and not yet waited for stop a moment later, traced by
        # this process: collect their stops so that they are let go with the rest. Left out,
        # they stayed stopped, traced by ptdebug, for good: a data breakpoint armed while a
        # record window traced one thread froze every thread seized before it in the same
        # pass, pydevd's among them, and debugpy answered nothing more (the DAP fuzzer, seed
        # 17391865).
        for tid in seized:
            if tid not in held:
                try:
                    pt.interrupt(tid)  # again, in case the first was not sent
                except pt.PtraceError:
                    pass
                _collect_stop(tid, held)
        let_go(held)
        raise


def _collect_stop(tid: int, held: dict[int, pt.WaitStatus | None]) -> None:
    try:
        status = pt.waitpid(tid, pt.WALL)
    except (pt.PtraceError, ChildProcessError):
        return  # it exited
    if status is not None and not status.gone:
        held[tid] = status


def let_go(held: dict[int, pt.WaitStatus | None]) -> None:
    """Detach every held thread, delivering the signal of a signal-delivery stop (an event
    stop, PTRACE_EVENT_STOP, carries none; None: nothing to deliver)."""
    for tid, status in held.items():
        deliver = 0
        if status is not None and status.stopped and not status.event:
            deliver = status.stop_signal
        try:
            pt.detach(tid, deliver)
        except pt.PtraceError:
            pass  # it ended meanwhile

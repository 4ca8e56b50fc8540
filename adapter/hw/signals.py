"""SIGINT and SIGTERM held off while ptdebug changes a target's state; SIGALRM ticks that give
back the alarm they borrowed.

Role: `alarm_ticks`, the one way ptdebug borrows SIGALRM (the recorder's watchdog, the Python
line gate); `interrupts_noted`, an interrupt that reaches the recorder even when the
KeyboardInterrupt it raises is swallowed; `signals_held`, for the few steps that must not be cut
in two by Ctrl-C, SIGTERM or the adapter stopping a recorder (each raises KeyboardInterrupt in
the recorder): putting a target back (release, detach), and opening a breakpoint event together
with keeping its file descriptor. A perf breakpoint opened with SIGTRAP on the thread and lost
to an interrupt before its descriptor was kept stays armed while the recorder cleans up: the
thread, let go, hit it with no tracer and died of SIGTRAP (CI ci11 and stop 23;
tests/live/test_line_window.py). The signal waits, and its handler runs as the block ends.

Why handlers and not only a signal mask: a mask holds a signal off one thread, but kill() sends
SIGINT to the process, and the kernel hands it to any thread that does not block it (the
adapter's reader threads, a test run's leftovers). Python's C-level handler then runs there and
the main thread raises KeyboardInterrupt at its next check, inside the block (stop 23's CI).
Python runs signal handlers only on the main thread, so there the block swaps in a handler that
notes the signal, and raises what it noted once the block is over; the mask still covers a
signal sent to the thread itself. Off the main thread no handler runs, so the mask is enough.

Layer: adapter.hw, mechanism only; knows nothing of what is recorded.
"""
from __future__ import annotations

import contextlib
import signal
import threading
import time

HELD = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM wait while the block runs (a second Ctrl-C must not cut short
    putting the target back); the handler each would have run runs after it."""
    noted: list[int] = []
    replaced: dict[int, object] = {}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        # set up inside the try: a signal handled as a handler is swapped (signal.signal runs
        # the pending ones) leaves nothing swapped behind
        if threading.current_thread() is threading.main_thread():
            for signum in HELD:
                handler = signal.getsignal(signum)
                if handler is None:  # installed outside Python: cannot be put back, left alone
                    continue
                replaced[signum] = handler
                signal.signal(signum, lambda received, _frame: noted.append(received))
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)  # a masked one is handled here
        for signum, handler in replaced.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(noted):
            signal.raise_signal(signum)


@contextlib.contextmanager
def interrupts_noted(on_interrupt):
    """While the block runs (main thread only), SIGINT and SIGTERM also call
    `on_interrupt(signum)` before the handler each had (which raises KeyboardInterrupt). Python runs that handler
    in whatever Python code runs at the moment, and a KeyboardInterrupt raised inside a gc
    callback or a `__del__` is swallowed there ("Exception ignored in ..."): the recording
    went on to its end (ci42: hypothesis's gc callback, in a test run's worker). What
    `on_interrupt` notes is still there. Yields the signals noted."""
    noted: list[int] = []
    replaced: dict[int, object] = {}

    def note(signum, frame) -> None:
        noted.append(signum)
        on_interrupt(signum)
        replaced[signum](signum, frame)

    try:
        if threading.current_thread() is threading.main_thread():
            for signum in HELD:
                handler = signal.getsignal(signum)
                if callable(handler):  # (SIG_DFL, SIG_IGN and C handlers left alone)
                    replaced[signum] = handler
                    signal.signal(signum, note)
        yield noted
    finally:
        for signum, handler in replaced.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def alarm_ticks(period: float, handler):
    """SIGALRM every `period` s into `handler` while the block runs (main thread only: Python
    runs signal handlers nowhere else). The handler and the alarm that were set before are put
    back, the alarm with the time it had left, and at once if that ran out in the block: an
    embedding program's alarm, and pytest-timeout's, which a recording test cancelled before
    and which then no longer ended a hung test (stop 22's CI ran into its 90 minutes)."""
    old_handler = signal.signal(signal.SIGALRM, handler)
    old_delay, old_interval = signal.setitimer(signal.ITIMER_REAL, period, period)
    started = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL if old_handler is None else old_handler)
        if old_delay > 0:
            left = old_delay - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3), old_interval)

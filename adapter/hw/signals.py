"""SIGINT and SIGTERM held off while ptdebug changes a target's state.

Role: one context manager, `signals_held`, for the few steps that must not be cut in two by
Ctrl-C, SIGTERM or the adapter stopping a recorder (each raises KeyboardInterrupt in the
recorder): putting a target back (release, detach), and opening a breakpoint event together
with keeping its file descriptor. A perf breakpoint opened with SIGTRAP on the thread and lost
to an interrupt before its descriptor was kept stays armed while the recorder cleans up: the
thread, let go, hit it with no tracer and died of SIGTRAP (CI ci11; tests/live/
test_line_window.py). The signal waits, and its handler runs as the block ends.

Layer: adapter.hw, mechanism only; knows nothing of what is recorded.
"""
from __future__ import annotations

import contextlib
import signal

HELD = frozenset({signal.SIGINT, signal.SIGTERM})


@contextlib.contextmanager
def signals_held():
    """SIGINT and SIGTERM wait while the block runs (a second Ctrl-C must not cut short
    putting the target back); a handler runs after it."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)

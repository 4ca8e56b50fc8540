"""What a stepper recording of a Go goroutine needs so that the goroutine stays on the recorded
thread for the window: the goroutine-id probe, Go's preemption signal withheld, and sysmon kept
off the goroutine's P.

Layer: adapter.golang. Used by adapter.capture.record (the CLI's `ptdebug record` of a Go
program) and by the record-breakpoint worker; knows the runtime layout and park.py, nothing of
the stepper's internals or DAP.

Why (issue 14: `ptdebug record --from main.work --until-return -- ./prog` lost the goroutine
after ~680 instructions unless GODEBUG=asyncpreemptoff=1): the stepper slows the thread a
thousand times, so sysmon sees the goroutine running for more than 10 ms at once and asks it
to yield: it sets g.preempt and g.stackguard0 = stackPreempt and sends SIGURG; the handler
(runtime.doSigPreempt) makes the thread enter runtime.asyncPreempt, and the goroutine goes to
a run queue, often to another thread. So, for the window only:
  * sysmon's record of the P says "scheduled just now, far in the future" and a request
    already made is dropped (park.hold_preemption; resume_preemption at the end: from then on
    the goroutine is preempted as usual after 10 ms);
  * a SIGURG that reaches the recorded thread is not delivered (`withheld_signals`): Go uses
    SIGURG only to ask a goroutine to yield (runtime/preempt.go; a program's own
    os/signal.Notify(SIGURG) would miss it), and the runtime asks again while it still
    needs the goroutine to stop (suspendG for a stop-the-world), which it gets, as with
    GODEBUG=asyncpreemptoff=1, when the goroutine next yields by itself;
  * when it does yield (a stop-the-world's stack check), sleeps or blocks, it comes back to
    the recorded thread: the goroutine is locked to it for the window as by
    runtime.LockOSThread (`hold`, thread_lock.py).
What the program computes does not change: only when its scheduler may move the goroutine.
"""
from __future__ import annotations

import os
import signal

from .park import Parked, hold_preemption, resume_preemption
from .runtime_layout import LayoutError, RuntimeLayout
from .stepper_probe import GoidProbe
from .thread_lock import GoroutineLock


class GoWindow:
    """`ptw_probe` of a Go recording (the goroutine id at each stop) that holds preemption off
    from the window's first stop until `release()`."""

    withheld_signals = frozenset({signal.SIGURG})

    def __init__(self, pid: int, layout: RuntimeLayout):
        self.pid = pid
        self.layout = layout
        self.goid = GoidProbe(pid, layout)
        self.hold = GoroutineLock.for_process(pid, layout)
        """The stepper's `hold`: the goroutine locked to the thread, preemption held off on
        each P it runs on (None: a Go before 1.10, where only the first P is held here)."""
        self.held: Parked | None = None
        self.first_goid: int | None = None
        self.last_goid: int | None = None

    @classmethod
    def for_process(cls, pid: int) -> GoWindow | None:
        """The window helper of process `pid`, None when it is not a Go program whose runtime
        layout can be read."""
        from elftools.common.exceptions import ELFError
        try:
            return cls(pid, RuntimeLayout.from_elf(os.readlink(f"/proc/{pid}/exe")))
        except (LayoutError, OSError, ValueError, ELFError):
            return None

    def __call__(self, regs) -> int | None:
        if self.held is None and self.hold is None:
            # the window's first stop: hold preemption off (the lock does, where there is one)
            try:
                self.held = hold_preemption(self.pid, regs.fs_base, self.layout)
            except OSError:
                self.held = Parked(self.pid, 0, "")
        goid = self.goid(regs)
        if goid is not None:
            if self.first_goid is None:
                self.first_goid = goid
            self.last_goid = goid
        return goid

    def release(self) -> None:
        """The window is over: the goroutine is preempted as usual again."""
        if self.held is not None:
            try:
                resume_preemption(self.held)
            except OSError:
                pass
            self.held = None

    def describe(self) -> str:
        """Which goroutine the window began in and which it ended in, for a partial reason."""
        if self.first_goid is None:
            return "no goroutine id was read"
        if self.first_goid == self.last_goid:
            return f"goroutine {self.first_goid} throughout"
        return (f"goroutine {self.first_goid} at the start, goroutine {self.last_goid} on the "
                "thread at the end (goid 0: the runtime's g0)")

    def close(self) -> None:
        self.release()
        self.goid.close()

"""The debugger's native code in a Python program run under debugpy: the calls into it that a
Python window runs unrecorded.

Layer: adapter.python (mechanism: /proc/PID/maps and the frame probe; knows nothing of DAP).
adapter/capture/record.py hands a DebuggerCode to the stepper (ThreadRecorder's
`untraced_calls`) for a Python window.

Why: under debugpy, CPython calls the debugger's trace function on every Python call (and on
every line of a function with a breakpoint). pydevd's is compiled (pydevd_cython's
ThreadTracer, called through the C trampoline of pydevd_attach_to_process on 3.11, or
sys.monitoring callbacks on 3.12+), and a window on a scikit-learn `predict` spent about a
third of its instructions in it (`call_trace_protected` 33 % of a 2,000,000-instruction
window, 2026-12-04), so the window ran out before numpy did any work, and the stepper spent
that third of its time there. The issue asks for what the program does, not the debugger's
machinery. So an indirect call into the debugger's native code runs at full speed to its
return: the history shows the call, tracing off at its target and on again at its return
address (as an Intel PT address filter would show it), the time it took, and nothing of it.

Except on a line where a breakpoint would close the window (LineStops.close): there the tracer
may evaluate the breakpoint or suspend the thread, and the frame probe sees it do so only in
the recorded instructions (frame_probe._watch). A debugger written in Python (no compiled
pydevd) is not skipped: its frames are folded in the views (debugger_frames.py).
"""
from __future__ import annotations

import bisect

from adapter.hw.procfs import file_mappings
from adapter.python.debugger_frames import DEBUGGER_FILES


def debugger_ranges(pid: int) -> list[tuple[int, int]]:
    """The executable mappings of the debugger's native modules in process `pid` (sorted,
    start-stop). OSError when /proc/PID/maps cannot be read."""
    return sorted((m.start, m.end) for m in file_mappings(pid)
                  if "x" in m.perms and DEBUGGER_FILES.search(m.path))


class DebuggerCode:
    """`code(target, regs) -> bool`: whether the callee at `target` is the debugger's native
    code to run unrecorded (never on a line the window closes at, `probe.at_close_line`).
    `calls` counts the yeses."""

    def __init__(self, ranges: list[tuple[int, int]], probe):
        self.ranges = ranges
        self._starts = [lo for lo, _ in ranges]
        self.probe = probe
        self.calls = 0

    @classmethod
    def of_process(cls, pid: int, probe) -> DebuggerCode | None:
        """None where no debugger's native module is mapped (a program not under debugpy, or
        a debugpy without its compiled modules)."""
        try:
            ranges = debugger_ranges(pid)
        except OSError:
            return None
        return cls(ranges, probe) if ranges else None

    def __call__(self, target: int, regs) -> bool:
        k = bisect.bisect_right(self._starts, target) - 1
        if k < 0 or target >= self.ranges[k][1]:
            return False
        if self.probe is not None and self.probe.at_close_line(regs):
            return False
        self.calls += 1
        return True

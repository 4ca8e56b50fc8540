"""One record breakpoint's window recorded with the DBI recorder, in the recorder process: the
DBI counterpart of recorder_worker._record_worker's stepper call.

Layer: features (the process side of record_breakpoints.py; recorder_worker.py calls
`record`). It turns the window (record_window.RecordWindow) into adapter.capture.record_dbi's
end conditions, and closes a window on a Python line when that Python function returns
(adapter.python.line_window.ReturnWatch). It knows nothing of DAP.

How it differs from the stepper's window (docs/recording.md, "Record breakpoints and the
recorder"): the thread is never stopped. Frida attaches (only while the program's main thread
waits in a system call: dbi.main_thread_at_rest) and follows the thread while the debugger
still holds it suspended at the breakpoint; the recorder then says `attached`, the adapter
lets debugpy continue, and the window records from there: the debugger's return from its
suspension first (pydevd's code), then the line. It closes at the function's return (seen
between drains, a few ms late), at the debugger's next stop of the thread (a breakpoint in
the window: the adapter's signal), at its instruction cap or its time bound. DBI writes no
Python frame samples: stepping back by Python line is not offered on its captures.
"""
from __future__ import annotations

import dataclasses
import time

from adapter.capture.record import RecordResult
from adapter.features.record_window import DBI_INSTRUCTION_CAP, RecordWindow


def record(spec: dict, window: RecordWindow, request, *, pid: int, attached, say,
           why: str) -> RecordResult:
    """Record `spec`'s window of thread spec["tid"] with DBI. `attached()` once the thread is
    followed; `say(...)` writes a line to the adapter. Raises dbi.DbiUnavailable before
    anything was done to the program (the caller records with the stepper), RecordFailed."""
    from adapter.capture import dbi
    from adapter.capture.record_dbi import record_dbi
    tid = spec["tid"]
    python_start = spec.get("python_start")
    end = dataclasses.replace(window.end_condition(), request=request)
    cap = DBI_INSTRUCTION_CAP
    if window.python_line and window.instructions is None:
        # on a Python line the count is the window's cap (reaching it ends it partial)
        cap, end = end.count or cap, dataclasses.replace(end, count=None)
    dbi.frida_module()  # (DbiUnavailable before the thread is touched)
    watch = None
    if python_start and window.python_ends["return"]:
        from adapter.python.cpython_layout import LayoutError
        from adapter.python.line_window import ReturnWatch
        try:
            watch = ReturnWatch.of(pid, tid, python_start[0], python_start[1], request)
        except (OSError, LayoutError) as exc:
            raise dbi.DbiUnavailable(f"the Python frame of the line could not be read "
                                     f"({exc}), so the window could not close at its return")
        if watch is None:
            raise dbi.DbiUnavailable(f"thread {tid} runs no frame at {python_start[0]}:"
                                     f"{python_start[1]}, so the window could not close at "
                                     "its return")

    def stage(name: str) -> None:
        if name == "recorder set up" and python_start:
            name = "thread at the Python line"  # the window opens as debugpy lets it go
        say("stage", time.monotonic(), name)

    try:
        return record_dbi(spec["output"], pid=pid, tid=tid, start=window.function,
                          end=end, copy_images=False, max_instructions=cap,
                          trigger_timeout=window.timeout, why=why, on_attached=attached,
                          at_drain=watch, stage=stage,
                          log=lambda text: say("log", text.replace("\n", "\\n")))
    finally:
        if watch is not None:
            watch.close()

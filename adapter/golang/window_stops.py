"""Where a Go record window must close: the pcs of the user's breakpoints that would stop the
recorded goroutine, read from Delve's breakpoint list before Delve lets go of the program.

Layer: adapter.golang. Pure: takes the breakpoints as Delve's JSON-RPC `ListBreakpoints`
returns them (service/api.Breakpoint) and returns addresses; knows nothing of DAP, the
recorder or Delve's connection.

Why: for a record window Delve detaches (a thread has one tracer), so the int3 bytes of its
breakpoints are gone and the recorded thread would run through them unseen (issue 14: a
normal breakpoint a few lines after a record breakpoint never stopped). The recorder stops
before any of these pcs instead; the window closes there, the thread is parked on it, and the
Delve that takes the program back finds it at the breakpoint's pc, evaluates the condition and
reports the stop as it would have without the recording.

Which breakpoints: every enabled one that stops (logpoints, Delve's `continue` tracepoints,
do not), including Delve's own unrecovered-panic and fatal-throw breakpoints (a panic in the
window then reaches the user); not the record breakpoints themselves (their lines open
windows) nor the pc the window starts at. Watchpoints have no pc.

Conditions: no debugger can evaluate a Go condition while Delve is away, so each is evaluated
by Delve in the recorded goroutine when the window opens. One that is false then (a loop
counter not there yet, an id of another request) does not close the window: a window would
otherwise be cut at every pass over a conditional breakpoint that never stops. Such a
breakpoint is `unwatched`, and if the recorded thread passes it in the window the user is told
(it may have become true meanwhile). One that is true, or that cannot be evaluated there (its
variables are not in scope), closes the window; Delve, back, evaluates it where it stands.
"""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class WindowStop:
    address: int
    breakpoint_id: int
    """Delve's id (the client's id may differ after a recording: breakpoint_ids.py)."""
    where: str
    """FILE:LINE (or the function) for messages."""
    condition: str


def window_stops(breakpoints: list[dict], start_pc: int, record_lines: set[tuple[str, int]],
                 holds=lambda condition: None) -> tuple[dict[int, WindowStop],
                                                       dict[int, WindowStop]]:
    """(watched, unwatched): address -> WindowStop for Delve's `breakpoints`, without those
    at `start_pc` and those on a record breakpoint's (path, line). `holds(condition)` is
    True/False as Delve evaluates it in the recorded goroutine now, None if it cannot; a
    breakpoint whose condition is False now is unwatched."""
    record = {(os.path.realpath(path), line) for path, line in record_lines}
    stops: dict[int, WindowStop] = {}
    unwatched: dict[int, WindowStop] = {}
    verdicts: dict[str, bool | None] = {}
    for bp in breakpoints:
        if bp.get("disabled") or bp.get("continue") or bp.get("WatchExpr"):
            continue
        file, line = bp.get("file") or "", int(bp.get("line") or 0)
        if file and (os.path.realpath(file), line) in record:
            continue
        where = (f"{os.path.basename(file)}:{line}" if file and line
                 else bp.get("name") or bp.get("functionName") or f"breakpoint {bp.get('id')}")
        condition = bp.get("Cond") or ""
        if condition and condition not in verdicts:
            verdicts[condition] = holds(condition)
        into = unwatched if condition and verdicts[condition] is False else stops
        for address in bp.get("addrs") or [bp.get("addr")]:
            if address and address != start_pc:
                into[int(address)] = WindowStop(int(address), int(bp.get("id") or 0), where,
                                                condition)
    return stops, unwatched

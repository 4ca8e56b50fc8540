"""`ptdebug export perfetto`: a decoded bundle as a timeline of function calls, one track per
thread, in the Chrome trace-event JSON format that Perfetto (ui.perfetto.dev) and
chrome://tracing open.

Layer: adapter.export. Reads a DecodedBundle (trace.py); knows nothing of DAP.

Each call the history decoded opens a slice named after the callee, and its return closes it,
so slices nest exactly as the calls did. Time is the instructions' TSC time in nanoseconds
(trace.py), relative to the first recorded instruction; the JSON `ts`/`dur` fields are in
microseconds as the format requires, with three decimals so that no nanosecond is lost.
Slices are written as begin/end events in execution order (not complete events), so their
nesting is explicit even where many instructions share one timestamp.
Each slice carries the cycles and instructions spent inside it (args). Frames entered before
the recording window start with the window; a return past the first frame opens a slice for
the caller it returns to. A gap in the trace closes every open slice and starts again after it.
"""
from __future__ import annotations

import json
import os
from array import array
from dataclasses import dataclass

from pt_decoder import insn_flags

from .trace import DecodedBundle, ThreadTrace


@dataclass
class Slice:
    """One call: `name` ran from instruction position `start` to `end` (exclusive), from
    `start_ns` to `end_ns`, at call depth `depth` of thread `tid`."""

    tid: int
    name: str
    start_ns: int
    end_ns: int
    start: int
    end: int
    depth: int


def thread_timeline(decoded: DecodedBundle, thread: ThreadTrace) -> tuple[list[tuple[str, int, str]], list[int]]:
    """The begin/end marks of one thread's call slices in execution order,
    [("B", position, name) | ("E", position, "")], and each position's time in ns."""
    history = thread.history
    n = len(history)
    if n == 0:
        return [], []
    ips = history.ips()
    flags = history.flags_range()
    gaps = {g.position for g in history.gaps}
    times = decoded.times_ns(thread)
    ns = list(times) + [times[n - 1]]
    marks: list[tuple[str, int, str]] = [("B", 0, decoded.function(ips[0])[0])]
    depth = 1
    for i in range(n):
        if i in gaps and i:
            marks.extend(("E", i, "") for _ in range(depth))
            marks.append(("B", i, decoded.function(ips[i])[0]))
            depth = 1
        f = flags[i]
        if f & insn_flags.FAR or i + 1 >= n or (i + 1) in gaps:
            continue
        if f & insn_flags.CALL:
            marks.append(("B", i + 1, decoded.function(ips[i + 1])[0]))
            depth += 1
        elif f & insn_flags.RETURN:
            marks.append(("E", i + 1, ""))
            depth -= 1
            if not depth:  # returned into a caller that was entered before the window
                marks.append(("B", i + 1, decoded.function(ips[i + 1])[0]))
                depth = 1
    marks.extend(("E", n, "") for _ in range(depth))
    return marks, ns


def thread_slices(decoded: DecodedBundle, thread: ThreadTrace) -> list[Slice]:
    """The call slices of one thread, in the order they close."""
    marks, ns = thread_timeline(decoded, thread)
    stack: list[tuple[str, int]] = []
    out = []
    for phase, position, name in marks:
        if phase == "B":
            stack.append((name, position))
        else:
            opened, start = stack.pop()
            out.append(Slice(thread.tid, opened, ns[start], ns[position], start, position,
                             len(stack)))
    return out


def trace_events(decoded: DecodedBundle) -> dict:
    """The Chrome trace-event document of the bundle (a JSON-able dict): per thread, B/E
    events in execution order, so that nesting never depends on timestamps (the stepper
    gives instructions between two of its stops the same time)."""
    pid = int(decoded.manifest.get("pid") or 0)
    command = decoded.manifest.get("command") or []
    starts = [decoded.times_ns(t)[0] for t in decoded.threads if len(t.history)]
    origin = min(starts) if starts else 0
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": " ".join(command) or f"process {pid}"}}]
    for thread in decoded.threads:
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": thread.tid,
                       "args": {"name": thread.name or f"thread {thread.tid}"}})
        weights = thread.cycle_weights()
        prefix = array("Q", [0]) * (len(weights) + 1)
        running = 0
        for i, w in enumerate(weights):
            running += w
            prefix[i + 1] = running
        marks, ns = thread_timeline(decoded, thread)
        open_at: list[int] = []
        for phase, position, name in marks:
            event = {"ph": phase, "pid": pid, "tid": thread.tid, "ts": _us(ns[position] - origin)}
            if phase == "B":
                event.update(name=name, cat="call")
                open_at.append(position)
            else:
                start = open_at.pop()
                event["args"] = {"cycles": prefix[position] - prefix[start],
                                 "instructions": position - start}
            events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"bundle": os.path.abspath(decoded.root), "time_origin_ns": origin,
                          "backend": decoded.manifest.get("backend"),
                          "status": decoded.manifest.get("status")}}


def write_perfetto(decoded: DecodedBundle, path: str | os.PathLike) -> int:
    """Write the timeline JSON to `path`; returns the number of slices."""
    document = trace_events(decoded)
    with open(path, "w") as f:
        json.dump(document, f, separators=(",", ":"))
    return sum(1 for e in document["traceEvents"] if e["ph"] == "B")


def _us(ns: int) -> float:
    return round(ns / 1000, 3)

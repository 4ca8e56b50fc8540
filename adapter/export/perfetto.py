"""`ptdebug export perfetto`: a decoded bundle as a timeline of function calls, one track per
thread, in the Chrome trace-event JSON format that Perfetto (ui.perfetto.dev) and
chrome://tracing open, or in Perfetto's own protobuf format (TrackEvent, written with
protowire.py; nanosecond timestamps without the JSON's microsecond units).

Layer: adapter.export. Reads a Recording (adapter.recording); knows nothing of DAP.

Each call the history decoded opens a slice named after the callee, and its return closes it,
so slices nest exactly as the calls did. Time is the instructions' TSC time in nanoseconds
(trace.py), relative to the first recorded instruction; the JSON `ts`/`dur` fields are in
microseconds as the format requires, with three decimals so that no nanosecond is lost.
Slices are written as begin/end events in execution order (not complete events), so their
nesting is explicit even where many instructions share one timestamp.
Each slice carries the cycles and instructions spent inside it (args). A stepper recording's
time is stepper time (trace.py: wall-clock ns of a ptrace-slowed thread, not CPU time): the
process track is named with that, its cycles argument is `stepper_ns`, and the JSON's
`otherData.timing` says it in a sentence; instructions are exact either way. For a Go recording
whose goids were recorded (the stepper's goid probe), each goroutine also gets a track with one
slice per run of it on a thread (adapter/golang's index of the goids). Frames entered before
the recording window start with the window; a return past the first frame opens a slice for
the caller it returns to. A gap in the trace closes every open slice and starts again after it.
A Python capture (the stepper's Python probe) also gets, per thread, a "Python" track: a slice
per Python function activation and inside it one per source line run
(adapter/python/timeline.py), with their instructions and cycles.
"""
from __future__ import annotations

import json
import os
from array import array
from dataclasses import dataclass

from adapter.recording.recording import STEPPER_TIME, Recording, ThreadTrace
from pt_decoder import insn_flags


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


def thread_timeline(decoded: Recording, thread: ThreadTrace) -> tuple[list[tuple[str, int, str]], list[int]]:
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


@dataclass
class GoroutineRun:
    """Goroutine `goid` ran on thread `tid` from history position `start` to `stop`
    (exclusive): what adapter.golang's index of the recorded goids says."""

    goid: int
    tid: int
    start: int
    stop: int


def goroutine_runs(decoded: Recording) -> list[GoroutineRun]:
    """The goroutine runs of a Go recording whose goids were recorded (the stepper's goid
    probe, PTWRITE); [] for other bundles, or where no goid is known at all."""
    from adapter.recording.goroutines import GoroutineHistoryError
    try:
        indexed = decoded.goroutines()
    except GoroutineHistoryError:
        return []  # not a Go program, or no goid recorded
    runs = []
    for thread in indexed.values():
        for goid in thread.index.goroutines():
            if goid < 0:
                continue  # before any goid was seen
            runs.extend(GoroutineRun(goid, thread.tid, a, b) for a, b in thread.index.ranges(goid))
    return sorted(runs, key=lambda r: (r.goid, r.tid, r.start))


def _goroutine_name(goid: int) -> str:
    return "g0 (scheduler)" if goid == 0 else f"goroutine {goid}"


def thread_slices(decoded: Recording, thread: ThreadTrace) -> list[Slice]:
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


def trace_events(decoded: Recording) -> dict:
    """The Chrome trace-event document of the bundle (a JSON-able dict): per thread, B/E
    events in execution order, so that nesting never depends on timestamps (the stepper
    gives instructions between two of its stops the same time)."""
    pid = int(decoded.manifest.get("pid") or 0)
    command = decoded.manifest.get("command") or []
    starts = [decoded.times_ns(t)[0] for t in decoded.threads if len(t.history)]
    origin = min(starts) if starts else 0
    cycles_name = decoded.cycles_name
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
                           "args": {"name": _process_name(decoded, command, pid)}}]
    for thread in decoded.threads:
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": thread.tid,
                       "args": {"name": thread.name or f"thread {thread.tid}"}})
        prefix = _prefix_sums(thread.cycle_weights())
        marks, ns = thread_timeline(decoded, thread)
        open_at: list[int] = []
        for phase, position, name in marks:
            event = {"ph": phase, "pid": pid, "tid": thread.tid, "ts": _us(ns[position] - origin)}
            if phase == "B":
                event.update(name=name, cat="call")
                open_at.append(position)
            else:
                start = open_at.pop()
                event["args"] = {"instructions": position - start,
                                 cycles_name: prefix[position] - prefix[start]}
            events.append(event)
    runs = goroutine_runs(decoded)
    if runs:
        # Goroutines are a second process of tracks (tid = goid), so that their ids never mix
        # with OS thread ids; each run is one slice "on thread T".
        gpid = GOROUTINE_PID_BASE + pid
        events.append({"ph": "M", "name": "process_name", "pid": gpid, "tid": 0,
                       "args": {"name": f"goroutines of {' '.join(command) or pid}"}})
        times = {t.tid: (decoded.times_ns(t), _prefix_sums(t.cycle_weights()))
                 for t in decoded.threads}
        for goid in sorted({r.goid for r in runs}):
            events.append({"ph": "M", "name": "thread_name", "pid": gpid, "tid": goid,
                           "args": {"name": _goroutine_name(goid)}})
        for r in runs:
            ns, prefix = times[r.tid]
            end = ns[r.stop] if r.stop < len(ns) else ns[-1]
            events.append({"ph": "X", "name": f"on thread {r.tid}", "cat": "goroutine",
                           "pid": gpid, "tid": r.goid, "ts": _us(ns[r.start] - origin),
                           "dur": _us(end - ns[r.start]),
                           "args": {"instructions": r.stop - r.start,
                                    cycles_name: prefix[r.stop] - prefix[r.start]}})
    pythons = python_timelines(decoded)
    if pythons:
        # A Python capture: the Python functions and lines of each thread, a third process of
        # tracks (adapter/python/timeline.py), each end with its instructions and cycles.
        ppid = PYTHON_PID_BASE + pid
        events.append({"ph": "M", "name": "process_name", "pid": ppid, "tid": 0,
                       "args": {"name": f"Python of {' '.join(command) or pid}"}})
        for thread, marks in pythons:
            events.append({"ph": "M", "name": "thread_name", "pid": ppid, "tid": thread.tid,
                           "args": {"name": f"Python, thread {thread.tid}"}})
            ns = decoded.times_ns(thread)
            prefix = _prefix_sums(thread.cycle_weights())
            open_at = []
            for phase, position, name, category in marks:
                stamp = ns[min(position, len(ns) - 1)]
                event = {"ph": phase, "pid": ppid, "tid": thread.tid, "ts": _us(stamp - origin)}
                if phase == "B":
                    event.update(name=name, cat=category)
                    open_at.append(position)
                else:
                    start = open_at.pop()
                    event["args"] = {"instructions": position - start,
                                     cycles_name: prefix[position] - prefix[start]}
                events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"bundle": os.path.abspath(decoded.root), "time_origin_ns": origin,
                          "backend": decoded.manifest.get("backend"),
                          "timing": decoded.timing_note() or "TSC time and CPU cycles",
                          "status": decoded.manifest.get("status")}}


def python_timelines(decoded: Recording) -> list[tuple[ThreadTrace, list]]:
    """(thread, adapter.python.timeline marks) of each thread of a Python capture (the
    manifest's "python" table, the stepper's Python probe); [] for other bundles."""
    if decoded.python_table is None:
        return []
    from adapter.python.timeline import python_marks
    return [(t, python_marks(decoded.python_frames(t), len(t.history))) for t in decoded.threads
            if len(t.history)]


def _process_name(decoded: Recording, command: list, pid: int) -> str:
    """The process track's name; a stepper recording's says its time is stepper time."""
    name = " ".join(command) or f"process {pid}"
    return (f"{name} [{STEPPER_TIME}: {decoded.slowed_short}-slowed, not CPU time]"
            if decoded.stepper else name)


GOROUTINE_PID_BASE = 1 << 30
"""JSON: the pid of the goroutine tracks' process is this plus the recorded pid."""
PYTHON_PID_BASE = 1 << 29
"""JSON: the pid of the Python tracks' process is this plus the recorded pid."""

# Perfetto's trace.proto field numbers (protos/perfetto/trace/trace_packet.proto and
# track_event/*.proto in the Perfetto repository).
TRACE_PACKET = 1                                          # Trace.packet
PACKET_TIMESTAMP, PACKET_SEQUENCE_ID, PACKET_TRACK_EVENT, PACKET_TRACK_DESCRIPTOR = 8, 10, 11, 60
DESCRIPTOR_UUID, DESCRIPTOR_NAME, DESCRIPTOR_PROCESS, DESCRIPTOR_THREAD, DESCRIPTOR_PARENT = \
    1, 2, 3, 4, 5
PROCESS_PID, PROCESS_NAME = 1, 6                          # ProcessDescriptor
THREAD_PID, THREAD_TID, THREAD_NAME = 1, 2, 5             # ThreadDescriptor
EVENT_ANNOTATIONS, EVENT_TYPE, EVENT_TRACK, EVENT_CATEGORIES, EVENT_NAME = 4, 9, 11, 22, 23
SLICE_BEGIN, SLICE_END = 1, 2                             # TrackEvent.Type
ANNOTATION_INT, ANNOTATION_NAME = 4, 10                   # DebugAnnotation
SEQUENCE_ID = 1
GOROUTINE_UUID_BASE = 1 << 62
PYTHON_UUID_BASE = 1 << 61
"""Proto: the Python track of thread T is this plus T."""


def trace_proto(decoded: Recording) -> bytes:
    """The bundle's timeline as a Perfetto protobuf trace (a `Trace` message): a process track,
    one thread track per thread, and begin/end TrackEvents with timestamps in nanoseconds (the
    bundle's clock) in execution order; each end carries the slice's cycles and instructions."""
    from .protowire import Message
    pid = int(decoded.manifest.get("pid") or 0)
    command = decoded.manifest.get("command") or []
    out = bytearray()

    def packet(message: Message) -> None:
        out.extend(Message().message(TRACE_PACKET, message).bytes())

    process_uuid = (pid << 1) | 1
    process = Message().int(PROCESS_PID, pid).string(PROCESS_NAME,
                                                     _process_name(decoded, command, pid))
    packet(Message().message(PACKET_TRACK_DESCRIPTOR, Message().int(DESCRIPTOR_UUID, process_uuid)
                             .message(DESCRIPTOR_PROCESS, process)))
    for thread in decoded.threads:
        uuid = thread.tid << 1
        name = thread.name or f"thread {thread.tid}"
        descriptor = (Message().int(DESCRIPTOR_UUID, uuid).int(DESCRIPTOR_PARENT, process_uuid)
                      .message(DESCRIPTOR_THREAD, Message().int(THREAD_PID, pid)
                               .int(THREAD_TID, thread.tid).string(THREAD_NAME, name)))
        packet(Message().message(PACKET_TRACK_DESCRIPTOR, descriptor))
        prefix = _prefix_sums(thread.cycle_weights())
        marks, ns = thread_timeline(decoded, thread)
        open_at: list[int] = []
        for phase, position, name in marks:
            event = Message().int(EVENT_TYPE, SLICE_BEGIN if phase == "B" else SLICE_END) \
                .int(EVENT_TRACK, uuid, keep_zero=True)
            if phase == "B":
                event.string(EVENT_CATEGORIES, "call").string(EVENT_NAME, name)
                open_at.append(position)
            else:
                start = open_at.pop()
                for key, value in (("instructions", position - start),
                                   (decoded.cycles_name, prefix[position] - prefix[start])):
                    event.message(EVENT_ANNOTATIONS, Message().string(ANNOTATION_NAME, key)
                                  .int(ANNOTATION_INT, value, keep_zero=True))
            packet(Message().int(PACKET_TIMESTAMP, ns[position], keep_zero=True)
                   .int(PACKET_SEQUENCE_ID, SEQUENCE_ID).message(PACKET_TRACK_EVENT, event))
    runs = goroutine_runs(decoded)
    times = {t.tid: decoded.times_ns(t) for t in decoded.threads}
    for goid in sorted({r.goid for r in runs}):
        # Track uuids: thread tracks are even (tid << 1), the process's is odd (pid << 1 | 1);
        # goroutine tracks live above 2**62 so they collide with neither.
        packet(Message().message(PACKET_TRACK_DESCRIPTOR, Message()
                                 .int(DESCRIPTOR_UUID, GOROUTINE_UUID_BASE + goid)
                                 .int(DESCRIPTOR_PARENT, process_uuid)
                                 .string(DESCRIPTOR_NAME, _goroutine_name(goid))))
    for r in runs:
        ns = times[r.tid]
        track = GOROUTINE_UUID_BASE + r.goid
        for phase, position in ((SLICE_BEGIN, r.start), (SLICE_END, r.stop)):
            event = Message().int(EVENT_TYPE, phase).int(EVENT_TRACK, track)
            if phase == SLICE_BEGIN:
                event.string(EVENT_CATEGORIES, "goroutine").string(EVENT_NAME, f"on thread {r.tid}")
            stamp = ns[position] if position < len(ns) else ns[-1]
            packet(Message().int(PACKET_TIMESTAMP, stamp, keep_zero=True)
                   .int(PACKET_SEQUENCE_ID, SEQUENCE_ID + 1).message(PACKET_TRACK_EVENT, event))
    for thread, marks in python_timelines(decoded):
        track = PYTHON_UUID_BASE + thread.tid
        packet(Message().message(PACKET_TRACK_DESCRIPTOR, Message()
                                 .int(DESCRIPTOR_UUID, track).int(DESCRIPTOR_PARENT, process_uuid)
                                 .string(DESCRIPTOR_NAME, f"Python, thread {thread.tid}")))
        ns = times[thread.tid]
        prefix = _prefix_sums(thread.cycle_weights())
        open_at = []
        for phase, position, name, category in marks:
            event = Message().int(EVENT_TYPE, SLICE_BEGIN if phase == "B" else SLICE_END) \
                .int(EVENT_TRACK, track)
            if phase == "B":
                event.string(EVENT_CATEGORIES, category).string(EVENT_NAME, name)
                open_at.append(position)
            else:
                start = open_at.pop()
                for key, value in (("instructions", position - start),
                                   (decoded.cycles_name, prefix[position] - prefix[start])):
                    event.message(EVENT_ANNOTATIONS, Message().string(ANNOTATION_NAME, key)
                                  .int(ANNOTATION_INT, value, keep_zero=True))
            packet(Message().int(PACKET_TIMESTAMP, ns[min(position, len(ns) - 1)], keep_zero=True)
                   .int(PACKET_SEQUENCE_ID, SEQUENCE_ID + 2).message(PACKET_TRACK_EVENT, event))
    return bytes(out)


def _prefix_sums(weights) -> array:
    prefix = array("Q", [0]) * (len(weights) + 1)
    running = 0
    for i, w in enumerate(weights):
        running += w
        prefix[i + 1] = running
    return prefix


PROTO_SUFFIXES = (".perfetto-trace", ".pftrace", ".pb", ".proto")


def write_perfetto(decoded: Recording, path: str | os.PathLike, fmt: str | None = None) -> int:
    """Write the timeline to `path` as Chrome JSON (`fmt` "json") or Perfetto protobuf
    ("proto"; the default for the suffixes in PROTO_SUFFIXES); returns the number of slices."""
    fmt = fmt or ("proto" if os.fspath(path).endswith(PROTO_SUFFIXES) else "json")
    if fmt == "proto":
        data = trace_proto(decoded)
        with open(path, "wb") as f:
            f.write(data)
        return sum(sum(1 for phase, _, _ in thread_timeline(decoded, t)[0] if phase == "B")
                   for t in decoded.threads)
    document = trace_events(decoded)
    with open(path, "w") as f:
        json.dump(document, f, separators=(",", ":"))
    return sum(1 for e in document["traceEvents"] if e["ph"] == "B")


def _us(ns: int) -> float:
    return round(ns / 1000, 3)

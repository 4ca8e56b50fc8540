"""Goroutines in the views of a Go capture: which goroutine ran each recorded instruction, shown
in the Processor Trace scope (time per goroutine, the goroutine at the position), in the threads
pane and the recorded frames while replaying, and in the text of a replay stop.

Layer: features. Reads captures (features.captures.Capture) and takes their goroutine index
from their recording (adapter.recording: Recording.goroutines, built once from the PTWRITE
goids its decode kept and the binary's runtime layout); knows DAP and the Session's hooks,
and nothing of how a capture was recorded.

Whose goroutine is which. In a Go session DAP thread ids are goroutine ids (Delve), and a
capture belongs to the goroutine that hit its record breakpoint (`Capture.thread_id`). The OS
thread recorded may run other goroutines in the window (the scheduler switches them on the
same M) and the Go runtime's scheduler itself (g0, goid 0, on the system stack): the index
tells them apart, each label with how sure it is (goroutine_index.Confidence).

The threads pane while replaying. VS Code asks `threads` after every `stopped` event (its
debugSession.handleStop -> fetchThreads), and every move of the replay cursor (stepBack,
reverseContinue, a forward step in the history) ends with a `stopped` event: so the pane is
refreshed at each move without an `invalidated` event (which would cancel the stack requests
that stop has just started, VS Code's onDidInvalidated -> cancelAllRequests). The `threads`
answer is changed only while a thread of a Go capture is being replayed: the replayed entry's
name says which goroutine ran at the cursor, and the entry of that goroutine, when it is in the
list, says that it ran there. No entry is added: ids stay Delve's goroutine ids.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from adapter.features.captures import where
from adapter.golang.goroutine_index import Confidence
from adapter.protocol.channel import DEFERRED
from adapter.protocol.messages import Request
from adapter.routes import GOROUTINE_HISTORY as HISTORY_STEP
from adapter.routes import GOROUTINE_VIEW

log = logging.getLogger("ptdebug.dap")

MAX_RANGES_SHOWN = 200
"""Ranges listed under one goroutine in the trace scope (the first ones, in order)."""

_building = threading.Lock()


@dataclass
class CaptureGoroutines:
    """The goroutine index of one capture, with the per-goroutine figures of its window."""

    index: object
    """adapter.golang.goroutine_index.GoroutineIndex over the capture's history."""
    observations: int
    """How many goids the recorder wrote (PTWRITE packets)."""
    _summaries: list | None = None

    def at(self, position: int):
        """(goid, Confidence) of the instruction at `position`."""
        return self.index.goid_at(position)

    def summaries(self, history) -> list:
        """goroutine_index.GoroutineSummary of each goroutine, most time first (times in the
        history's unit: TSC ticks, ns for the stepper)."""
        if self._summaries is None:
            import numpy as np
            times = np.frombuffer(history.times(), dtype=np.uint64)
            cycles = np.frombuffer(history.cycles_range(), dtype=np.uint64)
            found = self.index.summaries(times, cycles)
            found.sort(key=lambda s: (-s.time, -s.instructions, s.goid))
            self._summaries = found
        return self._summaries


def capture_goroutines(capture) -> CaptureGoroutines | None:
    """The goroutine index of `capture`, built on first use and kept on the capture (as
    `capture._goroutines`); None when the capture is not of a Go program or its recorder
    wrote no goroutine ids (no PTWRITE: a stepper without the goid probe, Intel PT without
    PTWRITE). Safe to call from several threads: one builds, the others wait for it."""
    kept = getattr(capture, "_goroutines", None)
    if kept is not None:
        return kept[0]
    with _building:
        kept = getattr(capture, "_goroutines", None)
        if kept is None:
            kept = (_build(capture),)
            capture._goroutines = kept
    return kept[0]


def _build(capture) -> CaptureGoroutines | None:
    """The index of the capture's stream, from its recording's (Recording.goroutines: built
    once from the goids its one decode kept, shared by the captures of a replayed bundle)."""
    from adapter.recording.goroutines import GoroutineHistoryError
    try:
        indexed = capture.trace.goroutines().get(capture.stream)
    except GoroutineHistoryError as exc:
        log.info("capture %s: no goroutine index: %s", capture.id, exc)
        return None
    except Exception:  # a capture that cannot be indexed still shows everything else
        log.exception("capture %s: building the goroutine index failed", capture.id)
        return None
    if indexed is None:
        log.info("capture %s: the recorder wrote no goroutine ids in its stream", capture.id)
        return None
    return CaptureGoroutines(indexed.index, len(indexed.samples))


def prepare(capture) -> None:
    """Build the capture's index off the caller's thread, so the first replay stop finds it.
    A failure is logged here and met again by the view that asks for the index (its request
    fails, naming it): this thread has no user to tell."""
    def build() -> None:
        try:
            capture_goroutines(capture)
        except Exception:
            log.exception("capture %s: building its goroutine index ahead failed",
                          getattr(capture, "id", "?"))

    threading.Thread(target=build, daemon=True,
                     name=f"ptdebug-goroutines-{getattr(capture, 'id', '?')}").start()


# --- words -----------------------------------------------------------------------------------
def goroutine_name(goid: int) -> str:
    if goid == 0:
        return "g0 (the Go scheduler)"  # runtime work on the thread's system stack
    if goid < 0:
        return "an unknown goroutine"
    return f"goroutine {goid}"


def label(goid: int, confidence) -> str:
    """`goroutine 12 (observed)`, `g0 (the Go scheduler; flow)`: the name and how sure the
    label is."""
    return annotated(goroutine_name(goid), confidence.name.lower())


def annotated(name: str, note: str) -> str:
    """`name (note)`, or `g0 (the Go scheduler; note)` where the name ends in parentheses."""
    return f"{name[:-1]}; {note})" if name.endswith(")") else f"{name} ({note})"


def here(capture, position: int) -> str | None:
    """What ran at `position`, for the text of a replay stop and a recorded frame; None for
    a capture without goroutines."""
    goroutines = capture_goroutines(capture)
    if goroutines is None:
        return None
    goid, confidence = goroutines.at(position)
    return label(goid, confidence)


def switch_note(capture, before: int | None, after: int) -> str:
    """`; goroutine 12 ran here (flow), after goroutine 7`: the goroutine at `after`, and the
    one at `before` when a move from `before` crossed a goroutine switch; '' when the capture
    has no goroutines."""
    goroutines = capture_goroutines(capture)
    if goroutines is None:
        return ""
    goid, confidence = goroutines.at(after)
    text = f"; {label(goid, confidence)} ran here"
    if before is not None:
        previous, _ = goroutines.at(before)
        if previous != goid:
            text += f" (crossed a goroutine switch: {goroutine_name(previous)} ran at " \
                    f"insn {before})"
    return text


# --- the Processor Trace scope ---------------------------------------------------------------
def scope_variables(recording, capture, position: int) -> list[dict]:
    """The goroutine items of the Processor Trace scope at `position` (none for a capture
    without goroutines)."""
    goroutines = capture_goroutines(capture)
    if goroutines is None:
        return []
    history = capture.history
    trace = capture.trace
    goid, confidence = goroutines.at(position)
    summaries = goroutines.summaries(history)
    last = len(history) - 1
    window_time = history.time(last) - history.time(0)
    window_instructions = len(history)
    window_cycles = capture.cycles
    stepper = trace.manifest.get("backend") == "stepper"
    owner = capture.thread_id
    where_note = ""
    if owner is not None and goid != owner:
        where_note = f"; the capture is goroutine {owner}'s (it hit the record breakpoint)"

    def share(part: int, whole: int) -> str:
        return f"{100 * part / whole:.1f} %" if whole else "n/a"

    def one(summary) -> dict:
        ns = trace.ns(summary.time)
        if stepper:  # instructions first; its cycles are its ns again (trace_scope.py)
            value = (f"{summary.instructions:,} instructions "
                     f"({share(summary.instructions, window_instructions)}), "
                     f"{share(summary.time, window_time)} of the stepper time ({_ms(ns)}, "
                     "not CPU time)")
        else:
            value = (f"{share(summary.time, window_time)} of the time ({_ms(ns)}), "
                     f"{summary.instructions:,} instructions "
                     f"({share(summary.instructions, window_instructions)})")
            value += (f", {summary.cycles:,} cycles ({share(summary.cycles, window_cycles)})"
                      if window_cycles else ", no cycles recorded")
        value += f", {len(summary.ranges)} ranges; label: {summary.confidence.name.lower()}"
        name = goroutine_name(summary.goid)
        if summary.goid == goid:
            name = annotated(name, "ran here")
        return {"name": name, "value": value, "type": "goroutine",
                "variablesReference": recording.reference(lambda: ranges(summary))}

    def ranges(summary) -> list[dict]:
        items = []
        for k, (start, stop) in enumerate(summary.ranges[:MAX_RANGES_SHOWN]):
            spent = trace.ns(history.time(min(stop, last)) - history.time(start))
            items.append({"name": f"[{k}] insn {start}..{stop - 1}",
                          "value": f"{stop - start:,} instructions, {_ms(spent)}, from "
                                   f"{where(capture, history.ip(start))}",
                          "type": "range", "variablesReference": 0})
        if len(summary.ranges) > MAX_RANGES_SHOWN:
            items.append({"name": "...", "value": f"{len(summary.ranges) - MAX_RANGES_SHOWN} "
                          "more ranges (ptdebug/goroutineHistory lists them all)",
                          "variablesReference": 0})
        return items

    clock = ("time: stepper time, the CLOCK_MONOTONIC ns of a thread slowed by ptrace, not "
             "CPU time" if stepper else "time: TSC")
    return [
        {"name": "goroutine", "value": f"{label(goid, confidence)} ran instruction "
         f"{position}{where_note}", "type": "goroutine", "variablesReference": 0},
        {"name": "goroutines", "value": f"{len(summaries)} in the window ({_ms(trace.ns(window_time))}"
         f", {goroutines.observations} goid observations; {clock}), most time first",
         "type": "", "variablesReference": recording.reference(
             lambda: [one(s) for s in summaries])},
    ]


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f} ms"


# --- the threads pane while replaying ------------------------------------------------------
class GoroutineView:
    """Names the goroutine at the replay cursor in the `threads` answers while a thread of a Go
    capture is replayed; builds each new capture's index in the background."""

    def __init__(self, session, recording, reverse):
        self.session = session
        self.recording = recording
        self.reverse = reverse
        recording.on_capture(prepare)
        session.routes.add(GOROUTINE_VIEW, "threads", watch=self._threads,
                           active=self.intercepting)

    def intercepting(self, command: str) -> bool:
        """Whether `threads` may be taken now (the session's fast relay forwards it without
        asking while this is False). Only a capture can lead to a replay, and the session
        re-asks when a capture is kept; a replay starts and ends with no such call, so the
        answer stays True from the first capture on (not replaying: forwarded untouched)."""
        return command == "threads" and bool(self.recording.captures)

    def cursors(self) -> dict[int, tuple[object, int, int, object]]:
        """Replayed DAP thread id -> (capture, position, goid at it, Confidence), for the
        threads replaying a capture that has goroutines."""
        out = {}
        for thread_id, replay in list(self.reverse.replays.items()):
            goroutines = capture_goroutines(replay.capture)
            if goroutines is not None:
                goid, confidence = goroutines.at(replay.position)
                out[thread_id] = (replay.capture, replay.position, goid, confidence)
        return out

    def _threads(self, request: Request) -> Callable[[dict], None] | None:
        """Watches `threads` answers while replaying: renames the replayed threads."""
        if not self.reverse.replays:
            return None  # not replaying: forwarded untouched
        cursors = self.cursors()
        if not cursors:
            return None

        def observe(response: dict) -> None:
            if response.get("success"):
                rename_threads((response.get("body") or {}).get("threads") or [], cursors)

        return observe


def rename_threads(threads: list[dict], cursors: dict) -> None:
    """Change, in place, the names of the DAP threads (`{id, name}`) of a `threads` answer:
    each replayed thread says what ran at its cursor; a goroutine that ran at some thread's
    cursor says so. Ids are left as they are."""
    ran_at: dict[int, list[int]] = {}
    for thread_id, (_, _, goid, _) in cursors.items():
        if goid != thread_id and goid > 0:
            ran_at.setdefault(goid, []).append(thread_id)
    for thread in threads:
        thread_id = thread.get("id")
        name = thread.get("name") or f"goroutine {thread_id}"
        cursor = cursors.get(thread_id)
        if cursor is not None:
            capture, position, goid, confidence = cursor
            if goid == thread_id:
                what = f"this goroutine ran insn {position}"
            else:
                what = f"{goroutine_name(goid)} ran insn {position} here, not this one"
            if confidence <= Confidence.ASSUMED:
                what += f" ({confidence.name.lower()})"
            name = f"{name} — replaying capture {capture.id}: {what}"
        elif thread_id in ran_at:
            names = ", ".join(f"goroutine {t}" for t in sorted(ran_at[thread_id]))
            name = f"{name} — ran at the replay cursor of {names}"
        thread["name"] = name


# --- ptdebug/goroutineHistory ---------------------------------------------------------------
GOROUTINE_HISTORY = "ptdebug/goroutineHistory"
"""Custom request: which goroutine ran which instructions of a recorded bundle (schema.py
GoroutineHistoryIn/Out). It reads a bundle, not the program: every session answers it; a
replay's defaults to the replayed bundle."""


def install_goroutine_history(session) -> None:
    from adapter.powers import ReplaysRecordings

    def intercept(request: Request) -> object:
        arguments = request.raw.get("arguments")
        arguments = dict(arguments) if isinstance(arguments, dict) else arguments
        backend = session.backend
        if (isinstance(arguments, dict | None) and isinstance(backend, ReplaysRecordings)
                and backend.replayed is not None and "bundle" not in (arguments or {})):
            arguments = {**(arguments or {}), "bundle": backend.replayed.path}
        held = list(getattr(session.recording, "captures", ()))  # a snapshot, for the thread
        threading.Thread(target=_answer_goroutine_history, args=(request, arguments, held),
                         daemon=True, name="goroutine-history").start()  # decoding takes a while
        return DEFERRED

    session.routes.add(HISTORY_STEP, GOROUTINE_HISTORY, take=intercept)


def _answer_goroutine_history(request: Request, arguments, captures: list) -> None:
    from adapter.protocol.errors import AdapterError, InvalidRequest
    from adapter.protocol.schema import GoroutineHistoryIn, parse
    from adapter.recording.goroutines import GoroutineHistoryError
    try:
        args = parse(GoroutineHistoryIn, arguments)
        request.respond(goroutine_history(args, _held_recording(captures, args.bundle)))
    except AdapterError as exc:
        request.fail(exc)
    except GoroutineHistoryError as exc:
        request.fail(InvalidRequest(str(exc)))
    except Exception as exc:  # this thread has the request: it is answered, never dropped
        log.exception("ptdebug/goroutineHistory failed")
        request.fail(AdapterError(f"the goroutine history could not be built: {exc}"))


def _held_recording(captures: list, bundle: str):
    """The Recording of a capture or replayed bundle of this session at path `bundle`
    (decoded already, its goroutine index perhaps built), None for a bundle it does not
    hold."""
    import os
    wanted = os.path.realpath(bundle)
    for capture in captures:
        if os.path.realpath(str(capture.bundle)) == wanted:
            return capture.trace
    return None


def goroutine_history(args, recording=None) -> dict:
    """The body of `ptdebug/goroutineHistory` (schema.GoroutineHistoryIn -> Out as a dict),
    from `recording` when the session holds the bundle decoded, else from the bundle opened
    here. Raises GoroutineHistoryError when the bundle has no goroutine history; the Go
    binary is looked for before anything is decoded."""
    import dataclasses

    import numpy as np

    from adapter.capture.bundle import Bundle, BundleError
    from adapter.protocol.schema import (
        GoroutineHistoryEntry,
        GoroutineHistoryOut,
        GoroutineRange,
    )
    from adapter.recording.goroutines import GoroutineHistoryError, go_binary
    from adapter.recording.recording import Recording, TraceError
    try:
        if recording is None:
            go_binary(Bundle.open(args.bundle))
            recording = Recording.open(args.bundle)
    except (BundleError, TraceError) as exc:
        raise GoroutineHistoryError(str(exc)) from None
    threads = list(recording.goroutines().values())
    if args.thread is not None:
        threads = [t for t in threads if t.tid == args.thread]
        if not threads:
            raise GoroutineHistoryError(f"{args.bundle} has no recorded thread {args.thread}")
    unit = "ns" if recording.stepper else "tsc"
    entries = []
    for thread in threads:
        history = thread.history
        times = np.frombuffer(history.times(), dtype=np.uint64)
        cycles = np.frombuffer(history.cycles_range(), dtype=np.uint64)
        last = len(history) - 1
        for summary in thread.index.summaries(times, cycles):
            ranges = [GoroutineRange(a, b, int(times[a]), int(times[min(b, last)]))
                      for a, b in summary.ranges[:args.maxRanges]]
            entries.append(GoroutineHistoryEntry(
                thread.tid, summary.goid, summary.instructions, summary.time, summary.cycles,
                summary.confidence.name.lower(), ranges,
                len(summary.ranges) > args.maxRanges))
    return dataclasses.asdict(GoroutineHistoryOut(entries, unit))

"""The "Processor Trace" scope: the recorded CPU timing and branches of a capture, shown in the
Variables view of any stop of a thread that has a capture.

Layer: features. Reads captures (features.record_breakpoints) and their History; merges its
scope into the backend's `scopes` answers (its watch steps of the route table, adapter/routes.py:
`stackTrace` teaches it each frame's thread, `scopes` gets the scope) and answers `variables` on
its own references locally. Reverse stepping asks it for the scope of a replay position.

The position shown is the replay position while replaying, else the capture's last instruction.
A Go capture adds the goroutine that ran there and the time per goroutine in the window
(features.goroutine_view). A Python capture (the recorder wrote Python frame samples) adds the
Python frame at the position, the run of its line, and per line of its function the
instructions and time spent while it was the running line (features.python_replay).
Times: the bundle's TSC; CYC is the cumulative cycle count of the trace's CYC packets (Intel
SDM Vol. 3C §33.3.7 "Cycle-Accurate Mode"); IPC is instructions over cycles in the window.
A capture of the ptrace stepper has no CPU time: its TSC is CLOCK_MONOTONIC ns read at its
stops and its CYC those ns again, the time of a thread slowed by ptrace (microseconds an
instruction). Its scope leads with instruction counts, the exact measure, and shows its time
once, named "stepper time, not CPU time" (adapter/recording/recording.py says the same for the
exports); it shows no IPC.
"""
from __future__ import annotations

import os
from collections.abc import Callable

from adapter.features import goroutine_view
from adapter.features.captures import where
from adapter.protocol.messages import Request
from adapter.routes import TRACE_SCOPE
from pt_decoder import insn_flags

SCOPE_NAME = "Processor Trace"
LAST_BRANCHES = 16
BRANCH = insn_flags.CALL | insn_flags.RETURN | insn_flags.TAKEN | insn_flags.FAR


def last_branches(capture, position: int, count: int = LAST_BRANCHES) -> list[tuple[int, int]]:
    """(position of the branch, position of its target) of the last `count` taken branches at
    or before `position`, newest first."""
    history = capture.history
    found = []
    stop = position
    while stop > 0 and len(found) < count:
        start = max(0, stop - 4096)
        flags = history.flags_range(start, stop)
        for k in range(len(flags) - 1, -1, -1):
            f = flags[k]
            if f & BRANCH and (f & insn_flags.TAKEN or not f & insn_flags.CONDITIONAL):
                found.append((start + k, start + k + 1))
                if len(found) == count:
                    break
        stop = start
    return found


def scope_variables(recording, capture, position: int) -> list[dict]:
    """The variables of the Processor Trace scope at `position` of `capture`."""
    history = capture.history
    trace = capture.trace
    last = len(history) - 1
    ip = history.ip(position)
    t0 = trace.ns(history.time(0))
    cycles = capture.cycles

    def plain(name: str, value: str, kind: str = "") -> dict:
        return {"name": name, "value": value, "type": kind, "variablesReference": 0}

    branches = last_branches(capture, position)

    def branch_items() -> list[dict]:
        items = []
        for k, (src, dst) in enumerate(branches):
            target = history.ip(dst) if dst <= last else None
            to = where(capture, target) if target is not None else "(end of the window)"
            items.append(plain(f"[{k}] insn {src}", f"{where(capture, history.ip(src))} -> {to}",
                               "branch"))
        return items

    gaps = history.gaps

    def gap_items() -> list[dict]:
        return [plain(f"[{k}] before insn {g.position}",
                      f"{g.reason} (trace offset {g.offset:#x}, ip {g.ip:#x})", "gap")
                for k, g in enumerate(gaps)]

    head = [
        plain("capture", f"#{capture.id}, thread {capture.tid}: {capture.window.describe()}"),
        plain("position", f"instruction {position} of {capture.instructions}"
              + (" (the window's last)" if position == last else " (replaying)")),
        # which clock the times and cycles below are, as the ptdebug/capture event says
        plain("clock", trace.clock_label, trace.clock),
        plain("recorder", f"{capture.recorder_choice['name']}: {capture.recorder_choice['why']}",
              "recorder"),
    ]
    if trace.stepper:  # (the stepper's and DBI's wall clock: no CPU time)
        timing = _stepper_timing(capture, position, plain)
    else:
        ipc = f"{capture.instructions / cycles:.3f}" if cycles else "n/a (no cycles recorded)"
        timing = [
            plain("TSC", str(history.time(position)), "u64"),
            plain("IP", f"{ip:#x} {where(capture, ip)}", "address"),
            plain("CYC", str(history.cycles(position) - history.cycles(0)), "cycles since the "
                  "window opened"),
            plain("ns since window opened", str(trace.ns(history.time(position)) - t0), "ns"),
            plain("instructions in window", str(capture.instructions)),
            plain("cycles in window", str(cycles)),
            plain("IPC", ipc),
        ]
    variables = [
        *head,
        *timing,
        {"name": "last branches", "value": f"{len(branches)} taken branches before this "
         "point, newest first", "type": "", "variablesReference":
         recording.reference(branch_items) if branches else 0},
        {"name": "gaps", "value": (f"{len(gaps)} gaps" if gaps else "none: the window is "
                                   "complete"), "type": "", "variablesReference":
         recording.reference(gap_items) if gaps else 0},
    ]
    linkage = capture.linkage_name(ip)
    if linkage is not None and linkage != capture.function(ip)[0]:
        # frames, this scope and the exports show the demangled name; the linkage name is here
        variables.append(plain("linkage name", linkage, "mangled symbol"))
    if capture.partial:
        variables.append(plain("partial", capture.partial))
    # a Python capture: the Python frame here, its line's run, the cost of each of its lines
    variables[2:2] = _python_variables(recording, capture, position, plain)
    # a Go capture: which goroutine ran here, and time per goroutine in the window
    variables[2:2] = goroutine_view.scope_variables(recording, capture, position)
    return variables


STEPPER_TIME = "stepper time, not CPU time"
"""The type shown beside every time of a stepper capture."""


def _stepper_timing(capture, position: int, plain) -> list[dict]:
    """The timing items of a stepper capture: instructions first, its one clock named as
    what it is (the CYC column repeats the same ns, so it is not shown twice), no IPC."""
    history = capture.history
    trace = capture.trace
    ip = history.ip(position)
    since = trace.ns(history.time(position)) - trace.ns(history.time(0))
    window = capture.duration_ns
    per_instruction = (f"; {window / capture.instructions / 1000:.3f} us an instruction"
                       if capture.instructions else "")
    dbi = trace.manifest.get("backend") == "dbi"
    return [
        plain("instructions since window opened", str(position), "instructions (exact)"),
        plain("instructions in window", str(capture.instructions), "instructions (exact)"),
        plain("IP", f"{ip:#x} {where(capture, ip)}", "address"),
        plain("stepper time since window opened", f"{since / 1e6:.3f} ms", STEPPER_TIME),
        plain("stepper time in window", f"{window / 1e6:.3f} ms (a thread slowed by "
              f"{trace.slowed_by}{per_instruction})", STEPPER_TIME),
        plain("stepper clock", f"{history.time(position)} ns (CLOCK_MONOTONIC at the "
              + ("recorder's drains of its ring, every few ms)" if dbi
                 else "recorder's stops)"), STEPPER_TIME),
        plain("IPC", "n/a: the recorder records no CPU cycles (its cycles are its ns)"),
    ]


def _python_variables(recording, capture, position: int, plain) -> list[dict]:
    """The Python items of a capture with Python frame samples at a position a Python frame
    ran (features.python_replay): the frame, the run of its line holding the position, and
    per line of its function the instructions and time (stepper time, named so, for a
    stepper capture; CPU cycles besides for Intel PT) spent while it was the running line."""
    from adapter.features import python_replay
    frame = python_replay.frame_at(capture, position)
    if frame is None:
        return []
    stepper = capture.trace.stepper
    kind = STEPPER_TIME if stepper else "instructions, time, cycles"

    def cost(n: int, ns: int, cycles: int) -> str:
        text = f"{n} instructions, {ns / 1e6:.3f} ms"
        return text if stepper else text + f", {cycles} cycles"

    place = f"{frame.qualname} ({os.path.basename(frame.filename)}:{frame.line})"
    items = [plain("Python frame", f"{place}, {frame.depth} frames deep", "recorded Python")]
    run = python_replay.run_at(capture, position)
    if run is not None:
        start, stop, spent = run
        items.append(plain("Python line run", f"{cost(*spent)}: instructions {start}.."
                           f"{stop - 1}, {position - start} of them before this point", kind))
    lines = python_replay.line_costs(capture, frame.code)

    def line_items() -> list[dict]:
        return [plain(f"line {line}", f"{cost(n, ns, cycles)} in {runs} executions", kind)
                for line, n, ns, cycles, runs in lines]

    items.append({"name": f"Python lines of {frame.qualname}", "value":
                  f"{len(lines)} lines: what each took while it was the running line "
                  "(native code under it included, callees' lines not)", "type": kind,
                  "variablesReference": recording.reference(line_items) if lines else 0})
    return items


def scope(recording, capture, position: int) -> dict:
    """The DAP Scope of `capture` at `position`."""
    return {"name": SCOPE_NAME, "presentationHint": "registers", "expensive": False,
            "variablesReference": recording.reference(
                lambda: scope_variables(recording, capture, position))}


class TraceScope:
    """Adds the Processor Trace scope to the scopes of a stopped thread that has a capture."""

    def __init__(self, session, recording):
        self.session = session
        self.recording = recording
        self.frame_threads: dict[int, int] = {}
        """debugpy frameId -> threadId, learnt from stackTrace answers."""
        session.routes.add(TRACE_SCOPE, "scopes", watch=self._scopes, active=self.intercepting)
        session.routes.add(TRACE_SCOPE, "stackTrace", watch=self._stack_trace,
                           active=self.intercepting)

    def intercepting(self, command: str) -> bool:
        """Whether its watches may act on `command` now (Session.update_fast_path lets
        the fast relay carry it otherwise): only once there is a capture."""
        return bool(self.recording.captures)

    def _stack_trace(self, request: Request) -> Callable[[dict], None] | None:
        """Watches stackTrace answers: learns which thread each frame is in."""
        if not self.recording.captures:
            return None
        thread_id = (request.raw.get("arguments") or {}).get("threadId")

        def observe(response: dict) -> None:
            for frame in (response.get("body") or {}).get("stackFrames") or []:
                self.frame_threads[frame.get("id")] = thread_id

        return observe

    def _scopes(self, request: Request) -> Callable[[dict], None] | None:
        """Watches scopes answers: adds the Processor Trace scope of the frame's thread."""
        if not self.recording.captures:
            return None
        frame_id = (request.raw.get("arguments") or {}).get("frameId")
        thread_id = self.frame_threads.get(frame_id)
        capture = self.recording.latest(thread_id)
        if capture is None:
            return None
        reverse = self.session.reverse
        position = (reverse.position_of(thread_id, capture) if reverse is not None
                    else len(capture.history) - 1)

        def observe(response: dict) -> None:
            if response.get("success"):
                body = response.setdefault("body", {})
                body.setdefault("scopes", []).append(scope(self.recording, capture, position))

        return observe

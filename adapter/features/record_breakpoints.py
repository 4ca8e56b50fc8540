"""Record breakpoints: DAP source breakpoints in mode `record` that open a trace window instead
of stopping, and the captures they leave in the session (the feature: the breakpoints the
client set, the stops it consumes or holds back, each capture from the record breakpoint's
stop to its announcement).

Layer: features. Knows DAP and the Session's hooks (its steps of the route table, adapter/routes.py,
`backend.request`) and the backends' powers (adapter/powers.py); records in a recorder process
(recorder_worker.py: adapter.capture.record, the ptrace stepper writing an Intel PT bundle) and
decodes the bundle with adapter.recording.recording. The window settings are record_window.py's, a
capture is captures.py's. It knows nothing of how the trace scope or reverse stepping present a
capture: they read `captures`.

How a record breakpoint fires (Python backend):
- `setBreakpoints` is intercepted: each breakpoint is forwarded to debugpy as a normal one with
  its condition / hitCondition (debugpy evaluates them; `mode` is removed), and the ids debugpy
  gives back to the `record` ones are remembered.
- When debugpy reports a stop whose `hitBreakpointIds` are all record breakpoints, the event is
  consumed (the user never sees it). Off the reader thread, the stopped thread's OS id is asked
  of debugpy (`threading.get_native_id()` in its top frame; once per thread); a recorder child
  process (adapter/features/recorder_worker.py, started once per session and kept warm: the
  stepper's watchdog is a SIGALRM handler, which Python runs only on a main thread) seizes that
  one thread with ptrace and stops it; only then is
  debugpy told to `continue` (pydevd works in-process, so the thread it releases is still held
  by ptrace and cannot run away); the stepper then lets it
  run to the window's native function (a debug-register breakpoint) or records at once, for N
  instructions / T ms / until that function returns, and releases it before it reads the
  process's mappings and encodes the trace (the request waits for the window only). Stops
  reached while a capture holds its thread, and stops other than a record breakpoint's while
  captures are being encoded and decoded, are held back and delivered after, so they see it; a
  record breakpoint's stop during another capture's decoding starts its own capture at once.
  Each capture's steps are timed in one INFO line of the adapter's log (StepClock).
- Each capture is decoded into a History, kept in `captures`, and announced by the custom event
  `ptdebug/capture` (id, thread, window, instructions, cycles, duration, gaps). Its bundle is in
  the session's captures directory (adapter/capture/captures_dir.py), its program files put
  into the directory's captures store once it is announced (image_store.store_images_in, on a
  thread of its own: the event's `preparing` says so, `ptdebug/capturePrepared` follows), leased
  while the session lasts, and outlives the session; the directory's size limit removes the
  oldest captures no session uses and no one pinned (retention.enforce).
- A replayed bundle's threads become captures too (`adopt_replay`, for backends.replay).
- Data breakpoints armed at the same time share the thread's debug registers with the
  recorder (it uses the slots they leave); a failure is told to the user in an `output` event
  and the program runs on.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import pathlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from adapter.features import window_recorder
from adapter.features.captures import Capture
from adapter.features.record_window import (
    BREAKPOINT_MODES,
    RECORD_MODE,
    RecordWindow,
    ReplayedWindow,
)
from adapter.features.recorder_worker import (
    GOROUTINE_PARKED,
    RecorderWatchdog,
    RecorderWorker,
    RecorderWorkers,
)
from adapter.features.recording_progress import RecordingProgress
from adapter.features.replay_hits import ReplayBreakpoint
from adapter.features.run_control import RECORDED_RELEASE_TIMEOUT, RELEASE_TIMEOUT
from adapter.features.window_ends import (
    native_position,
    python_window_lines,
    tell_python_window,
    tell_unwatched,
)
from adapter.golang.park import Parked, resume_preemption, unpark
from adapter.powers import (
    HandsOverThreads,
    ReplaysRecordings,
    RunsInsidePython,
    records,
)
from adapter.protocol.channel import DEFERRED
from adapter.protocol.errors import AdapterError, BackendTimeout, NotRecorded
from adapter.protocol.messages import Event, Request
from adapter.protocol.schema import CaptureNowIn, CapturePreparedOut, parse
from adapter.routes import RECORD

log = logging.getLogger("ptdebug.dap")

LOCAL_REFERENCE_BASE = 1 << 28
"""variablesReference / frameId numbers from here on are ptdebug's (debugpy counts from 1)."""
RECORDER_GRACE = 120.0
"""Seconds a recording may take beyond waiting for its trigger (the stepper records some
10^5-10^6 instructions a second here; a 5 M-instruction window takes about 5 s)."""
DISCONNECT_LET_GO_S = 5.0
"""Seconds a `disconnect` waits for a recorded thread to be let go before it goes on."""


@dataclass
class SourceBreakpoints:
    """What the client set in one source file."""
    record_ids: dict[int, dict] = field(default_factory=dict)
    """debugpy breakpoint id -> the client's breakpoint (mode record)."""
    replay: list[ReplayBreakpoint] = field(default_factory=list)
    """Every one of them (any mode) as a replay stops at it: id, line, conditions."""
    stops: list[tuple[int, str]] = field(default_factory=list)
    """(line, condition) of those that stop the program (mode normal, no logMessage,
    verified), at the line the debugger put them: a record window closes at them."""


@dataclass(eq=False)
class LiveWindow:
    """The recorder side of one capture while its recorder runs: what a stop, a pause, a
    data-breakpoint hit or a disconnect acts on. One object per capture, because captures
    overlap: the one before may still be encoding in its recorder when the next record
    breakpoint's window waits for its line, and the first one's end once cleared the
    second's state; its wait's clock, which the user's stop had stood still, ran on, and
    the hit was lost under load (issue 13, 1 run in 5-8)."""

    worker: RecorderWorker
    thread_id: int
    """The DAP thread id it records."""
    tid: int
    """The OS thread id it records."""
    watchdog: RecorderWatchdog
    line: str
    """The Python line the window opens at, as the user is told of it ("service.py:30"),
    or ""."""
    opening: bool = False
    """A window on a Python line waits for its thread to run the line (the recorder said
    `attached`, not yet `thread at the Python line`)."""
    held: bool = False
    """... and the debugger stopped the program for the user meanwhile: the thread runs the
    line after the user continues (RecordBreakpoints._hold_opening)."""


STORING = "storing the program's files in the captures store"
"""What a capture prepares after its announcement (`preparing` of its event)."""
PREPARE_AT_CLOSE_S = 60.0
"""Seconds the session's end waits for a capture still being prepared."""
WARM_UP_PERIOD_S = 0.5
"""Seconds between two looks at the program's mappings while it has record breakpoints."""
OWN_WINDOW_WAIT = 30.0
"""Seconds a record breakpoint's stop of a thread still being recorded waits for that
thread's capture to let it go (its window closes at once on that stop)."""


class RecordBreakpoints:
    """The record-breakpoint feature of one session; owns the captures."""

    def __init__(self, session):
        self.session = session
        self.sources: dict[str, SourceBreakpoints] = {}
        self.captures: list[Capture] = []
        self.local_references: dict[int, Any] = {}
        """ptdebug's own variablesReference -> callable returning DAP variables."""
        self._next_reference = LOCAL_REFERENCE_BASE
        self._directory: str | None = None
        """The captures directory of the session, once the first capture made it."""
        self._stored_images: dict[tuple, str] = {}
        """(path, inode, size, mtime) of a program file -> its key in the captures store."""
        self._closed = threading.Event()
        """The session ended (the read-ahead of _warm_up stops)."""
        self._warming = False
        self._preparing: list[threading.Thread] = []
        """The threads preparing captures after their announcement (_prepare)."""
        self._prepare_lock = threading.Lock()
        self._told_over = False
        """The directory was over its limit with nothing left to remove, and the user was
        told (not again after every capture)."""
        self._leases: list = []
        """retention.Lease of every capture of the session (recorded or replayed): while the
        session lasts, the captures directory's limit never removes them."""
        self._busy = threading.Lock()
        self._recording: set[int] = set()
        """DAP ids of the threads a capture holds: from its stop until the recorder lets the
        thread go. More than one when another thread's record breakpoint was hit while the
        captures in progress had their recorders attached: its capture begins beside them
        (debugpy sessions, _filter_event)."""
        self._starting: set[int] = set()
        """Those whose recorder has not attached yet (the program is stopped for them)."""
        self._held: list[tuple[dict, int]] = []
        """Stops held back during a capture, each with run_control.resumes_seen() then."""
        self._live: dict[int, LiveWindow] = {}
        """DAP thread id -> the newest capture of that thread whose recorder runs (an older
        one may still be encoding)."""
        self._wait_lock = threading.Lock()
        """Guards LiveWindow.held and what it stands still."""
        self._workers = RecorderWorkers(lambda: session.pid)
        self._phase_lock = threading.Lock()
        self._finishing = 0
        """Captures whose thread is let go, being encoded and decoded."""
        self._next_number = 1
        self._listeners: list = []
        self._lock = threading.Lock()
        for command, handler in (("setBreakpoints", self._set_breakpoints),
                                 ("variables", self._variables),
                                 ("ptdebug/captureNow", self._capture_now),
                                 ("pause", self._pause)):
            session.routes.add(RECORD, command, take=handler, active=self.intercepting)
        session.routes.on_events(RECORD, self._filter_event)

    # --- shared with the trace scope and reverse stepping ---------------------------------
    def reference(self, produce) -> int:
        """A new variablesReference whose `variables` are `produce()` (answered locally)."""
        with self._lock:
            self._next_reference += 1
            self.local_references[self._next_reference] = produce
            return self._next_reference

    def on_capture(self, listener) -> None:
        self._listeners.append(listener)

    def intercepting(self, command: str) -> bool:
        """Whether its steps may take `command` now (Session.update_fast_path):
        `variables` of ptdebug's own references, which exist only once there is a capture;
        the others always."""
        if command == "variables":
            return bool(self.captures or self.local_references)
        return True

    def latest(self, thread_id: int | None) -> Capture | None:
        for capture in reversed(self.captures):
            if thread_id is None or capture.thread_id == thread_id:
                return capture
        return None

    def _variables(self, request: Request) -> object:
        reference = (request.raw.get("arguments") or {}).get("variablesReference")
        produce = self.local_references.get(reference)
        if produce is None:
            return None
        return {"variables": produce()}

    # --- setBreakpoints -------------------------------------------------------------------
    def _set_breakpoints(self, request: Request) -> object:
        backend = self.session.backend
        if not (records(backend) or isinstance(backend, ReplaysRecordings)):
            return None  # (a replay records nothing, but its breakpoint lines stop replays)
        arguments = dict(request.raw.get("arguments") or {})
        asked = list(arguments.get("breakpoints") or [])
        path = (arguments.get("source") or {}).get("path") or ""
        modes = []
        for bp in asked:
            mode = bp.get("mode") if isinstance(bp, dict) else None
            if mode not in (None, "normal", RECORD_MODE):
                raise AdapterError(f"breakpoint mode {mode!r} is not one of ptdebug's modes "
                                   "('normal', 'record')")
            modes.append(mode)
        # index in `asked` -> why its window can never open: not sent to the debugger, and
        # answered unverified with that reason (issue 34: a misspelt function failed at the hit)
        refused: dict[int, str] = {}
        for index, bp in enumerate(asked):
            if bp.get("mode") == RECORD_MODE:
                window = RecordWindow.from_dicts(self.session.launch_arguments.get(
                    "recordWindow"), bp.get("recordWindow"))  # a bad window fails here, now
                why = _window_refused(backend, window)
                if why is not None:
                    refused[index] = why
        arguments["breakpoints"] = [{k: v for k, v in bp.items()
                                     if k not in ("mode", "recordWindow")}
                                    for index, bp in enumerate(asked) if index not in refused]
        request.raw["arguments"] = arguments

        def observe(response: dict) -> None:
            entry = SourceBreakpoints()
            answered = (response.get("body") or {}).get("breakpoints") or []
            if refused and response.get("success"):
                answered = _with_refused(asked, answered, refused, path)
                response["body"]["breakpoints"] = answered
            entry.replay = [ReplayBreakpoint(
                result.get("id") if isinstance(result.get("id"), int) else None, path,
                bp.get("line"), str(bp.get("condition") or ""), str(bp.get("hitCondition") or ""))
                for bp, result in zip(asked, answered + [{}] * (len(asked) - len(answered)))
                if isinstance(bp.get("line"), int) and bp.get("line") > 0]
            for bp, mode, result in zip(asked, modes, answered):
                if mode != RECORD_MODE and not bp.get("logMessage") and result.get("verified"):
                    line = result.get("line") or bp.get("line")
                    if isinstance(line, int):
                        entry.stops.append((line, str(bp.get("condition") or "")))
                if (mode == RECORD_MODE and result.get("id") is not None
                        and records(backend)):
                    entry.record_ids[result["id"]] = bp
                    window = RecordWindow.from_dicts(
                        self.session.launch_arguments.get("recordWindow"), bp.get("recordWindow"))
                    # described as it will record: in a debugpy session, a window on a Python
                    # line (sized in Python terms, as _capture makes it)
                    window = dataclasses.replace(window, python_line=not window.function and
                                                 not isinstance(backend, HandsOverThreads))
                    window = window.bounded(go=isinstance(backend, HandsOverThreads))
                    if result.get("verified", True):
                        result["message"] = (f"record: a trace window opens here "
                                             f"({window.describe()})")
                    else:
                        # the debugger's reason stays (debugpy's justMyCode on a library
                        # file, first contact 2026-12-05: it was replaced by the line above,
                        # and the grey breakpoint said a window opens there)
                        why = str(result.get("message") or "").strip() or (
                            "the debugger did not verify it")
                        result["message"] = (f"record: no window opens here while the "
                                             f"debugger cannot stop here: {why}")
            self.sources[path] = entry
            if entry.record_ids:  # its first capture should not wait for a recorder to start
                threading.Thread(target=self._warm_up, daemon=True,
                                 name="ptdebug-recorder-warm-up").start()

        self.session.backend.forward(request, observe)
        return DEFERRED

    def _warm_up(self) -> None:
        """Before the windows: a recorder process started, and, while the session has record
        breakpoints, the images of the program kept listed (adapter/capture/process_images.py,
        in the recorder processes) and the headers of the files it maps read
        (pt_decoder.image.elf_layout, kept per file): a capture reads after its window only
        what changed since (issue 33: 0.2 s listing and 0.3 s opening an onnxruntime
        capture). The mappings are looked at again every WARM_UP_PERIOD_S (a program imports
        its native libraries as it starts and later); a read costs about a millisecond."""
        self._workers.warm_up()
        with self._lock:
            if self._warming:
                return
            self._warming = True
        from adapter.capture.process_images import FileMapping, ProcessImages
        from pt_decoder.errors import PtError
        from pt_decoder.image import elf_layout
        listing = ProcessImages()
        seen: set = set()
        while not self._closed.wait(WARM_UP_PERIOD_S):
            with self._lock:
                if not any(entry.record_ids for entry in self.sources.values()):
                    self._warming = False  # (the next record breakpoint starts it again)
                    return
            pid = self.session.pid
            if pid is None:
                continue
            try:
                files = {m for m in listing.mappings(pid) if isinstance(m, FileMapping)}
            except OSError:
                continue  # (ended: the session ends soon)
            if files <= seen:
                continue
            for mapping in files - seen:
                try:
                    elf_layout(mapping.path)
                except PtError:
                    pass  # (not ELF: opened raw at the capture, as before)
            seen |= files
            self._workers.warm_images()

    def _record_breakpoint(self, ids) -> dict | None:
        for path, entry in self.sources.items():
            for bp_id in ids:
                if bp_id in entry.record_ids:
                    return {"id": bp_id, "path": path, **entry.record_ids[bp_id]}
        return None

    def _record_hit(self, body: dict) -> dict | None:
        """The record breakpoint a `stopped` event's body hit, when every breakpoint it hit is
        one (a normal breakpoint on the same line wins: the user sees that stop)."""
        ids = body.get("hitBreakpointIds") or []
        if body.get("reason") != "breakpoint" or not ids or any(
                self._record_breakpoint([i]) is None for i in ids):
            return None
        return self._record_breakpoint(ids)

    def replay_breakpoints(self) -> list[ReplayBreakpoint]:
        """Every source breakpoint the client set (any mode), as replays stop at them."""
        return [bp for entry in self.sources.values() for bp in entry.replay]

    # --- stops ----------------------------------------------------------------------------
    def _filter_event(self, raw: dict) -> bool:
        if raw.get("event") == "continued":
            with self._lock:  # DAP: references are valid only while the program is paused
                self.local_references.clear()
        if raw.get("event") != "stopped":
            return False
        body = raw.get("body") or {}
        breakpoint = self._record_hit(body)
        record_stop = breakpoint is not None
        thread = body.get("threadId")
        all_stop = bool(body.get("allThreadsStopped"))
        with self._phase_lock:
            opening = [w for w in self._live.values() if w.opening]
            # a capture that is starting (not attached yet) or records its thread
            busy = bool(self._recording - {w.thread_id for w in opening})
            # the windows whose thread this stop holds before it ran its line: that thread
            # stays in the debugger's suspension until the program is continued, and runs
            # the line then; their waits stand still meanwhile (_hold_opening)
            held_windows = [w for w in opening if all_stop or w.thread_id == thread]
            newly_held = [w for w in held_windows if self._hold_opening(w)]
            # another thread's record breakpoint while the captures in progress have their
            # recorders attached: its capture begins beside them, and its release lets them
            # go on. Before, a window waiting for its thread to run the line was ended ("not
            # recorded this time": the new stop could not end before it, nor it before the
            # stop; tests/e2e/test_dap_record_two_threads.py), and a window recording
            # stalled: debugpy suspended its thread inside the tracer the recorder lets run
            # untraced, and the stop held back waited for the window (2 minutes, until the
            # watchdog, in a scikit-learn forest on two threads, first contact 2026-12-05)
            beside = (record_stop and bool(self._recording) and not self._starting
                      and thread not in self._recording
                      and isinstance(self.session.backend, RunsInsidePython))
        if not record_stop and newly_held:
            for window in newly_held:
                self.session.client.send_event("output", {"category": "console", "output":
                    f"ptdebug: record breakpoint at {window.line}: the program stopped before "
                    f"thread {window.thread_id} ran the line; its window opens when the thread "
                    "runs it, once you continue\n"})
        if not record_stop and held_windows and not busy:
            # (another thread's breakpoint, step or data breakpoint, a pause): the user's
            # stop, shown now, not held for the captures, which would wait for it (that hit
            # went unrecorded, issue 13)
            return False
        with self._phase_lock:
            live = self._live.get(thread)
            recorded_thread = (thread in self._recording and live is not None
                               and not live.opening
                               and isinstance(self.session.backend, RunsInsidePython))
            if recorded_thread:
                # debugpy stopped the thread being recorded (a breakpoint the window did not
                # see coming, an exception): the rest of the window would record it waiting
                # in debugpy, so it closes now; the stop is shown once the capture is kept.
                # (Not on another thread's stop that stops all: ptdebug's own data-breakpoint
                # stops are such, and closing there left windows empty, 2026-12-03; a pause
                # closes the window at the request, _pause.)
                live.worker.end_window("debugger")
            # while a capture holds its thread, every stop waits; while captures are only
            # being decoded (the program runs again), a record breakpoint's stop starts its
            # own capture at once and the others wait, so that they see the capture
            if record_stop and recorded_thread and thread not in self._starting:
                # the recorded thread's own record breakpoint again (its window closes: the
                # stop of a recorded thread, above; or the adapter has not read yet that the
                # window let it go): its capture begins once the recorder lets it go. Held
                # until every capture was over, it waited for the others' windows, whose
                # threads this stop had suspended in debugpy's tracer, which the recorder
                # lets run untraced: a scikit-learn forest on two threads froze until the
                # watchdog (tests/e2e/test_dap_record_sklearn_forest.py)
                self.session.paused = False
                threading.Thread(target=self._after_own_window, args=(raw, thread), daemon=True,
                                 name="ptdebug-record-next").start()
                return True
            if not beside and (self._recording or (self._finishing and not record_stop)):
                # delivered once the capture is kept, unless the program resumed meanwhile
                self._held.append((raw, self.session.run_control.resumes_seen()))
                self.session.paused = False
                return True
            if record_stop:
                if beside:
                    log.info("record breakpoint: thread %s's capture begins beside that of "
                             "thread %s", thread,
                             ", ".join(str(t) for t in sorted(self._recording)))
                self._recording.add(thread)
                self._starting.add(thread)
        if not record_stop:
            return False  # (a normal breakpoint on the same line: the user sees the stop)
        self.session.paused = False
        hold = self.session.run_control.hold("record breakpoint")  # the user's continue waits
        threading.Thread(target=self._capture, args=(body, breakpoint, None, hold), daemon=True,
                         name="ptdebug-record").start()
        return True

    def _after_own_window(self, raw: dict, thread: int) -> None:
        """Take `raw` (a record breakpoint's stop of `thread`) again once the capture that
        records `thread` has let it go."""
        deadline = time.monotonic() + OWN_WINDOW_WAIT
        while time.monotonic() < deadline:
            with self._phase_lock:
                if thread not in self._recording:
                    break
            time.sleep(0.01)
        else:
            log.warning("record breakpoint: thread %s was not let go within %g s; its next "
                        "stop waits for every capture", thread, OWN_WINDOW_WAIT)
            with self._phase_lock:
                self._held.append((raw, self.session.run_control.resumes_seen()))
            return
        try:
            self._filter_event(raw)
        except Exception as exc:  # noqa: BLE001 - told, never a thread dying silently
            log.exception("record breakpoint: a stop could not be taken")
            self.session.client.send_event("output", {"category": "important", "output":
                f"ptdebug: a record breakpoint's stop could not be taken: {exc}\n"})

    # Lock order: _phase_lock, then run control's lock (resumes_seen), then _wait_lock; the
    # resume listener runs under run control's lock and so takes only _wait_lock.
    def _hold_opening(self, live: LiveWindow) -> bool:
        """(Under _phase_lock.) The program stopped for the user while `live` waits for its
        thread to run its Python line: the wait's timeouts (the recorder's and the
        watchdog's) stand still until the program runs again (program_resumed). False when
        they stood still already."""
        with self._wait_lock:
            if live.held:
                return False
            live.held = True
            live.worker.wait_held(True)
            live.watchdog.hold()
            return True

    def _end_opening(self, live: LiveWindow) -> None:
        """`live`'s window opened (or its recording ended): its wait is over."""
        with self._phase_lock:
            live.opening = False
        self._let_wait_run(live)  # (a window that opened records now: its watchdog runs)

    def _window_over(self, live: LiveWindow) -> None:
        """`live`'s recorder has ended: its wait (if any) is over, and it is no longer the
        live window, unless the next capture's has become that meanwhile (which stays as it
        is: held, if the user holds the program)."""
        self._end_opening(live)
        with self._phase_lock:
            if self._live.get(live.thread_id) is live:
                del self._live[live.thread_id]
            elif live.thread_id in self._live:
                log.debug("record breakpoint: a recorder ended while the next capture's was "
                          "live (%s)", "its window held for the user"
                          if self._live[live.thread_id].held else "not held")

    def _let_wait_run(self, live: LiveWindow | None) -> None:
        with self._wait_lock:
            if live is None or not live.held:
                return
            live.held = False
            live.worker.wait_held(False)
            live.watchdog.resume()

    def program_resumed(self) -> None:
        """The program (or a thread) runs again (run_control.on_resume, wired by Session):
        the waiting windows' timeouts run again."""
        for live in list(self._live.values()):
            self._let_wait_run(live)

    def _release_recorded(self, release, number: int, thread_id: int | None = None) -> None:
        """Let the program run on once the recorder holds the thread. A debugpy that does not
        answer in time (its threads wait for the GIL the recorded thread holds): the window
        records on (whatever the thread does, it is recorded) and the capture is kept; the user
        is told why it may show the thread waiting in debugpy. Runs on its own thread for a
        window on a Python line: any other failure is told too."""
        try:
            release(recording=True)
            # a thread the recorder never stops (DBI) may have run to its next stop before
            # the release's answer counted as a resume: that stop came after the release,
            # and is not stale (its mark is taken again; the user cannot resume meanwhile:
            # the hold keeps their requests waiting)
            mark = self.session.run_control.resumes_seen()
            with self._phase_lock:
                self._held = [(raw, mark if (raw.get("body") or {}).get("threadId") == thread_id
                               else seen) for raw, seen in self._held]
        except BackendTimeout as exc:
            log.warning("record breakpoint: %s", exc)
            self.session.client.send_event("output", {"category": "important", "output":
                f"ptdebug: capture {number}: {exc}; the window records on, and may show the "
                "thread waiting in the debugger\n"})
        except Exception as exc:  # noqa: BLE001 - told, never a thread dying silently
            log.warning("record breakpoint: letting the program run failed: %s", exc,
                        exc_info=not isinstance(exc, AdapterError))
            self.session.client.send_event("output", {"category": "important", "output":
                f"ptdebug: capture {number}: the debugger could not let the program run on: "
                f"{exc}\n"})

    def _keep(self, capture: Capture) -> None:
        self.captures.append(capture)
        self.session.client.send_event("ptdebug/capture", capture.event_body())
        if capture.trace.clock == "stepper":  # its cycles are its ns: said once, as what they are
            cost = (f"{capture.duration_ns / 1e6:.3f} ms stepper time (slowed by "
                    f"{capture.trace.slowed_by}, not CPU time)")
        else:
            cost = f"{capture.cycles} cycles, {capture.duration_ns / 1e6:.3f} ms"
        self.session.client.send_event("output", {"category": "console", "output":
            f"ptdebug: capture {capture.id}: thread {capture.tid}, {capture.window.describe()}: "
            f"{capture.instructions} instructions, {cost}, {len(capture.history.gaps)} gaps\n"})
        for listener in self._listeners:
            listener(capture)

    def adopt_replay(self, replayed) -> None:
        """The threads of a replayed bundle (backends.replay.ReplayedBundle) become captures,
        one a thread, those of one stream sharing its decode, line table and goroutine index
        (the recording's); each stream is announced once (`ptdebug/capture`). Reverse stepping puts every thread
        in its history at once (Capture.replay_from)."""
        manifest = replayed.trace.manifest
        stats = manifest.get("stats") or {}
        window = ReplayedWindow(text=replayed.describe())
        self._lease_replayed(replayed.path)
        first: dict[int, Capture] = {}
        for thread in replayed.threads:
            shared = first.get(thread.stream)
            capture = Capture(thread.stream + 1, replayed.trace.threads[thread.stream].tid,
                              thread.thread_id, window, replayed.path, replayed.trace,
                              end_reason=str(stats.get("end_reason") or ""),
                              partial=manifest.get("partial_reason"), stream=thread.stream,
                              replay_from=thread.position,
                              _lines=shared.lines if shared is not None else None)
            if shared is None:
                first[thread.stream] = capture
                self._keep(capture)
            else:
                self.captures.append(capture)
                for listener in self._listeners:
                    listener(capture)

    def _lease_replayed(self, path) -> None:
        """A replayed bundle is not removed by a captures directory's limit while the session
        replays it (a bundle anywhere else, or one that cannot take a lease, is left as is)."""
        from adapter.capture import image_store, retention
        if not image_store.store_directory(pathlib.Path(path).parent).is_dir():
            return  # not in a captures directory: no limit removes it
        try:
            self._leases.append(retention.Lease(path))
        except (retention.RetentionError, OSError) as exc:
            log.info("no lease on the replayed bundle %s: %s", path, exc)

    def _pause(self, request: Request) -> object:
        """A `pause` while a debugpy window records: the window closes now, and the pause goes
        to debugpy. debugpy suspends the thread at its next traced Python line, which at the
        stepper's pace was 27 s away in a scikit-learn partial_fit (2026-12-03, 727,000
        instructions recorded meanwhile, the last of them in debugpy's own suspension)."""
        with self._phase_lock:
            # (not while a window on a Python line waits for its thread to run the line: the
            # pause's stop holds that wait, _filter_event)
            recording = [w for t, w in self._live.items()
                         if t in self._recording and not w.opening]
        if isinstance(self.session.backend, RunsInsidePython):
            for live in recording:
                live.worker.end_window("debugger")
        elif isinstance(self.session.backend, HandsOverThreads):
            # Go: Delve is away for the window; it closes now, the pause is answered at once
            # and the Delve that comes back pauses the program (backends/delve_away.py)
            for live in recording:
                live.worker.end_window("paused")
        return None  # forwarded

    def _capture_now(self, request: Request) -> object:
        """`ptdebug/captureNow {threadId?}`: record a paused thread now, with the launch
        configuration's window; the program then runs on. The response is the capture's
        `ptdebug/capture` body (sent as an event too)."""
        if not records(self.session.backend):
            return None
        if not self.session.paused:
            raise AdapterError("ptdebug/captureNow records a paused thread: pause the program "
                               "(or use a breakpoint in mode 'record') first")
        if self._recording:
            raise AdapterError("a capture is already being recorded")
        thread_id = parse(CaptureNowIn, request.raw.get("arguments") or {}).threadId
        if thread_id is None:
            threads = self.session.backend.request("threads", {}, timeout=10)
            listed = (threads.raw.get("body") or {}).get("threads") or []
            if not listed:
                raise AdapterError("the program has no thread to record")
            thread_id = listed[0]["id"]
        hold = self.session.run_control.hold("captureNow")  # its release and the user's are one
        with self._phase_lock:
            self._recording.add(thread_id)
            self._starting.add(thread_id)
        threading.Thread(target=self._capture, args=({"threadId": thread_id}, {}, request, hold),
                         daemon=True, name="ptdebug-record").start()
        return DEFERRED

    def _capture(self, stopped: dict, breakpoint: dict, answer: Request | None = None,
                 hold: int | None = None) -> None:
        """`hold`: run control's id of this capture's hold (its release and end are this
        hold's only: the next record breakpoint's may begin before this one ends)."""
        thread_id = stopped.get("threadId")
        backend = self.session.backend
        steps = StepClock(f"capture of thread {thread_id}")
        released = threading.Event()
        parked: list[Parked] = []
        """Set once Delve has let go of the program (Go): the thread spins at its pc until
        the recorder holds it and unparks it."""
        parked_at_end: list[Parked] = []
        """Where the recorder left it spinning when the window closed (Go)."""
        handed_over = False
        kept = False
        python_lines = None
        """debugpy: the Python lines the window closes at or watches (python_window_lines)."""
        stops: dict = {}
        """Go: address -> WindowStop, the user's breakpoints that close the window."""
        unwatched: dict = {}
        """Go: those whose condition was false when the window opened (told if passed)."""

        released_target = []

        def target_released() -> None:
            # the recorder has let the thread go (the window is closed; the trace is still to
            # be encoded and decoded): the next record breakpoint's stop may begin a capture
            with self._phase_lock:
                if not released_target:
                    released_target.append(True)
                    self._recording.discard(thread_id)
                    self._finishing += 1

        release_once = threading.Lock()  # (a window on a Python line releases on a thread
        # of its own, _release_recorded, and a capture that fails early releases here too)

        def release(recording: bool = False) -> None:
            with release_once:
                first = not released.is_set() and not parked
                if first:
                    released.set()
            if first:
                # never a continue the program cannot take (features/run_control.py)
                self.session.run_control.release(
                    thread_id, hold, RECORDED_RELEASE_TIMEOUT if recording else RELEASE_TIMEOUT)

        try:
            window = RecordWindow.from_dicts(self.session.launch_arguments.get("recordWindow"),
                                             breakpoint.get("recordWindow")).bounded(
                go=isinstance(backend, HandsOverThreads))
            # Data breakpoints armed meanwhile hold some of the thread's four debug registers
            # (SDM Vol. 3B §17.2): the stepper uses the slots they leave, and steps every
            # instruction where they leave none (capture/stepper.py, free_slots). Their hits
            # in the window are stops once it is over (data_breakpoints, after_hidden_stop).
            if isinstance(backend, HandsOverThreads):
                # Delve holds the program with ptrace, and a thread has one tracer: Delve lets
                # go of it for the window and comes back after (DelveBackend.hand_over)
                tid, pc = backend.thread_of(thread_id)
                window = dataclasses.replace(window, until=native_position(self.session.pid, window))
                # the user's breakpoints the thread may reach in the window: it closes there
                # and the Delve that comes back stops at it (adapter/golang/window_stops.py)
                stops, unwatched = backend.window_stops(thread_id, pc, self._record_lines())
                log.info("record breakpoint: the window closes at %s",
                         ", ".join(f"{s.where} ({a:#x})" for a, s in stops.items()) or "no "
                         "breakpoint")
                if any(stop.breakpoint_id > 0 for stop in stops.values()):
                    self.session.client.send_event("output", {"category": "console", "output":
                        f"ptdebug: recording goroutine {thread_id}: Delve lets go of the "
                        "program until the window closes; other goroutines pass breakpoints "
                        "without stopping meanwhile\n"})
                clock = [time.monotonic()]
                parked.append(backend.hand_over(tid, pc))
                handed_over = True  # from here the program runs on when Delve is back
                clock.append(time.monotonic())
            else:
                tid = backend.native_thread_id(thread_id)
                steps.mark("OS thread id asked of debugpy")
                # a record breakpoint on a Python line: the window opens when the thread runs
                # that line's code, and is sized in Python terms (adapter/python/line_window.py)
                window = dataclasses.replace(window, until=native_position(self.session.pid, window),
                                             python_line=bool(breakpoint.get("path")
                                                              and breakpoint.get("line")
                                                              and not window.function))
                python_lines = python_window_lines(backend, self.sources, thread_id)
                steps.mark("breakpoints in the window listed")

            def take_back() -> None:
                # as soon as the recorder is done, before decoding: the program is whole again
                start = parked.pop()  # taken back once, whatever happens
                unpark(start)

                def while_held() -> None:
                    # the new Delve holds every thread: the end park can go
                    for where in parked_at_end:
                        unpark(where)
                    resume_preemption(start)

                clock.append(time.monotonic())
                backend.take_back(while_held)
                clock.append(time.monotonic())
                log.info("record breakpoint: Delve away %.0f ms (letting go %.0f ms, recording "
                         "%.0f ms, attaching again and giving the breakpoints back %.0f ms)",
                         1e3 * (clock[3] - clock[0]),
                         *(1e3 * (b - a) for a, b in itertools.pairwise(clock)))

            capture = self._record(tid, thread_id, window, breakpoint.get("id"), release,
                                   parked=parked[0] if parked else None,
                                   parked_at_end=parked_at_end,
                                   recorded=take_back if parked else None, stop_at=stops,
                                   python_lines=python_lines, clock=steps,
                                   python_start=((breakpoint["path"], breakpoint["line"])
                                                 if window.python_line else None),
                                   target_released=target_released)
            tell_unwatched(self.session.client.send_event, capture, unwatched)
            if breakpoint.get("path"):
                capture.location = {"path": breakpoint["path"], "line": breakpoint.get("line")}
            self._keep(capture)
            kept = True
            steps.mark("kept")
            steps.report()
            self._prepare(capture)
            if answer is not None:
                answer.respond(capture.event_body())
        except NotRecorded as exc:
            # a window whose thread was stopped, or the program, before it ran the Python
            # line or the window's first instruction: nothing to record this time; the
            # breakpoint stays armed
            log.info("record breakpoint: %s", exc.message)
            if answer is not None:
                answer.fail(exc)
            else:
                where = f" at {breakpoint['path']}:{breakpoint['line']}" if breakpoint.get(
                    "path") else ""
                self.session.client.send_event("output", {"category": "console", "output":
                    f"ptdebug: record breakpoint{where}: not recorded this time: "
                    f"{exc.message}\n"})
        except Exception as exc:
            message = exc.message if isinstance(exc, AdapterError) else str(exc)
            log.warning("record breakpoint: %s", message, exc_info=not isinstance(
                exc, AdapterError))
            if answer is not None:
                answer.fail(exc if isinstance(exc, AdapterError) else AdapterError(message))
            else:
                self.session.client.send_event("output", {"category": "important", "output":
                    f"ptdebug: the record breakpoint did not record: {message}\n"})
        finally:
            try:
                if parked:  # the recording failed before the program was taken back
                    unpark(parked[0])
                    backend.take_back(lambda: [unpark(where) for where in parked_at_end])
                elif not handed_over and (answer is None or kept):
                    # never leave the program paused at a breakpoint unseen; a captureNow that
                    # failed leaves the program paused, as the user had it (issue 17)
                    release()
            except Exception as exc:
                # an AdapterError (debugpy did not answer the release, or is gone) is a known
                # outcome, told to the user below; anything else is a bug: its traceback
                log.warning("record breakpoint: letting the program run on failed: %s", exc,
                            exc_info=not isinstance(exc, AdapterError))
                self.session.client.send_event("output", {"category": "important", "output":
                    f"ptdebug: after the recording, the debugger could not take the program "
                    f"back: {exc}\n"})
            with self._phase_lock:
                self._starting.discard(thread_id)
                if released_target:
                    self._finishing -= 1
                else:
                    self._recording.discard(thread_id)
                # another capture in progress delivers them when it ends
                idle = not self._recording and not self._finishing
                held, self._held = (self._held, []) if idle else ([], self._held)
            for raw, mark in held:
                if self.session.run_control.resumed_since(mark):
                    log.info("record breakpoint: a stop held back during the capture is stale "
                             "(the program resumed since); not shown")
                    missed = self._record_hit(raw.get("body") or {})
                    if missed is not None and missed.get("path"):
                        # a record breakpoint's hit while another capture attached to its
                        # thread: the release of that one let this thread run on
                        self.session.client.send_event("output", {"category": "console",
                            "output": f"ptdebug: record breakpoint at {missed['path']}:"
                            f"{missed.get('line')}: not recorded this time: thread "
                            f"{(raw.get('body') or {}).get('threadId')} hit it while another "
                            "capture was starting, and ran on when that one let the program "
                            "go\n"})
                    continue
                self.session.backend_event(Event(raw), observed=True)
            self.session.run_control.done(hold)  # stops features queued meanwhile go out now

    def close_window_of(self, tid: int, why: str) -> None:
        """Close the window that holds OS thread `tid` now, if one does (`why`: a key of
        WINDOW_ENDS): its thread is to stop for the user (data breakpoints: it wrote a
        watched buffer), and the rest of the window would record it waiting."""
        with self._phase_lock:
            live = [w for w in self._live.values() if w.tid == tid]
        for window in live:
            window.worker.end_window(why)

    def let_go_before_disconnect(self, timeout: float = DISCONNECT_LET_GO_S) -> None:
        """The client is leaving: close the window that holds a thread now (complete, where
        it stands) and wait, at most `timeout`, until the recorder has let the thread go,
        so that the debugger hears `disconnect` only then. A thread that debugpy had begun to
        suspend (a breakpoint it met in the window) finishes suspending at full speed, and
        the disconnect's resume reaches it; told while the thread still crawled through
        pydevd under the recorder, the resume came first and the attached program stayed
        suspended for good after the session (tests/e2e/test_fault_matrix.py)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._phase_lock:
                live = list(self._live.values())
                holding = bool(self._recording)
            if not holding:
                return
            for window in live:
                window.worker.end_window("disconnect")
            time.sleep(0.02)
        log.warning("disconnect: the recorded thread was not let go within %g s", timeout)

    def holds_a_thread(self) -> bool:
        """Whether a capture holds its thread (from its record breakpoint's stop until the
        recorder lets the thread go)."""
        with self._phase_lock:
            return bool(self._recording)

    def _record_lines(self) -> set[tuple[str, int]]:
        """(path, line) of every record breakpoint the client set."""
        return {(path, bp.get("line")) for path, entry in self.sources.items()
                for bp in entry.record_ids.values()}

    def _record(self, tid: int, thread_id: int, window: RecordWindow, breakpoint_id,
                release, parked: Parked | None = None,
                parked_at_end: list | None = None, recorded=None,
                stop_at: dict | None = None, python_lines: dict | None = None,
                clock: StepClock | None = None, target_released=None,
                python_start: tuple[str, int] | None = None) -> Capture:
        """Record `tid` in a child process (the stepper's watchdog is a SIGALRM handler, which
        Python runs only on a main thread); `release()` once the child holds the thread.
        With `parked` (Go: no debugger holds the program), the child unparks the thread when it
        holds it and parks it again where the window closed: that Parked goes into
        `parked_at_end`. `recorded()` runs once the child has ended, before the decoding.
        `stop_at` (Go): address -> WindowStop where the window closes before its end.
        `python_lines` (debugpy): window_ends.python_window_lines. `python_start` (debugpy):
        (path, line) of the Python line the window opens at (record_stepper's)."""
        from adapter.recording.recording import Recording, TraceError
        with self._phase_lock:  # captures may overlap (one decoded, the next recorded)
            number = max(len(self.captures) + 1, self._next_number)
            self._next_number = number + 1
        output = str(self._new_bundle_directory(number))
        backend = self.session.backend
        probe = backend.thread_id_probe() if isinstance(backend, HandsOverThreads) else None
        # which recorder, chosen once for this window and told (adapter/features/
        # window_recorder.py: auto is the stepper, DBI only when asked for)
        chosen = window_recorder.choose(
            window_recorder.requested(self.session.launch_arguments, window), window,
            pid=self.session.pid, go=isinstance(backend, HandsOverThreads))
        self._tell_fallback(number, chosen.fallback)
        window = dataclasses.replace(window, dbi=chosen.name == "dbi")
        if probe is not None and not window.untilPark:
            probe["park_at"] = None  # followed through its parks (the lock brings it back)
        spec = {"output": output, "tid": tid, "window": dataclasses.asdict(window),
                "goid_probe": probe,
                "parked": parked.to_json() if parked else None,
                "stop_at": sorted(stop_at or ()),
                "held_slots": _data_breakpoint_registers(self.session),
                # a debugpy session's captures name the Python frames and lines that ran
                # (adapter/python/frame_probe.py; "auto": not for an interpreter whose
                # layout ptdebug does not know, which the log says)
                "python": "auto" if isinstance(backend, RunsInsidePython) else "off",
                "python_lines": python_lines,
                "python_start": list(python_start) if python_start else None,
                "recorder": chosen.as_dict()}
        clock = clock or StepClock(f"capture {number}")
        try:  # a warm recorder process (adapter/features/recorder_worker.py)
            worker = self._workers.take()
        except (RuntimeError, OSError) as exc:
            raise AdapterError(f"recording thread {tid} failed: {exc}") from None
        # A recorder that neither finishes nor fails is ended (it then detaches, keeping what
        # it had): the program must never stay held by a window that cannot close.
        limit = window.timeout + (window.timeBound or (window.milliseconds or 0) / 1000) \
            + RECORDER_GRACE
        watchdog = RecorderWatchdog(limit, worker.overdue)
        live = LiveWindow(worker, thread_id, tid, watchdog,
                          f"{os.path.basename(python_start[0])}:{python_start[1]}"
                          if python_start else "")
        with self._phase_lock:
            self._live[thread_id] = live
        clock.what += f" (recorder process {worker.process.pid})"
        worker.send(spec)
        clock.mark("recorder asked")
        watchdog.resume()
        result = None
        recording = None
        # (Go) the program is taken back as soon as the recorder has let the thread go, while
        # it still encodes the trace: Delve answers again that much sooner (issue 34)
        taking_back = _Once(recorded)
        try:
            for line in worker.lines():
                if line.startswith("stage "):  # stamped by the recorder (CLOCK_MONOTONIC)
                    at, _, step = line[6:].strip().partition(" ")
                    clock.mark(step, float(at))
                    if step == "thread at the Python line":  # the window opens now
                        recording = RecordingProgress.start(self.session, worker, thread_id,
                                                            window)
                    if step in ("thread at the Python line", "recorder set up"):
                        self._end_opening(live)
                    if step == "target released":
                        self._workers.spare()
                        if target_released is not None:
                            target_released()
                        taking_back.start()
                elif line.startswith("log "):  # the recorder's warnings, tracebacks
                    log.info("recorder: %s", line[4:].rstrip().replace("\\n", "\n"))
                elif line.startswith("attached"):
                    clock.mark("recorder says attached")
                    with self._phase_lock:
                        self._starting.discard(thread_id)
                    live.opening = python_start is not None
                    if python_start is not None:
                        # the recorder's next lines (the thread at its line: the window open)
                        # are read while debugpy answers the release, so that `opening` says
                        # only what is true: a stop passed to the user while it was stale
                        # (the window recording already) left the user's continue unanswered
                        threading.Thread(target=self._release_recorded,
                                         args=(release, number, thread_id), daemon=True,
                                         name="ptdebug-release").start()
                    else:
                        self._release_recorded(release, number, thread_id)
                        clock.mark("debugger released the program")
                        recording = RecordingProgress.start(self.session, worker, thread_id,
                                                            window)
                elif line.startswith("parked ") and parked is not None:
                    parked_at_end.append(Parked.from_json(json.loads(line[7:])))
                elif line.startswith("{"):
                    result = json.loads(line)
        finally:
            watchdog.cancel()
            if recording is not None:
                recording.end()
            self._window_over(live)
            failure = None
            if result is None:
                worker.stop()  # ends the recording early (partial), and then the worker
                failure = worker.error_text()
            self._workers.give_back(worker, reusable=result is not None)
        clock.mark("recorder done")
        taking_back.start()
        taking_back.join()
        failed = None
        if result is None or "error" in result:
            failed = result["error"] if result else failure
            if result and ", before the thread ran " in failed:
                raise NotRecorded(failed)
            if not os.path.exists(os.path.join(output, "manifest.json")):
                raise AdapterError(f"recording thread {tid} failed: {failed}")
            # the recorder wrote what it had before it failed or was interrupted: kept as a
            # partial capture, its images stored like any other's, so that it decodes and
            # exports after the program's files are gone (issue 34: the bundle of an
            # interrupted window named the deleted __debug_bin, and no capture was kept)
            result = {"end_reason": failed, "partial_reason": failed}
        try:
            with self.session.progress.start(f"ptdebug: decoding capture {number}") as progress:
                trace = Recording.open(output, progress)
        except TraceError as exc:
            raise AdapterError(f"recording thread {tid} failed: {failed}" if failed
                               else str(exc)) from None
        for note in trace.notes:  # a window too long to decode whole: its end is loaded
            self.session.client.send_event("output", {"category": "console", "output":
                                                      f"ptdebug: capture {number}: {note}\n"})
        if not trace.threads or not len(trace.threads[0].history):
            why = result.get("partial_reason") or result.get("end_reason") or "no reason given"
            if failed:
                raise AdapterError(f"recording thread {tid} failed: {failed}")
            raise AdapterError(f"the window recorded no instructions (it ended at once: {why})")
        if failed:
            self.session.client.send_event("output", {"category": "important", "output":
                f"ptdebug: capture {number}: the recording failed ({failed}); what it "
                "recorded up to there is kept, partial\n"})
        clock.mark("bundle decoded")
        recorded_by = result.get("recorder") or chosen.as_dict()
        self._tell_fallback(number, recorded_by.get("fallback"))
        if recorded_by["name"] != "dbi":
            window = dataclasses.replace(window, dbi=False)  # (described with its caps)
        capture = Capture(number, tid, thread_id, window, output, trace, breakpoint_id,
                          result.get("end_reason", ""), result.get("partial_reason"),
                          preparing=[STORING],
                          recorder={"name": recorded_by["name"], "why": recorded_by["why"]})
        if capture.end_reason == GOROUTINE_PARKED:
            # a Go session's DAP thread is its goroutine
            capture.end_reason = f"goroutine {thread_id} parked"
            self.session.client.send_event("output", {"category": "console", "output":
                f"ptdebug: capture {number} closed where goroutine {thread_id} parked "
                "(runtime.gopark); Delve took the program back then\n"})
        if python_lines is not None:
            capture.end_reason = (tell_python_window(self.session.client.send_event, number,
                                                     result, python_lines)
                                  or capture.end_reason)
        closed_by = result.get("closed_by")
        if closed_by is not None:
            what = {"debugger": "debugpy stopped the recorded thread",
                    "data breakpoint": "a data breakpoint fired in the recorded thread",
                    "cancelled": "the recording was cancelled",
                    "disconnect": "the client disconnected",
                    "paused": "the program was paused",
                    "overdue": "the recorder had not ended in time"}
            follows = ("; its stop follows" if closed_by in ("debugger", "data breakpoint",
                                                             "paused") else "")
            self.session.client.send_event("output", {"category": "console", "output":
                f"ptdebug: capture {number} closed early: {what[closed_by]}{follows}\n"})
        thread_lock = result.get("thread_lock") or ""
        if "stays locked" in thread_lock:  # adapter/golang/thread_lock.py, abandon
            self.session.client.send_event("output", {"category": "console", "output":
                f"ptdebug: capture {number}: {thread_lock}\n"})
        stop = (stop_at or {}).get(result.get("stopped_at"))
        if stop is not None:
            capture.end_reason = f"the thread reached the breakpoint at {stop.where}"
            self.session.client.send_event("output", {"category": "console", "output":
                f"ptdebug: capture {number} closed early at the breakpoint at {stop.where}, "
                "which the recorded thread reached in the window"
                + (f"; Delve stops there if `{stop.condition}` holds" if stop.condition
                   else "") + "\n"})
        return capture

    def _tell_fallback(self, number: int, fallback: str | None) -> None:
        """DBI was asked for and the stepper records (or recorded) instead: the user is told
        why, once, in the console."""
        if fallback:
            self.session.client.send_event("output", {"category": "important", "output":
                f"ptdebug: capture {number}: DBI cannot record this window ({fallback}); the "
                "ptrace stepper records it instead (10^4-10^5 instructions a second)\n"})

    # --- where captures are kept ----------------------------------------------------------
    def _new_bundle_directory(self, number: int):
        """A new directory for capture `number` in the session's captures directory
        (adapter/capture/captures_dir.py: the launch's `captures`, else the workspace's
        `.ptdebug/captures/`, else the user's data directory), created on first use. A
        directory that cannot be made is told to the user, and the user's data directory
        serves instead."""
        from adapter.capture import captures_dir, retention
        arguments = self.session.launch_arguments
        if self._directory is None:
            wanted = captures_dir.captures_directory(arguments.get("captures"),
                                                     arguments.get("cwd"))
            try:
                self._directory = str(captures_dir.prepare(wanted))
            except OSError as exc:
                fallback = captures_dir.user_captures_directory()
                if fallback == wanted:
                    raise AdapterError(f"cannot keep captures in {wanted}: {exc}") from None
                self.session.client.send_event("output", {"category": "important", "output":
                    f"ptdebug: cannot keep captures in {wanted} ({exc}); keeping them in "
                    f"{fallback}\n"})
                try:
                    self._directory = str(captures_dir.prepare(fallback))
                except OSError as again:
                    raise AdapterError(f"cannot keep captures in {wanted} ({exc}) nor in "
                                       f"{fallback} ({again})") from None
            log.info("captures of this session go to %s", self._directory)
        path = captures_dir.new_capture_directory(pathlib.Path(self._directory),
                                                  arguments.get("program"), number)
        # leased before the recorder writes its manifest: the limit never removes it
        self._leases.append(retention.Lease(path))
        return path

    def _prepare(self, capture: Capture) -> None:
        """What a capture needs for keeping, done after it was announced and its first answers
        could be given (issue 33: "a capture is ready when its window ends"), on a thread of
        its own: its program files into the captures store, then the directory kept within its
        limit; `ptdebug/capturePrepared` says it is done. Captures are prepared one at a time,
        in order; the session's end waits for them (close)."""
        def prepare() -> None:
            with self._prepare_lock:
                started = time.monotonic()
                problems = self._make_self_contained(capture.bundle, capture.trace)
                capture.preparing = []
                log.info("capture %s prepared in %.1f ms", capture.id,
                         1e3 * (time.monotonic() - started))
                self.session.client.send_event("ptdebug/capturePrepared", dataclasses.asdict(
                    CapturePreparedOut(capture.id, capture.bundle, [STORING], problems)))

        def guarded() -> None:
            try:
                prepare()
            except Exception as exc:  # noqa: BLE001 - told, never a thread dying silently
                log.exception("capture %s: preparing it failed", capture.id)
                self.session.client.send_event("output", {"category": "important", "output":
                    f"ptdebug: capture {capture.id}: preparing it for keeping failed: {exc}\n"})

        thread = threading.Thread(target=guarded, daemon=True,
                                  name=f"ptdebug-prepare-capture-{capture.id}")
        self._preparing.append(thread)
        thread.start()

    def _make_self_contained(self, output: str, trace) -> list[str]:
        """Put the recorded program's files its decode reads (the built Go binary, the user's
        libraries) into the captures store, once for every capture of the directory, so the
        capture decodes after they are gone (adapter/capture/image_store.py); then keep the
        directory within its limit (retention.enforce). A copy that fails leaves the bundle
        referencing the originals, and the user is told. Returns what went wrong."""
        from adapter.capture.bundle import BundleError
        from adapter.capture.image_store import store_images_in
        ips = sorted(set().union(*(t.history.distinct_ips for t in trace.threads)))
        problems = []
        try:
            _, added, warnings = store_images_in(output, ips, self._stored_images)
            log.info("capture %s: the captures store grew by %d bytes", output, added)
        except (BundleError, OSError) as exc:
            log.warning("capture %s: storing its images failed: %s", output, exc)
            problems.append(f"storing its images failed: {exc}")
            self.session.client.send_event("output", {"category": "important", "output":
                f"ptdebug: the capture {output} references the program's files instead of "
                f"holding copies (storing failed: {exc}); it decodes only while they exist\n"})
            warnings = []
        for warning in warnings:
            problems.append(warning)
            self.session.client.send_event("output", {"category": "important", "output":
                f"ptdebug: capture {output}: {warning}\n"})
        self._keep_within_limit()
        return problems

    def _keep_within_limit(self) -> None:
        """Remove the oldest captures of the directory, neither pinned nor in use by any
        session, until it fits its limit (the launch's `capturesLimit`, else the directory's,
        adapter/capture/retention.py); say what was removed."""
        from adapter.capture import retention
        configured = self.session.launch_arguments.get("capturesLimit")
        try:
            limit = retention.parse_size(configured) if configured is not None else None
            outcome = retention.enforce(self._directory, limit)
        except (retention.RetentionError, OSError) as exc:
            log.warning("keeping %s within its limit failed: %s", self._directory, exc)
            return
        if outcome["removed"] or (outcome["over"] and not self._told_over):
            self._told_over = outcome["over"]  # once a session while nothing can go
            text = (f"ptdebug: the captures in {self._directory} reached their limit of "
                    f"{retention.show_size(outcome['limit'])}: removed "
                    f"{', '.join(outcome['removed']) or 'nothing'} "
                    f"({retention.show_size(outcome['freed_bytes'])})")
            if outcome["over"]:
                text += "; still over it (what is left is pinned or in use)"
            self.session.client.send_event("output", {"category": "console",
                                                      "output": text + "\n"})

    def close(self) -> None:
        """The session ends: a recording still running is stopped (its bundle is kept, marked
        partial by the recorder), and the session's leases on its captures are let go (the
        directory's limit may remove them later, oldest first, unless pinned)."""
        self._closed.set()
        self._workers.stop_all()  # a recording in progress ends partial
        for thread in self._preparing:  # captures kept whole before their leases go
            thread.join(PREPARE_AT_CLOSE_S)
            if thread.is_alive():
                log.warning("%s still runs at the session's end", thread.name)
        for lease in self._leases:
            lease.release()


class StepClock:
    """The steps of one capture, timed from the stop that began it; `report()` logs them in
    one INFO line (where a captured request's extra latency goes: docs/PERFORMANCE.md)."""

    def __init__(self, what: str):
        self.what = what
        self.start = time.monotonic()
        self.steps: list[tuple[str, float]] = []

    def mark(self, step: str, at: float | None = None) -> None:
        self.steps.append((step, time.monotonic() if at is None else at))

    def report(self) -> None:
        last = self.start
        parts = []
        for step, at in sorted(self.steps, key=lambda s: s[1]):
            parts.append(f"{step} +{1e3 * (at - last):.1f} ms")
            last = at
        # (the stop's CLOCK_MONOTONIC: benchmarks place the steps on the machine's clock)
        log.info("%s: %s (%.1f ms in all) (stop at %.6f)", self.what, ", ".join(parts),
                 1e3 * (last - self.start), self.start)


class _Once:
    """`action()` (or nothing, for None) run once on its own thread, from whichever of two
    places asks first; `join()` waits for it and raises what it raised."""

    def __init__(self, action):
        self._action = action
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        if self._action is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, daemon=True, name="ptdebug-take-back")
        self._thread.start()

    def _run(self) -> None:
        try:
            self._action()
        except BaseException as exc:  # noqa: BLE001 - raised again by join()
            self._error = exc

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()
        if self._error is not None:
            raise self._error


def _window_refused(backend, window: RecordWindow) -> str | None:
    """Why a record breakpoint with `window` can never record in this session, found when it
    is set; None when it may. In a Go session (the debugger hands the program over): the
    window's function must be one of the program's."""
    if not window.function or not isinstance(backend, HandsOverThreads):
        return None
    pid = getattr(backend, "pid", None)
    if pid is None:
        return None
    from adapter.golang.functions import missing_function
    return missing_function(pid, window.function)


def _with_refused(asked: list[dict], answered: list[dict], refused: dict[int, str],
                  path: str) -> list[dict]:
    """The debugger's answers for the breakpoints it was sent, with an unverified one in the
    place of each refused record breakpoint (DAP answers breakpoints in the order asked)."""
    given = iter(answered)
    merged = []
    for index, bp in enumerate(asked):
        if index in refused:
            merged.append({"verified": False, "line": bp.get("line"), "source": {"path": path},
                           "message": f"record: no window can open here: {refused[index]}"})
        else:
            merged.append(next(given, {"verified": False}))
    return merged


def _data_breakpoint_registers(session) -> int:
    """Debug registers the session's data breakpoints hold in every thread: the recorder
    leaves them alone (the kernel's count misses those of threads created after a watch
    was armed; capture/stepper.py, _DebugRegisters)."""
    watcher = getattr(getattr(session, "data_breakpoints", None), "watcher", None)
    return watcher.registers.in_use() if watcher is not None else 0


def install_trace_features(session) -> None:
    """Wire record breakpoints, the trace scope and reverse stepping into a new session."""
    from adapter.features.goroutine_view import install_goroutine_history
    from adapter.features.reverse import Reverse
    from adapter.features.trace_scope import TraceScope
    recording = RecordBreakpoints(session)
    session.recording = recording
    session.capabilities["breakpointModes"] = BREAKPOINT_MODES
    TraceScope(session, recording)
    session.reverse = Reverse(session, recording)
    install_goroutine_history(session)



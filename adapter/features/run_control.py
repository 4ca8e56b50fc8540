"""Run control of a Python session has one owner: this component. It knows whether the
program runs or is stopped, answers the user's redundant `continue` itself, refuses a step of a
thread that runs, and serialises ptdebug's own hidden stops and releases (a record breakpoint's
stop, `ptdebug/captureNow`) with the user's run-control requests.

Layer: features (debugpy sessions; in a Go session it only passes ptdebug's releases on). Knows
DAP and the Session's hooks (`routes`: its `run_control` steps, adapter/routes.py; `backend`);
sees every backend event first
(`Session.backend_event` calls `observe_event` before any filter may consume one). Knows nothing
of recording, watchpoints or VS Code: record_breakpoints holds and releases through it, and
data_breakpoints asks it whether a hidden stop is in progress (`after_hidden_stop`).

Why: debugpy 1.8 answers `continue` only once a thread really resumes (pydevd's
on_continue_request waits for its resume notification), so a `continue` sent while the program
runs is never answered; and debugpy's adapter serves the client's requests one at a time,
waiting for each (clients.py `continue_request` delegates synchronously), so it answers nothing
after it (tests/e2e/test_dap_run_control.py checks this against debugpy alone). ptdebug sends
`continue` itself to release its hidden stops, and a user's `continue` that met one wedged the
session (issue 17).

The model:
- State comes from debugpy's events: `stopped` (with `allThreadsStopped`, every thread),
  `continued` (with `allThreadsContinued`, every thread), `thread` exited; a successful
  `continue`/step response marks the program running unless a `stopped` came meanwhile (pydevd
  sends the response and the events on different threads, so they may cross).
- The user's `continue`, `next`, `stepIn`, `stepOut` and `pause` go through one queue, in
  their order, and each is decided against the state once the one before it is settled: a
  resume request (`continue`, a step) is forwarded only when no other resume request is
  waiting for debugpy's answer. Two resumes in flight at once were the wedge the fuzzer found
  (seed 17): both were decided while the program was stopped, the first resumed it, and
  debugpy's adapter, serving one request at a time, handed pydevd the second while the program
  ran; it was never answered and nothing after it was either.
- While ptdebug holds a hidden stop (`hold` .. `release`), the queue waits; after the release
  the requests are decided against the state then (a `continue` of a program that runs is
  answered `allThreadsContinued`, as debugpy answers a real one).
- A `continued` that no resume request explains (none was sent or unanswered since the last
  `stopped`) is pydevd's stale resume notification: a thread resuming late from an earlier
  suspension, after a new stop was announced, makes pydevd send `continued` for the new stop
  (ThreadsSuspendedSingleNotification.on_thread_resume) although every thread is suspended
  again; pydevd then answers no `continue` until its next stop, and debugpy's adapter, waiting
  for that answer, nothing at all (found under load with a data breakpoint and a record
  breakpoint armed). Such an event is dropped (the program stays stopped, as the client was
  told), and before the next resume ptdebug sends `pause`: pydevd re-announces the suspended
  threads half a second later (a `stopped` ptdebug consumes), after which a `continue` is
  answered again. A resume is also sent no sooner than SETTLE after a `stopped`, so that a
  stale `continued` has arrived before it is decided.
- A feature that must show a stop (a data-breakpoint hit) while a hidden stop is in progress
  queues it with `after_hidden_stop`: it runs once the hidden operation is over and the program
  runs again, so the stop is delivered instead of being lost in ptdebug's own pause.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from adapter.features.hooks import SessionHooks
from adapter.powers import RunsInsidePython
from adapter.protocol.channel import DEFERRED
from adapter.protocol.errors import AdapterError, InternalError, InvalidRequest
from adapter.routes import RUN_CONTROL as RUN_CONTROL_STEP

if TYPE_CHECKING:
    from adapter.protocol.messages import Request

log = logging.getLogger("ptdebug.dap")

RUN_CONTROL = ("continue", "next", "stepIn", "stepOut", "pause")
"""The user's requests that move the program, serialised with ptdebug's hidden stops."""
STEPS = ("next", "stepIn", "stepOut")
RELEASE_TIMEOUT = 10.0
"""Seconds debugpy gets to answer ptdebug's own `continue`."""
RECORDED_RELEASE_TIMEOUT = 60.0
"""The same while the thread that debugpy resumes is being recorded: debugpy answers with the
GIL, which that thread, a thousand times slower under the stepper, holds for long stretches
in debugpy's own suspend loop (10 s was not enough in 1 of 3 first tries on a scikit-learn
service, 2026-12-03: the capture was lost)."""
SETTLE = 0.05
"""Seconds after a `stopped` before a resume is sent: a stale `continued` of pydevd (a thread
resuming late from the suspension before) follows the stop within milliseconds, and a
`continue` sent before it arrives would be taken as answered by it... or never answered."""
QUIET_BEFORE_STOP = 1.0
"""A `stopped` that comes this long after the last resume took effect (its `continued`, or
the answer to a resume request), with no hidden operation of ptdebug's in progress, needs no
SETTLE: the threads of the suspension before have all left pydevd's wait long since (a thread
leaves it as soon as it has the GIL once its event is set), so no late resume can announce a
stale `continued`. This is a record breakpoint's usual case, a request hitting it a while
after the last one, and SETTLE was most of the captured request's fixed cost (issue 13:
37-53 ms of 56-68 ms, 2026-12-03). A hidden operation in progress keeps SETTLE: its thread
may crawl through pydevd's suspend loop under the recorder (a window opened where the thread
stands), and resume for seconds."""
PAUSE_SETTLE = 0.6
"""SETTLE after a `stopped` of reason `pause`: pydevd announces a pause's stop from a timer
(0.5 s, NOTIFY_OF_PAUSE_TIMEOUT) and, when the program was resumed meanwhile, sends the
`continued` right after it; debugpy's adapter relays the two apart by as long as the request
it is serving takes (90 ms seen, seed 2347405148 of the fuzzer, 2026-12-03: a `continue`
decided in between was never answered). Not a bound: a request that keeps debugpy's adapter
busy longer still lets a resume through between the two."""
PAUSE_WAIT = 15.0
"""Seconds a user's `pause` waits for the evaluations debugpy is running (`_decide`)."""
RESYNC_WAIT = 5.0
"""Seconds to wait for pydevd's `stopped` after ptdebug's `pause` of a program whose threads
are suspended (pydevd re-announces them after 0.5 s, NOTIFY_OF_PAUSE_TIMEOUT)."""
IN_FLIGHT_WAIT = 40.0
"""Seconds a release waits for the user's resume request still in flight (one at most): its
answer says whether the program still needs the release, and a release sent beside it is the
second continue debugpy never answers. Past the backend's own limit on the request (30 s), so
that the request has been answered or has timed out by then."""


class RunControl:
    """The run state of the debuggee and the one door run-control requests go through."""

    def __init__(self, session: SessionHooks):
        self.session = session
        self._cond = threading.Condition()
        self.stopped: set[int] = set()
        """DAP ids of threads known stopped (a `stopped` event naming them since they ran)."""
        self.all_stopped = False
        """A `stopped` with allThreadsStopped and no `continued` since: every thread stops."""
        self._stops_seen = 0
        """How many `stopped` events came (a response older than the last one is stale)."""
        self._resumes_seen = 0
        """How many times threads were seen to resume (a stop older than that is stale)."""
        self._resume_listeners: list[Callable[[], None]] = []
        self._holds: dict[int, str] = {}
        """ptdebug's holds not let go yet (hold .. release): id -> what for. Two may overlap:
        a capture that released the program and is finishing, and the next record
        breakpoint's, which the first one's end must not let go."""
        self._hidden_ops: set[int] = set()
        """Holds whose hidden operation is not over (hold .. done): a stop a feature must show
        waits for them."""
        self._hold_ids = itertools.count(1)
        self._waiting: list[Request] = []
        """User run-control requests not decided yet, in their order: they wait for ptdebug's
        hidden stop to end and for the resume request before them to be answered."""
        self._worker: threading.Thread | None = None
        """Decides the waiting requests, one at a time, in their order (started on first use):
        never the backend's reader thread, which must go on reading the events a decision
        may wait for."""
        self._resume_sent = True
        """A resume request (the user's or a release) was sent, or was unanswered, since the
        last `stopped`: a `continued` now is its."""
        self._stale_resume = False
        """pydevd sent a `continued` no resume explains: its threads are suspended but it
        answers no `continue` until it announces a stop again (`_resync`)."""
        self._stale_event: dict | None = None
        """That `continued` event, consumed by `_filter_event`."""
        self._resyncing = False
        """ptdebug's `pause` of `_resync` is out: the `stopped` it brings is consumed."""
        self._deciding = False
        """The run-control thread is deciding a request (a release waits for it: the two
        would otherwise both send a `continue`)."""
        self._last_stop_at = 0.0
        """monotonic() of the last `stopped`."""
        self._settle = SETTLE
        """How long after that `stopped` a resume waits (PAUSE_SETTLE after a pause's, none
        after a quiet one: QUIET_BEFORE_STOP)."""
        self._last_resume_at = time.monotonic()
        """monotonic() when a resume last took effect: a `continued`, or a resume request's
        answer. It starts at the session's start: a program attached to may have had another
        client, whose disconnect resumed it a moment ago."""
        self._releasing = False
        """ptdebug's own `continue` (release) is out."""
        self._release_claimed = False
        """A release has decided to send its `continue` and has not had the answer yet: a
        second hold's release waits for it (two captures at once, a record breakpoint's and
        a captureNow's, sent two `continue`s 0.3 ms apart: fuzzer seed 480080094)."""
        self._stopped_since_continued = False
        """A `stopped` came after the last `continued`."""
        self._continueds_seen = 0
        """How many `continued` events were taken (`_runs_after`)."""
        self._after: list[Callable[[], None]] = []
        """Feature stops queued during a hidden operation (after_hidden_stop)."""
        self._in_flight = 0
        """User resume requests forwarded to debugpy and not answered yet (0 or 1)."""
        for command in RUN_CONTROL:
            # after the thread guard and the replay (a replaying thread never moves the program)
            session.routes.add(RUN_CONTROL_STEP, command, take=self._intercept,
                               active=self.intercepting)
        session.routes.on_events(RUN_CONTROL_STEP, self._filter_event)

    def _active(self) -> bool:
        return isinstance(self.session.backend, RunsInsidePython)

    def intercepting(self, command: str) -> bool:
        """Session.update_fast_path: a debugpy session's run control always comes here."""
        return self._active()

    # --- state ----------------------------------------------------------------------------
    def observe_event(self, raw: dict) -> None:
        """Every backend event, before any filter: the program's run state follows them."""
        name = raw.get("event")
        if name not in ("stopped", "continued", "thread", "exited", "terminated"):
            return
        body = raw.get("body") or {}
        thread_id = body.get("threadId")
        with self._cond:
            if name == "stopped":
                self._stops_seen += 1
                self._stopped_since_continued = True
                self._last_stop_at = time.monotonic()
                quiet = (self._last_stop_at - self._last_resume_at > QUIET_BEFORE_STOP
                         and not self._hidden_ops and not self._in_flight
                         and not self._releasing)
                self._settle = (PAUSE_SETTLE if body.get("reason") == "pause" else
                                0.0 if quiet else SETTLE)
                self._stale_resume = False  # pydevd announced a stop: it answers a resume
                self._resume_sent = bool(self._in_flight or self._releasing)
                if body.get("allThreadsStopped"):
                    self.all_stopped = True
                if type(thread_id) is int:
                    self.stopped.add(thread_id)
            elif name == "continued" and not self._resume_sent and self._active() and (
                    self.stopped or self.all_stopped):
                log.info("run control: pydevd sent 'continued' (thread %s) that no resume "
                         "explains; its threads are stopped: dropped, pause before the next "
                         "resume", thread_id)
                self._stale_resume = True
                self._stale_event = raw
            elif name == "continued":
                self._stopped_since_continued = False
                self._continueds_seen += 1
                self._last_resume_at = time.monotonic()
                if body.get("allThreadsContinued", True):
                    self._running()
                else:
                    self.stopped.discard(thread_id)
                    self.all_stopped = False
                    self._resumed()
            elif name == "thread" and body.get("reason") == "exited":
                self.stopped.discard(thread_id)
            elif name in ("exited", "terminated"):
                self._running()
            self._cond.notify_all()

    def _filter_event(self, raw: dict) -> bool:
        """Consumes pydevd's stale `continued` and the `stopped` that `_resync` brings: the
        client was told the program is stopped, and it still is."""
        with self._cond:
            if raw is self._stale_event:
                self._stale_event = None
                self.session.paused = True  # as it was: Session saw the event before us
                return True
            if self._resyncing and raw.get("event") == "stopped":
                log.debug("run control: pydevd announced the stop again; not shown")
                return True
        return False

    def _runs_after(self, continueds_before: int) -> bool:
        """Whether the program runs once a resume request decided when `_continueds_seen`
        was `continueds_before` is answered with success (under the lock). A `stopped` that
        came after the request's own `continued` is a stop since: it does not run. Without
        that `continued` yet (debugpy's adapter relays a `continue`'s answer before the
        event pydevd sent first, and pydevd answers a step before its event), every stop so
        far came before the resume took effect (a pause's stop, re-announced half a second
        later): it runs, and a later stop's event follows the `continued`."""
        if self._continueds_seen != continueds_before:
            return not self._stopped_since_continued
        return True

    def _running(self) -> None:
        self.stopped.clear()
        self.all_stopped = False
        self._resumed()

    def _resumed(self) -> None:
        """(Under the lock.) Threads resumed: stops held back before are stale, and the
        features listening are told."""
        self._resumes_seen += 1
        for listener in self._resume_listeners:
            listener()

    def on_resume(self, listener: Callable[[], None]) -> None:
        """`listener()` after each resume of the program or of a thread (record_breakpoints:
        a window waiting for its Python line while the user held the program). It runs under
        run control's lock and must not call back into it."""
        self._resume_listeners.append(listener)

    def resumes_seen(self) -> int:
        """A mark to tell later whether the program resumed since (`resumed_since`)."""
        with self._cond:
            return self._resumes_seen

    def resumed_since(self, mark: int) -> bool:
        """Whether threads resumed after `resumes_seen()` gave `mark`: a stop held back
        since then is stale and must not be shown (the client would think the program
        stopped while it runs)."""
        with self._cond:
            return self._active() and self._resumes_seen != mark

    def program_runs(self) -> bool:
        """No thread is known stopped."""
        with self._cond:
            return not self.stopped and not self.all_stopped

    def thread_stopped(self, thread_id: int) -> bool:
        with self._cond:
            return self.all_stopped or thread_id in self.stopped

    # --- the user's requests --------------------------------------------------------------
    def _intercept(self, request: Request) -> object:
        if not self._active():
            return None
        with self._cond:
            if self._holds:
                log.debug("run control: %s waits for ptdebug's %s", request.command,
                          ", ".join(self._holds.values()))
            elif self._in_flight:
                log.debug("run control: %s waits for the resume request before it",
                          request.command)
            self._waiting.append(request)
        self._pump()
        return DEFERRED

    def _pump(self) -> None:
        """Wake the worker: the waiting requests may be decided now."""
        with self._cond:
            if self._worker is None:
                self._worker = threading.Thread(target=self._work, daemon=True,
                                                name="ptdebug-run-control")
                self._worker.start()
            self._cond.notify_all()

    def _work(self) -> None:
        """Decide the waiting requests, in their order, while nothing holds them back: no
        hidden stop, and no resume request of the user's still waiting for debugpy's answer
        (the answer moves the state the next one is decided against)."""
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._waiting and not self._holds
                                    and not self._in_flight)
                request = self._waiting.pop(0)
                self._deciding = True
            try:
                self._serve(request)
            finally:
                with self._cond:
                    self._deciding = False
                    self._cond.notify_all()

    def _decide(self, request: Request) -> object:
        command = request.command
        thread_id = (request.raw.get("arguments") or {}).get("threadId")
        if command != "pause":
            self._ready_to_resume(thread_id)
        with self._cond:
            if self._holds:
                # a hidden stop began while this one was being made ready: its release
                # decides first, and this request is decided after it, against that state
                self._waiting.insert(0, request)
                return DEFERRED
            runs = not self.stopped and not self.all_stopped
            if command == "continue" and runs:
                # what debugpy answers a continue that resumed every thread
                log.debug("run control: continue of a running program answered here")
                return {"allThreadsContinued": True}
            if command in STEPS and not (self.all_stopped or thread_id in self.stopped):
                raise InvalidRequest(f"thread {thread_id} is running: {command!r} steps a "
                                     "stopped thread (pause the program first)")
            pause = command == "pause"  # debugpy answers a pause in every state
            if not pause:
                self._in_flight += 1
                self._resume_sent = True
            # debugpy's all-stop mode (stopAllThreadsOnSuspend) resumes every thread on a step
            # too, and answers a step before its `continued` event: the next request is
            # decided on the answer, so the answer must already mean "all threads run"
            resumes_all = command == "continue" or self.all_stopped
            continueds_before = self._continueds_seen
        if pause:  # sent outside the lock: a write to debugpy may block for a while
            # not while an evaluation runs: pydevd would suspend its thread inside it
            backend = self.session.backend
            if isinstance(backend, RunsInsidePython) and not backend.evaluations_done(PAUSE_WAIT):
                log.warning("run control: an evaluation is still running after %g s; "
                            "pausing anyway", PAUSE_WAIT)
            self.session.backend.forward(request)
            return DEFERRED

        def answered(response: dict) -> None:
            with self._cond:
                self._in_flight -= 1
                self._last_resume_at = time.monotonic()
                if response.get("success") and self._runs_after(continueds_before):
                    if resumes_all:
                        self._running()
                    else:
                        self.stopped.discard(thread_id)
                        self.all_stopped = False
                        self._resumed()
                self._cond.notify_all()
            self._pump()  # the next waiting request is decided against the state now

        try:
            self.session.backend.forward(request, answered)
        except BaseException:
            with self._cond:  # never sent: it holds nothing back
                self._in_flight -= 1
                self._cond.notify_all()
            raise
        return DEFERRED

    def _ready_to_resume(self, thread_id) -> None:
        """Before a resume of a stopped program: let a stale `continued` arrive (SETTLE,
        PAUSE_SETTLE after a pause's stop), and
        if one came, have pydevd announce its stop again (`_resync`). Not on the backend's
        reader thread (it waits for events)."""
        with self._cond:
            if not (self.stopped or self.all_stopped):
                return
            while True:
                left = self._last_stop_at + self._settle - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            stale = self._stale_resume
        if stale:
            self._resync(thread_id)

    def _resync(self, thread_id) -> None:
        """pydevd believes it announced the resume of threads that are suspended: it answers
        no `continue` now. A `pause` makes it announce the suspended threads again (after
        0.5 s); that `stopped` is consumed, and a `continue` is answered after it."""
        log.info("run control: pausing first, so that pydevd answers the resume")
        with self._cond:
            stops = self._stops_seen
            self._resyncing = True
        try:
            self.session.backend.request("pause", {"threadId": thread_id if type(thread_id)
                                                   is int else 1}, timeout=RESYNC_WAIT)
            with self._cond:
                if not self._cond.wait_for(lambda: self._stops_seen != stops, RESYNC_WAIT):
                    log.warning("run control: pydevd did not announce its stop again within "
                                "%g s", RESYNC_WAIT)
        finally:
            with self._cond:
                self._resyncing = False

    # --- ptdebug's hidden stops -----------------------------------------------------------
    def hold(self, what: str) -> int | None:
        """ptdebug keeps the stopped program for itself (`what`, for the log): from now on the
        user's run-control requests wait for `release`. Called as the stop is hidden (on the
        backend's reader thread) or as captureNow takes a paused program. Returns the hold's
        id, for `release` and `done` (None in a session whose run control is not ours)."""
        if not self._active():
            return None
        with self._cond:
            hold = next(self._hold_ids)
            self._holds[hold] = what
            self._hidden_ops.add(hold)
            return hold

    def holding(self) -> bool:
        with self._cond:
            return bool(self._holds)

    def hidden_stop_in_progress(self) -> bool:
        """Whether ptdebug has the program in one of its own stops (hold .. done)."""
        with self._cond:
            return bool(self._hidden_ops)

    def release(self, thread_id: int | None, hold: int | None = None,
                timeout: float = RELEASE_TIMEOUT) -> None:
        """ptdebug's own `continue` of a hidden stop: sent only while the program is stopped
        (a second continue is never answered), bounded in time (`timeout`). The user's
        requests that waited are then served, in their order. Raises BackendTimeout /
        BackendGone."""
        backend = self.session.backend
        if not self._active():
            if backend is not None:
                backend.request("continue", {"threadId": thread_id}, timeout=timeout)
            return
        try:
            if not self._claim_release():
                return
            try:
                self._send_release(backend, thread_id, timeout)
            finally:
                with self._cond:
                    self._release_claimed = False
                    self._cond.notify_all()
        finally:
            self._let_go(hold)

    def _claim_release(self) -> bool:
        """Whether this release is the one `continue` to send: the program is stopped, and no
        other resume is in flight or being decided. Claimed, the others wait for its answer."""
        with self._cond:
            # a user's resume debugpy has not answered yet may resume the program itself:
            # a release sent beside it would be the second continue, never answered
            # nor beside one the run-control thread is deciding right now
            # nor beside another hold's release (its answer says whether this one is due)
            if not self._cond.wait_for(lambda: self._in_flight == 0 and not self._deciding
                                       and not self._release_claimed, IN_FLIGHT_WAIT):
                log.warning("run control: a resume request is still unanswered after %g "
                            "s; no release sent", IN_FLIGHT_WAIT)
                return False
            if not self.stopped and not self.all_stopped:
                log.info("run control: the program already runs; no release sent")
                return False
            self._release_claimed = True
            return True

    def _send_release(self, backend, thread_id: int | None, timeout: float) -> None:
        """The claimed release's `continue`, and what its answer says of the program."""
        self._ready_to_resume(thread_id)
        with self._cond:
            self._releasing = self._resume_sent = True
            continueds_before = self._continueds_seen
        try:
            response = backend.request("continue", {"threadId": thread_id}, timeout=timeout)
        finally:
            with self._cond:
                self._releasing = False
                self._last_resume_at = time.monotonic()
        with self._cond:
            if response.success and self._runs_after(continueds_before):
                self._running()

    def _let_go(self, hold: int | None) -> None:
        """The user's requests may go on, unless another hold keeps them (None: every hold)."""
        with self._cond:
            if hold is None:
                self._holds.clear()
            else:
                self._holds.pop(hold, None)
        self._pump()

    def done(self, hold: int | None = None) -> None:
        """The hidden operation of `hold` is over (the capture kept or given up): once none is
        in progress, stops features queued meanwhile are delivered, on this thread, in their
        order."""
        self._let_go(hold)  # in case release was never reached
        with self._cond:
            if hold is None:
                self._hidden_ops.clear()
            else:
                self._hidden_ops.discard(hold)
            if self._hidden_ops:
                return
            after, self._after = self._after, []
        for deliver in after:
            try:
                deliver()
            except AdapterError as exc:
                log.warning("run control: a queued stop failed: %s", exc.message)
            except Exception:
                log.exception("run control: a queued stop failed")

    def after_hidden_stop(self, deliver: Callable[[], None]) -> bool:
        """For a feature that must stop the program to show something (a data-breakpoint
        hit): True when a hidden stop is in progress and `deliver()` was queued to run once
        it is over and the program runs again; False when none is (the caller stops the
        program now). `deliver` runs on the thread that ends the hidden operation."""
        with self._cond:
            if not self._hidden_ops:
                return False
            self._after.append(deliver)
            return True

    def _serve(self, request: Request) -> None:
        """Answer a request that waited, as the client channel would have."""
        try:
            result = self._decide(request)
            if result is not DEFERRED and not request.answered:
                request.respond(result)
        except AdapterError as exc:
            if not request.answered:
                request.fail(exc)
        except Exception as exc:
            log.exception("run control: serving %s failed", request.command)
            if not request.answered:
                request.fail(InternalError(f"internal error in ptdebug while handling "
                                           f"{request.command!r}: {exc}"))


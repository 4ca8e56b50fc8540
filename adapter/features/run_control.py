"""Run control of a Python session has one owner: this component. It knows whether the
program runs or is stopped, answers the user's redundant `continue` itself, refuses a step of a
thread that runs, and serialises ptdebug's own hidden stops and releases (a record breakpoint's
stop, `ptdebug/captureNow`) with the user's run-control requests.

Layer: features (debugpy sessions; in a Go session it only passes ptdebug's releases on). Knows
DAP and the Session's hooks (`request_interceptors`, `backend`); sees every backend event first
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
- While ptdebug holds a hidden stop (`hold` .. `release`), the user's `continue`, `next`,
  `stepIn`, `stepOut` and `pause` wait, in order; after the release they are decided against
  the state then (a `continue` of a program that runs is answered `allThreadsContinued`, as
  debugpy answers a real one).
- A feature that must show a stop (a data-breakpoint hit) while a hidden stop is in progress
  queues it with `after_hidden_stop`: it runs once the hidden operation is over and the program
  runs again, so the stop is delivered instead of being lost in ptdebug's own pause.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from adapter.protocol.channel import DEFERRED
from adapter.protocol.errors import AdapterError, InternalError, InvalidRequest

if TYPE_CHECKING:
    from adapter.protocol.messages import Request
    from adapter.session import Session

log = logging.getLogger("ptdebug.dap")

RUN_CONTROL = ("continue", "next", "stepIn", "stepOut", "pause")
"""The user's requests that move the program, serialised with ptdebug's hidden stops."""
STEPS = ("next", "stepIn", "stepOut")
RELEASE_TIMEOUT = 10.0
"""Seconds debugpy gets to answer ptdebug's own `continue`."""
IN_FLIGHT_WAIT = 5.0
"""Seconds a release waits for the user's resume requests still in flight: debugpy's adapter
serves one at a time, and a release queued behind one it cannot answer would never be sent."""


class RunControl:
    """The run state of the debuggee and the one door run-control requests go through."""

    def __init__(self, session: Session):
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
        self._holder: str | None = None
        """What ptdebug holds the program for (a hidden stop), until its release."""
        self._hidden = False
        """A hidden operation is in progress (hold .. done): a stop a feature must show waits."""
        self._waiting: list[Request] = []
        """User requests that came while ptdebug held the program, in their order."""
        self._after: list[Callable[[], None]] = []
        """Feature stops queued during a hidden operation (after_hidden_stop)."""
        self._in_flight = 0
        """User resume requests forwarded to debugpy and not answered yet."""
        for command in RUN_CONTROL:
            # after the thread guard and the replay (a replaying thread never moves the program)
            session.request_interceptors.setdefault(command, []).append(self._intercept)

    def _active(self) -> bool:
        backend = self.session.backend
        return backend is not None and backend.name == "debugpy"

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
                if body.get("allThreadsStopped"):
                    self.all_stopped = True
                if type(thread_id) is int:
                    self.stopped.add(thread_id)
            elif name == "continued":
                if body.get("allThreadsContinued", True):
                    self._running()
                else:
                    self.stopped.discard(thread_id)
                    self.all_stopped = False
                    self._resumes_seen += 1
            elif name == "thread" and body.get("reason") == "exited":
                self.stopped.discard(thread_id)
            elif name in ("exited", "terminated"):
                self._running()
            self._cond.notify_all()

    def _running(self) -> None:
        self.stopped.clear()
        self.all_stopped = False
        self._resumes_seen += 1

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
            if self._holder is not None:
                log.debug("run control: %s waits for ptdebug's %s", request.command,
                          self._holder)
                self._waiting.append(request)
                return DEFERRED
        return self._decide(request)

    def _decide(self, request: Request) -> object:
        command = request.command
        thread_id = (request.raw.get("arguments") or {}).get("threadId")
        with self._cond:
            runs = not self.stopped and not self.all_stopped
            if command == "continue" and runs:
                # what debugpy answers a continue that resumed every thread
                log.debug("run control: continue of a running program answered here")
                return {"allThreadsContinued": True}
            if command in STEPS and not (self.all_stopped or thread_id in self.stopped):
                raise InvalidRequest(f"thread {thread_id} is running: {command!r} steps a "
                                     "stopped thread (pause the program first)")
            if command == "pause":  # debugpy answers a pause in every state
                self.session.backend.forward(request)
                return DEFERRED
            self._in_flight += 1
            stops_before = self._stops_seen

        def answered(response: dict) -> None:
            with self._cond:
                self._in_flight -= 1
                if response.get("success") and self._stops_seen == stops_before:
                    if command == "continue":
                        self._running()
                    else:
                        self.stopped.discard(thread_id)
                        self.all_stopped = False
                        self._resumes_seen += 1
                self._cond.notify_all()

        self.session.backend.forward(request, answered)
        return DEFERRED

    # --- ptdebug's hidden stops -----------------------------------------------------------
    def hold(self, what: str) -> None:
        """ptdebug keeps the stopped program for itself (`what`, for the log): from now on the
        user's run-control requests wait for `release`. Called as the stop is hidden (on the
        backend's reader thread) or as captureNow takes a paused program."""
        if not self._active():
            return
        with self._cond:
            self._holder = what
            self._hidden = True

    def holding(self) -> bool:
        with self._cond:
            return self._holder is not None

    def hidden_stop_in_progress(self) -> bool:
        """Whether ptdebug has the program in one of its own stops (hold .. done)."""
        with self._cond:
            return self._hidden

    def release(self, thread_id: int | None) -> None:
        """ptdebug's own `continue` of a hidden stop: sent only while the program is stopped
        (a second continue is never answered), bounded in time. The user's requests that
        waited are then served, in their order. Raises BackendTimeout / BackendGone."""
        backend = self.session.backend
        if not self._active():
            if backend is not None:
                backend.request("continue", {"threadId": thread_id}, timeout=RELEASE_TIMEOUT)
            return
        try:
            with self._cond:
                # debugpy's adapter serves one request at a time: a user's resume it has not
                # answered yet would keep the release from ever reaching pydevd
                self._cond.wait_for(lambda: self._in_flight == 0, IN_FLIGHT_WAIT)
                runs = not self.stopped and not self.all_stopped
                stops_before = self._stops_seen
            if runs:
                log.info("run control: the program already runs; no release sent")
                return
            response = backend.request("continue", {"threadId": thread_id},
                                       timeout=RELEASE_TIMEOUT)
            with self._cond:
                if response.success and self._stops_seen == stops_before:
                    self._running()
        finally:
            self._let_go()

    def _let_go(self) -> None:
        with self._cond:
            self._holder = None
            waiting, self._waiting = self._waiting, []
        for request in waiting:
            self._serve(request)

    def done(self) -> None:
        """The hidden operation is over (the capture kept or given up): stops features queued
        meanwhile are delivered now, on this thread, in their order."""
        self._let_go()  # in case release was never reached
        with self._cond:
            self._hidden = False
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
            if not self._hidden:
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


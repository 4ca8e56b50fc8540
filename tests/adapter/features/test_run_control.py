"""features/run_control.py alone (issue 17): the order in which the user's run-control requests
reach debugpy, and what ptdebug does with pydevd's stale `continued`. The session is real (on a
socket pair); the backend is a stand-in that records what reaches it, and the test plays
debugpy's events and answers, so that the interleavings the DAP fuzzer and the load test met
by chance are played every time. tests/e2e/test_dap_run_control.py checks the same against
real debugpy."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from adapter.features import run_control
from adapter.protocol.messages import Event, Request, Response
from adapter.session import Session


class _DebugpyLike:
    """Records forwarded requests (with their observers) and ptdebug's own requests. Has
    debugpy's power (powers.RunsInsidePython), on which run control decides."""
    name = "debugpy"

    def native_thread_id(self, thread_id: int) -> int:
        return thread_id

    def evaluations_done(self, timeout: float) -> bool:
        return True

    def __init__(self):
        self.sent: list[str] = []
        self.observers: list = []
        self.on_request = None
        self._lock = threading.Lock()

    def relays_untouched(self, command: str) -> bool:
        return False

    def forward(self, request, observe=None) -> None:
        with self._lock:
            self.sent.append(request.command)
            self.observers.append((request, observe))

    def request(self, command, arguments=None, timeout=10.0) -> Response:
        with self._lock:
            self.sent.append(f"ptdebug:{command}")
        if self.on_request is not None:
            self.on_request(command)
        return Response({"type": "response", "seq": 1, "request_seq": 1, "command": command,
                         "success": True})


class _Client:
    """Where the session's answers and events to the client go."""

    def __init__(self):
        self.messages: list[dict] = []

    def send(self, message: dict) -> None:
        self.messages.append(message)

    def events(self, name: str) -> list[dict]:
        return [m for m in self.messages if m.get("type") == "event" and m["event"] == name]

    def response(self, seq: int) -> dict | None:
        return next((m for m in self.messages if m.get("type") == "response"
                     and m["request_seq"] == seq), None)


@pytest.fixture
def session():
    ours, theirs = socket.socketpair()
    session = Session(ours.makefile("rb"), ours.makefile("wb"))
    session.backend = _DebugpyLike()
    client = _Client()
    session.client.send = client.send
    session.test_client = client
    yield session
    ours.close()
    theirs.close()


_seq = iter(range(100, 10 ** 6))


def _event(session, name: str, **body) -> None:
    session.backend_event(Event({"seq": next(_seq), "type": "event", "event": name,
                                 "body": body}))


def _ask(session, command: str, thread_id: int = 1) -> Request:
    request = Request({"seq": next(_seq), "type": "request", "command": command,
                       "arguments": {"threadId": thread_id}}, session.test_client)
    session.run_control._intercept(request)
    return request


def _until(predicate, seconds: float = 3.0) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.005)


def _answer(session, index: int, success: bool = True, continued: bool = True) -> None:
    """debugpy answers the forwarded request number `index`: a `continue` with its
    `continued` event first, as pydevd sends them (`continued=False`: a step's answer, whose
    `continued` comes after)."""
    request, observe = session.backend.observers[index]
    response = {"type": "response", "seq": next(_seq), "request_seq": request.seq,
                "command": request.command, "success": success}
    if success and continued:
        _event(session, "continued", threadId=1, allThreadsContinued=True)
    observe(response)
    request.respond_like(response)


def test_resume_requests_are_forwarded_one_at_a_time(session):
    """continue, continue, next sent together to a stopped program (the fuzzer's seed 17):
    only the first reaches debugpy until it is answered; then the program runs, so the second
    continue is answered by ptdebug and the next refused. Before, all three were forwarded and
    debugpy never answered the second."""
    _event(session, "stopped", reason="breakpoint", threadId=1, allThreadsStopped=True)
    time.sleep(run_control.SETTLE)
    first, second, step = (_ask(session, c) for c in ("continue", "continue", "next"))
    _until(lambda: session.backend.sent == ["continue"])
    time.sleep(0.2)
    assert session.backend.sent == ["continue"]  # the others wait for its answer
    assert not second.answered and not step.answered
    _answer(session, 0)
    _until(lambda: step.answered)
    client = session.test_client
    assert client.response(first.seq)["success"]
    assert client.response(second.seq)["body"] == {"allThreadsContinued": True}
    refused = client.response(step.seq)
    assert refused["success"] is False and "thread 1 is running" in refused["message"]
    assert session.backend.sent == ["continue"]


def test_a_stale_continued_is_dropped_and_pydevd_resynced_before_the_next_resume(session):
    """pydevd's stale `continued` (a thread resuming late from the suspension before, after
    the next stop was announced) leaves the program stopped: the client is not told it runs,
    and the user's `continue` is sent only after a `pause` made pydevd announce the stop again
    (that `stopped` is not shown either). Sent as it was, pydevd never answered it."""
    backend = session.backend
    client = session.test_client
    _event(session, "stopped", reason="breakpoint", threadId=2, allThreadsStopped=True)
    _event(session, "continued", threadId=3, allThreadsContinued=True)  # no resume was sent
    assert client.events("continued") == []
    assert session.run_control.thread_stopped(2) and session.paused

    def pydevd(command: str) -> None:  # the pause's re-announcement, half a second later
        if command == "pause":
            threading.Timer(0.1, _event, (session, "stopped"), {
                "reason": "pause", "threadId": 2, "allThreadsStopped": True}).start()
    backend.on_request = pydevd
    resumed = _ask(session, "continue", 2)
    _until(lambda: backend.sent == ["ptdebug:pause", "continue"])
    assert [e["body"]["reason"] for e in client.events("stopped")] == ["breakpoint"]
    _answer(session, 0)
    assert client.response(resumed.seq)["success"]
    assert not session.run_control.thread_stopped(2)


def test_a_resume_waits_for_the_continued_that_follows_a_late_pause_stop(session):
    """pydevd announces a pause's stop from a timer; when a `continue` resumed the program
    meanwhile, it sends `continued` right after that `stopped`, and debugpy's adapter relayed
    the two 90 ms apart (fuzzer seed 2347405148, after 9 minutes): the user's `continue`,
    decided 50 ms after the `stopped`, reached a running program and was never answered.
    Now a resume waits PAUSE_SETTLE after a pause's stop, so the `continued` is seen first
    (stale: pydevd is resynced) and the `continue` goes after."""
    backend = session.backend

    def pydevd(command: str) -> None:
        if command == "pause":
            threading.Timer(0.1, _event, (session, "stopped"), {
                "reason": "pause", "threadId": 2, "allThreadsStopped": True}).start()
    backend.on_request = pydevd
    _event(session, "stopped", reason="pause", threadId=2, allThreadsStopped=True)
    resumed = _ask(session, "continue", 2)
    time.sleep(0.09)
    assert backend.sent == []  # still settling
    _event(session, "continued", threadId=2, allThreadsContinued=True)
    _until(lambda: backend.sent == ["ptdebug:pause", "continue"])
    _answer(session, 0)
    assert session.test_client.response(resumed.seq)["success"]


def test_a_continued_of_a_resume_in_flight_is_not_stale(session):
    """A stop that comes while the user's continue is still unanswered may be followed by that
    continue's own `continued`: it is the program's state, shown, and no pause is sent."""
    _event(session, "stopped", reason="breakpoint", threadId=1, allThreadsStopped=True)
    time.sleep(run_control.SETTLE)
    _ask(session, "continue")
    _until(lambda: session.backend.sent == ["continue"])
    _event(session, "stopped", reason="breakpoint", threadId=2, allThreadsStopped=True)
    _answer(session, 0)
    assert len(session.test_client.events("continued")) == 1
    assert session.run_control.program_runs()
    assert session.backend.sent == ["continue"]


def test_the_end_of_one_capture_does_not_let_go_of_the_next_ones_hold(session):
    """A capture releases the program, and before it ends (decode, held stops) the next record
    breakpoint fires and holds the program again. The first one's end must not let the user's
    requests through while the second hidden stop is in progress (the fuzzer saw a user's
    `stepOut` reach debugpy in the middle of a capture)."""
    control = session.run_control

    def pydevd(command: str) -> None:  # a continue's `continued` comes before its answer
        if command == "continue":
            _event(session, "continued", threadId=2, allThreadsContinued=True)
    session.backend.on_request = pydevd
    _event(session, "stopped", reason="breakpoint", threadId=2, allThreadsStopped=True)
    first = control.hold("record breakpoint")
    time.sleep(run_control.SETTLE)
    control.release(2, first)
    _event(session, "stopped", reason="breakpoint", threadId=3, allThreadsStopped=True)
    second = control.hold("record breakpoint")
    resumed = _ask(session, "continue", 1)
    time.sleep(run_control.SETTLE)
    control.done(first)
    time.sleep(0.2)
    assert not resumed.answered and control.holding()
    assert session.backend.sent == ["ptdebug:continue"]
    control.release(3, second)
    control.done(second)
    _until(lambda: resumed.answered)
    assert session.test_client.response(resumed.seq)["body"] == {"allThreadsContinued": True}
    assert session.backend.sent == ["ptdebug:continue", "ptdebug:continue"]


def test_two_holds_released_together_send_one_continue(session):
    """A record breakpoint's capture and a captureNow hold the program at once, and both
    release it at the same moment: one `continue` reaches debugpy, the other release sees
    the program running. Both were sent, 0.3 ms apart, and debugpy answered neither (fuzzer
    seed 480080094, after 18 minutes)."""
    control = session.run_control

    def pydevd(command: str) -> None:  # a continue's `continued` comes before its answer
        if command == "continue":
            time.sleep(0.05)  # debugpy takes a moment: the other release is waiting by then
            _event(session, "continued", threadId=1, allThreadsContinued=True)
    session.backend.on_request = pydevd
    _event(session, "stopped", reason="breakpoint", threadId=2, allThreadsStopped=True)
    record = control.hold("record breakpoint")
    capture_now = control.hold("captureNow")
    time.sleep(run_control.SETTLE)
    releases = [threading.Thread(target=control.release, args=(thread, hold))
                for thread, hold in ((2, record), (1, capture_now))]
    for release in releases:
        release.start()
    for release in releases:
        release.join(10)
    assert session.backend.sent == ["ptdebug:continue"]
    assert control.program_runs() and not control.holding()


def test_a_step_answered_before_its_continued_event_means_the_program_runs(session):
    """pydevd answers a step before it sends the step's `continued`, and in all-stop mode the
    step resumes every thread: a `continue` queued behind the step is decided on the answer
    and must see a running program (it was forwarded, because another thread's stop was still
    on the books, and debugpy never answered it: the fuzzer's seed 17, second run)."""
    _event(session, "stopped", reason="data breakpoint", threadId=2, allThreadsStopped=True)
    time.sleep(run_control.SETTLE)
    step = _ask(session, "stepOut", 1)
    resumed = _ask(session, "continue", 3)
    _until(lambda: session.backend.sent == ["stepOut"])
    _answer(session, 0, continued=False)
    _until(lambda: resumed.answered)
    assert step.answered
    assert session.test_client.response(resumed.seq)["body"] == {"allThreadsContinued": True}
    assert session.backend.sent == ["stepOut"]


def test_a_stop_before_a_steps_answer_does_not_keep_the_program_stopped(session):
    """A `pause`'s stop that arrives after a `next` was sent but before pydevd ran it: the
    step still resumes every thread, so the `continue` queued behind it must be answered by
    ptdebug, not forwarded to a running program (seed 1971368202 of the long run)."""
    _event(session, "stopped", reason="breakpoint", threadId=1, allThreadsStopped=True)
    time.sleep(run_control.SETTLE)
    _ask(session, "next", 2)
    resumed = _ask(session, "continue", 3)
    _until(lambda: session.backend.sent == ["next"])
    _event(session, "stopped", reason="pause", threadId=1, allThreadsStopped=True)
    _answer(session, 0, continued=False)
    _until(lambda: resumed.answered)
    assert session.test_client.response(resumed.seq)["body"] == {"allThreadsContinued": True}
    assert session.backend.sent == ["next"]


def test_a_continue_answered_before_its_continued_event_means_the_program_runs(session):
    """debugpy's adapter relays a `continue`'s answer before the `continued` event pydevd sent
    first: the `continue` queued behind it must still see a running program."""
    _event(session, "stopped", reason="breakpoint", threadId=1, allThreadsStopped=True)
    time.sleep(run_control.SETTLE)
    _ask(session, "continue", 1)
    second = _ask(session, "continue", 1)
    _until(lambda: session.backend.sent == ["continue"])
    _answer(session, 0, continued=False)
    _until(lambda: second.answered)
    assert session.test_client.response(second.seq)["body"] == {"allThreadsContinued": True}
    assert session.backend.sent == ["continue"]


def test_a_hidden_stop_that_begins_while_a_resume_is_being_decided_goes_first(session):
    """The user's `continue` is being made ready (the settle time after a stop) when a record
    breakpoint stops the program and its capture, failing at once, releases it: only one
    `continue` may reach debugpy. Both were sent (fuzzer, seed 6), and pydevd answered one."""
    control = session.run_control

    def pydevd(command: str) -> None:  # a continue's `continued` comes before its answer
        if command == "continue":
            _event(session, "continued", threadId=3, allThreadsContinued=True)
    session.backend.on_request = pydevd
    _event(session, "stopped", reason="breakpoint", threadId=1, allThreadsStopped=True)
    resumed = _ask(session, "continue", 1)
    _event(session, "stopped", reason="breakpoint", threadId=3, allThreadsStopped=True)
    hold = control.hold("record breakpoint")
    control.release(3, hold)
    control.done(hold)
    _until(lambda: resumed.answered)
    assert session.test_client.response(resumed.seq)["body"] == {"allThreadsContinued": True}
    assert session.backend.sent == ["ptdebug:continue"]


def test_a_stop_long_after_the_last_resume_needs_no_settle(session):
    """A record breakpoint's stop a while after the program last resumed (a request hitting
    it): no thread of the suspension before can still be resuming, so ptdebug's release is not
    held back by SETTLE, which was most of a captured request's fixed cost (issue 13). A stop
    right after a resume still settles: a stale `continued` 20 ms after it is caught before
    the release, which then resyncs pydevd first."""
    control = session.run_control
    backend = session.backend
    _event(session, "stopped", reason="breakpoint", threadId=1, allThreadsStopped=True)
    assert control._settle == run_control.SETTLE  # the session began a moment ago
    control._last_resume_at -= run_control.QUIET_BEFORE_STOP + 0.1  # as if long ago
    _event(session, "stopped", reason="breakpoint", threadId=2, allThreadsStopped=True)
    assert control._settle == 0.0  # nothing resumed for over a second
    hold = control.hold("record breakpoint")
    control.release(2, hold)
    control.done(hold)
    assert backend.sent == ["ptdebug:continue"]
    _event(session, "continued", threadId=2, allThreadsContinued=True)

    # the next stop comes at once: a thread of the last suspension may still be resuming
    _event(session, "stopped", reason="breakpoint", threadId=3, allThreadsStopped=True)
    assert control._settle == run_control.SETTLE
    threading.Timer(0.02, _event, (session, "continued"), {
        "threadId": 2, "allThreadsContinued": True}).start()  # that thread's stale one

    def pydevd(command: str) -> None:  # the resync pause's re-announcement
        if command == "pause":
            threading.Timer(0.05, _event, (session, "stopped"), {
                "reason": "pause", "threadId": 3, "allThreadsStopped": True}).start()
    backend.on_request = pydevd
    hold = control.hold("record breakpoint")
    control.release(3, hold)
    control.done(hold)
    assert backend.sent == ["ptdebug:continue", "ptdebug:pause", "ptdebug:continue"]

    # a stop more than QUIET_BEFORE_STOP after the last resume, none of ptdebug's in progress
    control._last_resume_at -= run_control.QUIET_BEFORE_STOP + 0.1
    _event(session, "stopped", reason="breakpoint", threadId=3, allThreadsStopped=True)
    assert control._settle == 0.0

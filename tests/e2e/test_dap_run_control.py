"""Run control has one owner (issue 17): the races between the user's run-control requests and
ptdebug's own hidden stops and releases, through `ptdebug dap` in front of real debugpy.

debugpy 1.8 never answers a `continue` sent while the program already runs, and from then on
answers nothing at all (the first test checks it against debugpy's adapter alone). ptdebug
sends `continue` itself to release a record-breakpoint stop or a `ptdebug/captureNow`, so a
user's `continue` that meets one of those used to wedge the session. Every request here must
be answered within its timeout; a wedge fails the test instead of hanging it.
"""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from conftest import PROGRAMS, launch, top_frame
from dapclient import DapClient, marker_line

pytestmark = pytest.mark.timeout(150)

PROGRAM = PROGRAMS / "dap_run_control.py"
SOURCE = {"path": str(PROGRAM)}
WINDOW = {"instructions": 300}
"""A short window: the stepper records a few thousand instructions a second here."""


def _record_at_worker(hit_condition: str | None = "1") -> list[dict]:
    bp = {"line": marker_line(PROGRAM, "worker"), "mode": "record"}
    if hit_condition:
        bp["hitCondition"] = hit_condition
    return [bp]


def _session(run, **config) -> int:
    """Launch the fixture stopped at @main; returns the main thread's id."""
    launch(run.client, PROGRAM, breakpoints=["main"], args=["120"], recordWindow=WINDOW,
           **config)
    thread = run.client.expect_stopped("breakpoint")["threadId"]
    run.track()
    return thread


def _still_serves(client: DapClient) -> None:
    """The session is not wedged: `threads`, a pause and a continue are answered."""
    assert client.call("threads", timeout=10)["threads"]
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": [
        {"line": marker_line(PROGRAM, "main")}]}, timeout=10)
    stopped = client.expect_stopped(timeout=20)
    assert client.call("stackTrace", {"threadId": stopped["threadId"]}, timeout=10)
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": []}, timeout=10)
    client.call("continue", {"threadId": stopped["threadId"]}, timeout=10)


def _end(run) -> None:
    run.client.call("disconnect", {"terminateDebuggee": True}, timeout=10)
    assert run.wait_exit() == 0
    run.assert_nothing_left()


def test_debugpy_alone_never_answers_a_continue_while_running(dap_schema):
    """Why ptdebug must own run control (debugpy 1.8.22): a second `continue` sent straight to
    debugpy's adapter while the program runs gets no answer, and neither does anything after."""
    client = DapClient.stdio([sys.executable, "-m", "debugpy.adapter"], dap_schema,
                             stderr=subprocess.DEVNULL)
    try:
        launch(client, PROGRAM, breakpoints=["main"], args=["60"])
        thread = client.expect_stopped("breakpoint")["threadId"]
        client.call("setBreakpoints", {"source": SOURCE, "breakpoints": []})
        client.call("continue", {"threadId": thread})
        stalled = client.send_request("continue", {"threadId": thread})
        after = client.send_request("threads")
        with pytest.raises(TimeoutError):
            client.expect_response(stalled, timeout=3)
        with pytest.raises(TimeoutError):
            client.expect_response(after, timeout=1)
    finally:
        client.proc.kill()
        client.proc.wait(10)
        client.schema_errors.clear()  # debugpy's own messages are not what is tested here
        client.close()


def test_a_redundant_continue_is_answered_by_ptdebug(start_adapter):
    """A `continue` while the program runs is answered as debugpy answers a real one
    (allThreadsContinued), never sent on; the session goes on."""
    run = start_adapter()
    client = run.client
    thread = _session(run)
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": []})
    assert client.call("continue", {"threadId": thread})["allThreadsContinued"] is True
    for _ in range(3):
        again = client.call("continue", {"threadId": thread}, timeout=10)
        assert again == {"allThreadsContinued": True}
    _still_serves(client)
    _end(run)


@pytest.mark.parametrize("attempt", [1, 2, 3])
def test_continue_at_once_after_a_record_breakpoint_on_a_worker(start_adapter, attempt):
    """Stopped in the main thread, a record breakpoint set on a worker's line and `continue`
    at once: the worker fires it while the user's continue is in flight and ptdebug's release
    follows. Both `continue` and `threads` are answered, the capture is kept (3 of 3 wedged
    before)."""
    run = start_adapter()
    client = run.client
    thread = _session(run)
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": _record_at_worker()})
    resumed = client.send_request("continue", {"threadId": thread})
    threads = client.send_request("threads")
    assert client.expect_response(resumed, timeout=10)["success"]
    assert client.expect_response(threads, timeout=10)["success"]
    capture = client.expect_event("ptdebug/capture", timeout=40)["body"]
    assert capture["instructions"] == WINDOW["instructions"], capture
    _still_serves(client)
    _end(run)


def test_continue_after_capture_now(start_adapter):
    """`ptdebug/captureNow` lets the program run on; the user's `continue` after it (the
    program already runs) is answered, and so is everything after."""
    run = start_adapter()
    client = run.client
    thread = _session(run)
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": []})
    body = client.call("ptdebug/captureNow", {"threadId": thread}, timeout=40)
    assert body["instructions"] == WINDOW["instructions"]
    assert client.call("continue", {"threadId": thread}, timeout=10)["allThreadsContinued"]
    _still_serves(client)
    _end(run)


def test_continue_sent_with_capture_now(start_adapter):
    """A `continue` sent right behind `ptdebug/captureNow`, before its answer: ptdebug's
    release and the user's continue are serialised; both are answered."""
    run = start_adapter()
    client = run.client
    thread = _session(run)
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": []})
    capture = client.send_request("ptdebug/captureNow", {"threadId": thread})
    resumed = client.send_request("continue", {"threadId": thread})
    answer = client.expect_response(capture, timeout=40)
    assert answer["success"], answer
    assert client.expect_response(resumed, timeout=40)["success"]
    _still_serves(client)
    _end(run)


def test_resume_requests_sent_together_are_decided_one_after_another(start_adapter):
    """The wedge the DAP fuzzer found (seed 17): several resume requests sent together while
    the program is stopped were all decided against that stopped state and all forwarded; the
    first resumed the program and debugpy never answered the second (nor anything after it).
    Each is now decided once the one before it is answered: the second `continue` is answered
    by ptdebug (the program runs), the `next` of a running thread is refused."""
    run = start_adapter()
    client = run.client
    thread = _session(run)
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": []})
    burst = [("continue", {"threadId": thread}), ("continue", {"threadId": thread}),
             ("next", {"threadId": thread}), ("continue", {"threadId": thread}),
             ("threads", None)]
    seqs = [client.send_request(command, arguments) for command, arguments in burst]
    answers = [client.expect_response(seq, timeout=10) for seq in seqs]
    assert [a["success"] for a in answers] == [True, True, False, True, True], answers
    assert answers[1]["body"] == {"allThreadsContinued": True}
    assert f"thread {thread} is running" in answers[2]["message"]
    _still_serves(client)
    _end(run)


def test_resume_requests_queued_behind_a_failed_capture_now(start_adapter):
    """Requests that waited for a hidden stop are let go together when it ends: a
    `ptdebug/captureNow` that fails leaves the program paused, and the `continue`, `continue`,
    `next` queued behind it are decided one after another against that state, as they would
    have been without the capture (the first resumes the program)."""
    run = start_adapter()
    client = run.client
    thread = _session(run)
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": []})
    capture = client.send_request("ptdebug/captureNow", {"threadId": 999999})
    seqs = [client.send_request(command, {"threadId": thread})
            for command in ("continue", "continue", "next")]
    threads = client.send_request("threads")
    failed = client.expect_response(capture, timeout=20)
    assert failed["success"] is False, failed
    answers = [client.expect_response(seq, timeout=10) for seq in seqs]
    assert [a["success"] for a in answers] == [True, True, False], answers
    assert client.expect_response(threads, timeout=10)["success"]
    _still_serves(client)
    _end(run)


def test_a_step_of_a_running_thread_is_refused(start_adapter):
    """`next` / `stepIn` / `stepOut` of a thread that runs: a clear error naming the thread,
    and the session goes on; a `continue` right behind a step (the program runs once the step
    is answered) is answered too."""
    run = start_adapter()
    client = run.client
    thread = _session(run)
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": []})
    client.call("continue", {"threadId": thread})
    for command in ("next", "stepIn", "stepOut"):
        refused = client.request(command, {"threadId": thread}, timeout=10)
        assert refused["success"] is False, refused
        assert f"thread {thread} is running" in refused["message"], refused
    client.call("pause", {"threadId": thread}, timeout=10)
    thread = client.expect_stopped("pause", timeout=20)["threadId"]
    stepped = client.send_request("next", {"threadId": thread})
    resumed = client.send_request("continue", {"threadId": thread})
    assert client.expect_response(stepped, timeout=10)["success"]
    assert client.expect_response(resumed, timeout=10)["success"]
    client.expect_stopped("step", timeout=20)  # the step ends where it would have
    client.call("continue", {"threadId": thread}, timeout=10)
    _still_serves(client)
    _end(run)


def test_under_load_with_a_data_breakpoint_and_a_record_breakpoint(start_adapter):
    """Both armed on a busy program for 25 s (it wedged at 26-31 s in both 30 s runs): every
    write the data breakpoint sees while the program would be running is a stop (none is
    reported as written "while the program was paused" by ptdebug's own hidden stops), and
    every request is answered."""
    run = start_adapter()
    client = run.client
    thread = _session(run)
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    frame = top_frame(client, thread)["id"]
    info = client.call("dataBreakpointInfo", {"name": "cache[3]", "frameId": frame})
    armed = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert armed["breakpoints"][0]["verified"], armed
    client.call("setBreakpoints", {"source": SOURCE, "breakpoints": _record_at_worker("% 3")})
    stops = 0
    deadline = time.monotonic() + 25
    while time.monotonic() < deadline:
        client.call("continue", {"threadId": thread}, timeout=15)
        stopped = client.expect_stopped(timeout=20)
        assert stopped["reason"] == "data breakpoint", stopped
        thread = stopped["threadId"]
        stops += 1
        assert client.call("threads", timeout=10)["threads"]
    paused_writes = [e for e in client.events("output")
                     if "while the program was paused" in e["body"]["output"]]
    assert paused_writes == [], paused_writes[:3]
    assert stops > 10, stops
    client.call("setDataBreakpoints", {"breakpoints": []}, timeout=10)
    _end(run)

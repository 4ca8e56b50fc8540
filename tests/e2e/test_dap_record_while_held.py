"""A record breakpoint whose thread another stop holds before it runs the line (issue 13,
build item 1), real debugpy, real ptrace, on scikit-learn: the `inference` thread of
tests/fixtures/programs/dap_sklearn_predict_service.py has a record breakpoint on infer()'s
first line (the predict), and the main thread, which queues each request, a normal
breakpoint on the queueing line. With debugpy's stopAllThreadsOnSuspend, each of the main
thread's stops holds every thread; the release of a record breakpoint's hidden stop lets both
threads go at once, and the main thread often stops again before the inference thread has
run its line.

Before, such a hit was "not recorded this time": its window waited for the thread, the stop
waited for the window, and the wait ended at its timeout. Now the stop is the user's, shown at
once; the window waits (its timeouts standing still) and opens when the thread runs the line
after the user's continue. Every request is recorded, each window from infer()'s line."""
from __future__ import annotations

import sys
import time

import pytest
from conftest import PROGRAMS, launch, marker_line

from adapter.recording.recording import Recording

pytestmark = pytest.mark.timeout(300)

SERVICE = PROGRAMS / "dap_sklearn_predict_service.py"
REQUESTS = 20
HELD = "its window opens when the thread runs it, once you continue"
WINDOW_TIMEOUT = 5
"""recordWindow.timeout: how long a window waits for its thread to run the line (under load,
two busy loops beside the test, the thread took 2 s to come back from debugpy's suspension
after a release; 1 s gave up there)."""
LOOKED_AT = 2
"""How many of the stops that hold a window are looked at for longer than WINDOW_TIMEOUT (the
others are continued at once: the test's time)."""


def _console(client) -> str:
    return "".join(e["body"]["output"] for e in client.events("output")
                   if e["body"].get("category") in ("console", "important", "stdout"))


def _serve_with_both_breakpoints(client) -> dict:
    """Run the service with both breakpoints, continuing each stop until it exits; the first
    LOOKED_AT stops that hold a window's wait are looked at for longer than the window waits
    for its line (WINDOW_TIMEOUT): a wait that counted the user's time would give up."""
    # no gap between requests: the main thread stops again one line after each continue; the
    # service runs on this interpreter, which has scikit-learn (an adapter installed elsewhere,
    # PTDEBUG_TEST_ADAPTER, would run it with its own venv's)
    launch(client, SERVICE, args=[str(REQUESTS), "0"], python=sys.executable,
           recordWindow={"instructions": 2000, "timeout": WINDOW_TIMEOUT})
    answer = client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": marker_line(SERVICE, "predict"), "mode": "record"},
        {"line": marker_line(SERVICE, "put")}]})
    assert all(b["verified"] for b in answer["breakpoints"]), answer
    announced = answer["breakpoints"][0]["message"]
    stops = []
    held = 0
    deadline = time.monotonic() + 240
    while not client.events("exited"):
        assert time.monotonic() < deadline, f"the service did not end; {len(stops)} stops"
        try:
            stopped = client.expect_stopped(timeout=0.5)
        except TimeoutError:
            continue
        stops.append(stopped)
        # (the console line comes before the stop it is about)
        if _console(client).count(HELD) > held:
            held += 1
            if held <= LOOKED_AT:
                time.sleep(WINDOW_TIMEOUT + 1)
        client.call("continue", {"threadId": stopped["threadId"]}, timeout=60)
    # the last capture may still be decoding when the program exits
    settle = time.monotonic() + 60
    while len(client.events("ptdebug/capture")) + _console(client).count("did not record") \
            < REQUESTS and time.monotonic() < settle:
        try:
            client.expect_event("ptdebug/capture", timeout=max(0.1, settle - time.monotonic()))
        except TimeoutError:
            break
    return {"stops": stops, "console": _console(client), "held": held, "announced": announced,
            "captures": [e["body"] for e in client.events("ptdebug/capture")]}


def test_every_request_is_recorded_while_another_thread_stops_the_program(start_adapter):
    run = start_adapter()
    seen = _serve_with_both_breakpoints(run.client)
    console = seen["console"]
    assert f"answered {REQUESTS} requests" in console, console[-2000:]
    assert "not recorded this time" not in console, console[-2000:]
    # (on a loaded machine, 1 run in 5-8, the capture before ending while the user looked at
    # a stop that held the next window let that window's wait run on, and it gave up: "did
    # not record: ... the thread did not come to infer (...) within 5 s"; LiveWindow)
    assert "did not record" not in console, console[-2000:]
    assert [s["reason"] for s in seen["stops"]] == ["breakpoint"] * REQUESTS, seen["stops"]
    assert len(seen["captures"]) == REQUESTS, (len(seen["captures"]), console[-2000:])
    print(f"{REQUESTS} requests, {len(seen['stops'])} stops, {seen['held']} windows waited "
          "for a continue")
    predict = marker_line(SERVICE, "predict")
    for capture in seen["captures"]:
        assert capture["status"] == "complete", capture
        # the breakpoint said what its windows would be: a Python line's, closing at the
        # function's return (it described a plain window from the stop before)
        assert seen["announced"] == f"record: a trace window opens here ({capture['window']})"
        recording = Recording.open(capture["bundle"])
        (thread,) = recording.threads
        assert recording.python_frames(thread) is not None  # (gives the history its frames)
        first = thread.history.python_frame(0)
        # the window opened where the thread runs infer()'s line, not in debugpy's suspension
        assert (first.qualname, first.line) == ("infer", predict), (capture, first)
    run.client.call("disconnect", {}, timeout=30)
    assert run.wait_exit() == 0
    run.assert_nothing_left()

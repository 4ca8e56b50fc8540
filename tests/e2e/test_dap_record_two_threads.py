"""Two threads hitting one record breakpoint at nearly the same moment (issue 13), real
debugpy, real ptrace: tests/fixtures/programs/dap_pair_record_service.py lets two worker
threads through a barrier each round, and both call score(), whose first line has a record
breakpoint.

With debugpy's stopAllThreadsOnSuspend, the first thread's hidden stop holds the second;
released, the second hits the breakpoint while the first one's window still waits for its
thread to run the line. Before, that window was ended ("not recorded this time: another
thread's record breakpoint stopped the program": 4 of 12 hits in a first try, 2026-12-05),
because the second capture waited for the first and the first for the second's stop to end.
Now the second capture begins beside the first: every hit is recorded, each window from
score()'s line, and each thread's captures are its own."""
from __future__ import annotations

import time

import pytest
from conftest import PROGRAMS, launch, marker_line

from adapter.recording.recording import Recording

pytestmark = pytest.mark.timeout(240)

SERVICE = PROGRAMS / "dap_pair_record_service.py"
ROUNDS = 6
HITS = 2 * ROUNDS


def _console(client) -> str:
    return "".join(e["body"]["output"] for e in client.events("output")
                   if e["body"].get("category") in ("console", "important", "stdout"))


def test_both_threads_hitting_a_record_breakpoint_together_are_recorded(start_adapter):
    run = start_adapter()
    client = run.client
    # (the record breakpoint is set before configurationDone, before the threads start)
    launch(client, SERVICE, record=["score"], args=[str(ROUNDS)],
           recordWindow={"instructions": 3000})
    line = marker_line(SERVICE, "score")
    client.expect_event("exited", timeout=150)
    assert client.events("stopped") == []  # a record breakpoint's stops are ptdebug's own
    settle = time.monotonic() + 60  # the last captures may still be decoding
    while (len(client.events("ptdebug/capture")) + _console(client).count("not recorded")
           + _console(client).count("did not record") < HITS and time.monotonic() < settle):
        try:
            client.expect_event("ptdebug/capture", timeout=max(0.1, settle - time.monotonic()))
        except TimeoutError:
            break
    console = _console(client)
    assert f"scored {HITS}" in console, console[-2000:]
    for unwanted in ("not recorded", "did not record", "closed early"):
        assert unwanted not in console, console[-2000:]
    captures = [e["body"] for e in client.events("ptdebug/capture")]
    assert len(captures) == HITS, (len(captures), console[-2000:])
    by_thread: dict[int, int] = {}
    for capture in captures:
        assert capture["status"] == "complete", capture
        by_thread[capture["threadId"]] = by_thread.get(capture["threadId"], 0) + 1
        recording = Recording.open(capture["bundle"])
        (thread,) = recording.threads
        assert recording.python_frames(thread) is not None
        first = thread.history.python_frame(0)
        assert (first.qualname, first.line) == ("score", line), (capture, first)
    assert sorted(by_thread.values()) == [ROUNDS, ROUNDS], by_thread
    beside = run.log().count("capture begins beside")
    print(f"{HITS} hits, {len(captures)} captures; {beside} began beside another")
    client.call("disconnect", {}, timeout=30)
    assert run.wait_exit() == 0
    run.assert_nothing_left()

"""Which threads a data-breakpoint stop pauses, through `ptdebug dap` in front of real debugpy:
debugpy's launch option `stopAllThreadsOnSuspend` decides, as at any debugpy stop. The writer
always stops at its writing line; a second thread (a counter it increments for ever) keeps
counting when the option is false and is frozen with the default."""
from __future__ import annotations

import time

import pytest
from conftest import (
    PROGRAMS,
    evaluate,
    finish_kv_session,
    launch,
    python_frame,
    top_frame,
)
from dapclient import marker_line

pytestmark = pytest.mark.timeout(90)

PROGRAM = PROGRAMS / "dap_kv_two_threads.py"


def _stop_on_write(run, **config) -> tuple[dict, dict]:
    """Launch, arm a data breakpoint on cache[5], continue; returns (stopped body, top frame)."""
    client = run.client
    launch(client, PROGRAM, breakpoints=["armed"], **config)
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    main_thread = client.expect_stopped("breakpoint")["threadId"]
    frame = top_frame(client, main_thread)["id"]
    info = client.call("dataBreakpointInfo", {"name": "cache[5]", "frameId": frame})
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    client.call("continue", {"threadId": main_thread})
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert "from 0.0 to 7.25" in stopped["description"], stopped
    threads = {t["id"]: t["name"] for t in client.call("threads")["threads"]}
    assert threads[stopped["threadId"]] == "kv-writer"
    writer = python_frame(client, stopped["threadId"])
    assert writer["name"] == "writer"
    # held at the write by its SIGTRAP: the frame is at the line that wrote
    assert writer["line"] == marker_line(PROGRAM, "write"), writer
    return stopped, writer


def _ticks_twice(client, frame_id: int) -> tuple[int, int]:
    first = int(evaluate(client, frame_id, "ticks"))
    time.sleep(0.5)
    return first, int(evaluate(client, frame_id, "ticks"))


def test_stop_all_threads_false_stops_only_the_writer(start_adapter):
    run = start_adapter()
    stopped, writer = _stop_on_write(run, stopAllThreadsOnSuspend=False)
    assert stopped.get("allThreadsStopped") is not True, stopped
    first, later = _ticks_twice(run.client, writer["id"])
    assert later > first + 10, (first, later)  # the ticker ran on while the writer was stopped
    finish_kv_session(run, stopped["threadId"], writer["id"])


def test_default_stops_every_thread(start_adapter):
    run = start_adapter()
    stopped, writer = _stop_on_write(run)
    first, later = _ticks_twice(run.client, writer["id"])
    assert later == first, (first, later)  # the ticker is paused too
    finish_kv_session(run, stopped["threadId"], writer["id"])

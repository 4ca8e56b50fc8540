"""Record breakpoints through `ptdebug dap` in front of real debugpy: a conditional breakpoint
in mode `record` never shows a stop; each time its condition holds, the ptrace stepper records
the stopped thread through the native helper (kv_update, until it returns) and the session sends
`ptdebug/capture`; when the condition does not hold nothing is recorded."""
from __future__ import annotations

import dataclasses
import json
import pathlib

import pytest
from conftest import INITIALIZE, evaluate, top_frame
from record_support import (
    KVCACHE,
    SERVICE,
    build_kvcache,
    line_of,
    record_session,
    stop_ready_with_data_breakpoints,
)

pytestmark = pytest.mark.timeout(120)


def test_record_breakpoint_captures_only_when_its_condition_holds(start_adapter, tmp_path):
    run = start_adapter()
    client = run.client
    library = build_kvcache(tmp_path)
    # Requests 1..7 pass the record breakpoint; only request 5 satisfies its condition.
    stopped = record_session(client, library, record_condition="request_id == 5",
                             stop_condition="request_id == 7")
    run.track()
    frame = top_frame(client, stopped["threadId"])
    assert frame["line"] == line_of(SERVICE, "after_request")
    assert evaluate(client, frame["id"], "request_id") == "7"
    # No stop was shown for the record breakpoint: this is the first `stopped` of the session.
    assert len(client.events("stopped")) == 1
    captures = client.events("ptdebug/capture")
    assert len(captures) == 1, captures
    capture = captures[0]["body"]
    assert capture["id"] == 1 and capture["threadId"] == stopped["threadId"]
    native = evaluate(client, frame["id"], "__import__('threading').get_native_id()")
    assert capture["tid"] == int(native)
    assert "kv_update" in capture["window"] and capture["endReason"]
    assert 20 < capture["instructions"] < 5000, capture
    assert capture["durationNs"] > 0 and capture["gaps"] == []
    assert capture["partial"] is False and capture["status"] == "complete"
    assert capture["reason"] == "breakpoint"
    assert capture["location"] == {"path": str(SERVICE), "line": line_of(SERVICE, "request")}
    assert (pathlib.Path(capture["bundle"]) / "manifest.json").is_file()
    # Issue 35: the event says which clock its durationNs and cycles are, as the manifest does
    # (the stepper's are the wall-clock ns of a ptrace-slowed thread: not CPU cycles), and so
    # does the Debug Console line.
    manifest = json.loads((pathlib.Path(capture["bundle"]) / "manifest.json").read_text())
    told = next(e["body"]["output"] for e in client.events("output")
                if e["body"]["output"].startswith("ptdebug: capture 1:"))
    if manifest["backend"] == "stepper":
        assert capture["clock"] == "stepper", capture
        assert "ptrace" in capture["clockLabel"] and "not CPU" in capture["clockLabel"], capture
        assert "stepper time" in told and "cycles" not in told, told
    else:
        assert capture["clock"] == "tsc", capture
        assert "cycles" in told, told
    # The capture is the request path through the native helper: stepping back from the live
    # end lands on kvcache.c (the trace is decoded against the helper's DWARF lines).
    client.call("stepBack", {"threadId": stopped["threadId"], "granularity": "line"})
    client.expect_stopped("step")
    top = top_frame(client, stopped["threadId"])
    assert top["source"]["path"] == str(KVCACHE) and top["name"].startswith("kv_update")
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def test_record_window_of_n_instructions_and_a_bad_window(start_adapter, tmp_path):
    """A window without a function records N instructions from the breakpoint on (inside the
    interpreter); a window setting that does not exist is refused by name."""
    run = start_adapter()
    client = run.client
    library = build_kvcache(tmp_path)
    stopped = record_session(client, library, record_condition="request_id == 2",
                             stop_condition="request_id == 3",
                             window={"instructions": 300})
    run.track()
    capture = client.events("ptdebug/capture")[0]["body"]
    assert capture["instructions"] == 300, capture
    assert "at most 300 instructions" in capture["window"]
    bad = client.request("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": line_of(SERVICE, "request"), "mode": "record",
         "recordWindow": {"cycles": 5}}]})
    assert bad["success"] is False and "recordWindow.cycles" in bad["message"], bad
    assert evaluate(client, top_frame(client, stopped["threadId"])["id"], "request_id") == "3"
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def test_a_window_that_cannot_open_is_reported_and_the_program_runs_on(start_adapter, tmp_path):
    """A window naming a function the process does not have: the user is told why nothing was
    recorded, no capture is kept, and the program was let go (it reaches the next stop)."""
    run = start_adapter()
    client = run.client
    library = build_kvcache(tmp_path)
    stopped = record_session(client, library, record_condition="request_id == 2",
                             stop_condition="request_id == 3",
                             window={"function": "no_such_function", "timeout": 5})
    run.track()
    outputs = [e["body"]["output"] for e in client.events("output")]
    assert any("did not record" in o and "no_such_function" in o for o in outputs), outputs
    assert client.events("ptdebug/capture") == []
    assert evaluate(client, top_frame(client, stopped["threadId"])["id"], "request_id") == "3"
    refused = client.request("stepBack", {"threadId": stopped["threadId"]})
    assert refused["success"] is False and "record" in refused["message"]
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def test_recording_while_a_data_breakpoint_holds_debug_registers(start_adapter, tmp_path):
    """A record breakpoint that fires while a data breakpoint is armed (cache[0]: 16 bytes, two
    of the thread's four debug registers) records with the two left: the window opens at
    kv_update (one of them) and closes when it returns; the program runs on to the next stop.
    (It used to refuse: "data breakpoint(s) are armed", issue 17.)"""
    run = start_adapter()
    client = run.client
    library = build_kvcache(tmp_path)
    stopped = stop_ready_with_data_breakpoints(run, client, library, {"function": "kv_update"})
    frame = top_frame(client, stopped["threadId"])
    info = client.call("dataBreakpointInfo", {"name": "cache[0]", "frameId": frame["id"]})
    client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": line_of(SERVICE, "request"), "mode": "record", "condition": "request_id == 2"},
        {"line": line_of(SERVICE, "after_request"), "condition": "request_id == 2"}]})
    client.call("continue", {"threadId": stopped["threadId"]})
    after = client.expect_stopped("breakpoint", timeout=30)
    assert top_frame(client, after["threadId"])["line"] == line_of(SERVICE, "after_request")
    capture = client.expect_event("ptdebug/capture", timeout=30)["body"]
    assert capture["status"] == "complete", capture
    assert capture["instructions"] > 20, capture  # the whole of kv_update (88 here)
    assert [e for e in client.events("output") if "did not record" in e["body"]["output"]] == []
    client.call("setDataBreakpoints", {"breakpoints": []})
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def test_window_closed_by_a_second_breakpoint_on_a_native_line(start_adapter, tmp_path):
    """`until: FILE:LINE` closes the window before that line's first run: the history holds
    kv_update up to its store loop and nothing of it."""
    run = start_adapter()
    client = run.client
    library = build_kvcache(tmp_path)
    store = line_of(KVCACHE, "store")
    stopped = record_session(client, library, record_condition="request_id == 5",
                             stop_condition="request_id == 5",
                             window={"function": "kv_update", "until": f"kvcache.c:{store}"})
    run.track()
    capture = client.events("ptdebug/capture")[0]["body"]
    assert 5 < capture["instructions"] < 40, capture
    thread_id = stopped["threadId"]
    lines = []
    for _ in range(12):
        client.call("stepBack", {"threadId": thread_id, "granularity": "line"})
        description = client.expect_stopped("step")["description"]
        lines.append(top_frame(client, thread_id)["line"])
        if "start of the recorded history" in description:
            break
    assert line_of(KVCACHE, "scale") in lines and max(lines) < store, lines
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def test_record_breakpoint_with_a_hit_condition(start_adapter, tmp_path):
    """hitCondition 3 (debugpy: the third pass of the line): requests 1..5 pass the record
    breakpoint, only request 3 is recorded. (debugpy breaks when the hit condition *or* the
    condition holds; a record breakpoint records exactly when debugpy would have stopped.)"""
    run = start_adapter()
    client = run.client
    library = build_kvcache(tmp_path)
    initialize = client.call("initialize", INITIALIZE)
    assert "record" in [m["mode"] for m in initialize["breakpointModes"]]
    launch_seq = client.send_request("launch", {
        "program": str(SERVICE), "args": [library, "60"], "console": "internalConsole",
        "recordWindow": {"function": "kv_update"}})
    client.expect_event("initialized")
    client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": line_of(SERVICE, "request"), "mode": "record", "hitCondition": "3"},
        {"line": line_of(SERVICE, "after_request"), "condition": "request_id == 5"}]})
    client.call("configurationDone", {})
    assert client.expect_response(launch_seq)["success"]
    stopped = client.expect_stopped("breakpoint", timeout=40)
    run.track()
    assert evaluate(client, top_frame(client, stopped["threadId"])["id"], "request_id") == "5"
    assert len(client.events("ptdebug/capture")) == 1
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def test_capture_now_records_the_paused_thread_and_the_program_runs_on(start_adapter, tmp_path):
    """`ptdebug/captureNow {threadId}` (the extension's Capture Now): the paused thread is
    recorded with the launch window; the response and a `ptdebug/capture` event carry it."""
    run = start_adapter()
    client = run.client
    library = build_kvcache(tmp_path)
    stopped = record_session(client, library, record_condition="request_id == 99",
                             stop_condition="request_id in (2, 4)",
                             window={"instructions": 200})
    run.track()
    body = client.call("ptdebug/captureNow", {"threadId": stopped["threadId"]}, timeout=30)
    assert body["instructions"] == 200 and body["reason"] == "command", body
    assert body["threadId"] == stopped["threadId"] and body["location"] is None
    event = client.expect_event("ptdebug/capture")["body"]
    assert event["bundle"] == body["bundle"]
    # the body has exactly the fields and types of its one source, schema.CaptureNowOut
    from adapter.protocol.schema import CaptureNowOut, parse
    assert set(event) == {f.name for f in dataclasses.fields(CaptureNowOut)}
    assert parse(CaptureNowOut, event).reason == "command"
    again = client.expect_stopped("breakpoint", timeout=30)  # it ran on to request 4
    assert evaluate(client, top_frame(client, again["threadId"])["id"], "request_id") == "4"
    refused = client.request("ptdebug/captureNow", {"threadId": "main"})
    assert refused["success"] is False and "threadId" in refused["message"]
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()

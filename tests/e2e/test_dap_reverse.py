"""Reverse stepping and the Processor Trace scope through `ptdebug dap` in front of real
debugpy, over a capture made by a record breakpoint on the demo service's request path
(kv_update in the native helper, recorded by the ptrace stepper, decoded from Intel PT)."""
from __future__ import annotations

import re

import pytest
from conftest import top_frame
from record_support import KVCACHE, SERVICE, build_kvcache, line_of, record_session

pytestmark = pytest.mark.timeout(120)

WIDTH = 4
"""Iterations of kv_update's store loop for one request (service.py's WIDTH)."""


def _position(stopped: dict) -> int:
    match = re.search(r"instruction (\d+) of (\d+)", stopped["description"])
    assert match, stopped
    return int(match.group(1))


def _back(client, thread_id: int, granularity: str) -> tuple[dict, dict]:
    client.call("stepBack", {"threadId": thread_id, "granularity": granularity})
    stopped = client.expect_stopped("step")
    assert stopped["threadId"] == thread_id
    return stopped, top_frame(client, thread_id)


def _variables(client, reference: int) -> dict[str, dict]:
    found = client.call("variables", {"variablesReference": reference})["variables"]
    return {v["name"]: v for v in found}


@pytest.fixture
def stopped_after_capture(start_adapter, tmp_path):
    run = start_adapter()
    library = build_kvcache(tmp_path)
    stopped = record_session(run.client, library, record_condition="request_id == 5",
                             stop_condition="request_id == 5")
    run.track()
    run.client.expect_event("capabilities",
                            pred=lambda e: e["body"]["capabilities"].get("supportsStepBack"))
    return run, stopped["threadId"]


def test_trace_scope_and_step_back_by_line_and_instruction(stopped_after_capture):
    run, thread_id = stopped_after_capture
    client = run.client
    # The live stop has the Processor Trace scope beside debugpy's own.
    live = top_frame(client, thread_id)
    assert live["line"] == line_of(SERVICE, "after_request")
    scopes = client.call("scopes", {"frameId": live["id"]})["scopes"]
    names = [s["name"] for s in scopes]
    assert "Locals" in names and names[-1] == "Processor Trace", names
    trace = _variables(client, scopes[-1]["variablesReference"])
    # a stepper capture: instructions first, its clock named stepper time, no CPU cycles
    # (issue 14 item 8; tests/adapter/features/test_trace_scope_timing.py has the Intel PT side)
    for name in ("instructions since window opened", "instructions in window", "IP",
                 "stepper time since window opened", "stepper time in window", "stepper clock",
                 "IPC", "last branches", "gaps"):
        assert name in trace, sorted(trace)
    assert not {"TSC", "CYC", "cycles in window"} & set(trace), sorted(trace)
    count = int(trace["instructions in window"]["value"])
    assert "kv_update" in trace["IP"]["value"]
    assert trace["stepper time in window"]["type"] == "stepper time, not CPU time"
    assert float(trace["stepper time in window"]["value"].split()[0]) > 0
    assert trace["IPC"]["value"].startswith("n/a")
    assert trace["gaps"]["value"].startswith("none")
    branches = _variables(client, trace["last branches"]["variablesReference"])
    assert len(branches) >= WIDTH and all("kv_update" in b["value"] for b in branches.values())
    assert any(f"kvcache.c:{line_of(KVCACHE, 'store')}" in b["value"] for b in branches.values())

    # Step back by line from the live end to the history's start.
    lines, positions = [], []
    for _ in range(40):
        stopped, top = _back(client, thread_id, "line")
        assert top["source"]["path"] == str(KVCACHE)
        assert top["instructionPointerReference"].startswith("0x")
        lines.append(top["line"])
        positions.append(_position(stopped))
        if "start of the recorded history" in stopped["description"]:
            break
    else:
        raise AssertionError(f"no start of history after 40 steps: {lines}")
    assert positions[0] == count - 1
    assert positions[:-1] == sorted(positions[:-1], reverse=True), positions
    assert lines.count(line_of(KVCACHE, "store")) == WIDTH, lines
    assert line_of(KVCACHE, "return") in lines[:3], lines
    order = [line for line in lines if line in (line_of(KVCACHE, "scale"),
                                                line_of(KVCACHE, "norm"))]
    assert order[:2] == [line_of(KVCACHE, "scale"), line_of(KVCACHE, "norm")], lines

    # While replaying: recorded frames joined to the live stack; values plainly not recorded.
    frames = client.call("stackTrace", {"threadId": thread_id, "levels": 20})["stackFrames"]
    assert frames[0]["name"].startswith("kv_update [recorded")
    # handle() stayed on the stack for the whole window: shown once, as its live frame
    # (evaluable), at the line it was on there (the call of kv_update; the live frame has moved
    # on to @after_request, and its values are today's, which its name says)
    handle = [f for f in frames if f.get("source", {}).get("path") == str(SERVICE)]
    assert handle[0]["name"] == (f"handle [line {line_of(SERVICE, 'request')} at the replay "
                                 "position; values of now]"), frames
    assert handle[0]["line"] == line_of(SERVICE, "request")
    assert [f["name"] for f in handle[1:]] == ["main", "<module>"], frames
    assert not any("[recorded Python" in f["name"] for f in frames), frames
    recorded = client.call("scopes", {"frameId": frames[0]["id"]})["scopes"]
    assert [s["name"] for s in recorded] == ["Locals (not recorded)", "Processor Trace"]
    note = _variables(client, recorded[0]["variablesReference"])["note"]["value"]
    assert "values were not recorded" in note
    replay_trace = _variables(client, recorded[1]["variablesReference"])
    assert "(replaying)" in replay_trace["position"]["value"]
    refused = client.request("evaluate", {"expression": "norm", "frameId": frames[0]["id"],
                                          "context": "watch"})
    assert refused["success"] is False and "not recorded" in refused["message"]

    # Forward by line, then back by instruction: one instruction at a time.
    client.call("next", {"threadId": thread_id})
    forward = client.expect_stopped("step")
    here = _position(forward)
    assert here > positions[-1]
    stopped, _ = _back(client, thread_id, "instruction")
    assert _position(stopped) == here - 1
    stopped, _ = _back(client, thread_id, "instruction")
    assert _position(stopped) == here - 2

    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def test_reverse_continue_to_breakpoints_and_continue_replays_to_live(stopped_after_capture):
    run, thread_id = stopped_after_capture
    client = run.client
    store = line_of(KVCACHE, "store")
    client.call("setBreakpoints", {"source": {"path": str(KVCACHE)},
                                   "breakpoints": [{"line": store}]})
    hits = []
    for _ in range(WIDTH):
        client.call("reverseContinue", {"threadId": thread_id})
        stopped = client.expect_stopped("breakpoint")
        assert top_frame(client, thread_id)["line"] == store
        hits.append(_position(stopped))
    assert hits == sorted(hits, reverse=True) and len(set(hits)) == WIDTH, hits
    client.call("reverseContinue", {"threadId": thread_id})
    first = client.expect_stopped("step")
    assert "no breakpoint hit before" in first["description"]
    # `continue` replays forward to the next recorded hit...
    client.call("continue", {"threadId": thread_id})
    assert _position(client.expect_stopped("breakpoint")) == hits[-1]
    # ...and with no breakpoint left in the history it reaches the live end and runs on.
    client.call("setBreakpoints", {"source": {"path": str(KVCACHE)}, "breakpoints": []})
    client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": []})
    client.call("continue", {"threadId": thread_id})
    client.expect_event("terminated", timeout=30)
    assert len(client.events("ptdebug/capture")) == 1
    client.call("disconnect", {})
    run.wait_exit()
    run.assert_nothing_left()

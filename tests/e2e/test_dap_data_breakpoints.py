"""Data breakpoints on a numpy array through `ptdebug dap` in front of real debugpy: the
hardware watchpoint (perf breakpoint events on every thread) catches the write of a background
thread, and the session stops that thread with reason `data breakpoint`."""
from __future__ import annotations

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

KV = PROGRAMS / "dap_kv_writer.py"


def _armed_session(run):
    client = run.client
    launch(client, KV, breakpoints=["armed"])
    capabilities = client.expect_event(
        "capabilities", pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    assert capabilities["body"]["capabilities"]["supportsDataBreakpointBytes"] is True
    stopped = client.expect_stopped("breakpoint")
    frame = top_frame(client, stopped["threadId"])
    assert frame["line"] == marker_line(KV, "armed")
    return stopped["threadId"], frame["id"]


def test_write_by_another_thread_stops_it_with_reason_data_breakpoint(start_adapter):
    run = start_adapter()
    client = run.client
    main_thread, frame = _armed_session(run)
    info = client.call("dataBreakpointInfo", {"name": "cache[3]", "frameId": frame})
    assert info["dataId"] and "cache[3]" in info["description"]
    assert "all 8 bytes" in info["description"], info
    assert info["accessTypes"] == ["write", "readWrite"]
    address = int(evaluate(client, frame, "cache.ctypes.data")) + 3 * 8
    assert info["dataId"] == f"{address:#x}/8"
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    # A write from the debug console while paused is reported, not turned into a stop.
    evaluate(client, frame, "cache.__setitem__(3, -1.5)")
    told = client.expect_event("output", pred=lambda e: "while the program was paused"
                               in e["body"]["output"])
    assert "from 0.0 to -1.5" in told["body"]["output"]
    client.call("continue", {"threadId": main_thread})
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert stopped["hitBreakpointIds"] == [body["breakpoints"][0]["id"]]
    assert "from -1.5 to 42.5" in stopped["description"], stopped
    assert "kv-writer" in stopped["description"]
    # The stop is in the writing thread, held at the write (its SIGTRAP): the line that wrote.
    threads = {t["id"]: t["name"] for t in client.call("threads")["threads"]}
    assert threads[stopped["threadId"]] == "kv-writer"
    native = top_frame(run.client, stopped["threadId"])  # the write, in numpy
    assert "_multiarray_umath" in native["name"] and "instructionPointerReference" in native
    writer = python_frame(run.client, stopped["threadId"])
    assert writer["name"] == "writer"
    assert writer["line"] == marker_line(KV, "write")
    assert evaluate(client, writer["id"], "float(cache[3])") == "42.5"
    finish_kv_session(run, stopped["threadId"], writer["id"])


def test_info_for_variables_addresses_and_what_cannot_be_watched(start_adapter):
    run = start_adapter()
    client = run.client
    main_thread, frame = _armed_session(run)
    # Through the Variables view: a variable of a scope, found by its variablesReference.
    scopes = client.call("scopes", {"frameId": frame})["scopes"]
    globals_ref = next(s["variablesReference"] for s in scopes if s["name"].lower()
                       .startswith("global"))
    client.call("variables", {"variablesReference": globals_ref})
    info = client.call("dataBreakpointInfo", {"name": "cache",
                                              "variablesReference": globals_ref})
    assert "bytes 0..32 of 128" in info["description"], info
    element = client.call("dataBreakpointInfo", {"name": "kv[1, 2]", "frameId": frame})
    kv_address = int(evaluate(client, frame, "kv.ctypes.data"))
    assert element["dataId"] == f"{kv_address + (8 + 2) * 4:#x}/4"
    raw = client.call("dataBreakpointInfo", {"name": hex(kv_address), "asAddress": True,
                                             "bytes": 16})
    assert raw["dataId"] == f"{kv_address:#x}/16"
    for name, reason in [("spins", "memoryview"), ("cache[::2]", "not contiguous"),
                         ("no_such_name", "NameError"), ("cache[", "not a Python expression")]:
        refused = client.call("dataBreakpointInfo", {"name": name, "frameId": frame})
        assert refused["dataId"] is None and reason in refused["description"], refused
    body = client.call("setDataBreakpoints", {"breakpoints": [
        {"dataId": element["dataId"]},                           # 1 debug register
        {"dataId": element["dataId"], "accessType": "read"},
        {"dataId": "nonsense"},
        {"dataId": raw["dataId"], "accessType": "readWrite"},    # 2 more
        {"dataId": info["dataId"]},                              # 4 more: too many
    ]})
    verified = [b["verified"] for b in body["breakpoints"]]
    assert verified == [True, False, False, True, False], body
    assert "reads alone" in body["breakpoints"][1]["message"]
    assert "no_register" in body["breakpoints"][4]["message"]
    assert evaluate(client, frame, "spins") == "0"  # the session carries on
    finish_kv_session(run, main_thread, frame)


SAME = PROGRAMS / "dap_same_value_writer.py"


def test_a_write_of_the_same_value_says_so(start_adapter):
    """Issue 35: a write that stored the value already there stopped, rightly, but said
    `buf changed from [0, …] to [0, …]`; it says `written (value unchanged)`. The next write,
    which changes the value, still says from what to what."""
    run = start_adapter()
    client = run.client
    launch(client, SAME, breakpoints=["armed"])
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    stopped = client.expect_stopped("breakpoint")
    frame = top_frame(client, stopped["threadId"])
    assert frame["line"] == marker_line(SAME, "armed")
    info = client.call("dataBreakpointInfo", {"name": "buf", "frameId": frame["id"]})
    assert info["dataId"], info
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    client.call("continue", {"threadId": stopped["threadId"]})
    same = client.expect_stopped("data breakpoint", timeout=30)
    assert "buf written (value unchanged" in same["description"], same
    assert "changed from" not in same["description"], same
    assert "same-writer" in same["description"], same
    writer = python_frame(client, same["threadId"])
    assert writer["line"] == marker_line(SAME, "write_same"), writer
    client.call("continue", {"threadId": same["threadId"]})
    changed = client.expect_stopped("data breakpoint", timeout=30)
    assert "buf changed from" in changed["description"], changed
    assert "7" in changed["description"].split("changed from", 1)[1], changed
    writer = python_frame(client, changed["threadId"])
    assert writer["line"] == marker_line(SAME, "write_new"), writer
    finish_kv_session(run, changed["threadId"], writer["id"])

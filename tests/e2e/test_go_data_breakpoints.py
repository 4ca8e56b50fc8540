"""A data breakpoint on a Go global through `ptdebug dap`: Delve's hardware watchpoint stops
the goroutine that writes it (main.sum), not the one that set it (main.square)."""
from __future__ import annotations

import pytest
from go_support import GO_SESSION, copy_package, go_marker, start_go

pytestmark = pytest.mark.timeout(240)


def test_data_breakpoint_on_a_global_catches_the_writing_goroutine(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package)}, source=source,
             breakpoints={"work": {"condition": "j.id == 1"}})
    stopped = client.expect_stopped("breakpoint", timeout=60)
    setter = stopped["threadId"]
    client.expect_event("capabilities", 10, lambda e: e["body"]["capabilities"].get(
        "supportsDataBreakpoints") is True)
    frame = client.call("stackTrace", {"threadId": setter})["stackFrames"][0]
    info = client.call("dataBreakpointInfo", {"name": "main.total", "frameId": frame["id"]})
    assert info["dataId"] and "write" in info["accessTypes"]
    client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": []})
    body = client.call("setDataBreakpoints", {"breakpoints": [
        {"dataId": info["dataId"], "accessType": "write"}]})
    assert body["breakpoints"][0]["verified"] is True
    client.call("continue", {"threadId": setter})
    hit = client.expect_stopped("data breakpoint", timeout=30)
    writer = hit["threadId"]
    assert writer != setter
    top = client.call("stackTrace", {"threadId": writer})["stackFrames"][0]
    assert top["name"] == "main.sum"
    # x86 data breakpoints trap after the write; the stop names the write's line (issue 34)
    assert top["line"] == go_marker(source, "write_total"), top
    # the first write the watch sees adds job 0's result (0 * 0 * 2) when `sum` had not taken
    # it before the watch was armed: a write of the same value, said so
    assert ("main.total changed from 0 to " in hit["description"]
            or "main.total written with the same value 0:" in hit["description"]), hit
    goroutines = client.call("ptdebug/goroutines", {})["goroutines"]
    assert next(g for g in goroutines if g["id"] == writer)["userFunction"] == "main.sum"
    run.track()
    client.call("disconnect", {}, timeout=15)
    assert run.wait_exit() == 0
    run.assert_nothing_left()

"""Where a Go data-breakpoint stop is shown (issue 34, item 3): a debug-register write watch
traps after the writing instruction, and when that instruction ends its line the pc is already
on the next one (the issue saw line 48 for the write on line 47). The stop must name the line
of the write, and its `stopped` event say what changed: the expression, old and new values."""
from __future__ import annotations

import pytest
from conftest import PROGRAMS
from go_support import copy_package, go_marker, start_go

pytestmark = pytest.mark.timeout(240)

GO_WATCH = PROGRAMS / "go_watch"


def _watch(client, source) -> int:
    """Stopped at @loop before update(1): a write watch on main.counter; the goroutine."""
    stopped = client.expect_stopped("breakpoint", timeout=60)
    client.expect_event("capabilities", 10, lambda e: e["body"]["capabilities"].get(
        "supportsDataBreakpoints") is True)
    frame = client.call("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"][0]
    info = client.call("dataBreakpointInfo", {"name": "main.counter", "frameId": frame["id"]})
    client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": []})
    body = client.call("setDataBreakpoints", {"breakpoints": [
        {"dataId": info["dataId"], "accessType": "write"}]})
    assert body["breakpoints"][0]["verified"] is True, body
    return stopped["threadId"]


def test_a_go_data_breakpoint_stop_names_the_writing_line_and_the_values(start_adapter,
                                                                        tmp_path):
    package = copy_package(GO_WATCH, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package)}, source=source,
             breakpoints={"loop": {}})
    thread = _watch(client, source)
    for old, new in ((0, 1), (1, 3)):
        client.call("continue", {"threadId": thread})
        hit = client.expect_stopped("data breakpoint", timeout=30)
        top = client.call("stackTrace", {"threadId": hit["threadId"]})["stackFrames"][0]
        assert (top["name"], top["line"]) == ("main.update", go_marker(source, "write")), top
        description = hit.get("description") or ""
        assert "main.counter" in description, hit
        assert f"changed from {old} to {new}" in description, hit
        assert f"main.go:{go_marker(source, 'write')}" in description, hit
        thread = hit["threadId"]
    client.call("disconnect", {}, timeout=15)
    assert run.wait_exit() == 0

"""A Go record breakpoint whose `recordWindow.function` names no function of the program
(issue 34, item 2): unverified at `setBreakpoints`, with a message naming the function, instead
of accepted there and failing only when hit. The line's requests are served as without it, and a
well-spelt one beside it stays verified."""
from __future__ import annotations

import urllib.request

import pytest
from conftest import PROGRAMS
from go_support import copy_package, go_marker, start_go
from test_go_record import _port

pytestmark = pytest.mark.timeout(240)

GO_HTTP = PROGRAMS / "go_http"


def test_a_misspelt_window_function_is_unverified_at_set_breakpoints(start_adapter, tmp_path):
    package = copy_package(GO_HTTP, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package)})
    body = client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": [
        {"line": go_marker(source, "record_here"), "mode": "record",
         "recordWindow": {"function": "main.chekcsum"}},
        {"line": go_marker(source, "call"), "mode": "record",
         "recordWindow": {"function": "main.checksum"}}]})
    misspelt, right = body["breakpoints"]
    assert misspelt["verified"] is False, misspelt
    assert "main.chekcsum" in misspelt["message"], misspelt
    assert "no function" in misspelt["message"], misspelt
    assert right["verified"] is True, right
    assert "main.checksum" in right["message"], right
    client.call("disconnect", {"terminateDebuggee": True}, timeout=30)
    assert run.wait_exit() == 0


def test_a_misspelt_launch_window_function_is_unverified(start_adapter, tmp_path):
    package = copy_package(GO_HTTP, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package),
                                "recordWindow": {"function": "main.Checksum"}})
    body = client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": [
        {"line": go_marker(source, "record_here"), "mode": "record"},
        {"line": go_marker(source, "after")}]})
    record, normal = body["breakpoints"]
    assert record["verified"] is False and "main.Checksum" in record["message"], record
    assert normal["verified"] is True, normal
    client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": [
        {"line": go_marker(source, "record_here"), "mode": "record"}]})
    # the line runs: nothing tries to record, the request is answered
    port = _port(client)
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/?id=abc", timeout=30) as reply:
        assert reply.read().decode().startswith("abc ")
    assert not client.events("ptdebug/capture")
    assert not [e for e in client.events("output") if e["body"].get("category") == "important"]
    client.call("disconnect", {"terminateDebuggee": True}, timeout=30)
    assert run.wait_exit() == 0

"""The launch modes of vscode-go's configurations that the other Go tests do not use: mode
"test" (ptdebug builds the package's test binary with `go test -c` and Delve attaches to it) with
the test's own flags as `args`, stopping at a breakpoint in a test function."""
from __future__ import annotations

import pytest
from conftest import top_frame
from go_support import GO_SESSION, copy_package, go_marker, output_text, start_go

pytestmark = pytest.mark.timeout(180)


def test_mode_test_stops_in_the_test_and_passes(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    test_file = package / "main_test.go"
    run = start_adapter()
    client = run.client
    response = start_go(client, "launch", {"program": str(package), "mode": "test",
                                           "args": ["-test.run", "TestBump", "-test.v"]},
                        source=test_file, breakpoints={"test_bump": {}})
    assert response["success"], response
    stopped = client.expect_stopped("breakpoint", timeout=60)
    frame = top_frame(client, stopped["threadId"])
    assert frame["line"] == go_marker(test_file, "test_bump")
    assert frame["name"].endswith("TestBump")
    client.call("continue", {"threadId": stopped["threadId"]})
    exited = client.expect_event("exited", timeout=60)
    assert exited["body"]["exitCode"] == 0
    client.expect_event("terminated", timeout=30)
    assert "--- PASS: TestBump" in output_text(client)
    client.call("disconnect", {})


def test_stop_on_entry_then_run_to_the_end(start_adapter, tmp_path):
    """stopOnEntry: the program (held at its first instruction by ptdebug, attached by Delve)
    is reported stopped before any of it ran; continuing runs it to its end."""
    package = copy_package(GO_SESSION, tmp_path)
    run = start_adapter()
    client = run.client
    response = start_go(client, "launch", {"program": str(package), "stopOnEntry": True})
    assert response["success"], response
    stopped = client.expect_event("stopped", timeout=60)["body"]
    assert "total" not in output_text(client)  # main has not run
    client.call("continue", {"threadId": stopped["threadId"]})
    assert client.expect_event("exited", timeout=60)["body"]["exitCode"] == 0
    assert "total " in output_text(client)
    client.call("disconnect", {})

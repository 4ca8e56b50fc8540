"""A whole debug session through `ptdebug dap` in front of real debugpy: launch a Python
fixture, stop at a marker line, look at the stack, scopes, variables, evaluate, continue, end."""
from __future__ import annotations

import os

import pytest
from conftest import BASIC, INITIALIZE, evaluate, launch, top_frame
from dapclient import marker_line

pytestmark = pytest.mark.timeout(60)


def _session_at_breakpoint(run):
    client = run.client
    launch(client, breakpoints=["after_compute"])
    stopped = client.expect_stopped("breakpoint")
    run.track()
    frame = top_frame(client, stopped["threadId"])
    assert frame["line"] == marker_line(BASIC, "after_compute")
    assert frame["name"] == "main"
    assert os.path.samefile(frame["source"]["path"], BASIC)
    return stopped["threadId"], frame


def _inspect_and_finish(run, thread_id, frame):
    client = run.client
    scopes = client.call("scopes", {"frameId": frame["id"]})["scopes"]
    local = next(s for s in scopes if s["name"].lower().startswith("local"))
    variables = client.call("variables", {"variablesReference": local["variablesReference"]})
    values = {v["name"]: v["value"] for v in variables["variables"]}
    assert values["result"] == "6"
    assert values["numbers"] == "[1, 2, 3]"
    assert evaluate(client, frame["id"], "result * 7") == "42"
    client.call("continue", {"threadId": thread_id})
    exited = client.expect_event("exited")
    assert exited["body"]["exitCode"] == 0
    client.expect_event("terminated")
    client.call("disconnect", {})
    assert run.wait_exit() == 0
    run.assert_nothing_left()


def test_launch_break_inspect_continue_over_stdio(start_adapter):
    run = start_adapter()
    thread_id, frame = _session_at_breakpoint(run)
    output = "".join(e["body"]["output"] for e in run.client.events("output")
                     if e["body"].get("category") == "stdout")
    _inspect_and_finish(run, thread_id, frame)
    assert "result=6" in output + "".join(e["body"]["output"] for e in
                                          run.client.events("output"))


def test_launch_over_port_on_loopback(start_adapter):
    run = start_adapter(port=True)
    assert run.client.sock.getpeername()[0] == "127.0.0.1"
    thread_id, frame = _session_at_breakpoint(run)
    _inspect_and_finish(run, thread_id, frame)


def test_capabilities_are_ours_then_debugpys_merged(start_adapter):
    client = start_adapter().client
    capabilities = client.call("initialize", INITIALIZE)
    assert capabilities["supportsReadMemoryRequest"] is True
    assert capabilities["supportsDisassembleRequest"] is True
    assert "supportsStepBack" not in capabilities          # no history to walk yet
    assert "supportsDataBreakpoints" not in capabilities   # not announced before it works
    client.send_request("launch", {"program": str(BASIC), "console": "internalConsole"})
    event = client.expect_event("capabilities")["body"]["capabilities"]
    # debugpy's own powers arrive by event, before `initialized`.
    assert event["supportsConditionalBreakpoints"] is True
    assert event["exceptionBreakpointFilters"]
    assert "supportsReadMemoryRequest" not in event       # unchanged: still ours
    client.expect_event("initialized")


def test_launch_options_reach_the_debuggee(start_adapter, tmp_path):
    run = start_adapter()
    client = run.client
    launch(client, args=["env"], cwd=str(tmp_path), env={"PTDEBUG_E2E": "yes"},
           stopOnEntry=True, justMyCode=False)
    stopped = client.expect_stopped("entry")
    frame = top_frame(client, stopped["threadId"])
    assert evaluate(client, frame["id"], "__import__('sys').argv[1:]") == "['env']"
    assert evaluate(client, frame["id"], "__import__('os').getcwd()") == repr(str(tmp_path))
    assert evaluate(client, frame["id"], "__import__('os').environ['PTDEBUG_E2E']") == "'yes'"
    client.call("continue", {"threadId": stopped["threadId"]})
    client.expect_event("terminated")
    client.call("disconnect", {})
    assert run.wait_exit() == 0


def test_run_in_terminal_reverse_request_goes_through_the_client(start_adapter):
    """With console integratedTerminal, debugpy asks the *client* to start the program
    (runInTerminal): ptdebug passes the reverse request on and the answer back."""
    run = start_adapter()
    client = run.client
    client.run_in_terminal = True
    client.call("initialize", {**INITIALIZE, "supportsRunInTerminalRequest": True})
    launch_seq = client.send_request("launch", {"program": str(BASIC), "console":
                                                "integratedTerminal"})
    client.expect_event("initialized")
    client.call("setBreakpoints", {"source": {"path": str(BASIC)},
                                   "breakpoints": [{"line": marker_line(BASIC, "after_compute")}]})
    client.call("configurationDone", {})
    assert client.expect_response(launch_seq)["success"]
    stopped = client.expect_stopped("breakpoint")
    reverse = [m for m in client.received if m["type"] == "request"]
    assert [m["command"] for m in reverse] == ["runInTerminal"]
    assert client.terminal_processes and client.terminal_processes[0].poll() is None
    frame = top_frame(client, stopped["threadId"])
    assert evaluate(client, frame["id"], "result") == "6"
    client.call("continue", {"threadId": stopped["threadId"]})
    client.expect_event("terminated")
    client.call("disconnect", {})
    assert run.wait_exit() == 0


def test_start_debugging_reverse_request_reaches_the_client(start_adapter):
    """debugpy debugs subprocesses by asking the client to start a session for each
    (startDebugging, when the client supports it): ptdebug passes the request on."""
    run = start_adapter()
    client = run.client
    client.call("initialize", {**INITIALIZE, "supportsStartDebuggingRequest": True})
    launch_seq = client.send_request("launch", {"program": str(BASIC), "args": ["child"],
                                                "console": "internalConsole"})
    client.expect_event("initialized")
    client.call("configurationDone", {})
    assert client.expect_response(launch_seq)["success"]
    client.expect_event("terminated", timeout=30)
    reverse = [m for m in client.received if m["type"] == "request"]
    assert [m["command"] for m in reverse] == ["startDebugging"], reverse
    configuration = reverse[0]["arguments"]["configuration"]
    assert reverse[0]["arguments"]["request"] == "attach" and configuration
    client.call("disconnect", {})
    assert run.wait_exit() == 0

"""A record breakpoint on a Python line records in Python terms (issue 13, build item 1; "Show
that it works"), real debugpy, real ptrace: tests/fixtures/programs/dap_py_score_service.py,
whose `scorer` thread calls score() for each request, with a record breakpoint on score()'s
first line and a normal breakpoint on the line after the call returns.

The window opens when the thread runs score()'s first line (not in debugpy's suspend loop, nor
where the thread takes the GIL back) and closes when score() returns. From the stop at the
normal breakpoint, stepBack by line walks exactly the reverse of the line sequence
sys.settrace reports for the same call in a separate run, in Python frames of the service
only, and ends at the start of the recorded history on score()'s first line. Also on CPython
3.12 and 3.13, where debugpy traces with sys.monitoring (PEP 669) instead of sys.settrace."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import INITIALIZE, PROGRAMS, marker_line, top_frame
from python_interpreters import interpreter

pytestmark = pytest.mark.timeout(180)

SERVICE = PROGRAMS / "dap_py_score_service.py"


def _settrace_lines(python: str) -> list[tuple[str, int]]:
    out = subprocess.run([python, str(SERVICE), "settrace"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    return [tuple(x) for x in json.loads(out)]


def _start(client, window: dict | None = None, python: str | None = None,
           stop_at: str = "after") -> dict:
    """Launch the service with the record breakpoint on score's first line and the normal
    breakpoint at marker `stop_at`; the capture's body."""
    client.call("initialize", INITIALIZE)
    config = {"program": str(SERVICE), "args": ["3"], "console": "internalConsole"}
    if python is not None:
        config["python"] = python
    if window is not None:
        config["recordWindow"] = window
    launch = client.send_request("launch", config)
    client.expect_event("initialized")
    answer = client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": marker_line(SERVICE, "score_first"), "mode": "record", "hitCondition": "2"},
        {"line": marker_line(SERVICE, stop_at), "hitCondition": "2"}]})
    assert all(b["verified"] for b in answer["breakpoints"]), answer
    client.call("configurationDone", {})
    assert client.expect_response(launch)["success"]
    return client.expect_event("ptdebug/capture", timeout=120)["body"]


def _python(version: str) -> str | None:
    """The interpreter of `version` ("default": the adapter's own choice, None); skips the
    test where this machine has no such CPython."""
    if version == "default":
        return None
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no CPython {version} on this machine")
    return python


def _python_top(client, thread_id: int) -> tuple[str, int, dict]:
    """(function, line) of the innermost frame with a source (the innermost Python frame:
    native frames above it have none), that frame."""
    frames = client.call("stackTrace", {"threadId": thread_id})["stackFrames"]
    top = next(f for f in frames if f.get("source"))
    return top["name"].split(" ")[0], top["line"], top


@pytest.mark.parametrize("version", ["default", "3.12", "3.13"])
def test_step_back_from_the_stop_after_score_walks_settrace_in_reverse(start_adapter, version):
    python = _python(version)
    run = start_adapter()
    client = run.client
    capture = _start(client, python=python)
    assert capture["status"] == "complete", capture
    assert capture["endReason"].startswith("score (dap_py_score_service.py:"), capture
    assert capture["endReason"].endswith("returned"), capture
    assert "from the breakpoint's Python line, until its function returns" in capture["window"]
    stopped = client.expect_stopped("breakpoint", timeout=60)
    thread = stopped["threadId"]
    run.track()
    top = top_frame(client, thread)
    assert top["line"] == marker_line(SERVICE, "after")
    if version in ("3.12", "3.13"):  # debugpy traces with sys.monitoring there (PEP 669), not settrace
        tool = client.call("evaluate", {"expression": "__import__('sys').monitoring.get_tool(0)",
                                        "frameId": top["id"], "context": "repl"})["result"]
        assert tool == "'pydevd'", tool
    expected = _settrace_lines(python or sys.executable)
    walked = _walk_back(client, thread, len(expected) + 5)
    # the history ends where score() returned into handle(), and begins on score's first line
    assert walked == expected[::-1], f"walked {walked}\nexpected {expected[::-1]}"
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def _walk_back(client, thread: int, limit: int) -> list[tuple[str, int]]:
    """stepBack by line from the stop until the start of the recorded history: the (function,
    line) of the innermost Python frame at each landing."""
    walked = []
    for _ in range(limit):
        client.call("stepBack", {"threadId": thread, "granularity": "line"})
        step = client.expect_stopped("step")
        name, line, frame = _python_top(client, thread)
        assert frame["source"]["path"] == str(SERVICE)
        if "start of the recorded history" in step["description"]:
            assert (name, line) == walked[-1]  # it stays on the first line
            return walked
        walked.append((name, line))
    raise AssertionError(f"no start of the recorded history after {limit} steps: {walked}")


def test_a_breakpoint_inside_the_window_closes_it_there_on_3_12(start_adapter):
    """A normal breakpoint on score's return line, inside the window (which would close at
    score's return): the window closes as the thread reaches it, so that debugpy stops there
    at full speed, and the history ends on that line. On 3.12+ the debugger's callback is
    called from C, through an entry frame of the C stack that the probe must look past (it
    did not: the window recorded debugpy's whole suspension, up to its cap). 3.11's settrace
    path: tests/e2e/test_dap_record_window_stops.py."""
    python = _python("3.12")
    run = start_adapter()
    client = run.client
    capture = _start(client, python=python, stop_at="score_ret")
    at = f"{SERVICE}:{marker_line(SERVICE, 'score_ret')}"
    assert capture["endReason"] == f"the thread reached the breakpoint at {at}", capture
    assert capture["status"] == "complete", capture
    thread = client.expect_stopped("breakpoint", timeout=60)["threadId"]
    run.track()
    assert top_frame(client, thread)["line"] == marker_line(SERVICE, "score_ret")
    expected = _settrace_lines(python)
    expected = expected[:expected.index(("score", marker_line(SERVICE, "score_ret"))) + 1]
    # the history ends on the breakpoint's line (where the window closed), as the stop
    assert _walk_back(client, thread, len(expected) + 5) == expected[::-1]
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()


def test_a_window_of_n_python_lines(start_adapter):
    """recordWindow.lines = 4: the window holds score's first four lines as settrace counts
    them (debugpy's own frames are not lines of the program) and closes as the fifth
    begins."""
    run = start_adapter()
    client = run.client
    capture = _start(client, {"lines": 4})
    assert capture["endReason"].startswith("4 Python lines ran from score ("), capture
    assert "4 Python lines" in capture["window"], capture
    thread = client.expect_stopped("breakpoint", timeout=60)["threadId"]
    run.track()
    expected = _settrace_lines(sys.executable)[:5]
    assert _walk_back(client, thread, 12) == expected[::-1]
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()

"""What a record breakpoint says of itself in a debugpy session (real debugpy): the window
it will record when debugpy can stop there, and debugpy's own reason when it cannot.

Found trying ptdebug as a new user (2026-12-05): a record breakpoint on a line of
scikit-learn's `KNeighborsClassifier.predict`, with debugpy's default `justMyCode`. debugpy
does not stop in library files then and left the breakpoint unverified, with its reason
("...justMyCode..."); ptdebug replaced that reason with "record: a trace window opens here
(...)", so the grey breakpoint promised a window that never opened."""
from __future__ import annotations

import queue

import pytest
from conftest import INITIALIZE, PROGRAMS

pytestmark = pytest.mark.timeout(120)

PROGRAM = PROGRAMS / "dap_basic.py"
LIBRARY = queue.__file__
"""A standard-library file: not the user's code for debugpy's justMyCode."""


def _library_line() -> int:
    """The first line of Queue.put's body (past its docstring)."""
    lines = open(LIBRARY).read().splitlines()
    start = next(i for i, text in enumerate(lines) if text.strip().startswith("def put("))
    return next(i for i in range(start, len(lines)) if lines[i].strip().startswith("with ")) + 1


@pytest.mark.parametrize("just_my_code", [True, False], ids=["justMyCode", "all_code"])
def test_a_record_breakpoint_in_a_library_says_why_no_window_opens(start_adapter, just_my_code):
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    launch = client.send_request("launch", {"program": str(PROGRAM), "console":
                                            "internalConsole", "stopOnEntry": True,
                                            "justMyCode": just_my_code})
    client.expect_event("initialized")
    (answer,) = client.call("setBreakpoints", {
        "source": {"path": LIBRARY},
        "breakpoints": [{"line": _library_line(), "mode": "record"}]})["breakpoints"]
    if just_my_code:
        assert answer["verified"] is False, answer
        assert answer["message"].startswith("record: no window opens here while the debugger "
                                            "cannot stop here: "), answer
        assert "justMyCode" in answer["message"], answer  # debugpy's own reason, kept
    else:
        assert answer["verified"] is True, answer
        assert answer["message"].startswith("record: a trace window opens here (from the "
                                            "breakpoint's Python line"), answer
    client.call("configurationDone", {})
    assert client.expect_response(launch)["success"]
    client.call("disconnect", {"terminateDebuggee": True}, timeout=30)
    assert run.wait_exit() == 0
    run.assert_nothing_left()

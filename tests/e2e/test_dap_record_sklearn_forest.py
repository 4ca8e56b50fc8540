"""A record breakpoint in scikit-learn's own code, hit by two threads (issue 13, first
contact), real debugpy, real ptrace: tests/fixtures/programs/dap_forest_fit.py fits a
RandomForestClassifier with n_jobs=2, and the record breakpoint is on the first line of
`sklearn.ensemble._forest._parallel_build_trees`, which joblib's two threads run, one call
per tree (justMyCode off, as a user who debugs a library sets it).

What was seen (2026-12-05, trying ptdebug as a new user): of 10 trees, 0 to 2 were recorded,
and the program froze for 2 minutes at a time. One thread's window recorded while the other
hit the breakpoint; that stop was held back until the window closed, but debugpy had
suspended the recorded thread inside its tracer, which the recorder lets run untraced, so the
window waited for the stop and the stop for the window, until the recorder's watchdog.
Now the second thread's capture begins beside the first, and its release lets the first go
on: every tree's call is recorded, each window from the breakpoint's line."""
from __future__ import annotations

import inspect
import sys

import pytest
from conftest import PROGRAMS, launch

from adapter.recording.recording import Recording

sklearn_forest = pytest.importorskip("sklearn.ensemble._forest")
pytestmark = pytest.mark.timeout(300)

PROGRAM = PROGRAMS / "dap_forest_fit.py"
TREES = 10


def _first_body_line() -> int:
    """The first line of _parallel_build_trees past its signature and docstring."""
    function = sklearn_forest._parallel_build_trees
    lines, start = inspect.getsourcelines(function)
    docstring_end = next(i for i, text in enumerate(lines) if text.rstrip().endswith('"""')
                         and i > 0 and '"""' in "".join(lines[:i]))
    return start + next(i for i in range(docstring_end + 1, len(lines)) if lines[i].strip())


def test_every_tree_of_a_two_thread_forest_is_recorded(start_adapter):
    path = inspect.getsourcefile(sklearn_forest)
    line = _first_body_line()
    run = start_adapter()
    client = run.client
    launch(client, PROGRAM, args=[str(TREES)], python=sys.executable, justMyCode=False,
           recordWindow={"instructions": 5000})
    answer = client.call("setBreakpoints", {"source": {"path": path},
                                            "breakpoints": [{"line": line, "mode": "record"}]})
    assert answer["breakpoints"][0]["verified"], answer
    client.expect_event("exited", timeout=200)
    console = ""
    captures: list = []
    while len(captures) < TREES:
        try:
            captures.append(client.expect_event("ptdebug/capture", timeout=60)["body"])
        except TimeoutError:
            break
    console = "".join(e["body"]["output"] for e in client.events("output")
                      if e["body"].get("category") in ("console", "important", "stdout"))
    assert f"fitted {TREES} trees" in console, console[-2000:]
    for unwanted in ("not recorded", "did not record", "closed early"):
        assert unwanted not in console, console[-2000:]
    assert len(captures) == TREES, (len(captures), console[-2000:])
    assert len({c["threadId"] for c in captures}) == 2, captures  # both of joblib's threads
    for capture in captures:
        assert capture["status"] == "complete", capture
        recording = Recording.open(capture["bundle"])
        (thread,) = recording.threads
        assert recording.python_frames(thread) is not None
        first = thread.history.python_frame(0)
        assert (first.qualname, first.line) == ("_parallel_build_trees", line), (capture, first)
    client.call("disconnect", {}, timeout=30)
    assert run.wait_exit() == 0
    run.assert_nothing_left()

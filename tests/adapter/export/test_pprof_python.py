"""`ptdebug export pprof` of a Python capture: a real stepper recording of score() in
tests/fixtures/programs/py_attribution.py (with the Python probe); `go tool pprof -top -cum`
lists the Python functions with the instructions that ran under each (their Python callees
and the native code under them included), and the native functions under them keep theirs."""
from __future__ import annotations

import sys
from collections import Counter

import pytest
from go_toolchain import pprof_top
from recorded_bundles import PROGRAMS, ptdebug

from adapter.capture import record, stepper
from adapter.recording.recording import Recording

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]


def _python_thread(bundle):
    """The one recorded thread of `bundle`, its History given its Python attribution."""
    recording = Recording.open(bundle)
    (thread,) = recording.threads
    assert recording.python_frames(thread) is not None
    return thread


def test_pprof_names_the_python_functions_over_the_native_ones(tmp_path):
    bundle = tmp_path / "py.bundle"
    result = record.record_stepper(str(bundle), command=[sys.executable,
                                                         str(PROGRAMS / "py_attribution.py")],
                                   start="getppid", end=stepper.EndCondition(until_spec="getpgrp"),
                                   python="on", trigger_timeout=60)
    assert result.manifest["status"] == "complete"
    out = tmp_path / "py.pb.gz"
    ptdebug("export", "pprof", str(bundle), "-o", str(out))
    top = pprof_top(out, "-cum", "-sample_index=instructions")
    thread = _python_thread(bundle)
    hist = thread.history
    under = Counter()   # instructions with each Python function on their stack
    for pos in range(len(hist)):
        for name in {f.qualname for f in hist.python_stack(pos) if f is not None}:
            under[name] += 1
    for name in ("main", "score", "weight", "clamp"):
        assert top[name] == (0, under[name]), (name, top[name], under[name])
    assert top["main"][1] == len(hist)            # everything in the window ran under main
    assert top["score"][1] > top["weight"][1] > top["clamp"][1] > 0
    # the interpreter and the native code under the Python lines keep their own names
    assert top["_PyEval_EvalFrameDefault"][0] > 0
    assert "getppid" in top and "getpgrp" not in top   # the window ends before getpgrp

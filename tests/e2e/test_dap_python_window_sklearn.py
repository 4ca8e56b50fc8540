"""A scikit-learn `predict` captured from the line that calls it (issue 13, "Show that it
works"), real debugpy, real scikit-learn and numpy: tests/fixtures/programs/
dap_sklearn_predict_service.py, a record breakpoint on infer()'s `model.predict(batch)` line.

The window opens at that line (not in debugpy's suspend loop) and records predict under
debugpy's tracing: its history names scikit-learn's Python functions (predict,
decision_function, check_is_fitted) with the interpreter's and debugpy's native code under
them, and `go tool pprof -top` of `ptdebug export pprof` lists the Python functions.

The debugger's compiled tracer, which CPython calls on every Python call under debugpy, runs
unrecorded (adapter/python/debugger_code.py): none of its functions is in the profile, and
the manifest counts the calls. Before, it took a third of the window.

Measured on this fixture (2026-12-04, 2,000,000-instruction window): under debugpy, predict of
4 rows runs 1,522,483 instructions of scikit-learn 1.9's input and array-namespace checks
before numpy's C code does any work; the window then holds numpy's ufunc and PyArray functions
(before the tracer ran unrecorded: 7 instructions of numpy in all). Recording that many takes
about 30 s here, so the window of this test is capped at 300,000 and numpy's C functions are
asserted in tests/live/test_python_attribution.py (predict recorded without a debugger);
docs/python.md says so.

The Python frames are read from the profile alone: walking the recorded Python stack in the
test as well decoded the bundle a second time (about a third of the test's 31-38 s)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import INITIALIZE, PROGRAMS, ROOT, marker_line
from go_toolchain import pprof_top

pytest.importorskip("sklearn", reason="scikit-learn is a test extra (pip install -e .[test])")
pytestmark = pytest.mark.timeout(300)

SERVICE = PROGRAMS / "dap_sklearn_predict_service.py"


def test_predict_captured_from_its_line_names_sklearns_python_functions(start_adapter, tmp_path):
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    # the test's interpreter runs the service (it has scikit-learn; an adapter installed
    # elsewhere, PTDEBUG_TEST_ADAPTER, has only its own venv's packages)
    launch = client.send_request("launch", {"program": str(SERVICE), "args": ["3"],
                                            "python": sys.executable,
                                            "console": "internalConsole",
                                            "recordWindow": {"instructions": 300_000}})
    client.expect_event("initialized")
    client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": marker_line(SERVICE, "predict"), "mode": "record", "hitCondition": "2"},
        {"line": marker_line(SERVICE, "after"), "hitCondition": "2"}]})
    client.call("configurationDone", {})
    assert client.expect_response(launch)["success"]
    capture = client.expect_event("ptdebug/capture", timeout=240)["body"]
    assert capture["status"] == "complete", capture
    client.expect_stopped("breakpoint", timeout=60)  # the line after infer's call
    run.track()

    out = tmp_path / "predict.pb.gz"
    subprocess.run([sys.executable, "-m", "adapter.cli", "export", "pprof", capture["bundle"],
                    "-o", str(out)], cwd=ROOT, check=True, capture_output=True, timeout=240)
    top = {name: cum for name, (_, cum) in
           pprof_top(out, "-cum", "-sample_index=instructions").items()}
    # scikit-learn's Python functions under infer(), each with the instructions under it
    assert top["infer"] >= top["LinearClassifierMixin.predict"] > \
        top["LinearClassifierMixin.decision_function"] > 0, top
    assert top["check_is_fitted"] > 0, top
    # the native code under them keeps its own names (the interpreter's loop among them)
    assert top["_PyEval_EvalFrameDefault"] > 0, top
    # ... but none of the debugger's compiled tracer: its calls ran unrecorded, and are counted
    assert not [name for name in top if "pydevd" in name or "TraceTrampoline" in name], top
    manifest = json.loads((Path(capture["bundle"]) / "manifest.json").read_text())
    assert manifest["stats"]["untraced_calls"] > 100, manifest["stats"]
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()

"""A request of an inference service on a real third-party native runtime, captured from the
line before the model runs (issue 33, "Show that it works"), real debugpy, real ptrace:
tests/fixtures/programs/dap_onnx_kv_service.py (onnxruntime on CPU, a model built with
onnx.helper, a threaded HTTP server, a KV cache written per request). A record breakpoint on
the handler's `# @embed` line (window: until the handler returns), a normal breakpoint on
`# @after`, both for the second request only.

The capture holds the whole call through onnxruntime's C++ (the PyPI wheel is stripped: only
PyInit is named in it, its code is shown by library and offset) and the C++ library code it
calls (libstdc++, named demangled, the linkage name kept), is announced saying what is still
being prepared (its files going into the captures store) and then prepared; from the stop at
`# @after`, stepBack by instruction walks the recorded instructions and stepBack by Python
line reaches the line that ran the model. How fast the capture is ready after its window:
benchmarks/bench_onnx_capture.py (docs/PERFORMANCE.md), not asserted here."""
from __future__ import annotations

import pytest
from conftest import PROGRAMS, marker_line
from record_support import assert_steps_back_by_instruction, launch_onnx_service

pytest.importorskip("onnxruntime", reason="onnxruntime is a test extra (pip install -e .[test])")
pytest.importorskip("onnx", reason="onnx is a test extra (pip install -e .[test])")
pytestmark = pytest.mark.timeout(300)

SERVICE = PROGRAMS / "dap_onnx_kv_service.py"


def _functions_by_library(bundle: str) -> dict[str, dict[str, str]]:
    """file name of the library as the program mapped it -> {display name: linkage name} of
    the functions of it the capture ran code of."""
    from adapter.recording.recording import Recording
    trace = Recording.open(bundle)
    images = [(i["load_address"], i["load_address"] + i["size"],
               (i.get("path") or "").rsplit("/", 1)[-1]) for i in trace.manifest["images"]]
    found: dict[str, dict[str, str]] = {}
    for ip in trace.threads[0].history.distinct_ips:
        library = next((name for low, high, name in images if low <= ip < high), "?")
        name, _ = trace.function(ip)
        found.setdefault(library, {})[name] = trace.linkage_name(ip) or ""
    return found


def _python_top(client, thread: int) -> dict:
    frames = client.call("stackTrace", {"threadId": thread, "levels": 40})["stackFrames"]
    return next(f for f in frames if f.get("source"))


def test_a_request_through_onnxruntime_is_captured_and_stepped_back(start_adapter, tmp_path):
    run = start_adapter()
    client = run.client
    launch_onnx_service(client, tmp_path, recordWindow={"untilReturn": True, "instructions": 3_000_000})

    capture = client.expect_event("ptdebug/capture", timeout=240)["body"]
    assert capture["status"] == "complete", capture
    after = marker_line(SERVICE, "after")
    assert capture["endReason"] == f"the thread reached the breakpoint at {SERVICE}:{after}", \
        capture
    assert any("captures store" in what for what in capture["preparing"]), capture
    stopped = client.expect_stopped("breakpoint", timeout=120)
    thread = stopped["threadId"]
    run.track()
    assert _python_top(client, thread)["line"] == after

    # the call ran through onnxruntime's C++ (the PyPI wheel is stripped: its own functions
    # are named by library and offset) and the C++ it calls, named demangled, the linkage
    # name kept
    libraries = _functions_by_library(capture["bundle"])
    runtime = next(name for name in libraries if name.startswith("onnxruntime_pybind11_state"))
    assert len(libraries[runtime]) >= 1, libraries.keys()
    cxx = {name: linkage for functions in libraries.values()
           for name, linkage in functions.items() if linkage.startswith("_Z")}
    assert any(name.startswith("std::") and "(" in name for name in cxx), cxx
    assert not [name for name in cxx if name.startswith("_Z")], cxx
    prepared = client.expect_event("ptdebug/capturePrepared", timeout=120)["body"]
    assert prepared["id"] == capture["id"] and prepared["problems"] == [], prepared

    # by instruction: each step lands on the instruction recorded before
    assert_steps_back_by_instruction(client, thread, capture["instructions"])

    # by Python line: back through onnxruntime's Python wrapper (InferenceSession.run's
    # lines, which called into its C++) to the service's line that ran the model
    model = marker_line(SERVICE, "model")
    lines = []
    for _ in range(200):
        client.call("stepBack", {"threadId": thread, "granularity": "line"})
        step = client.expect_stopped("step")
        frame = _python_top(client, thread)
        lines.append((frame["source"]["path"].rsplit("/", 1)[-1], frame["line"]))
        if frame["source"]["path"] == str(SERVICE) and frame["line"] == model:
            break
        assert "start of the recorded history" not in step["description"], lines
    else:
        raise AssertionError(f"stepBack by line never reached line {model}: {lines}")
    assert any(path == "onnxruntime_inference_collection.py" for path, _ in lines), lines
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()

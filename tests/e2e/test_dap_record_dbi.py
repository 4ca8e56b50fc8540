"""Record breakpoints recorded by the DBI recorder (`"recorder": "dbi"`, docs/recording.md,
"Record breakpoints and the recorder"), real debugpy, real Frida, a real onnxruntime service
(tests/fixtures/programs/dap_onnx_kv_service.py): a record breakpoint on the handler's
`# @embed` line, a normal breakpoint on `# @after`, both for the second request only.

The window holds the whole model call (more instructions than the stepper's cap on a Python
line, PYTHON_INSTRUCTION_CAP, and closed by the stop, not by a cap), the capture event and the Processor Trace scope name the recorder and why,
stepBack by instruction walks the recorded instructions from the stop at `# @after`, and the
service's answers are those of an unrecorded run, bit for bit. A Go program or a forced
stepper gets the stepper (tests/e2e/test_go_record.py, test_dap_onnx_service.py)."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import PROGRAMS
from record_support import assert_steps_back_by_instruction, launch_onnx_service

from adapter.features.record_window import PYTHON_INSTRUCTION_CAP

pytest.importorskip("onnxruntime", reason="onnxruntime is a test extra (pip install -e .[test])")
pytest.importorskip("frida", reason="frida is the DBI recorder's dependency (pip install -e .)")
pytestmark = [pytest.mark.timeout(300), pytest.mark.xfail(strict=False, reason=(
    "known race (docs/recording.md): the DBI-recorded thread is never held, so it can reach "
    "`# @after` before debugpy has processed the release's continue; the stop is then taken "
    "as stale and the late continue resumes it (2 of 3 runs here)"))]

SERVICE = PROGRAMS / "dap_onnx_kv_service.py"
ANSWERS = re.compile(r"answered \d+ requests; kv sum \S+; answers \w+")


def _unrecorded_answers() -> str:
    out = subprocess.run([sys.executable, str(SERVICE), "3", "0.1"], capture_output=True,
                         text=True, timeout=120, check=True).stdout
    return ANSWERS.search(out).group(0)


def test_a_dbi_window_holds_the_whole_onnxruntime_call(start_adapter, tmp_path):
    expected = _unrecorded_answers()
    run = start_adapter()
    client = run.client
    launch_onnx_service(client, tmp_path, recorder="dbi",
                        recordWindow={"untilReturn": True, "timeBound": 60})

    capture = client.expect_event("ptdebug/capture", timeout=240)["body"]
    told = "".join(e["body"]["output"] for e in client.events("output"))
    assert capture["recorder"]["name"] == "dbi", (capture, told)
    assert "dbi" in capture["recorder"]["why"], capture
    assert capture["status"] == "complete", capture
    # the window closed where debugpy stopped the thread at `# @after`: the model ran in it
    assert capture["endReason"] == "the debugger stopped the thread in the window", capture
    # more than the stepper's whole window on a Python line, and not cut by a cap
    assert capture["instructions"] > PYTHON_INSTRUCTION_CAP, capture
    assert not capture["partial"], capture
    assert capture["clock"] == "stepper" and "Frida" in capture["clockLabel"], capture
    print(f"DBI window: {capture['instructions']} instructions, "
          f"{capture['durationNs'] / 1e6:.1f} ms")
    stopped = client.expect_stopped("breakpoint", timeout=120)
    thread = stopped["threadId"]
    run.track()

    # the Processor Trace scope names the recorder and its clock
    frames = client.call("stackTrace", {"threadId": thread, "levels": 1})["stackFrames"]
    scopes = client.call("scopes", {"frameId": frames[0]["id"]})["scopes"]
    trace_scope = next(s for s in scopes if s["name"] == "Processor Trace")
    items = {v["name"]: v["value"] for v in client.call(
        "variables", {"variablesReference": trace_scope["variablesReference"]})["variables"]}
    assert items["recorder"].startswith("dbi: "), items
    assert "Frida" in items["stepper time in window"], items

    # by instruction: each step lands on the instruction recorded before
    assert_steps_back_by_instruction(client, thread, capture["instructions"])

    client.call("continue", {"threadId": thread})
    assert run.wait_exit(120) == 0
    output = "".join(e["body"]["output"] for e in client.events("output")
                     if e["body"].get("category") == "stdout")
    found = ANSWERS.search(output)
    assert found and found.group(0) == expected, (output[-400:], expected)
    run.assert_nothing_left()

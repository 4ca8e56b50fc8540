"""The stepper attaches to a *running* Python process and records a native
frame of it (libpython's _Py_bytes_count, called by bytes.count): the decoded
bundle equals an independent single-step log of another call of the same
function on the same data, and the process runs on untraced afterwards."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest
from stepper_support import PROGRAMS, decode_ips, errors_in, reference_from_trigger

from adapter.capture import record, stepper
from adapter.capture.target import Target
from adapter.hw import ptrace as pt

pytestmark = pytest.mark.live
SYMBOL = "_Py_bytes_count"


@pytest.fixture
def python_loop():
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "rec_loop.py")],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    yield proc
    proc.kill()
    proc.wait()


def _reference(pid: int) -> list[int]:
    target = Target.attach(pid=pid)
    try:
        tid = target.run_to(target.resolve(SYMBOL), timeout=10)
        target.keep_only(tid)
        return reference_from_trigger(tid)
    finally:
        target.release()


def test_running_python_native_frame_equals_single_step_reference(python_loop, tmp_path):
    pid = python_loop.pid
    reference = _reference(pid)
    assert pt.tracer_of(pid) == 0  # the reference let it go
    out = tmp_path / "py.bundle"
    result = record.record_stepper(str(out), pid=pid, start=SYMBOL,
                                   end=stepper.EndCondition(until_return=True),
                                   trigger_timeout=10)
    assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
    assert len(reference) > 100
    assert list(result.recording.ips) == reference
    ips, events = decode_ips(out)
    assert errors_in(events) == []
    assert ips == reference
    assert any("libpython" in im["path"] for im in result.manifest["images"])
    # the process was left running and untraced
    assert pt.tracer_of(pid) == 0
    time.sleep(0.05)
    assert python_loop.poll() is None
    with open(f"/proc/{pid}/stat") as f:
        assert f.read().split(") ")[1][0] in "RS"


def test_one_thread_for_a_duration(python_loop, tmp_path):
    """--tid: one thread of the running process, for 200 ms (it sleeps most of
    that time in a system call: the watchdog ends the recording on time)."""
    pid = python_loop.pid
    t0 = time.monotonic()
    result = record.record_stepper(str(tmp_path / "tid.bundle"), tid=pid,
                                   end=stepper.EndCondition(duration_ms=200))
    assert time.monotonic() - t0 < 5
    assert result.manifest["status"] == "complete"
    assert result.recording.reason == "recorded for 200 ms"
    assert result.manifest["stats"]["breakpoints"] == "dr"   # attached: nothing patched
    ips, events = decode_ips(tmp_path / "tid.bundle")
    assert ips == list(result.recording.ips) and errors_in(events) == []
    assert pt.tracer_of(pid) == 0 and python_loop.poll() is None

"""`ptdebug demo` end to end: it runs the shipped inference service under the adapter and
debugpy, and its output shows each step a user would see; nothing it started is left running.
A step that cannot happen ends it with status 1 and a message naming the step."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT
from record_support import KVCACHE, SERVICE, line_of

pytestmark = pytest.mark.timeout(120)


def _service_processes(service: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if service.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def test_demo_shows_the_session_and_leaves_nothing_behind():
    done = subprocess.run([sys.executable, "-m", "adapter.cli", "demo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=90, check=False)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    scale = line_of(KVCACHE, "scale")
    expected = [
        "adapter breakpoint modes: normal, record",
        "data breakpoint: cache[3] changed from [0.0, 0.0, 0.0, 0.0] to [-1.0, 0.0, 0.0, 0.0]",
        "written by thread 'compactor'",
        "  native frame of the write: ",  # the sample's IP, symbolised (native_frames)
        "the writer stopped at compactor at service.py:",  # its next Python line (pydevd)
        "record breakpoint: capture 1: thread",
        f"stopped at handle at service.py:{line_of(SERVICE, 'after_request')}",
        "==> the Processor Trace scope of this stop",
        "  IPC ",
        "kv_update+0x",
        "step back: kv_update [recorded, insn",
        f"at kvcache.c:{scale}",
        "tokens = 0.0",
        f"the bad value came from kvcache.c:{scale}: float scale = 1.0f / norm;",
        "the service is running live again",
        "demo finished: OK",
    ]
    position = 0
    for text in expected:  # in this order
        found = out.find(text, position)
        assert found >= 0, f"missing (in order) {text!r} in:\n{out}"
        position = found
    # the service ran from a temporary copy (debugpy skips site-packages code: justMyCode),
    # which is gone with every process that ran it
    service = re.search(r"^service: (\S+)", out, re.MULTILINE).group(1)
    assert "ptdebug-demo-" in service and service != str(SERVICE), service
    assert not os.path.exists(service)
    assert _service_processes(service) == []


def test_demo_failing_step_exits_nonzero_and_names_it(tmp_path):
    """Without a C compiler the native helper cannot be built: status 1, a message naming it."""
    env = dict(os.environ, PATH=str(tmp_path))
    done = subprocess.run([sys.executable, "-m", "adapter.cli", "demo"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "ptdebug demo: FAILED: no C compiler (gcc) on PATH" in done.stdout
    assert "demo finished" not in done.stdout

"""JIT code's names travel with the bundle (issue 13, build item 2: "-X perf" maps): CPython
3.12+ under `-X perf` runs each Python function entered from C through a trampoline that only
/tmp/perf-PID.map names. `ptdebug record --pid` copies the map into the bundle, so that
`ptdebug export pprof` names py::score:FILE after the program and its map are gone (as on
another machine), and a bundle whose map entry points outside it is refused by name."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
from go_toolchain import pprof_top
from python_interpreters import interpreter
from stepper_support import PROGRAMS, PTDEBUG, ROOT

pytestmark = pytest.mark.live
PROGRAM = PROGRAMS / "py_perf_trampolines.py"


@pytest.fixture
def recorded(tmp_path):
    """A bundle of 30,000 instructions of the program, whose perf map is then removed."""
    python = interpreter("3.12") or interpreter("3.13")
    if python is None:
        pytest.skip("no CPython 3.12 or 3.13 on this machine (-X perf needs 3.12+)")
    proc = subprocess.Popen([python, "-X", "perf", str(PROGRAM)], stdout=subprocess.PIPE,
                            text=True)
    perf_map = f"/tmp/perf-{proc.pid}.map"
    try:
        assert proc.stdout.readline() == "ready\n"
        bundle = tmp_path / "b"
        done = subprocess.run([*PTDEBUG, "record", "--pid", str(proc.pid), "--count", "30000",
                               "-o", str(bundle)], cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 0, done.stderr
    finally:
        proc.kill()
        proc.wait(10)
        if os.path.exists(perf_map):
            os.unlink(perf_map)
    return bundle, proc.pid


def test_the_trampolines_names_come_from_the_bundle(recorded, tmp_path):
    bundle, pid = recorded
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["symbol_maps"] == [{"file": f"symbols/perf-{pid}.map", "kind": "perf-map",
                                        "pid": pid, "path": f"/tmp/perf-{pid}.map"}]
    profile = tmp_path / "p.pb.gz"
    subprocess.run([*PTDEBUG, "export", "pprof", str(bundle), "-o", str(profile)], cwd=ROOT,
                   check=True, capture_output=True, timeout=120)
    top = pprof_top(profile, "-sample_index=instructions")
    trampoline = f"py::score:{PROGRAM}"
    # (how much of the 30,000 ran under score depends on where the recording attached:
    # 9,853 in ci48, over 10,000 before)
    assert top.get(trampoline, (0, 0))[1] > 5_000, sorted(top)
    assert top["score"][1] > 5_000  # the Python frame, from the samples, beside it


def test_a_symbol_map_outside_the_bundle_is_refused_by_name(recorded, tmp_path):
    bundle, _ = recorded
    manifest_path = bundle / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["symbol_maps"][0]["file"] = "../../../etc/passwd"
    manifest_path.write_text(json.dumps(manifest))
    done = subprocess.run([*PTDEBUG, "export", "pprof", str(bundle), "-o", str(tmp_path / "p")],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "symbol_maps[0].file '../../../etc/passwd' is outside the bundle" in done.stderr, \
        done.stderr

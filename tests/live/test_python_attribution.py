"""Python attribution of a real recording (issue 13): the stepper records `score()` of
tests/fixtures/programs/py_attribution.py in a real CPython of each installed version
(3.10-3.13), from os.getppid() (--from getppid) to before os.getpgrp() (--until getpgrp), with
the Python frame probe on. The (function, line) sequence found in the decoded history equals
the one sys.settrace reports for the same call in a separate run; stepping back by Python
line walks it exactly in reverse; the native code under a line is attributed to that line.
Third-party code: numpy's linspace, whose stacks equal settrace's too (py_numpy_window.py)."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from python_interpreters import VERSIONS, interpreter
from stepper_support import PROGRAMS, PTDEBUG

from adapter.capture import record, stepper
from adapter.recording.recording import Recording
from pt_decoder.python_frames import python_samples

pytestmark = pytest.mark.live


def _python_thread(bundle):
    """The one recorded thread of `bundle`, its History given its Python attribution."""
    recording = Recording.open(bundle)
    (thread,) = recording.threads
    assert recording.python_frames(thread) is not None
    return thread
FIXTURE = PROGRAMS / "py_attribution.py"


def markers() -> dict[str, int]:
    lines = FIXTURE.read_text().splitlines()
    return {m.group(1): n for n, text in enumerate(lines, 1)
            for m in [re.search(r"# @(\w+)", text)] if m}


def settrace_stacks(exe: str) -> list[list[tuple[str, int]]]:
    """The call stacks (main() inward) sys.settrace reports in a separate run, from the
    @before line to the @after one."""
    out = subprocess.run([exe, str(FIXTURE), "settrace"], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    stacks = [[tuple(f) for f in stack] for stack in json.loads(out)]
    mark = markers()
    first = stacks.index([("main", mark["before"])])
    last = stacks.index([("main", mark["after"])])
    return stacks[first:last + 1]


def from_main(stack) -> list[tuple[str, int]]:
    names = [(f.qualname, f.line) for f in stack]
    return names[[n for n, _ in names].index("main"):]


@pytest.mark.parametrize("version", VERSIONS)
def test_python_lines_of_a_recording_equal_settrace(version, tmp_path):
    exe = interpreter(version)
    if exe is None:
        pytest.skip(f"no CPython {version} on this machine")
    expected_stacks = settrace_stacks(exe)
    expected = [stack[-1] for stack in expected_stacks]
    out = tmp_path / "py.bundle"
    result = record.record_stepper(str(out), command=[exe, str(FIXTURE)], start="getppid",
                                   end=stepper.EndCondition(until_spec="getpgrp"),
                                   python="on", trigger_timeout=60)
    manifest = result.manifest
    assert manifest["status"] == "complete", manifest["partial_reason"]
    assert result.target_exit == 0
    table = manifest["python"]
    assert table["version"].startswith(version + ".")
    assert {c["qualname"] for c in table["codes"].values()} >= {"main", "score", "weight",
                                                                 "clamp"}
    thread = _python_thread(out)
    hist = thread.history
    assert len(hist) == manifest["stats"]["instructions"] > 1000
    runs = hist.python.line_sequence()
    found = [(f.qualname, f.line) for _, f in runs]
    assert found == expected
    assert {f.filename for _, f in runs} == {str(FIXTURE)}
    # the Python call stack of every line, callers at their calls, as settrace saw it; under
    # main() the frames of the window's start (<module>) read when it opened
    assert [from_main(hist.python_stack(pos)) for pos, _ in runs] == expected_stacks
    assert hist.python_stack(0)[0].qualname == "<module>"
    mark = markers()
    # the window opens inside getppid (libc): its instructions belong to the line that called it
    first = hist.python_frame(0)
    assert (first.qualname, first.line) == ("main", mark["before"])
    # the branch of clamp() ran both ways, and the native work under each line is there
    assert ("clamp", mark["clamp_hi"]) in found and ("clamp", mark["clamp_x"]) in found
    # stepping back by Python line from the end walks the same sequence in reverse
    pos = len(hist) - 1
    walked = [(hist.python_frame(pos).qualname, hist.python_frame(pos).line)]
    while True:
        step = hist.prev_python_line(pos)
        if step.reason != "found":
            assert step.reason == "start"
            break
        pos = step.position
        frame = hist.python_frame(pos)
        walked.append((frame.qualname, frame.line))
        assert hist.python_line_change_before(pos) in (None, pos - 1)
    assert walked == expected[::-1]
    assert pos == 0
    # over calls, from the end: main's own lines only
    pos, walked = len(hist) - 1, []
    while (step := hist.prev_python_line(pos, over_calls=True)).reason == "found":
        pos = step.position
        walked.append((hist.python_frame(pos).qualname, hist.python_frame(pos).line))
    assert walked == [("main", mark["call"]), ("main", mark["before"])]
    forward = []
    while (step := hist.next_python_line(pos, over_calls=True)).reason == "found":
        pos = step.position
        forward.append((hist.python_frame(pos).qualname, hist.python_frame(pos).line))
    assert forward == [("main", mark["call"]), ("main", mark["after"])]


def test_python_on_for_a_program_without_python_is_refused(tmp_path):
    out = tmp_path / "c.bundle"
    proc = subprocess.run(PTDEBUG + ["record", "--backend", "stepper", "--python", "on",
                                     "--count", "100", "-o", str(out), "--", "/bin/true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert re.search(r"no Python attribution: process \d+ runs no CPython", proc.stderr)
    recording = Recording.open(out)
    assert recording.python_table is None
    assert all(recording.python_frames(t) is None for t in recording.threads)


def test_record_says_what_python_attribution_recorded(tmp_path):
    out = tmp_path / "py.bundle"
    proc = subprocess.run(PTDEBUG + ["record", "--backend", "stepper", "--from", "getppid",
                                     "--until", "getpgrp", "-o", str(out), "--json", "--",
                                     sys.executable, str(FIXTURE)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1])
    python = summary["python"]
    assert python["version"] == ".".join(map(str, sys.version_info[:3]))
    assert python["code_objects"] >= 4 and python["samples"] > 100
    thread = _python_thread(out)
    assert python["samples"] == len(python_samples(thread.ptwrites))   # each one reached the trace


def test_python_auto_records_a_program_without_python_plainly(tmp_path):
    out = tmp_path / "c.bundle"
    proc = subprocess.run(PTDEBUG + ["record", "--backend", "stepper", "--count", "100",
                                     "-o", str(out), "--", "/bin/true"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "python" not in json.loads((out / "manifest.json").read_text())
    assert "frame samples" not in proc.stderr
    assert "no Python attribution: process" in proc.stderr   # said, not an error


NUMPY_FIXTURE = PROGRAMS / "py_numpy_window.py"


def test_numpy_linspace_stacks_equal_settrace(tmp_path):
    """Third-party code: numpy's linspace (Python in numpy over numpy's C, its dispatcher
    called from C and returning into it). Every line's Python stack, file included, equals
    what sys.settrace reports; numpy's C runs under numpy's Python lines."""
    pytest.importorskip("numpy")
    env = dict(os.environ, PYTHONHASHSEED="0")   # the same dict orders in both runs
    out = subprocess.run([sys.executable, str(NUMPY_FIXTURE), "settrace"], capture_output=True,
                         text=True, check=True, timeout=120, env=env).stdout
    stacks = [[tuple(f) for f in stack] for stack in json.loads(out)]
    lines = NUMPY_FIXTURE.read_text().splitlines()
    mark = {m.group(1): n for n, text in enumerate(lines, 1)
            for m in [re.search(r"# @(\w+)", text)] if m}
    path = str(NUMPY_FIXTURE)
    expected = stacks[stacks.index([("main", path, mark["before"])]):
                      stacks.index([("main", path, mark["after"])]) + 1]
    bundle = tmp_path / "np.bundle"
    result = record.record_stepper(str(bundle), command=[sys.executable, str(NUMPY_FIXTURE)],
                                   start="getppid",
                                   end=stepper.EndCondition(until_spec="getpgrp"),
                                   python="on", trigger_timeout=60, env=env)
    assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
    thread = _python_thread(bundle)
    hist = thread.history
    found = []
    for pos, _ in hist.python.line_sequence():
        stack = [(f.qualname, f.filename, f.line) for f in hist.python_stack(pos)]
        found.append(stack[[name for name, _, _ in stack].index("main"):])
    assert found == expected
    assert any(f[0] == "linspace" and "numpy" in f[1] for stack in found for f in stack)
    # numpy's C extension ran under numpy's Python lines
    umath = [im for im in result.manifest["images"] if "_multiarray_umath" in im["path"]]
    assert umath
    lo = min(im["load_address"] for im in umath)
    hi = max(im["load_address"] + im["size"] for im in umath)
    under = {hist.python_frame(pos).qualname for pos in range(len(hist))
             if lo <= hist.ip(pos) < hi and hist.python_frame(pos) is not None}
    assert "linspace" in under


def test_python_on_at_exec_of_a_shared_libpython_says_where_to_start(tmp_path):
    """A launched interpreter linked to libpython is caught at exec, before the dynamic loader
    maps that library: the refusal says so and how to start later (seen as a new user, on
    `python -m json.tool`), rather than "not a CPython interpreter"."""
    from adapter.python.cpython_layout import _libpython_not_loaded_yet
    exe = os.path.realpath(sys.executable)
    needed = _libpython_not_loaded_yet([exe], [exe])
    if needed is None:
        pytest.skip(f"{exe} carries the interpreter itself (no libpython to wait for)")
    out = tmp_path / "exec.bundle"
    proc = subprocess.run(PTDEBUG + ["record", "--backend", "stepper", "--python", "on",
                                     "--count", "1000", "-o", str(out), "--", sys.executable,
                                     "-c", "pass"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert f"has not loaded its interpreter library {needed} yet" in proc.stderr
    assert "--from Py_RunMain" in proc.stderr
    started = subprocess.run(PTDEBUG + ["record", "--backend", "stepper", "--python", "on",
                                        "--from", "Py_RunMain", "--count", "20000", "-o",
                                        str(tmp_path / "later.bundle"), "--", sys.executable,
                                        "-c", "pass"],
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    assert "Python attribution: CPython" in started.stderr


SKLEARN_FIXTURE = PROGRAMS / "py_sklearn_predict.py"


def test_sklearn_predict_names_its_python_functions_over_numpys_c(tmp_path):
    """Third-party code end to end, as a user runs it: `ptdebug record --python on` of a
    scikit-learn predict (some 10^6 instructions), then `ptdebug export pprof`. The profile
    names scikit-learn's Python functions, each with the instructions under it, and numpy's C
    functions (the ufunc and array machinery of the matrix product) ran under
    decision_function: the two levels in one profile (issue 13). Under debugpy the same
    predict runs over 10^6 instructions of input checks before numpy's C does any work
    (tests/e2e/test_dap_python_window_sklearn.py); here the program runs alone."""
    pytest.importorskip("sklearn", reason="scikit-learn is a test extra (pip install -e .[test])")
    from go_toolchain import pprof_top
    bundle = tmp_path / "predict.bundle"
    recorded = subprocess.run(PTDEBUG + ["record", "--backend", "stepper", "--python", "on",
                                         "--from", "getppid", "--until", "getpgrp", "-o",
                                         str(bundle), "--", sys.executable, str(SKLEARN_FIXTURE)],
                              capture_output=True, text=True, timeout=280)
    assert recorded.returncode == 0, recorded.stderr
    assert "Python attribution: CPython" in recorded.stderr
    profile = tmp_path / "predict.pb.gz"
    subprocess.run(PTDEBUG + ["export", "pprof", str(bundle), "-o", str(profile)], check=True,
                   capture_output=True, timeout=240)
    top = {name: cum for name, (_, cum) in
           pprof_top(profile, "-cum", "-sample_index=instructions").items()}
    assert top["LinearClassifierMixin.predict"] > \
        top["LinearClassifierMixin.decision_function"] > 0, top
    under = {name: cum for name, (_, cum) in pprof_top(
        profile, "-cum", "-sample_index=instructions",
        "-focus=^LinearClassifierMixin\\.decision_function$").items()}
    numpy_c = {name: cum for name, cum in under.items()
               if name.startswith(("PyArray_", "PyUFunc_", "ufunc_"))}
    assert len(numpy_c) >= 3 and all(cum > 0 for cum in numpy_c.values()), sorted(under)
    assert under["LinearClassifierMixin.decision_function"] >= max(numpy_c.values())

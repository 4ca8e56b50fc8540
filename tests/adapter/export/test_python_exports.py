"""The offline views of a Python capture (a real stepper recording of score() in
tests/fixtures/programs/py_attribution.py, Python probe on). `ptdebug export perfetto`: a
Python track per thread, a slice per function activation (score once, weight and clamp three
times, nested as they called each other) and inside it one per source line, each with its
instructions; the protobuf output has the same Python slices as the JSON. `ptdebug latency`:
FILE:LINE of a Python file measures between Python lines."""
from __future__ import annotations

import json
import sys

import pytest
from recorded_bundles import PROGRAMS, marker_line, ptdebug

from adapter.capture import record, stepper
from adapter.export import protowire
from adapter.export.perfetto import PYTHON_PID_BASE, PYTHON_UUID_BASE

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
FIXTURE = PROGRAMS / "py_attribution.py"


@pytest.fixture(scope="module")
def python_bundle(tmp_path_factory):
    bundle = tmp_path_factory.mktemp("py") / "py.bundle"
    result = record.record_stepper(str(bundle), command=[sys.executable, str(FIXTURE)],
                                   start="getppid", end=stepper.EndCondition(until_spec="getpgrp"),
                                   python="on", trigger_timeout=60)
    assert result.manifest["status"] == "complete"
    return bundle, result.manifest


def _python_slices(events, pid):
    """(name, category, depth, instructions) of the Python track's slices, in begin order."""
    out, stack = [], []
    for e in events:
        if e.get("pid") != PYTHON_PID_BASE + pid or e["ph"] not in ("B", "E"):
            continue
        if e["ph"] == "B":
            stack.append(len(out))
            out.append([e["name"], e["cat"], len(stack) - 1, None])
        else:
            out[stack.pop()][3] = e["args"]["instructions"]
    assert not stack
    return [tuple(s) for s in out]


def test_perfetto_python_track_nests_functions_and_lines(python_bundle, tmp_path):
    bundle, manifest = python_bundle
    path = tmp_path / "py.json"
    ptdebug("export", "perfetto", str(bundle), "-o", str(path))
    document = json.loads(path.read_text())
    slices = _python_slices(document["traceEvents"], manifest["pid"])
    functions = [s for s in slices if s[1] == "python"]
    names = [s[0] for s in functions]
    assert names.count("score") == 1 and names.count("weight") == 3 and names.count("clamp") == 3
    depth = {s[0]: s[2] for s in functions}
    assert depth["main"] + 1 == depth["score"] == depth["weight"] - 1 == depth["clamp"] - 2
    # main holds everything recorded from the window's first Python sample on
    main = next(s for s in functions if s[0] == "main")
    assert main[3] == sum(s[3] for s in slices if s[2] == main[2] + 1)
    lines = [s[0] for s in slices if s[1] == "python.line"]
    for mark in ("before", "call", "score_for", "weight_mul", "clamp_if", "clamp_hi",
                 "clamp_x"):
        assert f"py_attribution.py:{marker_line(FIXTURE, mark)}" in lines, mark
    assert lines.count(f"py_attribution.py:{marker_line(FIXTURE, 'clamp_hi')}") == 1


def test_perfetto_protobuf_has_the_python_track(python_bundle, tmp_path):
    bundle, manifest = python_bundle
    proto_path, json_path = tmp_path / "py.pftrace", tmp_path / "py.json"
    ptdebug("export", "perfetto", str(bundle), "-o", str(proto_path))
    ptdebug("export", "perfetto", str(bundle), "-o", str(json_path))
    expected = [s[0] for s in _python_slices(json.loads(json_path.read_text())["traceEvents"],
                                             manifest["pid"])]

    def message(data: bytes) -> dict:
        out: dict = {}
        for number, _, value in protowire.fields(data):
            out.setdefault(number, []).append(value)
        return out

    packets = [message(v) for n, _, v in protowire.fields(proto_path.read_bytes()) if n == 1]
    tid = manifest["threads"][0]["tid"]
    track = PYTHON_UUID_BASE + tid
    names = {message(p[60][0])[1][0]: message(p[60][0]).get(2, [b""])[0].decode()
             for p in packets if 60 in p}
    assert names[track] == f"Python, thread {tid}"
    begun = [message(p[11][0])[23][0].decode() for p in packets
             if 11 in p and message(p[11][0])[11][0] == track and message(p[11][0])[9][0] == 1]
    assert begun == expected


def test_latency_between_python_lines(python_bundle):
    bundle, _ = python_bundle
    add, mul = marker_line(FIXTURE, "score_add"), marker_line(FIXTURE, "weight_mul")
    out = ptdebug("latency", str(bundle), "--from", f"py_attribution.py:{add}",
                  "--to", f"py_attribution.py:{mul}", "--json").stdout
    summary = json.loads(out)
    assert summary["count"] == 3           # once per iteration of score(3)
    assert summary["instructions"]["min"] > 10
    # to main's line after score() returned: only the last score_add run pairs with it
    out = ptdebug("latency", str(bundle), "--from", f"py_attribution.py:{add}",
                  "--to", f"py_attribution.py:{marker_line(FIXTURE, 'after')}", "--json").stdout
    assert json.loads(out)["count"] == 1


def test_hot_lines_of_the_python_file(python_bundle):
    """The language server's hot lines for the fixture's own file: each Python line's
    executions as the call ran them, and the instructions run under it."""
    from adapter.lsp.hotlines import HotLines
    from adapter.recording.recording import Recording
    bundle, _ = python_bundle
    decoded = Recording.open(bundle)
    lines = HotLines.from_decoded(decoded).for_path(str(FIXTURE))
    runs = {name: lines[marker_line(FIXTURE, name)].executions
            for name in ("score_init", "score_for", "score_add", "weight_mul", "weight_ret",
                         "clamp_if", "clamp_hi", "clamp_x", "score_ret", "call")}
    # score(3): the for line runs 4 times, its body 3 (coming back from weight() continues
    # the line), clamp's branch goes to `return hi` once (i=2: 6 > 5) and `return x` twice
    assert runs == {"score_init": 1, "score_for": 4, "score_add": 3, "weight_mul": 3,
                    "weight_ret": 3, "clamp_if": 3, "clamp_hi": 1, "clamp_x": 2,
                    "score_ret": 1, "call": 1}
    (thread,) = decoded.threads
    attributed = sum(entry.instructions for entry in lines.values())
    assert 0 < attributed <= len(thread.history)
    # the line calling weight() holds the instructions run in the native code under it too
    assert lines[marker_line(FIXTURE, "score_add")].instructions > 1000

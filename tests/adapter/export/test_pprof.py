"""`ptdebug export pprof`: `go tool pprof -top` reads the profile and lists the functions of a
recorded Go (and C) fixture with the bundle's cycle counts."""
from __future__ import annotations

import gzip
from collections import Counter

import pytest
from go_toolchain import pprof_top
from recorded_bundles import (  # noqa: F401
    PROGRAMS,
    REQUESTS,
    c_bundle,
    c_program,
    function_at,
    go_bundle,
    go_program,
    marker_line,
    nm_functions,
    ptdebug,
    spread_cycles,
)

from adapter.export import protowire
from adapter.recording.recording import Recording

pytestmark = pytest.mark.timeout(300)


def _expected_cycles(bundle, rows) -> tuple[Counter, Counter, int]:
    """Per function (by an independent symbolizer): cycles and instructions, from the decoded
    history's cumulative cycle column; and the thread's total cycles."""
    decoded = Recording.open(bundle)
    (thread,) = decoded.threads
    history = thread.history
    cycles, counts = Counter(), Counter()
    weights = spread_cycles(history)
    for pos in range(len(history)):
        name = function_at(rows, history.ip(pos)) or "?"
        cycles[name] += weights[pos]
        counts[name] += 1
    return cycles, counts, history.cycles(len(history) - 1) - history.cycles(0)


def test_go_tool_pprof_lists_the_go_functions_with_the_bundles_cycles(go_bundle, go_program,
                                                                       tmp_path):
    out = tmp_path / "go.pb.gz"
    ptdebug("export", "pprof", str(go_bundle), "-o", str(out))
    cycles, counts, total = _expected_cycles(go_bundle, nm_functions(go_program, go=True))
    top = pprof_top(out, "-unit=ns", "-sample_index=stepper_ns")  # a stepper recording's cycles
    for name in ("main.serve", "main.handle", "main.checksum"):
        assert name in top, top
        assert top[name][0] == cycles[name], (name, top[name], cycles[name])
    assert {n: flat for n, (flat, _) in top.items()} == {n: c for n, c in cycles.items() if c}
    assert top["main.serve"][1] == total  # everything ran under serve
    assert top["main.handle"][1] == cycles["main.handle"] + cycles["main.checksum"]
    instructions = pprof_top(out, "-unit=ns", "-sample_index=instructions")
    assert {n: flat for n, (flat, _) in instructions.items()} == dict(counts)


def test_c_profile_has_lines_and_the_call_tree(c_bundle, c_program, tmp_path):
    out = tmp_path / "c.pb.gz"
    ptdebug("export", "pprof", str(c_bundle), "-o", str(out))
    cycles, _, total = _expected_cycles(c_bundle, nm_functions(c_program))
    top = pprof_top(out, "-unit=ns", "-sample_index=stepper_ns")  # a stepper recording's cycles
    assert {n: flat for n, (flat, _) in top.items()} == {n: c for n, c in cycles.items() if c}
    assert top["serve"][1] == total
    # Line granularity: checksum's lines carry its cycles, the hashing line among them.
    lines = pprof_top(out, "-unit=ns", "-lines", "-sample_index=stepper_ns")
    rows = {k: v for k, v in lines.items() if k.startswith("checksum ")}
    assert sum(flat for flat, _ in rows.values()) == cycles["checksum"]
    hash_line = f"hotpath.c:{marker_line(PROGRAMS / 'hotpath.c', 'hash')}"
    assert any(k.endswith(hash_line) and flat > 0 for k, (flat, _) in rows.items()), rows
    # The raw message: string table starts with "", two sample types, every sample has a
    # thread label and an [instructions, stepper_ns] value (a stepper recording).
    profile = list(protowire.fields(gzip.decompress(out.read_bytes())))
    strings = [v.decode() for f, _, v in profile if f == 6]
    assert strings[0] == "" and "stepper_ns" in strings and "instructions" in strings
    samples = [{f: v for f, _, v in protowire.fields(v)} for f, _, v in profile if f == 2]
    assert len(samples) > REQUESTS
    for sample in samples:
        values = _packed(sample[2])
        assert len(values) == 2 and values[0] >= 1


def test_a_missing_bundle_is_a_clear_error(tmp_path):
    result = ptdebug("export", "pprof", str(tmp_path / "nope"), "-o", str(tmp_path / "x"),
                     check=False)
    assert result.returncode == 2  # bad input (adapter/cli.py)
    assert "nope: not a bundle directory" in result.stderr


def _packed(data: bytes) -> list[int]:
    values, pos = [], 0
    while pos < len(data):
        value, pos = protowire.read_varint(data, pos)
        values.append(value)
    return values


@pytest.mark.parametrize("value", [0, 1, 127, 128, 300, 2**32, 2**63 - 1, -1, -2**63])
def test_varint_round_trip(value):
    encoded = protowire.varint(value)
    decoded, end = protowire.read_varint(encoded, 0)
    assert end == len(encoded)
    assert decoded == value % 2**64
    assert len(encoded) == (10 if value < 0 else max(1, (value.bit_length() + 6) // 7))

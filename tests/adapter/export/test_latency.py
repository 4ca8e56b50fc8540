"""`ptdebug latency BUNDLE --from A --to B`: percentiles of the time between two code points,
checked against the intervals found in the decoded history with nm's addresses; the PNG
histogram is a valid PNG."""
from __future__ import annotations

import json
import math
import struct
import zlib

import pytest
from recorded_bundles import (  # noqa: F401
    PROGRAMS,
    REQUESTS,
    c_bundle,
    c_program,
    marker_line,
    nm_functions,
    ptdebug,
)

from adapter.recording.recording import Recording

pytestmark = pytest.mark.timeout(300)


def _nearest_rank(values, p):
    ordered = sorted(values)
    return ordered[max(1, math.ceil(p / 100 * len(ordered))) - 1]


def test_percentiles_between_two_functions_match_the_history(c_bundle, c_program, tmp_path):
    png = tmp_path / "latency.png"
    result = ptdebug("latency", str(c_bundle), "--from", "handle", "--to", "checksum",
                     "--json", "--png", str(png))
    summary = json.loads(result.stdout[:result.stdout.rindex("}") + 1])
    entry = {name: start for start, _, name in nm_functions(c_program)}
    history = Recording.open(c_bundle).threads[0].history
    intervals, cycles, start = [], [], None
    held, latest = [], 0  # time never runs backwards: a stepped-back estimate is held
    for t in history.times():  # the stepper's bundles count TSC in ns
        latest = max(latest, t)
        held.append(latest)
    for pos in range(len(history)):
        ip = history.ip(pos)
        if ip == entry["checksum"] and start is not None:
            intervals.append(held[pos] - held[start])
            cycles.append(history.cycles(pos) - history.cycles(start))
            start = None
        if ip == entry["handle"]:
            start = pos
    assert summary["count"] == REQUESTS == len(intervals)
    for p in (50, 90, 99):
        assert summary["ns"][f"p{p}"] == _nearest_rank(intervals, p)
        assert summary["cycles"][f"p{p}"] == _nearest_rank(cycles, p)
    assert summary["ns"]["min"] == min(intervals) and summary["ns"]["max"] == max(intervals)
    _check_png(png)


def test_line_code_points_and_the_text_report(c_bundle):
    source = f"hotpath.c:{marker_line(PROGRAMS / 'hotpath.c', 'request')}"
    target = f"hotpath.c:{marker_line(PROGRAMS / 'hotpath.c', 'served')}"
    result = ptdebug("latency", str(c_bundle), "--from", source, "--to", source)
    assert f"{REQUESTS - 1} interval(s) on 1 thread(s)" in result.stdout  # one per loop turn
    for label in ("P50", "P90", "P99"):
        assert label in result.stdout
    once = ptdebug("latency", str(c_bundle), "--from", "serve", "--to", target, "--json")
    assert json.loads(once.stdout)["count"] == 1


def test_code_points_that_name_nothing_are_refused(c_bundle):
    unknown = ptdebug("latency", str(c_bundle), "--from", "no_such_fn", "--to", "serve",
                      check=False)
    assert unknown.returncode == 2 and "no_such_fn: no function of that name" in unknown.stderr
    no_code = ptdebug("latency", str(c_bundle), "--from", "hotpath.c:1", "--to", "serve",
                      check=False)
    assert no_code.returncode == 2 and "hotpath.c:1: no code" in no_code.stderr
    never = ptdebug("latency", str(c_bundle), "--from", "checksum", "--to", "main",
                    check=False)
    assert never.returncode == 1 and "no interval" in never.stderr


def _check_png(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks[kind] = chunks.get(kind, b"") + body
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (depth, color) == (8, 2)
    raw = zlib.decompress(chunks[b"IDAT"])
    assert len(raw) == height * (1 + 3 * width)
    assert bytes((66, 114, 196)) in raw  # the bars are drawn

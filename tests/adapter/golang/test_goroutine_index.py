"""The goroutine index on hand-made flows (one layer, no process): segments and their
confidence, queries, summaries. The real-program checks are in
tests/live/test_goroutine_attribution.py."""
from __future__ import annotations

from array import array

import numpy as np
import pytest

from adapter.golang.goroutine_index import NO_GOID, Confidence, GoroutineIndex

STORE = 0x50  # a switch instruction's address


def test_observed_flow_assumed_unknown():
    ips = array("Q", [1, 2, 3, STORE, 4, 5, 6, STORE, 8, 9])
    index = GoroutineIndex.build(ips, [(1, 5), (9, 7)], [STORE])
    assert index.segments() == [
        (0, 1, NO_GOID, Confidence.UNKNOWN),
        (1, 4, 5, Confidence.OBSERVED),
        (4, 8, 5, Confidence.ASSUMED),   # a switch, then another before any observation
        (8, 9, 7, Confidence.FLOW),      # the switch at 7, observed at 9
        (9, 10, 7, Confidence.OBSERVED)]
    assert index.labels().tolist() == [-1, 5, 5, 5, 5, 5, 5, 5, 7, 7]
    assert index.goid_at(8) == (7, Confidence.FLOW)
    assert index.switches() == [1, 8]


def test_ranges_and_summaries():
    ips = array("Q", [1, STORE, 2, 3, STORE, 4, 5, STORE, 6, 7])
    samples = [(0, 3), (3, 0), (6, 4), (9, 3)]
    index = GoroutineIndex.build(ips, samples, [STORE])
    assert index.labels().tolist() == [3, 3, 0, 0, 0, 4, 4, 4, 3, 3]
    assert index.ranges(3) == [(0, 2), (8, 10)]
    times = np.arange(10, dtype=np.uint64) * 10
    summary = {s.goid: s for s in index.summaries(times, times * 2)}
    assert summary[3].instructions == 4 and summary[3].time == 20 + 10  # last range ends at 9
    assert summary[0].instructions == 3 and summary[0].cycles == 60
    assert sum(s.instructions for s in summary.values()) == len(ips)


def test_position_outside_the_history():
    index = GoroutineIndex.build(array("Q", [1, 2]), [(0, 1)], [])
    with pytest.raises(IndexError, match="outside the history"):
        index.goid_at(2)



"""features/replay_hits.py on its own: the hit-condition forms debugpy and Delve accept, and
the nearest stop among several breakpoints' recorded hits (the recorded hits are given here;
tests/e2e/test_replay.py finds them in a real recording)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from adapter.features import replay_hits
from adapter.features.replay_hits import ReplayBreakpoint


@pytest.mark.parametrize("text, holds, fails", [
    ("3", [3], [1, 2, 4]), ("== 3", [3], [2]), ("!= 3", [1, 4], [3]), ("> 2", [3, 9], [1, 2]),
    (">= 2", [2, 3], [1]), ("< 2", [1], [2]), ("<= 2", [1, 2], [3]), ("% 3", [3, 6], [1, 4]),
    ("%0", [], [1, 3]),
])
def test_hit_condition_forms(text, holds, fails):
    test = replay_hits.hit_condition_test(text)
    assert [test(n) for n in holds] == [True] * len(holds)
    assert [test(n) for n in fails] == [False] * len(fails)


@pytest.mark.parametrize("text", ["", "x > 2", "3 >", "== -1", "@HIT@ == 2"])
def test_other_texts_cannot_be_decided(text):
    assert replay_hits.hit_condition_test(text) is None


def _capture(hits: dict, loaded_from: int = 0):
    """A capture whose hits are known (`loaded_from`: where the loaded part of its recording
    begins, ThreadTrace.loaded_from)."""
    capture = SimpleNamespace(replay_hits={}, stream=0, trace=SimpleNamespace(
        threads=[SimpleNamespace(loaded_from=loaded_from)]))
    capture.replay_hits[tuple(hits)] = hits
    return capture


def test_the_nearest_stop_counts_hits_per_breakpoint_and_joins_those_at_one_position():
    every = ReplayBreakpoint(1, "a.c", 10)
    third = ReplayBreakpoint(2, "a.c", 20, hit_condition="== 3")
    same = ReplayBreakpoint(3, "b.c", 5, condition="x > 1")
    hits = {every: [10, 50, 90], third: [20, 30, 40, 60], same: [50]}
    capture = _capture(hits)
    bps = list(hits)
    at, there = replay_hits.nearest(capture, bps, 0, True, 1000)
    assert at == 10 and [(h.breakpoint.id, h.number) for h in there] == [(1, 1)]
    at, there = replay_hits.nearest(capture, bps, 10, True, 1000)
    assert at == 40 and [(h.breakpoint.id, h.number) for h in there] == [(2, 3)]
    at, there = replay_hits.nearest(capture, bps, 40, True, 1000)
    assert at == 50 and sorted(h.breakpoint.id for h in there) == [1, 3]
    assert "condition 'x > 1' not evaluated" in replay_hits.describe(there)
    # backwards, and a limit (a gap) that hides the hits beyond it
    assert replay_hits.nearest(capture, bps, 90, False, 0)[0] == 50
    assert replay_hits.nearest(capture, bps, 49, False, 41) is None


def test_in_a_recording_loaded_in_part_hit_conditions_are_not_evaluated():
    """Its hits before the loaded part are not known: every hit stops, numbered in the loaded
    part, and the stop says the hit condition was not evaluated."""
    third = ReplayBreakpoint(2, "a.c", 20, hit_condition="== 3")
    capture = _capture({third: [20, 30, 40, 60]}, loaded_from=990_096_310)
    position, hits = replay_hits.nearest(capture, [third], 0, True, 1000)
    assert position == 20 and hits[0].number == 1 and not hits[0].counted
    text = replay_hits.describe(hits)
    assert "hit 1 in the loaded part of the recording" in text
    assert "hit condition '== 3' not evaluated: the recording is loaded in part" in text
    # loaded from the start (whole, or a first part), the same hits stop at the third only
    assert replay_hits.nearest(_capture({third: [20, 30, 40, 60]}), [third], 0, True,
                               1000)[0] == 40

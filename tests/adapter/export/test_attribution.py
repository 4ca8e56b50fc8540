"""Unit tests of the export layer's rules on hand-made histories (no recording): cycles spread
over the instructions between reports, and gaps: no cycles, stacks, slices or latency
intervals across lost trace. The recorded-bundle tests beside this file prove the features."""
from __future__ import annotations

from array import array

from adapter.export.latency import CodePoint, measure
from adapter.export.perfetto import thread_slices, thread_timeline
from adapter.export.pprof import stack_samples
from adapter.recording.recording import Recording, ThreadTrace
from pt_decoder import insn_flags as F
from pt_decoder.history import Gap, History
from pt_decoder.image import Image


def _decoded(ips, times, cycles, flags, gaps=()) -> Recording:
    history = History.from_columns(array("Q", ips), array("Q", times), array("Q", cycles),
                                   array("B", flags), list(gaps), {})
    return Recording("/nonexistent", {"images": []}, [ThreadTrace(7, history)], Image(),
                         Image())


def test_cycles_are_spread_over_the_instructions_since_the_last_report():
    d = _decoded([1, 2, 3, 4, 5, 6], [0] * 6, [5, 5, 5, 12, 12, 20], [0] * 6)
    # 7 cycles reported at position 3 cover positions 1..3 (2, 2, 3); 8 at 5 cover 4..5.
    assert list(d.threads[0].cycle_weights()) == [0, 2, 2, 3, 4, 4]
    assert d.total_cycles == 20 - 5


def test_no_cycles_across_a_gap():
    gap = Gap(3, 100, 0, 1, "lost")
    d = _decoded([1, 2, 3, 4, 5, 6], [0] * 6, [0, 4, 4, 50, 50, 56], [0] * 6, [gap])
    assert list(d.threads[0].cycle_weights()) == [0, 4, 0, 0, 3, 3]


def test_times_never_run_backwards():
    d = _decoded([1, 2, 3, 4], [10, 30, 20, 40], [0] * 4, [0] * 4)
    assert list(d.times_ns(d.threads[0])) == [10, 30, 30, 40]


CALL, RET = F.CALL | F.TAKEN, F.RETURN | F.TAKEN


def test_slices_and_stacks_follow_calls_and_restart_after_a_gap():
    #        0     1     2     3     4     5     6
    ips = [0x10, 0x11, 0x20, 0x21, 0x12, 0x30, 0x31]
    flags = [0, CALL, 0, RET, 0, CALL, 0]
    gap = Gap(5, 64, 0x30, 1, "lost")
    d = _decoded(ips, list(range(7)), list(range(7)), flags, [gap])
    thread = d.threads[0]
    marks, _ = thread_timeline(d, thread)
    assert [(p, pos) for p, pos, _ in marks] == [
        ("B", 0), ("B", 2), ("E", 4), ("E", 5),   # the call, its return, the gap closes all
        ("B", 5), ("B", 6), ("E", 7), ("E", 7)]   # after the gap: a new root, then the call
    slices = thread_slices(d, thread)
    assert [(s.start, s.end, s.depth) for s in slices] == [(2, 4, 1), (0, 5, 0), (6, 7, 1), (5, 7, 0)]
    samples = stack_samples(d)
    stacks = {stack: value[1] for (_tid, stack), value in samples.items()}
    assert stacks[(0x20, 0x11)] == 1 and stacks[(0x21, 0x11)] == 1   # callee under the call site
    assert stacks[(0x30,)] == 1          # after the gap the stack starts again
    assert stacks[(0x31, 0x30)] == 1


def test_a_return_past_the_window_start_opens_the_caller():
    d = _decoded([0x10, 0x11, 0x50, 0x51], [0, 1, 2, 3], [0, 1, 2, 3], [0, RET, 0, 0])
    slices = thread_slices(d, d.threads[0])
    assert [(s.start, s.end, s.depth) for s in slices] == [(0, 2, 0), (2, 4, 0)]


def test_latency_pairs_b_with_the_latest_a_and_never_across_a_gap():
    a, b = CodePoint("A", frozenset({0xA})), CodePoint("B", frozenset({0xB}))
    ips = [0xA, 0x1, 0xA, 0xB, 0xA, 0x1, 0xB, 0xA, 0xB]
    gap = Gap(8, 0, 0, 1, "lost")
    d = _decoded(ips, [0, 5, 10, 13, 20, 30, 41, 50, 60], list(range(0, 90, 10)), [0] * 9, [gap])
    report = measure(d, a, b)
    assert [(i.start, i.end, i.ns, i.cycles) for i in report.intervals] == [(2, 3, 3, 10),
                                                                           (4, 6, 21, 20)]
    assert report.percentile(50) == 3 and report.percentile(99) == 21
    same = measure(d, a, a)   # A to A: the period between passes
    assert [(i.start, i.end) for i in same.intervals] == [(0, 2), (2, 4), (4, 7)]

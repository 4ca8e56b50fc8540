"""`ptdebug export perfetto`: the timeline parses, its slices nest properly on every thread,
and they are the calls of the decoded history."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from recorded_bundles import REQUESTS, c_bundle, c_program, go_bundle, go_program, ptdebug  # noqa: F401

from adapter.recording.recording import Recording
from pt_decoder import insn_flags

pytestmark = pytest.mark.timeout(300)


def _check_nesting(events: list[dict]) -> dict[int, list[dict]]:
    """Replays each thread's B/E events with a stack; returns the closed slices per tid with
    their begin event, end event and depth. Fails on any improper nesting."""
    stacks: dict[int, list[dict]] = {}
    last_ts: dict[int, float] = {}
    slices: dict[int, list[dict]] = {}
    for event in events:
        assert event["ph"] in ("B", "E", "M", "X"), event
        if event["ph"] == "M":
            continue
        if event["ph"] == "X":
            # A goroutine's run on a thread: a complete event on the goroutine tracks'
            # own process, checked in test_perfetto_goroutines.py; never on a thread's track.
            assert event.get("cat") == "goroutine" and event["dur"] >= 0, event
            continue
        tid = event["tid"]
        assert isinstance(event["ts"], (int, float)) and event["ts"] >= 0
        assert event["ts"] >= last_ts.get(tid, 0), "time runs backwards on a thread"
        last_ts[tid] = event["ts"]
        stack = stacks.setdefault(tid, [])
        if event["ph"] == "B":
            assert isinstance(event["name"], str) and event["name"]
            stack.append(event)
        else:
            assert stack, f"an end without a begin on thread {tid}"
            begin = stack.pop()
            assert event["ts"] >= begin["ts"]
            slices.setdefault(tid, []).append({"name": begin["name"], "begin": begin,
                                               "end": event, "depth": len(stack)})
    for tid, stack in stacks.items():
        assert not stack, f"thread {tid} ends with {len(stack)} open slices"
    return slices


@pytest.mark.parametrize("which", ["c", "go"])
def test_timeline_parses_and_nests_on_every_thread(which, c_bundle, go_bundle, tmp_path):
    bundle = c_bundle if which == "c" else go_bundle
    out = tmp_path / "timeline.json"
    ptdebug("export", "perfetto", str(bundle), "-o", str(out))
    document = json.loads(out.read_text())
    assert document["displayTimeUnit"] == "ns"
    slices = _check_nesting(document["traceEvents"])
    decoded = Recording.open(bundle)
    assert set(slices) == {t.tid for t in decoded.threads}
    for thread in decoded.threads:
        history = thread.history
        flags = history.flags_range()
        calls = sum(1 for i, f in enumerate(flags[:-1])
                    if f & insn_flags.CALL and not f & insn_flags.FAR)
        thread_slices = slices[thread.tid]
        roots = [s for s in thread_slices if s["depth"] == 0]
        assert len(thread_slices) == calls + len(roots)
        # The cycles of the outermost slices add up to the thread's cycles (a stepper
        # recording's, named stepper_ns: they are its ns, not CPU cycles).
        assert sum(s["end"]["args"]["stepper_ns"] for s in roots) == \
            history.cycles(len(history) - 1) - history.cycles(0)
        assert sum(s["end"]["args"]["instructions"] for s in roots) == len(history)
        # Time axis in ns: first event at 0, last at the window's length (the latest time
        # the decoder gave any instruction: its estimates may step back between TSCs).
        times = history.times()
        span = max(times) - times[0]  # the stepper's bundles count TSC in ns
        assert max(round(s["end"]["ts"] * 1000) for s in thread_slices) == span
    prefix = "main." if which == "go" else ""
    names = Counter(s["name"] for tid in slices for s in slices[tid])
    assert names[prefix + "handle"] == REQUESTS and names[prefix + "checksum"] == REQUESTS
    roots = [s["name"] for tid in slices for s in slices[tid] if s["depth"] == 0]
    assert roots == [prefix + "serve"]
    # Every checksum slice sits inside a handle slice (depth 2 under serve).
    assert {s["depth"] for tid in slices for s in slices[tid]
            if s["name"] == prefix + "checksum"} == {2}


def test_perfetto_protobuf_has_the_same_slices_in_nanoseconds(c_bundle, tmp_path):
    from adapter.export import protowire
    proto_path, json_path = tmp_path / "t.pftrace", tmp_path / "t.json"
    ptdebug("export", "perfetto", str(c_bundle), "-o", str(proto_path))
    ptdebug("export", "perfetto", str(c_bundle), "-o", str(json_path))
    document = json.loads(json_path.read_text())
    origin = document["otherData"]["time_origin_ns"]
    json_events = [e for e in document["traceEvents"] if e["ph"] in ("B", "E")]

    def message(data: bytes) -> dict:
        out: dict = {}
        for number, _, value in protowire.fields(data):
            out.setdefault(number, []).append(value)
        return out

    packets = [message(v) for number, _, v in protowire.fields(proto_path.read_bytes())
               if number == 1]
    descriptors = [message(p[60][0]) for p in packets if 60 in p]
    threads = {d[1][0]: message(d[4][0]) for d in descriptors if 4 in d}
    processes = [message(d[3][0]) for d in descriptors if 3 in d]
    decoded = Recording.open(c_bundle)
    assert [t[2][0] for t in threads.values()] == [t.tid for t in decoded.threads]
    assert processes[0][1][0] == decoded.manifest["pid"]
    proto_events = []
    for p in packets:
        if 11 not in p:
            continue
        event = message(p[11][0])
        assert event[11][0] in threads and p[10] == [1]
        proto_events.append((p[8][0], event))
    assert len(proto_events) == len(json_events)
    stack = []
    for (timestamp, event), expected in zip(proto_events, json_events):
        assert timestamp - origin == round(expected["ts"] * 1000)   # ns, no unit conversion
        if event[9][0] == 1:
            assert expected["ph"] == "B" and event[23][0].decode() == expected["name"]
            stack.append(event)
        else:
            assert expected["ph"] == "E" and event[9][0] == 2 and stack
            stack.pop()
            annotations = {message(a)[10][0].decode(): message(a)[4][0] for a in event[4]}
            assert annotations == expected["args"]
    assert not stack

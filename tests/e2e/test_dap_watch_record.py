"""Data breakpoints and record breakpoints armed together both work (issue 17), through
`ptdebug dap` in front of real debugpy, on a busy multi-threaded service that writes a numpy
array (tests/fixtures/programs/dap_watch_record_service.py counts its writes and its answered
requests).

Before: with a data breakpoint armed, a record breakpoint did not record ("both need the
thread's debug registers"), and writes made during ptdebug's own hidden record-breakpoint stops
were reported as made "while the program was paused" instead of stopping the program. Now the
recorder uses the debug-register slots the watch leaves (none: it steps every instruction), and
a hit during a recording window is delivered as a stop once the window is over: every write the
program counts is a `data breakpoint` stop, and each record breakpoint hit is a capture, also
when the program was stopped for another writer before the thread ran the line (a window on a
Python line opens only there: it waits for the user's continue, issue 13).

The soak (`slow`) runs the same session for PTDEBUG_SOAK_SECONDS (default 20; 600 for the
figures in docs/testing.md) and also checks that every request is answered and that the
adapter's memory stays flat (its RSS sampled every second: start, end, max are printed)."""
from __future__ import annotations

import os
import re
import time

import pytest
from conftest import PROGRAMS, launch, top_frame
from dapclient import marker_line

PROGRAM = PROGRAMS / "dap_watch_record_service.py"
SOURCE = {"path": str(PROGRAM)}
WINDOW = {"instructions": 300}
"""A short window (the stepper records a few thousand instructions a second here, fewer when
the watch leaves it no slot and it steps every instruction)."""
REQUEST_TIMEOUT = 30.0
"""Every request must be answered within this (a wedge fails the test instead of hanging it)."""


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def _drive(run, seconds: float, size: int, hit_condition: str) -> dict:
    """Launch the service for `seconds` with `size` int64 elements in `table`, stopped at
    @begin; arm a data breakpoint on `table` and a record breakpoint (every `hit_condition`
    hit) on @handler, then continue after every stop until the program exits. Returns the
    figures: stops, the program's own counts, captures, the adapter's RSS samples."""
    client = run.client
    launch(client, PROGRAM, breakpoints=["begin"], args=[str(seconds), str(size)],
           recordWindow=WINDOW)
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    main_thread = client.expect_stopped("breakpoint")["threadId"]
    run.track()
    frame = top_frame(client, main_thread)["id"]
    info = client.call("dataBreakpointInfo", {"name": "table", "frameId": frame})
    armed = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert armed["breakpoints"][0]["verified"], armed
    record = client.call("setBreakpoints", {"source": SOURCE, "breakpoints": [
        {"line": marker_line(PROGRAM, "handler"), "mode": "record",
         "hitCondition": hit_condition}]})
    assert record["breakpoints"][0]["verified"], record
    client.call("continue", {"threadId": main_thread}, timeout=REQUEST_TIMEOUT)
    stops = 0
    other_stops = []
    rss = [_rss_kib(run.proc.pid)]
    captured_by_sample = [0]  # captures kept when each RSS sample was taken
    next_sample = time.monotonic() + 1
    next_probe = time.monotonic() + 5
    deadline = time.monotonic() + seconds + 300
    ends = time.monotonic() + seconds - 1
    while not client.events("exited"):
        assert time.monotonic() < deadline, f"the program did not end; {stops} stops"
        now = time.monotonic()
        if now >= next_sample:
            rss.append(_rss_kib(run.proc.pid))
            captured_by_sample.append(len(client.events("ptdebug/capture")))
            next_sample = now + 1
        if now >= next_probe:  # the session answers while the program runs or is stopped
            answer = client.request("threads", timeout=REQUEST_TIMEOUT)
            # refused only by a program ending (debugpy: "Server ... disconnected")
            assert answer["success"] or now > ends, answer
            next_probe = now + 5
        try:
            stopped = client.expect_stopped(timeout=0.5)
        except TimeoutError:
            continue
        if stopped["reason"] == "data breakpoint":
            stops += 1
        else:
            other_stops.append(stopped)
        client.call("continue", {"threadId": stopped["threadId"]}, timeout=REQUEST_TIMEOUT)
    printed = "".join(e["body"]["output"] for e in client.events("output")
                      if e["body"].get("category") == "stdout")
    counts = re.search(r"writes=(\d+) answered=(\d+) unanswered=(\d+)", printed)
    assert counts, f"the program printed no counts: {printed[-500:]!r}"
    # the last capture may still be decoding when the program exits
    expected = int(counts.group(1)) // int(hit_condition.lstrip("% "))
    settle = time.monotonic() + 60

    def told() -> int:  # the hits the user was told of: captures, and hits not recorded
        return len(client.events("ptdebug/capture")) + sum(
            "not recorded this time" in e["body"]["output"] for e in client.events("output"))

    while told() < expected and time.monotonic() < settle:
        try:
            client.expect_event("ptdebug/capture", timeout=1)
        except TimeoutError:
            pass
    rss.append(_rss_kib(run.proc.pid))
    captured_by_sample.append(len(client.events("ptdebug/capture")))
    important = [e["body"]["output"] for e in client.events("output")
                 if e["body"].get("category") in ("important", "console")]
    return {"stops": stops, "other_stops": other_stops,
            "writes": int(counts.group(1)), "answered": int(counts.group(2)),
            "unanswered": int(counts.group(3)),
            "captures": len(client.events("ptdebug/capture")),
            "partial_captures": [e["body"] for e in client.events("ptdebug/capture")
                                 if e["body"]["status"] != "complete"],
            "not_recorded": [m for m in important if "not recorded this time" in m],
            "waited": [m for m in important if "its window opens when the thread runs it" in m],
            "messages": important, "rss": rss, "captured_by_sample": captured_by_sample}


def _check(figures: dict, record_every: int) -> None:
    unwanted = [m for m in figures["messages"] if any(
        text in m for text in ("did not record", "while the program was paused",
                               "not turned into a stop", "hits were lost", "could not take"))]
    assert unwanted == [], unwanted[:5]
    assert figures["other_stops"] == [], figures["other_stops"][:3]
    assert figures["unanswered"] == 0, figures
    assert figures["writes"] > 0 and figures["answered"] == figures["writes"], figures
    assert figures["stops"] == figures["writes"], figures  # every write is a stop
    # every record breakpoint hit is recorded: with every thread stopped at each of the other
    # writers' hits, its thread often comes to run its line only after the user continued
    # that stop; its window waits for it (before: "not recorded this time", issue 13). Also
    # when another worker's hit of the same record breakpoint stops the program first: its
    # capture begins beside the waiting one (before: 1 hit in 8 "not recorded this time:
    # another thread's record breakpoint stopped the program")
    assert figures["not_recorded"] == [], figures["not_recorded"][:3]
    assert figures["captures"] == figures["writes"] // record_every, figures
    # whole windows: the recorder's breakpoints fired beside the watch's ("lost the flow"
    # when it armed a fifth one on a thread the watch holds four of)
    assert figures["partial_captures"] == [], figures["partial_captures"][:2]


def _end(run) -> None:
    run.client.call("disconnect", {}, timeout=REQUEST_TIMEOUT)
    assert run.wait_exit() == 0
    run.assert_nothing_left()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("size", [4, 1], ids=["watch-holds-4-slots", "watch-holds-1-slot"])
def test_data_breakpoint_and_record_breakpoint_both_work(start_adapter, size):
    """`size` 4: the watch takes every debug register (32 bytes), the recorder steps; 1: it
    takes one, the recorder runs on the three left."""
    run = start_adapter()
    figures = _drive(run, seconds=6, size=size, hit_condition="% 4")
    shown = {k: v for k, v in figures.items()
             if k not in ("messages", "rss", "captured_by_sample", "partial_captures",
                          "not_recorded", "waited")}
    shown["not recorded"] = len(figures["not_recorded"])
    shown["waited for a continue"] = len(figures["waited"])
    print(f"figures: {shown}")
    _check(figures, record_every=4)
    _end(run)


SOAK_SECONDS = float(os.environ.get("PTDEBUG_SOAK_SECONDS", "20"))
SOAK_RECORD_EVERY = int(os.environ.get("PTDEBUG_SOAK_RECORD_EVERY", "10"))
"""The record breakpoint's hit condition: every Nth handled request opens a window."""


@pytest.mark.slow
@pytest.mark.timeout(SOAK_SECONDS + 900)
def test_soak_data_breakpoint_and_record_breakpoint(start_adapter):
    """A busy service with both armed for PTDEBUG_SOAK_SECONDS: every write a stop, every
    request (the program's and the client's) answered, the adapter's memory flat."""
    run = start_adapter()
    figures = _drive(run, seconds=SOAK_SECONDS, size=2,
                     hit_condition=f"% {SOAK_RECORD_EVERY}")
    rss = figures["rss"]
    settled = rss[min(len(rss) - 1, 10):]  # after imports and the first capture's decode
    print(f"soak {SOAK_SECONDS:g} s: {figures['writes']} writes, {figures['stops']} stops, "
          f"{figures['answered']} answered, {figures['captures']} captures; adapter RSS KiB "
          f"start {rss[0]} after-warm-up {settled[0]} end {rss[-1]} max {max(rss)} "
          f"({len(rss)} samples; every 30th: {rss[::30]})")
    _check(figures, record_every=SOAK_RECORD_EVERY)
    _end(run)
    # flat: over the run's second half, and past the first capture kept (its decode reads the
    # interpreter's code once, ~81 MB: in stop 23's CI the first of a 20 s run's 2 captures came
    # at sample 16 of 20, and that read was taken for growth), the adapter grows by less than
    # 16 MiB. Each capture kept used to cost ~81 MB, a copy of the program's code per decoded
    # bundle (issue 17; pt_decoder.image now shares it by file): 13 captures in a 600 s half.
    captured = figures["captured_by_sample"]
    after_first = next((i for i, n in enumerate(captured) if n), 0)  # none: the second half
    measured = rss[max(len(rss) // 2, after_first):]
    grown = measured[-1] - measured[0]
    assert grown < 16 * 1024, (f"adapter memory not flat: +{grown // 1024} MiB over the "
                               f"{len(measured)} samples after the run's first half and first "
                               f"capture, {figures['captures']} captures kept "
                               f"({rss[::max(1, len(rss) // 20)]})")

"""features.goroutine_view on a real stepper recording of a Go program whose goroutines hand a
token around channels (tests/fixtures/programs/go_handoff, GOMAXPROCS=1, the goid probe writing
PTWRITEs), turned into a captures.Capture as a record breakpoint leaves it:

* the capture's goroutine index agrees with the goid the probe read at every stop;
* the per-goroutine instructions, times and cycles of the Processor Trace scope add up to the
  window, and the scope names the goroutine at the position;
* while replaying, `threads` answers name the goroutine that ran at the cursor (at positions in
  two different goroutines), recorded frames and the stop's text name it too, and when not
  replaying `threads` is left to the backend;
* a capture of a C program has no goroutine index.

The session around the features is a thin fake (this tests the feature layer; the e2e tests
drive the same features through real Delve and debugpy).
"""
from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from adapter.capture import record, stepper
from adapter.features import goroutine_view, trace_scope
from adapter.features.captures import Capture
from adapter.features.record_breakpoints import RecordBreakpoints
from adapter.features.record_window import RecordWindow
from adapter.features.reverse import Reverse
from adapter.golang.goroutine_index import Confidence
from adapter.golang.stepper_probe import probe_for
from adapter.protocol.channel import DEFERRED
from adapter.protocol.messages import Request
from adapter.protocol.schema import StepBackArguments
from adapter.recording.recording import Recording
from adapter.routes import Router

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]

PROGRAMS = Path(__file__).resolve().parents[2] / "fixtures" / "programs"


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        pytest.fail("the Go toolchain is missing (a documented requirement)")
    return go


@pytest.fixture(scope="module")
def handoff(tmp_path_factory):
    """(capture, truth): a capture of main.handoff with 3 rounds, and {position: goid} the probe
    read at each stop of the recording."""
    tmp = tmp_path_factory.mktemp("handoff")
    package = tmp / "go_handoff"
    shutil.copytree(PROGRAMS / "go_handoff", package)
    binary = tmp / "handoff"
    subprocess.run([_go(), "build", "-o", str(binary), "."], cwd=package, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    proc = subprocess.Popen([str(binary), "3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, GODEBUG="asyncpreemptoff=1"))
    assert proc.stdout.readline() == b"ready\n"
    probe = probe_for(proc.pid)
    read: list[int | None] = []  # the probe's answer at every stop, in order

    def logging_probe(regs):
        goid = probe(regs)
        read.append(goid)
        return goid

    def release():  # once the recorder's trigger is armed
        time.sleep(1.0)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    threading.Thread(target=release, daemon=True).start()
    bundle = str(tmp / "handoff.bundle")
    try:
        result = record.record_stepper(bundle, pid=proc.pid, start="main.handoff",
                                       end=stepper.EndCondition(until_return=True),
                                       ptw_probe=logging_probe, trigger_timeout=60,
                                       wait_for_exit=False, copy_images=False)
    finally:
        probe.close()
    assert proc.wait(60) == 0
    assert result.manifest["status"] == "complete", result.manifest.get("partial_reason")
    stamps = [position for position, _ in result.recording.stamps]
    assert len(stamps) == len(read) > 100
    recorded = len(result.recording.ips)
    truth = {p: g for p, g in zip(stamps, read) if g is not None and p < recorded}
    trace = Recording.open(bundle)
    owner = truth[0]  # the goroutine that entered main.handoff: it "hit the record breakpoint"
    capture = Capture(1, trace.threads[0].tid, owner,
                      RecordWindow(function="main.handoff", untilReturn=True), bundle, trace)
    return capture, truth


def test_the_capture_index_agrees_with_the_probe_at_every_stop(handoff):
    capture, truth = handoff
    goroutines = goroutine_view.capture_goroutines(capture)
    assert goroutines is not None
    assert goroutine_view.capture_goroutines(capture) is goroutines  # built once, kept
    wrong = {p: (g, goroutines.at(p)[0]) for p, g in truth.items() if goroutines.at(p)[0] != g}
    assert wrong == {}
    assert len(truth) > 100
    assert goroutines.at(0) == (capture.thread_id, Confidence.OBSERVED)
    ran = goroutines.index.goroutines()
    assert 0 in ran and len([g for g in ran if g > 0]) == 3, ran  # main, two relays, g0


def test_time_per_goroutine_adds_up_to_the_window(handoff):
    capture, _ = handoff
    history = capture.history
    summaries = goroutine_view.capture_goroutines(capture).summaries(history)
    last = len(history) - 1
    assert sum(s.instructions for s in summaries) == len(history)
    assert sum(s.time for s in summaries) == history.time(last) - history.time(0) > 0
    assert sum(s.cycles for s in summaries) == capture.cycles
    ranges = sorted(r for s in summaries for r in s.ranges)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(history)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))  # no hole, no overlap
    assert [s.time for s in summaries] == sorted((s.time for s in summaries), reverse=True)
    for s in summaries:  # each goroutine's ranges are labelled with it, at both ends
        goroutines = goroutine_view.capture_goroutines(capture)
        assert all(goroutines.at(a)[0] == s.goid == goroutines.at(b - 1)[0]
                   for a, b in s.ranges)


def test_the_trace_scope_shows_the_goroutine_here_and_time_per_goroutine(handoff):
    capture, _ = handoff
    recording = _Recording()
    goroutines = goroutine_view.capture_goroutines(capture)
    other = next(p for p in range(len(capture.history))
                 if goroutines.at(p)[0] not in (capture.thread_id, 0, -1))
    other_goid = goroutines.at(other)[0]
    variables = {v["name"]: v for v in trace_scope.scope_variables(recording, capture, other)}
    here = variables["goroutine"]["value"]
    assert here.startswith(f"goroutine {other_goid} (") and f"instruction {other}" in here
    assert f"the capture is goroutine {capture.thread_id}'s" in here
    listed = recording.expand(variables["goroutines"])
    summaries = goroutines.summaries(capture.history)
    assert len(listed) == len(summaries) == len(goroutines.index.goroutines())
    assert [v["name"] for v in listed] == [
        f"goroutine {s.goid} (ran here)" if s.goid == other_goid else
        goroutine_view.goroutine_name(s.goid) for s in summaries]
    assert goroutine_view.annotated(goroutine_view.goroutine_name(0), "ran here") == \
        "g0 (the Go scheduler; ran here)"
    # a stepper capture: instructions first, its time named stepper time (issue 14 item 8)
    shares = [float(re.search(r"([\d.]+) % of the stepper time \(", v["value"]).group(1))
              for v in listed]
    assert abs(sum(shares) - 100) < 0.1 * len(shares)
    assert all(v["value"].startswith(f"{s.instructions:,} instructions (")
               and "not CPU time" in v["value"] and "cycles" not in v["value"]
               for v, s in zip(listed, summaries))
    for item, summary in zip(listed, summaries):
        assert f"{summary.instructions:,} instructions" in item["value"]
        assert f"label: {summary.confidence.name.lower()}" in item["value"]
        ranges = recording.expand(item)
        assert ranges[0]["name"] == f"[0] insn {summary.ranges[0][0]}..{summary.ranges[0][1] - 1}"
    # the Python-style items are still there, after the goroutine ones
    names = list(variables)
    assert names[:4] == ["capture", "position", "goroutine", "goroutines"] and \
        "stepper time in window" in names


def test_threads_while_replaying_name_the_goroutine_at_the_cursor(handoff):
    capture, _ = handoff
    goroutines = goroutine_view.capture_goroutines(capture)
    owner = capture.thread_id
    session = _Session()
    recording = RecordBreakpoints(session)
    recording.captures.append(capture)
    reverse = Reverse(session, recording)
    session.reverse = reverse
    delve_threads = [{"id": owner, "name": f"[Go {owner}] main.handoff"}] + [
        {"id": g, "name": f"[Go {g}] main.relay"} for g in goroutines.index.goroutines() if g > 0
        and g != owner] + [{"id": 99, "name": "[Go 99] main.unrelated"}]
    session.backend.threads = delve_threads

    # not replaying: `threads` is the backend's, untouched
    assert session.send("threads") is None
    assert reverse.goroutines.intercepting("threads")  # a capture exists: a replay may come
    assert not reverse.goroutines.intercepting("stackTrace")
    assert not goroutine_view.GoroutineView(_Session(), RecordBreakpoints(_Session()),
                                            reverse).intercepting("threads")  # no capture

    # enter the history at its last instruction (main.handoff's goroutine), then step back
    # by instruction until the cursor is in another goroutine's instructions
    session.paused = True
    session.step_back(owner)
    assert goroutines.at(reverse.replays[owner].position)[0] == owner
    names = session.threads()
    assert names[owner] == (f"[Go {owner}] main.handoff — replaying capture 1: this goroutine "
                            f"ran insn {reverse.replays[owner].position}")
    assert all(names[t["id"]] == t["name"] for t in delve_threads if t["id"] != owner)
    top = session.top_frame(owner)
    assert f"goroutine {owner} (" in top["name"]

    while goroutines.at(reverse.replays[owner].position)[0] in (owner, 0, -1):
        crossed_from = reverse.replays[owner].position
        session.step_back(owner)
        assert reverse.replays[owner].position < crossed_from
    position = reverse.replays[owner].position
    other, confidence = goroutines.at(position)
    assert other > 0 and other != owner
    names = session.threads()
    assert names[owner] == (f"[Go {owner}] main.handoff — replaying capture 1: goroutine "
                            f"{other} ran insn {position} here, not this one")
    assert names[other] == f"[Go {other}] main.relay — ran at the replay cursor of goroutine {owner}"
    assert names[99] == "[Go 99] main.unrelated"
    assert [t["id"] for t in session.backend.answered_threads] == [t["id"] for t in delve_threads]
    top = session.top_frame(owner)
    assert f"insn {position}, goroutine {other} ({confidence.name.lower()})" in top["name"]
    stopped = session.events[-1]
    assert stopped[0] == "stopped" and f"goroutine {other} (" in stopped[1]["description"]
    assert "crossed a goroutine switch" in stopped[1]["description"]

    # a `continued` ends the replay: `threads` goes to the backend untouched again
    reverse._filter_event({"event": "continued", "body": {"threadId": owner}})
    assert session.send("threads") is None


def test_a_capture_of_a_c_program_has_no_goroutine_index(tmp_path):
    binary = tmp_path / "rec_work"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(binary), str(PROGRAMS / "rec_work.c")],
                   check=True)
    bundle = str(tmp_path / "c.bundle")
    record.record_stepper(bundle, command=[str(binary)], end=stepper.EndCondition(count=300))
    trace = Recording.open(bundle)
    capture = Capture(1, trace.threads[0].tid, 1, RecordWindow(instructions=300), bundle, trace)
    assert goroutine_view.capture_goroutines(capture) is None
    assert goroutine_view.scope_variables(_Recording(), capture, 0) == []
    assert goroutine_view.switch_note(capture, 5, 0) == ""
    names = [v["name"] for v in trace_scope.scope_variables(_Recording(), capture, 0)]
    assert "goroutine" not in names and "goroutines" not in names


# --- a thin session: the hooks the features use ----------------------------------------------
class _Recording:
    def __init__(self):
        self.produce = {}

    def reference(self, produce) -> int:
        self.produce[len(self.produce) + 1] = produce
        return len(self.produce)

    def expand(self, variable: dict) -> list[dict]:
        return self.produce[variable["variablesReference"]]()


class _Answers:
    def __init__(self):
        self.sent = []

    def send(self, message: dict) -> None:
        self.sent.append(message)


class _Client:
    def __init__(self, events):
        self.events = events

    def send_event(self, name, body=None):
        self.events.append((name, body))


class _LiveAnswer:
    """A failed live `stackTrace`: the replayed frames alone are shown."""

    def __init__(self):
        self.success = False
        self.raw = {"success": False}


class _Backend:
    """Stands in for Delve: answers `threads` with a goroutine list, the live `stackTrace`
    with nothing (the recorded frames are what is looked at)."""
    name = "delve"

    def __init__(self):
        self.threads: list[dict] = []
        self.answered_threads: list[dict] = []

    def forward(self, request: Request, observe=None) -> None:
        assert request.command == "threads"
        response = {"success": True, "body": {"threads": [dict(t) for t in self.threads]}}
        if observe is not None:
            observe(response)
        self.answered_threads = response["body"]["threads"]
        request.respond_like(response)

    def request(self, command, arguments=None, timeout=10.0):
        return _LiveAnswer()


class _Session:
    def __init__(self):
        self.routes = Router()
        self.events: list = []
        self.client = _Client(self.events)
        self.backend = _Backend()
        self.paused = False
        self.reverse = None
        self.launch_arguments: dict = {}
        self.capabilities: dict = {}
        self._seq = 0

    def announce_capabilities(self, **capabilities):
        self.capabilities.update(capabilities)

    def send(self, command: str, arguments: dict | None = None):
        """Run the route table's steps as Session.route does: what the first taker returned,
        DEFERRED once the request went to the backend with a watch that wants it, or None
        when it would go to the backend untouched."""
        self._seq += 1
        raw = {"seq": self._seq, "type": "request", "command": command}
        if arguments is not None:
            raw["arguments"] = arguments
        self.last = Request(raw, _Answers())
        for take in self.routes.takers(command):
            answer = take(self.last)
            if answer is not None:
                return answer
        watcher = self.routes.watcher(command, self.last)
        if watcher is None:
            return None
        self.backend.forward(self.last, watcher)
        return DEFERRED

    def threads(self) -> dict[int, str]:
        assert self.send("threads") is DEFERRED
        (answer,) = self.last.channel.sent
        assert answer["success"]
        return {t["id"]: t["name"] for t in answer["body"]["threads"]}

    def step_back(self, thread_id: int) -> None:
        self.send("stepBack", {"threadId": thread_id, "granularity": "instruction"})
        self.reverse.step_back(self.last, StepBackArguments(threadId=thread_id,
                                                            granularity="instruction"))

    def top_frame(self, thread_id: int) -> dict:
        body = self.send("stackTrace", {"threadId": thread_id, "levels": 1})
        return body["stackFrames"][0]


def test_the_history_of_a_bundle_the_session_holds_comes_from_its_recording(handoff, tmp_path,
                                                                           monkeypatch):
    """`ptdebug/goroutineHistory` for a capture's own bundle answers from the capture's
    Recording (decoded already, its index shared with the trace scope): nothing is decoded
    again. Given by another path to the same bundle it is still found."""
    from adapter.protocol.schema import GoroutineHistoryIn, parse
    capture, _ = handoff
    alias = tmp_path / "same-bundle"
    alias.symlink_to(capture.bundle)
    assert goroutine_view._held_recording([capture], str(alias)) is capture.trace
    assert goroutine_view._held_recording([capture], str(tmp_path)) is None

    def no_decode(*args, **kwargs):
        raise AssertionError("the bundle was decoded again")
    monkeypatch.setattr(Recording, "open", no_decode)
    args = parse(GoroutineHistoryIn, {"bundle": str(alias)})
    body = goroutine_view.goroutine_history(args, capture.trace)
    counted = {e["goid"]: e["instructions"] for e in body["goroutines"]}
    summaries = goroutine_view.capture_goroutines(capture).summaries(capture.history)
    assert counted == {s.goid: s.instructions for s in summaries}
    assert sum(counted.values()) == len(capture.history)
    assert body["timeUnit"] == "ns"  # a stepper recording

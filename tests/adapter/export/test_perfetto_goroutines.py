"""Perfetto goroutine tracks: a Go channel-handoff program (three goroutines passing a token,
GOMAXPROCS=1) recorded by the stepper with the goid probe; the timeline then has one track per
goroutine whose runs cover the recorded thread exactly once, in time order, without overlap."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import time
from collections import Counter

import pytest
from recorded_bundles import PROGRAMS, go_tool, ptdebug

from adapter.capture import record, stepper
from adapter.export.perfetto import GOROUTINE_PID_BASE
from adapter.golang.stepper_probe import probe_for

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def handoff_bundle(tmp_path_factory):
    work = tmp_path_factory.mktemp("handoff")
    package = work / "go_handoff"
    shutil.copytree(PROGRAMS / "go_handoff", package)
    binary = work / "handoff"
    subprocess.run([go_tool(), "build", "-o", str(binary), "."], cwd=package, check=True,
                   env=dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod"))
    # The program waits for a line before its recorded part, so the probe and the recorder
    # attach first; no asynchronous preemption signal may interrupt the recording.
    proc = subprocess.Popen([str(binary), "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, GODEBUG="asyncpreemptoff=1"))
    try:
        assert proc.stdout.readline() == b"ready\n"
        probe = probe_for(proc.pid)

        def release():
            time.sleep(1.0)
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        threading.Thread(target=release, daemon=True).start()
        try:
            result = record.record_stepper(
                str(work / "handoff.bundle"), pid=proc.pid, start="main.handoff",
                end=stepper.EndCondition(until_return=True), ptw_probe=probe,
                trigger_timeout=60, wait_for_exit=False)
        finally:
            probe.close()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    return result.bundle, len(result.recording.ips), result.recording.tid


def test_each_goroutine_has_a_track_of_its_runs(handoff_bundle, tmp_path):
    bundle, recorded, tid = handoff_bundle
    out = tmp_path / "handoff.json"
    ptdebug("export", "perfetto", str(bundle), "-o", str(out))
    events = json.loads(out.read_text())["traceEvents"]
    runs = [e for e in events if e.get("cat") == "goroutine"]
    assert runs and all(e["ph"] == "X" and e["pid"] >= GOROUTINE_PID_BASE for e in runs)
    goids = Counter(e["tid"] for e in runs)
    assert len([g for g in goids if g > 0]) == 3, goids   # main + two relays
    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] >= GOROUTINE_PID_BASE}
    assert names[0] == "g0 (scheduler)" and all(names[g] == f"goroutine {g}" for g in goids if g)
    # The runs cover every recorded instruction of the thread exactly once.
    assert all(e["name"] == f"on thread {tid}" for e in runs)
    assert sum(e["args"]["instructions"] for e in runs) == recorded
    ordered = sorted(runs, key=lambda e: (e["ts"], e["args"]["instructions"]))
    for earlier, later in zip(ordered, ordered[1:]):
        assert round((earlier["ts"] + earlier["dur"]) * 1000) <= round(later["ts"] * 1000) + 1
    # The handoff switches goroutines many times: more runs than goroutines.
    assert len(runs) > 2 * len(goids)


def test_protobuf_has_the_goroutine_tracks(handoff_bundle, tmp_path):
    from adapter.export import protowire
    from adapter.export.perfetto import GOROUTINE_UUID_BASE
    bundle, _, _ = handoff_bundle
    out = tmp_path / "handoff.pftrace"
    ptdebug("export", "perfetto", str(bundle), "-o", str(out))

    def message(data: bytes) -> dict:
        fields: dict = {}
        for number, _, value in protowire.fields(data):
            fields.setdefault(number, []).append(value)
        return fields
    packets = [message(v) for n, _, v in protowire.fields(out.read_bytes()) if n == 1]
    tracks = {message(p[60][0])[1][0]: message(p[60][0]).get(2, [b""])[0].decode()
              for p in packets if 60 in p}
    goroutine_tracks = {uuid: name for uuid, name in tracks.items() if uuid >= GOROUTINE_UUID_BASE}
    assert len([n for n in goroutine_tracks.values() if n.startswith("goroutine ")]) == 3
    per_track = Counter()
    for p in packets:
        if 11 in p:
            event = message(p[11][0])
            if event[11][0] in goroutine_tracks:
                per_track[event[9][0]] += 1
    assert per_track[1] == per_track[2] > 3   # every run begins and ends

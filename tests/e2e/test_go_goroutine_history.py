"""`ptdebug/goroutineHistory` over the real protocol: a channel-handoff program recorded by
the stepper with the goid probe, then asked of a Go session: per-goroutine ranges, times and
cycles that cover the recording exactly once."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import pytest
from go_support import GO_SESSION, copy_package, go_tool, start_go

from adapter.capture import record, stepper
from adapter.golang.stepper_probe import probe_for

pytestmark = pytest.mark.timeout(240)


def _record_handoff(tmp_path):
    package = tmp_path / "go_handoff"
    shutil.copytree(GO_SESSION.parent / "go_handoff", package)
    binary = tmp_path / "handoff"
    subprocess.run([go_tool(), "build", "-o", str(binary), "."], cwd=package, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    proc = subprocess.Popen([str(binary), "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, GODEBUG="asyncpreemptoff=1"))
    assert proc.stdout.readline() == b"ready\n"

    def release():
        time.sleep(1.0)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    probe = probe_for(proc.pid)  # before the release: reading the layout takes a while
    threading.Thread(target=release, daemon=True).start()
    try:
        result = record.record_stepper(
            str(tmp_path / "handoff.bundle"), pid=proc.pid, start="main.handoff",
            end=stepper.EndCondition(until_return=True), ptw_probe=probe, trigger_timeout=60,
            wait_for_exit=False)
    finally:
        probe.close()
    assert proc.wait(60) == 0
    return result


def test_goroutine_history_request(start_adapter, tmp_path):
    result = _record_handoff(tmp_path)
    recorded = len(result.recording.ips)
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(copy_package(GO_SESSION, tmp_path))})
    body = client.call("ptdebug/goroutineHistory", {"bundle": result.bundle}, timeout=60)
    assert body["timeUnit"] == "ns"
    entries = {e["goid"]: e for e in body["goroutines"]}
    assert len([g for g in entries if g > 0]) == 3 and 0 in entries
    assert sum(e["instructions"] for e in entries.values()) == recorded
    covered = sorted((r["start"], r["stop"]) for e in entries.values() for r in e["ranges"])
    assert covered[0][0] == 0 and covered[-1][1] == recorded
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))  # no hole, no overlap
    for entry in entries.values():
        assert entry["confidence"] in ("observed", "flow")
        assert entry["time"] >= 0 and entry["cycles"] >= 0
        assert all(r["stopTime"] >= r["startTime"] for r in entry["ranges"])
    assert sum(e["time"] for e in entries.values()) > 0

    missing = client.request("ptdebug/goroutineHistory", {"bundle": str(tmp_path / "nope")})
    assert missing["success"] is False and "nope" in missing["body"]["error"]["format"]
    run.track()
    client.call("disconnect", {}, timeout=15)
    assert run.wait_exit() == 0
    run.assert_nothing_left()

"""`ptdebug watch` end to end: the console script on a live C process.

One hit a line (JSON lines with --json), --count ends it, Ctrl-C and SIGTERM
end it too, and the target runs on untouched in every case.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
from test_watchpoints import _marker_line, target_factory, watch_threads  # noqa: F401

pytestmark = pytest.mark.live
PTDEBUG = [sys.executable, "-X", "faulthandler", "-m", "adapter.cli"]
ROOT = pathlib.Path(__file__).resolve().parent.parent.parent


def _start(*argv) -> subprocess.Popen:
    proc = subprocess.Popen(PTDEBUG + ["watch", *map(str, argv)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    armed = proc.stderr.readline()
    assert "watching" in armed, armed + proc.stderr.read()
    return proc


@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
def test_json_lines_with_count(target_factory, mechanism):
    t = target_factory(2, 0, 5, 2000)
    cli = _start("--pid", t.pid, "--symbol", "watched_value", "--count", 6, "--json", "--mechanism", mechanism)
    t.go()
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert len(lines) == 6
    t.wait_done()
    for rec in lines:
        assert {"tid", "ip", "symbol", "time", "old", "new"} <= rec.keys()
        assert rec["tid"] in t.wrote and rec["pid"] == t.pid
        assert rec["symbol"].startswith("store_value") and rec["line"] == _marker_line("store")
        assert rec["address"] == hex(t.addr["value"])
        assert rec["callchain"][0]["symbol"].startswith("writer_main")
        assert int(rec["regs"]["rip"], 16) == int(rec["ip"], 16)
    if mechanism == "ptrace":
        assert all(r["exact"] and r["new"] is not None for r in lines)
    t.close()
    assert t.proc.returncode == 0


def test_text_lines_for_an_execute_watch_by_symbol(target_factory):
    t = target_factory(0, 0, 0, 0, 20)
    cli = _start("--pid", t.pid, "--symbol", "counted_call", "--access", "x", "--count", 20)
    t.go()
    out, err = cli.communicate(timeout=60)
    assert cli.returncode == 0, err
    lines = out.splitlines()
    assert len(lines) == 20
    assert all(f"tid {t.pid}  ip {t.addr['counted']:#x}  counted_call (watch_threads.c:" in line
               for line in lines)
    # counted_call(i) for i = 0..19: the first argument, rdi, is the call's number.
    assert [line.split("  args ")[1].split()[0] for line in lines] == [hex(i) for i in range(20)]
    t.wait_done()
    t.close()


@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_ends_the_watch_and_the_target_runs_on(target_factory, mechanism, sig):
    t = target_factory(1, 0, 400, 2000)           # writes for about a second
    cli = _start("--pid", t.pid, "--addr", hex(t.addr["value"]), "--mechanism", mechanism)
    t.go()
    first = cli.stdout.readline()
    assert "store_value" in first
    cli.send_signal(sig)
    try:
        cli.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        cli.send_signal(signal.SIGABRT)  # faulthandler prints where it hung
        raise AssertionError(f"ptdebug watch did not end on {sig!r}:\n{cli.communicate()[1][-3000:]}")
    assert cli.returncode == 0
    with open(f"/proc/{t.pid}/status") as f:
        assert "TracerPid:\t0\n" in f.read()
    t.wait_done()                          # the writer finished all 400 writes
    t.close()
    assert t.proc.returncode == 0 and list(t.wrote.values()) == [400]


def test_the_process_exiting_ends_the_watch(target_factory):
    t = target_factory(1, 0, 3, 1000)
    cli = _start("--pid", t.pid, "--addr", hex(t.addr["value"]))
    t.go()
    t.wait_done()
    t.close()
    out, err = cli.communicate(timeout=30)
    assert cli.returncode == 0 and f"process {t.pid} exited" in err
    assert len(out.splitlines()) == 3


def test_duration_ends_a_quiet_watch(target_factory):
    t = target_factory(1, 0, 1, 0)
    start = time.monotonic()
    cli = _start("--pid", t.pid, "--addr", hex(t.addr["neighbour"]), "--duration", 0.5)
    out, _ = cli.communicate(timeout=30)
    assert cli.returncode == 0 and out == "" and time.monotonic() - start >= 0.5
    assert os.path.exists(f"/proc/{t.pid}")

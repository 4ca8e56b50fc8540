"""Go record windows always end, and honestly; requests never wait behind them (issue 34, items
3 and 4), through `ptdebug dap` in front of real Delve on tests/fixtures/programs/go_window.

- A window on a goroutine that parks (a channel nobody sends on until the test says so, far
  longer than the window's time bound) closes where it parks, within its bound, with the end
  reason "goroutine N parked"; Delve is back at once: a breakpoint hit by another request
  stops, while the recorded goroutine still waits. The capture's bundle exports to pprof after
  the session has ended and Delve's build of the program is deleted.
- A window whose goroutine outlasts the time bound closes at the bound ("time bound of 1 s
  reached"), not at a watchdog's "interrupted by the user" minutes later.
- While Delve is away, `threads` and `cancel` (of the window's progress) are answered within a
  second; the cancelled window keeps what it recorded; a `pause` ends the window and the
  program stops once Delve is back.

Before (main 8bbcfdb): the parked window kept Delve away 131 s, then ended "interrupted by
the user" with no capture; `cancel` waited 30 s behind a `threads` request.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from conftest import INITIALIZE, PROGRAMS, ROOT
from go_support import copy_package, go_marker, require_dlv
from test_go_record import _port

pytestmark = pytest.mark.timeout(240)

GO_WINDOW = PROGRAMS / "go_window"
ANSWER_S = 1.0
"""Issue 34: cancel, pause, threads and disconnect are answered within a second."""


def _get(port: int, path: str, answers: dict, key: str) -> threading.Thread:
    def fetch():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=120) as reply:
                answers[key] = reply.read().decode()
        except OSError as exc:  # the session ended with the request open
            answers.setdefault(key, f"failed: {exc}")
    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    return thread


def _start(start_adapter, tmp_path, breakpoints: list[tuple[str, dict]]):
    """A launched go_window session with progress reporting, the breakpoints set at markers;
    (run, client, source, port)."""
    require_dlv()
    package = copy_package(GO_WINDOW, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    client.call("initialize", dict(INITIALIZE, supportsProgressReporting=True))
    response = client.expect_response(client.send_request("launch", {
        "backend": "go", "program": str(package)}), timeout=180)
    assert response["success"], response
    client.expect_event("initialized")
    body = client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": [
        {"line": go_marker(source, name), **extra} for name, extra in breakpoints]})
    assert all(b["verified"] for b in body["breakpoints"]), body
    client.call("configurationDone", {})
    return run, client, source, _port(client)


def _timed(client, command: str, arguments: dict) -> tuple[dict, float]:
    began = time.monotonic()
    response = client.expect_response(client.send_request(command, arguments), timeout=60)
    return response, time.monotonic() - began


def _recording(client) -> dict:
    return client.expect_event("progressStart", timeout=90, pred=lambda e: e["body"][
        "title"].startswith("ptdebug: recording thread "))


def test_a_window_on_a_goroutine_that_parks_ends_there_and_delve_comes_back(
        start_adapter, tmp_path, monkeypatch):
    monkeypatch.setenv("PTDEBUG_PROGRESS_DELAY", "0")
    run, client, source, port = _start(start_adapter, tmp_path, [
        ("park_here", {"mode": "record", "recordWindow": {"instructions": 300_000,
                                                         "timeBound": 20}}),
        ("probe_here", {})])
    answers: dict = {}
    parked = _get(port, "/park?id=p1", answers, "p1")
    capture = client.expect_event("ptdebug/capture", timeout=120)["body"]
    assert capture["endReason"].startswith("goroutine ") and capture["endReason"].endswith(
        " parked"), capture
    assert capture["instructions"] > 0 and capture["status"] == "complete", capture
    assert capture["durationNs"] < 20e9, capture  # it ended at the park, not at the bound
    # Delve is back: a breakpoint stops another request while p1 still waits on its channel
    probe = _get(port, "/probe?id=x", answers, "x")
    stopped = client.expect_stopped("breakpoint", timeout=60)
    frames = client.call("stackTrace", {"threadId": stopped["threadId"], "levels": 1})
    assert frames["stackFrames"][0]["line"] == go_marker(source, "probe_here"), frames
    assert "p1" not in answers
    client.call("continue", {"threadId": stopped["threadId"]})
    probe.join(60)
    assert answers["x"] == "x probed\n", answers
    _get(port, "/release", answers, "release").join(60)
    parked.join(60)
    assert answers["p1"].startswith("p1 "), answers
    client.call("disconnect", {"terminateDebuggee": True}, timeout=30)
    assert run.wait_exit() == 0
    _exports(capture["bundle"], tmp_path)


def _exports(bundle: str, tmp_path: pathlib.Path) -> None:
    """The capture's bundle exports after the session (Delve's build of the program is gone)."""
    out = tmp_path / "capture.pb.gz"
    done = subprocess.run([sys.executable, "-m", "adapter.cli", "export", "pprof", bundle,
                           "-o", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0


def test_a_window_that_outlasts_its_time_bound_ends_at_the_bound(start_adapter, tmp_path,
                                                                 monkeypatch):
    monkeypatch.setenv("PTDEBUG_PROGRESS_DELAY", "0")
    run, client, _source, port = _start(start_adapter, tmp_path, [
        ("spin_here", {"mode": "record", "recordWindow": {"instructions": 50_000_000,
                                                         "timeBound": 1}})])
    answers: dict = {}
    spun = _get(port, "/spin?id=s1&s=3", answers, "s1")
    _recording(client)
    threads, took = _timed(client, "threads", {})
    assert threads["success"] and threads["body"]["threads"], threads
    assert took < ANSWER_S, f"threads answered in {took:.2f} s while Delve was away"
    capture = client.expect_event("ptdebug/capture", timeout=120)["body"]
    assert capture["endReason"] == "time bound of 1 s reached", capture
    assert capture["instructions"] > 0, capture
    spun.join(60)
    assert answers["s1"].startswith("s1 "), answers
    client.call("disconnect", {"terminateDebuggee": True}, timeout=30)
    assert run.wait_exit() == 0
    _exports(capture["bundle"], tmp_path)


def test_cancel_and_pause_are_answered_at_once_while_delve_is_away(start_adapter, tmp_path,
                                                                   monkeypatch):
    monkeypatch.setenv("PTDEBUG_PROGRESS_DELAY", "0")
    run, client, _source, port = _start(start_adapter, tmp_path, [
        ("spin_here", {"mode": "record", "recordWindow": {"instructions": 50_000_000,
                                                         "timeBound": 60}})])
    answers: dict = {}
    _get(port, "/spin?id=c1&s=30", answers, "c1")
    started = _recording(client)
    # a request that waits for Delve first (it goes to the Delve that comes back), then the
    # cancel behind it: answered at once all the same
    waiting = client.send_request("stackTrace", {"threadId": 1, "levels": 1})
    time.sleep(0.3)  # the window records on meanwhile
    cancel, took = _timed(client, "cancel", {"progressId": started["body"]["progressId"]})
    assert cancel["success"], cancel
    assert took < ANSWER_S, f"cancel answered in {took:.2f} s while Delve was away"
    capture = client.expect_event("ptdebug/capture", timeout=60)["body"]
    assert capture["endReason"] == "the user cancelled the recording", capture
    assert capture["instructions"] > 0, capture
    assert client.expect_response(waiting, timeout=60)["command"] == "stackTrace"
    # a second window, ended by a pause: answered at once, the program stops once Delve is back
    _get(port, "/spin?id=c2&s=30", answers, "c2")
    _recording(client)
    pause, took = _timed(client, "pause", {"threadId": 1})
    assert pause["success"], pause
    assert took < ANSWER_S, f"pause answered in {took:.2f} s while Delve was away"
    capture = client.expect_event("ptdebug/capture", timeout=60)["body"]
    assert capture["endReason"] == "the user paused the program", capture
    client.expect_stopped("pause", timeout=60)
    client.call("disconnect", {"terminateDebuggee": True}, timeout=30)
    assert run.wait_exit() == 0

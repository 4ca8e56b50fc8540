"""The end of a session, however it comes: the debuggee crashing, being killed, or debugpy
dying. Each time the client gets `terminated`, `ptdebug dap` exits with status 0, and no
process it started is left (checked by scanning /proc for the pids seen during the session)."""
from __future__ import annotations

import os
import re
import signal
import time

import pytest
from conftest import evaluate, launch, top_frame
from dapclient import cmdline, descendants

pytestmark = pytest.mark.timeout(60)


def _end(run):
    run.client.call("disconnect", {}, timeout=10)
    assert run.wait_exit() == 0
    run.assert_nothing_left()


def _debuggee_pid(run) -> int:
    return run.client.events("process")[0]["body"]["systemProcessId"]


def test_debuggee_crash_in_native_code(start_adapter):
    run = start_adapter()
    launch(run.client, args=["crash"], breakpoints=["after_compute"])
    stopped = run.client.expect_stopped("breakpoint")
    run.track()
    assert _debuggee_pid(run) in run.seen
    run.client.call("continue", {"threadId": stopped["threadId"]})
    exited = run.client.expect_event("exited")
    assert exited["body"]["exitCode"] != 0  # SIGSEGV
    run.client.expect_event("terminated")
    _end(run)


def test_debuggee_killed(start_adapter):
    run = start_adapter()
    launch(run.client, args=["wait"], breakpoints=["wait"])
    run.client.expect_stopped("breakpoint")
    run.track()
    assert _debuggee_pid(run) in run.seen
    os.kill(_debuggee_pid(run), signal.SIGKILL)
    run.client.expect_event("terminated")
    _end(run)


def test_debugpy_dies(start_adapter):
    run = start_adapter()
    launch(run.client, args=["wait"], breakpoints=["wait"])
    stopped = run.client.expect_stopped("breakpoint")
    frame = top_frame(run.client, stopped["threadId"])["id"]
    assert evaluate(run.client, frame, "mode") == "'wait'"
    run.track()
    assert _debuggee_pid(run) in run.seen
    # started as `python -I .../debugpy/adapter` (adapter/spawn.py), or `-m debugpy.adapter`
    adapters = [pid for pid in descendants(run.proc.pid)
                if any(re.fullmatch(r".*debugpy/adapter/?|debugpy\.adapter", arg)
                       for arg in cmdline(pid))]
    assert len(adapters) == 1, [" ".join(cmdline(p)) for p in adapters]
    os.kill(adapters[0], signal.SIGKILL)
    run.client.expect_event("terminated")
    important = [e["body"]["output"] for e in run.client.events("output")
                 if e["body"].get("category") == "important"]
    assert any("debugpy" in text for text in important), important
    # Requests after the backend died get an error at once, never a stall.
    response = run.client.request("threads", {}, timeout=5)
    assert response["success"] is False and response["body"]["error"]["id"] == 1401
    _end(run)  # the debuggee, orphaned by debugpy's death, is ended by ptdebug


def test_client_closes_the_stream_without_disconnect(start_adapter):
    run = start_adapter()
    launch(run.client, args=["wait"], breakpoints=["wait"])
    run.client.expect_stopped("breakpoint")
    run.track()
    assert _debuggee_pid(run) in run.seen
    run.client.wfile.close()
    started = time.monotonic()
    assert run.wait_exit() == 0
    assert time.monotonic() - started < 10
    run.assert_nothing_left()


def test_debugpy_and_its_launcher_die_together(start_adapter):
    """Nothing of debugpy is left to end the debuggee: ptdebug, its subreaper, does it."""
    run = start_adapter()
    launch(run.client, args=["wait"], breakpoints=["wait"])
    run.client.expect_stopped("breakpoint")
    run.track()
    debuggee = _debuggee_pid(run)
    assert debuggee in run.seen
    debugpy = [pid for pid in descendants(run.proc.pid)
               if pid != debuggee and "debugpy" in " ".join(cmdline(pid))]
    assert len(debugpy) == 2, [cmdline(p) for p in debugpy]  # the adapter and the launcher
    for pid in debugpy:
        os.kill(pid, signal.SIGKILL)
    run.client.expect_event("terminated")
    _end(run)


def test_adapter_terminated_by_signal_ends_its_processes(start_adapter):
    """VS Code kills a misbehaving adapter with SIGTERM: debugpy and the debuggee go too."""
    run = start_adapter()
    launch(run.client, args=["wait"], breakpoints=["wait"])
    run.client.expect_stopped("breakpoint")
    run.track()
    assert _debuggee_pid(run) in run.seen
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait_exit() == 128 + signal.SIGTERM
    run.assert_nothing_left()

"""Fixtures of the end-to-end tests: the real `ptdebug dap` process (stdio or --port), a DAP
client validating every message against the DAP schema, and process-tree bookkeeping.

Every wait has a timeout, so a stalled adapter fails a test instead of hanging CI.
"""
from __future__ import annotations

import os
import pathlib
import re
import shlex
import subprocess
import sys
import time

import pytest
from dap_schema import dap_schema_path
from dapclient import DapClient, DapSchema, cmdline, descendants, marker_line, still_alive

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "fixtures" / "programs"
BASIC = PROGRAMS / "dap_basic.py"

INITIALIZE = {"clientID": "ptdebug-tests", "adapterID": "ptdebug", "linesStartAt1": True,
              "columnsStartAt1": True, "pathFormat": "path", "supportsVariableType": True,
              "supportsMemoryReferences": True, "supportsMemoryEvent": True}


@pytest.fixture(scope="session")
def dap_schema() -> DapSchema:
    return DapSchema(dap_schema_path())


class AdapterRun:
    """One `ptdebug dap` process and the client connected to it."""

    def __init__(self, client: DapClient, proc: subprocess.Popen, log_path: pathlib.Path):
        self.client = client
        self.proc = proc
        self.log_path = log_path
        self.seen: dict[int, int] = {}
        """Every descendant of the adapter seen so far ({pid: start time})."""

    def track(self) -> dict[int, int]:
        """Remember the adapter's current descendants (debugpy, launcher, debuggee)."""
        found = descendants(self.proc.pid)
        self.seen.update(found)
        return found

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_exit(self, timeout: float = 15.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"ptdebug dap did not exit within {timeout} s; "
                                 f"log:\n{self.log()}") from None

    def assert_nothing_left(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while still_alive(self.seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        left = still_alive(self.seen)
        assert left == [], "processes left behind: " + "; ".join(
            f"{pid} {' '.join(cmdline(pid) or [])}" for pid in left)


ADAPTER = (shlex.split(os.environ["PTDEBUG_TEST_ADAPTER"])
           if os.environ.get("PTDEBUG_TEST_ADAPTER") else [sys.executable, "-m", "adapter.cli"])
"""The adapter the e2e tests talk to: the checkout's, or PTDEBUG_TEST_ADAPTER (for example
`/tmp/venv/bin/ptdebug`, a wheel installed elsewhere: the same tests then try what users
install)."""


@pytest.fixture
def start_adapter(dap_schema, tmp_path):
    """start_adapter(port=False, command=None, cwd=ROOT) -> AdapterRun; everything is cleaned
    up after the test. `command` replaces `python -m adapter.cli` (the `dap` arguments follow),
    `cwd` is the adapter's current directory (a user's workspace)."""
    runs: list[AdapterRun] = []

    def start(port: bool = False, command: list[str] | None = None, cwd=ROOT) -> AdapterRun:
        log_path = tmp_path / f"adapter{len(runs)}.log"
        with open(log_path, "wb") as log:  # the adapter keeps its own copy of the fd
            return _start(log, log_path, port, command, cwd)

    def _start(log, log_path, port: bool, command, cwd) -> AdapterRun:
        argv = [*(command or ADAPTER), "dap", "--log-level", "DEBUG"]
        if not port:
            client = DapClient.stdio(argv, dap_schema, stderr=log, cwd=cwd)
            run = AdapterRun(client, client.proc, log_path)
        else:
            proc = subprocess.Popen(argv + ["--port", "0"], stdin=subprocess.DEVNULL,
                                    stdout=subprocess.DEVNULL, stderr=log, cwd=cwd)
            deadline = time.monotonic() + 15
            match = None
            while match is None and time.monotonic() < deadline and proc.poll() is None:
                match = re.search(r"listening on 127\.0\.0\.1:(\d+)", log_path.read_text())
                time.sleep(0.02)
            assert match, f"no 'listening on' line; log:\n{log_path.read_text()}"
            client = DapClient.tcp(int(match.group(1)), dap_schema, proc=proc)
            run = AdapterRun(client, proc, log_path)
        runs.append(run)
        return run

    yield start
    for run in runs:
        if run.proc.poll() is None:
            run.track()
        try:
            run.client.close()
        except AssertionError:
            pass
        if run.proc.poll() is None:
            run.proc.kill()
            run.proc.wait(10)
        for pid in still_alive(run.seen):
            subprocess.run(["kill", "-9", str(pid)], check=False)


def launch(client: DapClient, program=BASIC, *, breakpoints=(), record=(), args=(),
           **config) -> int:
    """initialize, launch, set breakpoints at markers of `program` (`record`: in mode
    record), configurationDone.

    Returns the seq of the launch request, whose response debugpy sends after
    configurationDone."""
    client.call("initialize", INITIALIZE)
    launch_seq = client.send_request("launch", {"program": str(program), "args": list(args),
                                                "console": "internalConsole", **config})
    client.expect_event("initialized")
    if breakpoints or record:
        lines = [{"line": marker_line(program, name)} for name in breakpoints] + [
            {"line": marker_line(program, name), "mode": "record"} for name in record]
        body = client.call("setBreakpoints", {"source": {"path": str(program)},
                                              "breakpoints": lines})
        assert [b["verified"] for b in body["breakpoints"]] == [True] * len(lines), body
    client.call("configurationDone", {})
    response = client.expect_response(launch_seq)
    assert response["success"], response
    return launch_seq


def top_frame(client: DapClient, thread_id: int) -> dict:
    return client.call("stackTrace", {"threadId": thread_id, "levels": 20})["stackFrames"][0]


def evaluate(client: DapClient, frame_id: int, expression: str) -> str:
    return client.call("evaluate", {"expression": expression, "frameId": frame_id,
                                    "context": "repl"})["result"]


def python_frame(client: DapClient, thread_id: int) -> dict:
    """The innermost Python frame (debugpy's) of a thread: after a data-breakpoint stop the
    stack starts with native frames of the write, which carry an instructionPointerReference."""
    frames = client.call("stackTrace", {"threadId": thread_id, "levels": 40})["stackFrames"]
    return next(f for f in frames if "instructionPointerReference" not in f)


def finish_kv_session(run, thread_id: int, frame_id: int) -> None:
    """End a session on a dap_kv_* fixture cleanly: clear the data breakpoints, let the
    fixture's loop stop (`stop=True`), and check that the program and the adapter exit 0."""
    client = run.client
    client.call("setDataBreakpoints", {"breakpoints": []})
    client.call("evaluate", {"expression": "globals().update(stop=True)", "frameId": frame_id,
                             "context": "repl"})
    client.call("continue", {"threadId": thread_id})
    assert client.expect_event("exited", timeout=30)["body"]["exitCode"] == 0
    client.call("disconnect", {})
    assert run.wait_exit() == 0

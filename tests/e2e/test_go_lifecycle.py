"""How a Go session ends, and the other ways to start one: the program panicking, Delve
dying, the build failing (each: a clear message, `terminated`, nothing left running, checked by
scanning /proc for every process seen); mode exec, attach to a pid, connect to a running
headless Delve."""
from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import pytest
from dapclient import cmdline, descendants
from go_support import (
    GO_SESSION,
    build,
    copy_package,
    go_marker,
    output_text,
    require_dlv,
    start_go,
)

pytestmark = pytest.mark.timeout(240)


def _end(run):
    run.client.call("disconnect", {}, timeout=15)
    assert run.wait_exit() == 0
    run.assert_nothing_left()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rfind(b")") + 2:].split()[1])


def _important(client) -> str:
    return "".join(e["body"]["output"] for e in client.events("output")
                   if e["body"].get("category") == "important")


def test_program_panics(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package), "args": ["panic"]})
    stopped = client.expect_stopped("exception", timeout=60)
    run.track()
    info = client.call("exceptionInfo", {"threadId": stopped["threadId"]})
    assert "assignment to entry in nil map" in info["description"], info
    frames = client.call("stackTrace", {"threadId": stopped["threadId"], "levels": 30})
    names = [f["name"] for f in frames["stackFrames"]]
    assert "main.explode" in names, names
    client.call("continue", {"threadId": stopped["threadId"]})
    exited = client.expect_event("exited", timeout=30)
    assert exited["body"]["exitCode"] == 2  # Go's exit status for an unrecovered panic
    client.expect_event("terminated")
    assert "panic: assignment to entry in nil map" in output_text(client)
    _end(run)


def test_delve_dies(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package), "args": ["wait"]}, source=source,
             breakpoints={"wait": {}})
    client.expect_stopped("breakpoint", timeout=60)
    run.track()
    debuggee = client.expect_event("process")["body"]["systemProcessId"]
    assert debuggee in run.seen
    dlv = [pid for pid in descendants(run.proc.pid) if os.path.basename(
        (cmdline(pid) or [""])[0]) == "dlv" and _parent(pid) == run.proc.pid]
    assert len(dlv) == 1, [(pid, cmdline(pid)) for pid in descendants(run.proc.pid)]
    os.kill(dlv[0], signal.SIGKILL)
    client.expect_event("terminated", timeout=15)
    assert "Delve" in _important(client)
    response = client.request("threads", {}, timeout=5)
    assert response["success"] is False and response["body"]["error"]["id"] == 1401
    _end(run)  # the debuggee, let go by the dead Delve, is ended by ptdebug


def test_build_fails(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    main = package / "main.go"
    main.write_text(main.read_text().replace("total += int64(r)", "total += undefinedThing"))
    run = start_adapter()
    client = run.client
    response = start_go(client, "launch", {"program": str(package)})
    assert response["success"] is False
    assert response["body"]["error"]["id"] == 1400
    assert "build failed" in response["message"]
    assert "undefined: undefinedThing" in response["message"]
    client.expect_event("terminated")
    stderr = [e for e in client.events("output") if e["body"].get("category") == "stderr"]
    assert any("undefined: undefinedThing" in e["body"]["output"] for e in stderr)
    run.track()
    _end(run)


def test_exec_mode_and_args(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    binary = build(package, tmp_path / "session_bin")
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(binary), "args": ["panic"],
                                "cwd": str(tmp_path)})
    client.expect_stopped("exception", timeout=60)
    run.track()
    _end(run)


def test_attach_to_pid_leaves_it_running(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    source = package / "main.go"
    binary = build(package, tmp_path / "session_bin")
    target = subprocess.Popen([str(binary), "spin"], stdout=subprocess.PIPE, text=True)
    try:
        assert target.stdout.readline().startswith("total 280")
        run = start_adapter()
        client = run.client
        start_go(client, "attach", {"pid": target.pid}, source=source,
                 breakpoints={"spin": {}})
        stopped = client.expect_stopped("breakpoint", timeout=60)
        frame = client.call("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"][0]
        assert (frame["name"], frame["line"]) == ("main.bump", go_marker(source, "spin"))
        assert client.expect_event("process")["body"]["systemProcessId"] == target.pid
        run.client.call("disconnect", {}, timeout=15)
        assert run.wait_exit() == 0
        time.sleep(0.3)
        assert target.poll() is None, "the attached program must keep running"
        with open(f"/proc/{target.pid}/status") as f:
            status = f.read()
        assert re.search(r"TracerPid:\s+0\b", status), status
    finally:
        target.kill()
        target.wait()


def test_connect_to_a_running_headless_delve(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    source = package / "main.go"
    binary = build(package, tmp_path / "session_bin")
    dlv = subprocess.Popen([require_dlv(), "exec", str(binary), "--headless",
                            "--accept-multiclient", "--api-version=2",
                            "--listen=127.0.0.1:0", "--", "wait"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    debuggee = None
    try:
        line = dlv.stdout.readline().decode()
        port = int(re.search(r"127\.0\.0\.1:(\d+)", line).group(1))
        run = start_adapter()
        client = run.client
        start_go(client, "attach", {"connect": {"host": "127.0.0.1", "port": port}},
                 source=source, breakpoints={"wait": {}})
        stopped = client.expect_stopped("breakpoint", timeout=60)
        debuggee = client.expect_event("process")["body"]["systemProcessId"]
        assert client.call("stackTrace", {"threadId": stopped["threadId"]})[
            "stackFrames"][0]["name"] == "main.main"
        run.client.call("disconnect", {}, timeout=15)
        assert run.wait_exit() == 0
        assert dlv.poll() is None, "the user's Delve is the user's: it keeps running"
    finally:
        dlv.kill()
        dlv.wait()
        if debuggee is not None:
            try:
                os.kill(debuggee, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_adapter_killed_leaves_nothing(start_adapter, tmp_path):
    """ptdebug dap killed with SIGKILL runs no clean-up of its own: Delve, told by the kernel
    (PR_SET_PDEATHSIG), ends the program it launched and exits."""
    package = copy_package(GO_SESSION, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package), "args": ["wait"]}, source=source,
             breakpoints={"after_total": {}})
    client.expect_stopped("breakpoint", timeout=60)
    run.track()
    debuggee = client.expect_event("process")["body"]["systemProcessId"]
    assert debuggee in run.seen and len(run.seen) >= 2
    run.proc.kill()
    run.proc.wait(10)
    run.assert_nothing_left(timeout=15)

"""Attaching through `ptdebug dap`: to a debugpy server (`connect`) and to a plain Python
process by `pid` (ptdebug runs debugpy's attach script in it with its own ptrace call:
adapter/python/inject.py). The debuggee is the test's, so it keeps running after the session
ends; readMemory works on it as on a launched one."""
from __future__ import annotations

import base64
import subprocess
import sys
import time

import pytest
from conftest import BASIC, INITIALIZE, evaluate, top_frame
from dapclient import free_port, listening, marker_line

pytestmark = pytest.mark.timeout(90)


def _tracer_of(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("TracerPid:")).split()[1])


@pytest.fixture
def debuggee():
    procs = []

    def start(argv):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)


def _attach(run, arguments, breakpoint):
    client = run.client
    client.call("initialize", INITIALIZE)
    attach = client.send_request("attach", arguments)
    client.expect_event("initialized", timeout=30)
    line = marker_line(BASIC, breakpoint)
    client.call("setBreakpoints", {"source": {"path": str(BASIC)}, "breakpoints": [{"line": line}]})
    client.call("configurationDone", {})
    assert client.expect_response(attach, timeout=30)["success"]
    stopped = client.expect_stopped("breakpoint", timeout=30)
    frame = top_frame(client, stopped["threadId"])
    assert frame["line"] == line
    return stopped["threadId"], frame["id"]


def _detach_leaves_it_running(run, proc):
    run.client.call("disconnect", {"terminateDebuggee": False})
    assert run.wait_exit() == 0
    time.sleep(0.2)
    assert proc.poll() is None


def test_attach_to_a_debugpy_server_with_connect(start_adapter, debuggee):
    port = free_port()
    proc = debuggee([sys.executable, "-m", "debugpy", "--listen", f"127.0.0.1:{port}",
                     "--wait-for-client", str(BASIC), "spin"])
    # Wait for the listening socket without connecting: debugpy's server takes one client.
    deadline = time.monotonic() + 15
    while not listening(port) and time.monotonic() < deadline:
        time.sleep(0.05)
    run = start_adapter()
    thread, frame = _attach(run, {"connect": {"host": "127.0.0.1", "port": port}}, "spin")
    assert int(evaluate(run.client, frame, "__import__('os').getpid()")) == proc.pid
    address = int(evaluate(run.client, frame, "__import__('ctypes').addressof((__import__("
                                               "'ctypes').c_char * 14).from_buffer(buf))"))
    data = run.client.call("readMemory", {"memoryReference": hex(address), "count": 14})["data"]
    assert base64.b64decode(data) == b"ptdebug-buffer"
    run.client.call("setBreakpoints", {"source": {"path": str(BASIC)}, "breakpoints": []})
    run.client.call("continue", {"threadId": thread})
    _detach_leaves_it_running(run, proc)


def test_attach_to_a_plain_process_by_pid(start_adapter, debuggee):
    proc = debuggee([sys.executable, str(BASIC), "spin"])
    assert proc.stdout.readline().startswith(b"result=6")  # it is past the breakpoint-free part
    run = start_adapter()
    thread, frame = _attach(run, {"pid": proc.pid, "justMyCode": True}, "spin")
    assert int(evaluate(run.client, frame, "__import__('os').getpid()")) == proc.pid
    run.client.call("setBreakpoints", {"source": {"path": str(BASIC)}, "breakpoints": []})
    run.client.call("continue", {"threadId": thread})
    _detach_leaves_it_running(run, proc)

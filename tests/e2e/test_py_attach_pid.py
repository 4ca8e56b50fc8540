"""Python attach by pid (issue 34, Build 2): ptdebug runs debugpy's attach script in a running
service with its own ptrace call (adapter/python/inject.py), not gdb. On a threaded numpy service
whose writers hold a model lock (tests/fixtures/programs/py_detach_service.py): a data
breakpoint stops the writing thread on its line, with its Python name; the service serves on
after continue and after disconnect, untraced, with SIGTRAP as it was and no thread of ptdebug's
left in it. A process ptdebug cannot run code in is refused with the reason, untouched.

Real debugpy, real processes, real ptrace; nothing is launched under debugpy beforehand."""
from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest
from conftest import INITIALIZE
from dapclient import marker_line
from test_py_detach import SERVICE, _watch, ask, keeps_serving, service, sigtrap_state  # noqa: F401
from unharmed import assert_unharmed, thread_states

pytestmark = pytest.mark.timeout(120)


def attach_by_pid(client, pid: int) -> float:
    """initialize + attach {pid} + configurationDone; returns the seconds to the attach's
    answer."""
    client.call("initialize", INITIALIZE)
    started = time.monotonic()
    attach = client.send_request("attach", {"pid": pid})
    client.expect_event("initialized", timeout=30)
    client.call("configurationDone", {})
    response = client.expect_response(attach, timeout=30)
    assert response["success"], response
    return time.monotonic() - started


def python_threads(port: int) -> list[str]:
    answer = ask(port, "threads")
    assert answer.startswith("ok "), answer
    return answer[3:].split(",")


def test_a_data_breakpoint_after_attach_by_pid_stops_the_writer_under_its_lock(
        start_adapter, service):
    proc, port, address = service()
    before = sigtrap_state(proc.pid)
    threads_before = python_threads(port)
    run = start_adapter()
    client = run.client
    took = attach_by_pid(client, proc.pid)
    print(f"attach by pid answered in {took:.3f} s")
    armed = _watch(client, address + 8 * 2)  # slot 2: written by requests, under model_lock
    pending = socket.create_connection(("127.0.0.1", port), timeout=30)
    pending.sendall(b"write 2 42\n")
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert stopped["hitBreakpointIds"] == [armed["id"]], stopped
    assert "by thread 'request-" in stopped["description"], stopped
    frames = client.call("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"]
    python = [f for f in frames if f.get("source", {}).get("path") == str(SERVICE)]
    assert python[0]["line"] == marker_line(SERVICE, "request_write"), frames
    named = {t["id"]: t["name"] for t in client.call("threads", {})["threads"]}
    assert named[stopped["threadId"]].startswith("request-"), named
    client.call("continue", {"threadId": stopped["threadId"]})
    assert pending.makefile("rb").readline().strip() == b"ok 42"
    pending.close()
    client.call("setDataBreakpoints", {"breakpoints": []})
    assert keeps_serving(port, 0.5) > 0  # while attached, the lock is free again
    client.call("disconnect", {"terminateDebuggee": False})
    assert run.wait_exit() == 0
    assert proc.poll() is None, "the service died"
    assert keeps_serving(port) > 0
    assert sigtrap_state(proc.pid) == before
    assert_unharmed(proc.pid)
    assert "ptdebug-attach" not in python_threads(port)
    assert len(python_threads(port)) >= len(threads_before)


def test_attach_by_pid_then_disconnect_at_once_leaves_it_serving(start_adapter, service):
    proc, port, _address = service()
    run = start_adapter()
    attach_by_pid(run.client, proc.pid)
    started = time.monotonic()
    run.client.call("disconnect", {"terminateDebuggee": False})
    assert run.wait_exit() == 0
    assert ask(port, "write 3 5") == "ok 5"
    print(f"disconnect -> serving again: {time.monotonic() - started:.3f} s")
    assert all(tracer == 0 for tracer, _state in thread_states(proc.pid).values())
    assert_unharmed(proc.pid)


@pytest.mark.parametrize("program,error_id,said", [
    (["-c", "while True: pass"], 1400, "no thread of process"),
    (None, 1201, "is neither a Python nor a Go program"),
])
def test_a_process_ptdebug_cannot_run_code_in_is_refused_untouched(start_adapter, program,
                                                                    error_id, said):
    """A Python program that never waits (one thread computing: 1400, the backend's refusal)
    and a program that is neither Python nor Go (1201, a configuration that names no target
    ptdebug debugs): the attach fails saying why, and the process runs on unchanged."""
    argv = [sys.executable, *program] if program else ["sleep", "60"]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        run = start_adapter()
        run.client.call("initialize", INITIALIZE)
        response = run.client.request("attach", {"pid": proc.pid}, timeout=60)
        assert response["success"] is False, response
        assert response["body"]["error"]["id"] == error_id, response
        assert said in response["body"]["error"]["format"], response
        assert f"process {proc.pid}" in response["body"]["error"]["format"], response
        run.client.call("disconnect", {})
        assert run.wait_exit(30) == 0
        time.sleep(0.2)
        assert proc.poll() is None, "the process died although ptdebug refused to attach"
        assert_unharmed(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)


def test_attach_by_pid_to_a_program_that_never_imported_threading(start_adapter, tmp_path):
    """A single-threaded script that imported nothing: the attach thread is the program's
    second thread, and a line breakpoint in its loop stops it."""
    script = tmp_path / "plain.py"
    script.write_text("import time\n"
                      "count = 0\n"
                      "while True:\n"
                      "    count += 1  # @tick\n"
                      "    time.sleep(0.01)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        run = start_adapter()
        client = run.client
        client.call("initialize", INITIALIZE)
        attach = client.send_request("attach", {"pid": proc.pid})
        client.expect_event("initialized", timeout=30)
        client.call("setBreakpoints", {"source": {"path": str(script)},
                                       "breakpoints": [{"line": marker_line(script, "tick")}]})
        client.call("configurationDone", {})
        assert client.expect_response(attach, timeout=30)["success"]
        stopped = client.expect_stopped("breakpoint", timeout=30)
        named = {t["id"]: t["name"] for t in client.call("threads", {})["threads"]}
        assert named[stopped["threadId"]] == "MainThread", named
        client.call("setBreakpoints", {"source": {"path": str(script)}, "breakpoints": []})
        client.call("continue", {"threadId": stopped["threadId"]})
        client.call("disconnect", {"terminateDebuggee": False})
        assert run.wait_exit() == 0
        time.sleep(0.2)
        assert proc.poll() is None
        assert_unharmed(proc.pid)
    finally:
        proc.kill()
        proc.wait(10)

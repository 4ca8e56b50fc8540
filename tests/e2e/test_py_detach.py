"""What a Python session leaves behind when it ends (issue 34; docs/protocol.md, "Attach and
detach (Python)"): a threaded service (tests/fixtures/programs/py_detach_service.py) keeps
serving, with no trace of ptdebug left in it: SIGTRAP's action and mask as they were before the
session (ptdebug installs a SIGTRAP handler for data breakpoints, features/writer_trap.py), no
thread traced or stopped, no debug register armed.

Real debugpy, real processes: the service runs under `python -m debugpy --listen` (attach with
`connect`) or is launched by ptdebug."""
from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time

import pytest
from conftest import INITIALIZE, PROGRAMS
from dapclient import free_port, listening, still_alive
from unharmed import assert_unharmed

pytestmark = pytest.mark.timeout(120)

SERVICE = PROGRAMS / "py_detach_service.py"
SIGTRAP_BIT = 1 << (5 - 1)
"""SIGTRAP (5) in the signal masks of /proc/PID/status (proc(5): bit N-1 is signal N)."""


def sigtrap_state(pid: int) -> dict:
    """SIGTRAP's disposition in `pid` (caught, ignored: process-wide) and the threads that
    block it (SigBlk is per thread)."""
    def bits(text: str, key: str) -> int:
        return int(re.search(rf"^{key}:\s+([0-9a-f]+)", text, re.M).group(1), 16)

    with open(f"/proc/{pid}/status") as f:
        status = f.read()
    blocked = []
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                if bits(f.read(), "SigBlk") & SIGTRAP_BIT:
                    blocked.append(tid)
        except OSError:
            continue  # the thread ended meanwhile
    return {"caught": bool(bits(status, "SigCgt") & SIGTRAP_BIT),
            "ignored": bool(bits(status, "SigIgn") & SIGTRAP_BIT), "blocked": blocked}


def ask(port: int, line: str, timeout: float = 5.0) -> str:
    """One request to the service, its answer line."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(line.encode() + b"\n")
        return sock.makefile("rb").readline().decode().strip()


def keeps_serving(port: int, seconds: float = 1.0) -> int:
    """Requests answered for `seconds`, each a write into slot 2 (the one the tests watched:
    a perf breakpoint left armed would now end the program with SIGTRAP); returns how many."""
    answered = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = answered + 100
        assert ask(port, f"write 2 {value}") == f"ok {value}", "the service stopped answering"
        answered += 1
    return answered


def connections(pid: int) -> list[str]:
    """The TCP sockets of `pid` that are not listening, as `state local remote` lines of
    /proc/net/tcp (proc(5); hex addresses): pydevd's to debugpy's adapter among them while
    debugpy holds the program."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in list(f)[1:]:
                fields = line.split()
                if fields[9] in inodes and fields[3] != "0A":
                    found.append(f"{fields[3]} {fields[1]} {fields[2]}")
    return found


def no_connections_left(pid: int, timeout: float = 5.0) -> list[str]:
    """connections(pid) once none is left, or after `timeout` what is left (a served client's
    socket closes a moment after its answer)."""
    deadline = time.monotonic() + timeout
    while connections(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return connections(pid)


@pytest.fixture
def service():
    """start(debugpy_port=None) -> (process, service port, cache address); killed after."""
    procs = []

    def start(debugpy_port: int | None = None):
        prefix = ([sys.executable, "-m", "debugpy", "--listen", f"127.0.0.1:{debugpy_port}"]
                  if debugpy_port else [sys.executable])
        proc = subprocess.Popen([*prefix, str(SERVICE), "0"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        procs.append(proc)
        words = proc.stdout.readline().split()
        assert words[:1] == [b"serving"], words
        if debugpy_port:
            deadline = time.monotonic() + 15
            while not listening(debugpy_port) and time.monotonic() < deadline:
                time.sleep(0.05)
        return proc, int(words[1]), int(words[2], 16)

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(10)


def _connect_attach(client, debugpy_port: int) -> None:
    """initialize, attach `connect` to the debugpy server on `debugpy_port`, configurationDone."""
    client.call("initialize", INITIALIZE)
    attach = client.send_request("attach", {"connect": {"host": "127.0.0.1",
                                                        "port": debugpy_port}})
    client.expect_event("initialized", timeout=30)
    client.call("configurationDone", {})
    assert client.expect_response(attach, timeout=30)["success"]


def _watch(client, address: int) -> dict:
    client.expect_event("capabilities", timeout=30,
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    info = client.call("dataBreakpointInfo", {"name": hex(address), "asAddress": True,
                                              "bytes": 8})
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    return body["breakpoints"][0]


@pytest.mark.parametrize("end", ["disconnect", "hang_up"])
@pytest.mark.parametrize("hit", [True, False], ids=["stopped_at_a_hit", "running"])
def test_connect_attach_with_a_data_breakpoint_leaves_sigtrap_as_it_was(start_adapter, service,
                                                                          hit, end):
    """Seen before: after the session the service still had ptdebug's SIGTRAP handler
    (SigCgt), the log saying "SIGTRAP action not restored: debugpy went away before
    answering 'evaluate'": the handler was to be removed after debugpy was let go. The same
    when the client hangs up without a `disconnect`."""
    debugpy_port = free_port()
    proc, port, address = service(debugpy_port)
    assert ask(port, "sum") == "ok 0"
    before = sigtrap_state(proc.pid)
    assert not before["caught"], before
    run = start_adapter()
    client = run.client
    _connect_attach(client, debugpy_port)
    armed = _watch(client, address + 8 * 2)  # slot 2
    assert sigtrap_state(proc.pid)["caught"], "the handler was not installed"
    pending = None
    if hit:
        pending = socket.create_connection(("127.0.0.1", port), timeout=30)
        pending.sendall(b"write 2 42\n")
        stopped = client.expect_stopped("data breakpoint", timeout=30)
        assert stopped["hitBreakpointIds"] == [armed["id"]], stopped
    if end == "disconnect":
        started = time.monotonic()
        client.call("disconnect", {"terminateDebuggee": False})
        print(f"connect-attach ({'stopped' if hit else 'running'}): disconnect answered in "
              f"{time.monotonic() - started:.3f} s")
    else:
        client.wfile.close()
    assert run.wait_exit() == 0
    assert not [e for e in client.events("output") if "SIGTRAP" in e["body"]["output"]]
    if pending is not None:  # the writer held at its write was let go: its request is answered
        assert pending.makefile("rb").readline().strip() == b"ok 42"
        pending.close()
    assert proc.poll() is None, "the service died"
    assert keeps_serving(port) > 0
    assert sigtrap_state(proc.pid) == before
    assert_unharmed(proc.pid)
    assert "SIGTRAP action not restored" not in run.log()


@pytest.mark.parametrize("hit", [True, False], ids=["stopped_at_a_hit", "running"])
def test_a_launched_service_let_go_with_terminate_debuggee_false_runs_on(start_adapter, hit):
    """Seen before: `disconnect {terminateDebuggee: false}` after a launch was answered after
    5 s (ptdebug's limit for debugpy's answer: debugpy's adapter waits up to 30 s for a
    launched program to exit, then kills its process group) and the service was killed."""
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    launch = client.send_request("launch", {"program": str(SERVICE), "args": ["0"],
                                            "console": "internalConsole"})
    client.expect_event("initialized", timeout=30)
    client.call("configurationDone", {})
    assert client.expect_response(launch, timeout=30)["success"]
    serving = client.expect_event("output", timeout=30, pred=lambda e: e["body"][
        "output"].startswith("serving "))["body"]["output"].split()
    port, address = int(serving[1]), int(serving[2], 16)
    pid = client.expect_event("process", timeout=30)["body"]["systemProcessId"]
    _watch(client, address + 8 * 2)
    assert sigtrap_state(pid)["caught"], "the handler was not installed"
    pending = None
    if hit:
        pending = socket.create_connection(("127.0.0.1", port), timeout=30)
        pending.sendall(b"write 2 42\n")
        client.expect_stopped("data breakpoint", timeout=30)
    run.track()
    started = time.monotonic()
    response = client.request("disconnect", {"terminateDebuggee": False}, timeout=15)
    answered_in = time.monotonic() - started
    assert response["success"], response
    assert answered_in < 1.0, f"disconnect answered in {answered_in:.2f} s"
    assert run.wait_exit() == 0
    print(f"launched ({'stopped' if hit else 'running'}): disconnect answered in "
          f"{answered_in:.3f} s")
    if pending is not None:  # the writer held at its write goes on
        assert pending.makefile("rb").readline().strip() == b"ok 42"
        pending.close()
    # of the session's processes (debugpy's adapter, its launcher, the program) only the
    # program is left
    assert still_alive(run.seen) == [pid], (still_alive(run.seen), pid)
    assert keeps_serving(port) > 0
    assert sigtrap_state(pid) == {"caught": False, "ignored": False, "blocked": []}
    assert_unharmed(pid)
    # its output went to debugpy's launcher, which is gone: /dev/null now, not a broken pipe
    assert [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in (1, 2)] == [os.devnull] * 2
    assert not [e for e in client.events("output") if "could not be let go" in
                e["body"]["output"]]
    # pydevd let go of its connection to debugpy's adapter (its threads ended with it)
    assert no_connections_left(pid) == []
    os.kill(pid, 9)


def test_debugpy_brought_in_after_the_threads_names_the_writer_and_leaves_sigtrap(
        start_adapter, service):
    """The state an attach by `pid` leaves a service in (debugpy arrives after its threads
    started), without gdb, which cannot call into a process on every machine: the service
    starts debugpy itself (`debugpy.listen`) on request. The writer's stop names its Python
    thread (`kv-writer`), and the session's end leaves SIGTRAP as it was."""
    proc, port, address = service()
    before = sigtrap_state(proc.pid)
    debugpy_port = free_port()
    assert ask(port, f"debug {debugpy_port}", timeout=30) == "ok listening"
    run = start_adapter()
    client = run.client
    started = time.monotonic()
    _connect_attach(client, debugpy_port)
    print(f"attach answered in {time.monotonic() - started:.3f} s")
    armed = _watch(client, address + 8 * 7)  # slot 7: kv-writer's, every 20 ms
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert stopped["hitBreakpointIds"] == [armed["id"]], stopped
    assert "by thread 'kv-writer'" in stopped["description"], stopped
    assert "held at the write" in stopped["description"], stopped
    client.call("disconnect", {"terminateDebuggee": False})
    assert run.wait_exit() == 0
    assert keeps_serving(port) > 0
    assert sigtrap_state(proc.pid) == before
    assert_unharmed(proc.pid)


def test_a_restore_that_fails_is_told_to_the_user(start_adapter, service):
    """No failure is only a log line: where the program's SIGTRAP action cannot be put back
    (here the handler's uninstall made to raise in the program), the client hears it in an
    `output` event (category important) before its disconnect is answered, and the program
    is still let go."""
    debugpy_port = free_port()
    proc, port, address = service(debugpy_port)
    run = start_adapter()
    client = run.client
    _connect_attach(client, debugpy_port)
    _watch(client, address + 8 * 2)
    client.call("evaluate", {"context": "repl", "expression":
                             "setattr(__import__('sys').modules['_ptdebug_trap'], 'uninstall', "
                             "lambda: 1 / 0)"})
    client.call("disconnect", {"terminateDebuggee": False})
    assert run.wait_exit() == 0
    told = [e["body"] for e in client.events("output") if "SIGTRAP" in e["body"]["output"]]
    assert len(told) == 1, told
    assert told[0]["category"] == "important", told
    assert f"stays installed in process {proc.pid}" in told[0]["output"], told
    assert "ZeroDivisionError" in told[0]["output"], told
    assert keeps_serving(port) > 0  # no watch is left to signal: the handler is never run
    assert sigtrap_state(proc.pid)["caught"]


def test_a_launched_program_without_pydevd_is_said_to_end(start_adapter):
    """Where ptdebug cannot let go of a launched program (`noDebug`: no pydevd in it to ask),
    the disconnect is debugpy's, which ends it, and the client is told so rather than left to
    believe it runs on."""
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    launch = client.send_request("launch", {"program": str(SERVICE), "args": ["0"],
                                            "console": "internalConsole", "noDebug": True})
    assert client.expect_response(launch, timeout=30)["success"]  # no configuration phase
    pid = client.expect_event("process", timeout=30)["body"]["systemProcessId"]
    port = int(client.expect_event("output", timeout=30, pred=lambda e: e["body"][
        "output"].startswith("serving "))["body"]["output"].split()[1])
    assert ask(port, "sum") == "ok 0"
    run.track()
    client.request("disconnect", {"terminateDebuggee": False}, timeout=30)
    assert run.wait_exit(40) == 0
    told = [e["body"] for e in client.events("output")
            if "could not be let go" in e["body"]["output"]]
    assert len(told) == 1 and told[0]["category"] == "important", told
    assert f"process {pid}" in told[0]["output"] and "ends with this session" in told[0][
        "output"], told
    run.assert_nothing_left(timeout=10)

"""Bad DAP input to `ptdebug dap`: broken framing closes the connection with a log line;
anything readable gets an error response (or an `output` event when there is no request to
answer) and the session goes on. Never a hang, never a crash of the debuggee."""
from __future__ import annotations

import time

import pytest
from conftest import BASIC, INITIALIZE, evaluate, launch, top_frame

pytestmark = pytest.mark.timeout(60)


def _frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _closes_with_log_line(run, text: str) -> None:
    run.client.expect_closed(timeout=5)
    assert run.wait_exit(timeout=5) == 0
    assert text in run.log(), run.log()


@pytest.mark.parametrize("header, logged", [
    (b"Content-Lenght: 2\r\n\r\n{}", "MalformedHeader [1101]"),
    (b"Content-Length: twelve\r\n\r\n{}", "MalformedHeader [1101]"),
    (b"GET / HTTP/1.1\r\n\r\n", "MalformedHeader [1101]"),
    (b"Content-Length: 5000\r\n\r\n{\"seq\":1}", None),  # the stream ends inside the body
])
def test_broken_framing_closes_the_connection_with_a_log_line(start_adapter, header, logged):
    run = start_adapter()
    run.client.send_raw(header)
    if logged is None:
        run.client.wfile.close()
        logged = "MalformedHeader [1101]"
    _closes_with_log_line(run, logged)


def _peak_rss_kib(pid: int) -> int:
    """VmHWM of a live process in KiB; 0 once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def test_absurd_content_length_is_refused_unread(start_adapter):
    """A 100 MB claim: refused at once (the test never sends the body, so waiting for it
    would hang), and never allocated (the adapter's peak RSS stays far below it)."""
    run = start_adapter()
    run.client.call("initialize", INITIALIZE)
    # The adapter's own high-water mark (VmHWM), read from /proc while it runs: wait4's
    # ru_maxrss would also count the pages it shared with the (large) pytest process it was
    # forked from before exec.
    peak_kib = _peak_rss_kib(run.proc.pid)
    started = time.monotonic()
    run.client.send_raw(b"Content-Length: 104857600\r\n\r\n{\"seq\": 2, ")
    while run.proc.poll() is None and time.monotonic() - started < 5:
        peak_kib = max(peak_kib, _peak_rss_kib(run.proc.pid))
        time.sleep(0.005)
    run.client.expect_closed(timeout=5)
    assert time.monotonic() - started < 5
    assert run.proc.wait(timeout=5) == 0
    assert 0 < peak_kib < 80 * 1024, f"peak RSS {peak_kib} KiB"
    assert "MessageTooLarge [1102]" in run.log() and "104857600" in run.log()


@pytest.mark.parametrize("body, error_id", [
    (b"{not json", 1103),
    (b"\xff\xfe{}", 1103),
    (b"[1, 2, 3]", 1104),
    (b'{"type": "bogus", "seq": 1}', 1104),
    (b'{"type": "request", "seq": "one", "command": "threads"}', 1104),
])
def test_unreadable_messages_are_reported_and_the_session_goes_on(start_adapter, body,
                                                                 error_id):
    run = start_adapter()
    run.client.send_raw(_frame(body))
    event = run.client.expect_event("output", timeout=5)
    assert event["body"]["category"] == "important"
    assert f"[error {error_id}]" in event["body"]["output"]
    assert run.client.call("initialize", INITIALIZE)["supportsReadMemoryRequest"] is True


def test_errors_before_a_debuggee_exists(start_adapter):
    client = start_adapter().client
    for command, arguments, error_id in [
        ("launch", {"program": str(BASIC)}, 1200),   # before initialize
        ("initialize", 5, 1200),                     # arguments not an object
        ("initialize", INITIALIZE, None),
        ("fooBar", {}, 1403),                        # unknown command, no backend yet
        ("threads", {}, 1403),                       # a real command, no backend yet
        ("readMemory", {"memoryReference": "0x10", "count": 4}, 1500),   # no process yet
        ("launch", {"program": 5}, 1201),
        ("launch", {"program": str(BASIC), "args": "not-a-list"}, 1201),
        ("launch", {"program": str(BASIC), "backend": "cobol"}, 1201),
        ("launch", {"cwd": "/"}, 1201),              # neither program nor module
        ("attach", {"pid": 1, "connect": {"port": 1}}, 1201),
    ]:
        response = client.request(command, arguments, timeout=5)
        if error_id is None:
            assert response["success"], response
            continue
        assert response["success"] is False, response
        assert response["body"]["error"]["id"] == error_id, (command, response)
    # After all that, a real session still starts.
    client.call("initialize", INITIALIZE)
    launch_seq = client.send_request("launch", {"program": str(BASIC),
                                                "console": "internalConsole"})
    client.expect_event("initialized")
    client.call("configurationDone", {})
    assert client.expect_response(launch_seq)["success"]
    assert client.expect_event("exited")["body"]["exitCode"] == 0


def test_bad_requests_in_a_live_session_never_hurt_the_debuggee(start_adapter):
    run = start_adapter()
    client = run.client
    launch(client, breakpoints=["after_compute"])
    stopped = client.expect_stopped("breakpoint")
    frame = top_frame(client, stopped["threadId"])["id"]
    for command, arguments, error_id in [
        ("fooBar", {"x": 1}, 1404),                          # debugpy's refusal, given an id
        ("stackTrace", {"threadId": "abc"}, 1200),
        # Each of these, forwarded, breaks debugpy (no answer, or the debuggee's debug
        # connection lost for good): checked against the DAP schema first.
        ("evaluate", {"expression": 5, "frameId": "FRAME"}, 1200),
        ("setBreakpoints", {"source": {"path": str(BASIC)}, "breakpoints": [{"line": "x"}]},
         1200),
        ("setExceptionBreakpoints", {"filters": "raised"}, 1200),
        ("next", {"threadId": "zz"}, 1200),
        ("stackTrace", {}, 1200),
        ("readMemory", {"memoryReference": "0x10", "count": "four"}, 1200),
        ("readMemory", {"memoryReference": "here", "count": 4}, 1202),
        ("readMemory", {"memoryReference": "0x10", "count": 1 << 40}, 1200),
        ("disassemble", {"memoryReference": "0x10"}, 1200),  # instructionCount missing
        ("writeMemory", {"memoryReference": "0x10", "data": "***"}, 1200),
        ("evaluate", [], 1200),
        ("launch", {"program": str(BASIC)}, 1000),           # a second launch
    ]:
        if isinstance(arguments, dict):
            arguments = {k: frame if v == "FRAME" else v for k, v in arguments.items()}
        response = client.request(command, arguments, timeout=5)
        assert response["success"] is False, response
        assert response["body"]["error"]["id"] == error_id, (command, response)
    client.send_raw(_frame(b"{broken"))
    client.expect_event("output", pred=lambda e: "[error 1103]" in e["body"]["output"])
    assert evaluate(client, frame, "result") == "6"
    client.call("continue", {"threadId": stopped["threadId"]})
    assert client.expect_event("exited")["body"]["exitCode"] == 0
    client.expect_event("terminated")
    client.call("disconnect", {})
    assert run.wait_exit() == 0


def test_a_program_that_does_not_exist_is_named(start_adapter, tmp_path):
    """Issue 35: a launch of a missing Python program failed with "Failed to spawn launcher:
    [Errno 2] No such file or directory: '/nonexistent'" (debugpy's cwd, the program's
    directory), not shown to the user; a missing file in an existing directory ran the
    interpreter on it. Now the launch fails at once (1201, shown to the user) naming the
    program's full path, no debugpy is started, and a corrected launch still works."""
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    for arguments, named in [
        ({"program": "/nonexistent/nope.py"}, "/nonexistent/nope.py"),
        ({"program": "nope.py", "cwd": str(tmp_path)}, str(tmp_path / "nope.py")),
        ({"program": str(BASIC), "cwd": str(tmp_path / "gone")}, str(tmp_path / "gone")),
    ]:
        response = client.request("launch", {**arguments, "console": "internalConsole"},
                                  timeout=10)
        assert response["success"] is False, response
        error = response["body"]["error"]
        assert error["id"] == 1201 and error["showUser"] is True, response
        assert named in response["message"] and "does not exist" in response["message"], response
        assert run.track() == {}, "a process was started for a launch that cannot run"
    launch_seq = client.send_request("launch", {"program": BASIC.name, "cwd": str(BASIC.parent),
                                                "console": "internalConsole"})
    client.expect_event("initialized")
    client.call("configurationDone", {})
    assert client.expect_response(launch_seq)["success"]
    assert client.expect_event("exited")["body"]["exitCode"] == 0

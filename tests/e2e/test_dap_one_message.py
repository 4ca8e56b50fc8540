"""No single message ends or wedges a `ptdebug dap` session (issue 17, "one message ends a
session"): each hostile request below gets an error response in bounded time, the adapter keeps
its CPU, and every later request of the session is still answered, ending with the debuggee's
clean exit. Real adapter, real debugpy, real debuggee."""
from __future__ import annotations

import base64
import os
import time

import pytest
from conftest import INITIALIZE, evaluate, launch, top_frame

pytestmark = pytest.mark.timeout(120)

ADDRESS_OF_GETPID = ("__import__('ctypes').cast(__import__('ctypes').CDLL(None).getpid, "
                     "__import__('ctypes').c_void_p).value")
ADDRESS_OF_BUF = ("__import__('ctypes').addressof((__import__('ctypes').c_char * len(buf))"
                  ".from_buffer(buf))")


def _frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _deep_request(seq: int, depth: int) -> bytes:
    """`evaluate` whose arguments nest `depth` arrays; the envelope keys after the arguments,
    as VS Code writes them (command, arguments, type, seq)."""
    return (b'{"command":"evaluate","arguments":{"expression":' + b"[" * depth + b"]" * depth
            + b'},"type":"request","seq":%d}' % seq)


def _stopped(client):
    launch(client, breakpoints=["after_compute"])
    stopped = client.expect_stopped("breakpoint")
    return stopped["threadId"], top_frame(client, stopped["threadId"])["id"]


def _finish(run, client, thread_id) -> None:
    client.call("continue", {"threadId": thread_id})
    assert client.expect_event("exited")["body"]["exitCode"] == 0
    client.call("disconnect", {})
    assert run.wait_exit() == 0


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_json_nested_1000_deep_is_answered_and_the_session_goes_on(start_adapter):
    """Seen: RecursionError in the reader thread, the session over. Now: error 1200 naming the
    nesting, before and after the client stream is handed to the fast relay."""
    run = start_adapter()
    client = run.client
    run.client.send_raw(_frame(_deep_request(90, 1000)))
    response = client.expect_response(90, timeout=10)
    assert response["success"] is False
    assert response["body"]["error"]["id"] == 1200
    assert "levels deep" in response["body"]["error"]["format"]
    thread_id, frame = _stopped(client)
    for depth in (200, 1000, 100_000):
        client.send_raw(_frame(_deep_request(1000 + depth, depth)))
        response = client.expect_response(1000 + depth, timeout=10)
        assert response["body"]["error"]["id"] == 1200, response
    # A deep message that is no request (nothing to answer) is reported in an output event.
    client.send_raw(_frame(b"[" * 5000 + b"]" * 5000))
    client.expect_event("output", pred=lambda e: "[error 1105]" in e["body"]["output"])
    assert evaluate(client, frame, "result") == "6"
    _finish(run, client, thread_id)


@pytest.mark.parametrize("command", ["next", "stepIn", "stepOut", "continue", "pause"])
def test_run_control_on_a_thread_that_does_not_exist_is_refused(start_adapter, command):
    """Seen: `next` with threadId 0 -> "Server[1] disconnected unexpectedly" and every later
    request failed. Now: error 1200 naming the thread; debugpy never sees the request."""
    run = start_adapter()
    client = run.client
    thread_id, frame = _stopped(client)
    for bad in (0, 999_999, -1):
        response = client.request(command, {"threadId": bad}, timeout=10)
        assert response["success"] is False, (command, bad, response)
        assert response["body"]["error"]["id"] == 1200, response
        assert str(bad) in response["body"]["error"]["format"]
    assert evaluate(client, frame, "result") == "6"
    assert client.call("threads", {})["threads"]
    _finish(run, client, thread_id)


def test_disassemble_offsets_are_bounded_and_cheap(start_adapter):
    """Seen: instructionOffset -100000 pinned the adapter (quadratic search backwards), and
    -10**12 raised MemoryError. Now: out-of-range offsets are refused at once; the largest
    accepted ones are answered within seconds, linearly."""
    run = start_adapter()
    client = run.client
    thread_id, frame = _stopped(client)
    getpid = hex(int(evaluate(client, frame, ADDRESS_OF_GETPID)))
    for offset in (-100_000, -10**12, 10**12, 100_000):
        started = time.monotonic()
        response = client.request("disassemble", {"memoryReference": getpid,
                                                  "instructionOffset": offset,
                                                  "instructionCount": 10}, timeout=10)
        assert response["success"] is False and response["body"]["error"]["id"] == 1200
        assert "instructionOffset" in response["body"]["error"]["format"]
        assert time.monotonic() - started < 2
    cpu_before = _cpu_seconds(run.proc.pid)
    started = time.monotonic()
    for offset, count in ((-10_000, 10_000), (10_000, 10_000), (-10_000, 1)):
        body = client.call("disassemble", {"memoryReference": getpid,
                                           "instructionOffset": offset,
                                           "instructionCount": count}, timeout=30)
        assert len(body["instructions"]) == count
        if offset < 0 and count > -offset:
            assert int(body["instructions"][-offset]["address"], 16) == int(getpid, 16)
    assert time.monotonic() - started < 20
    assert _cpu_seconds(run.proc.pid) - cpu_before < 20
    for bad in ({"instructionCount": 10**12}, {"offset": 10**30}, {"instructionCount": -1}):
        response = client.request("disassemble", {"memoryReference": getpid,
                                                  "instructionCount": 4, **bad}, timeout=10)
        assert response["success"] is False, (bad, response)
    assert evaluate(client, frame, "result") == "6"
    _finish(run, client, thread_id)


def test_memory_requests_are_bounded(start_adapter):
    """readMemory/writeMemory sizes and offsets out of range: refused with 1200/1202, at once."""
    run = start_adapter()
    client = run.client
    thread_id, frame = _stopped(client)
    buf = hex(int(evaluate(client, frame, ADDRESS_OF_BUF)))
    for command, arguments, error_id in [
        ("readMemory", {"memoryReference": buf, "count": 10**12}, 1200),
        ("readMemory", {"memoryReference": buf, "count": -5}, 1200),
        ("readMemory", {"memoryReference": buf, "offset": -10**30, "count": 4}, 1202),
        ("readMemory", {"memoryReference": "0x" + "f" * 100_000, "count": 4}, 1202),
        ("writeMemory", {"memoryReference": buf, "offset": 10**30, "data": "AAAA"}, 1202),
    ]:
        response = client.request(command, arguments, timeout=10)
        assert response["success"] is False, (command, arguments, response)
        assert response["body"]["error"]["id"] == error_id, response
    assert evaluate(client, frame, "bytes(buf)") == "b'ptdebug-buffer'"
    _finish(run, client, thread_id)


def test_write_memory_into_a_read_only_mapping_fails_with_1501(start_adapter):
    """Seen: writeMemory into the code of libc succeeded (/proc/PID/mem writes through page
    protections as root). docs/protocol.md promises 1501; the code bytes stay as they were."""
    run = start_adapter()
    client = run.client
    thread_id, frame = _stopped(client)
    getpid = hex(int(evaluate(client, frame, ADDRESS_OF_GETPID)))
    before = client.call("readMemory", {"memoryReference": getpid, "count": 8})["data"]
    for allow_partial in (False, True):
        response = client.request("writeMemory", {
            "memoryReference": getpid, "data": base64.b64encode(b"\xcc" * 8).decode(),
            "allowPartial": allow_partial}, timeout=10)
        assert response["success"] is False, response
        assert response["body"]["error"]["id"] == 1501, response
        assert "read-only" in response["body"]["error"]["format"]
    assert client.call("readMemory", {"memoryReference": getpid, "count": 8})["data"] == before
    assert evaluate(client, frame, "__import__('os').getpid() > 0") == "True"
    _finish(run, client, thread_id)


def test_a_failed_capture_now_leaves_the_program_paused(start_adapter):
    """Seen: `ptdebug/captureNow {threadId: 999999}` failed ("debugpy gave no stack") and then
    the program was continued. Now: the request is refused, naming the thread, and the program
    stays paused."""
    run = start_adapter()
    client = run.client
    thread_id, frame = _stopped(client)
    response = client.request("ptdebug/captureNow", {"threadId": 999_999}, timeout=30)
    assert response["success"] is False, response
    assert response["body"]["error"]["format"].startswith(
        "arguments.threadId 999999 is not a thread of the debuggee"), response
    with pytest.raises(TimeoutError):
        client.expect_event("continued", timeout=2)
    assert evaluate(client, frame, "result") == "6"
    _finish(run, client, thread_id)


def test_initialize_is_still_answered_after_hostile_messages(start_adapter):
    """A mix of hostile messages before any debuggee exists: all answered or reported."""
    run = start_adapter()
    client = run.client
    client.send_raw(_frame(_deep_request(5, 3000)))
    assert client.expect_response(5, timeout=10)["body"]["error"]["id"] == 1200
    assert client.call("initialize", INITIALIZE)["supportsReadMemoryRequest"] is True


def test_a_fifo_as_the_perf_map_does_not_wedge_disassemble(start_adapter):
    """Seen: another user's FIFO at /tmp/perf-PID.map wedged the session at the first
    `disassemble` with symbols (the adapter blocked opening it). Now it is refused unread."""
    run = start_adapter()
    client = run.client
    thread_id, frame = _stopped(client)
    pid = int(evaluate(client, frame, "__import__('os').getpid()"))
    path = f"/tmp/perf-{pid}.map"
    os.mkfifo(path)
    try:
        getpid = hex(int(evaluate(client, frame, ADDRESS_OF_GETPID)))
        body = client.call("disassemble", {"memoryReference": getpid, "instructionCount": 4,
                                           "resolveSymbols": True}, timeout=20)
        assert "getpid" in body["instructions"][0]["symbol"]
    finally:
        os.unlink(path)
    assert evaluate(client, frame, "result") == "6"
    _finish(run, client, thread_id)


def test_requests_ptdebug_answers_itself_are_bounded(start_adapter):
    """Sizes, counts and ids at their extremes in the other requests ptdebug answers itself:
    each is answered within seconds, and the session goes on."""
    run = start_adapter()
    client = run.client
    thread_id, frame = _stopped(client)
    buf = hex(int(evaluate(client, frame, ADDRESS_OF_BUF)))
    cases = [
        ("dataBreakpointInfo", {"name": buf, "asAddress": True, "bytes": 10**12}),
        ("dataBreakpointInfo", {"name": buf, "asAddress": True, "bytes": -8}),
        ("dataBreakpointInfo", {"name": "0x" + "f" * 50_000, "asAddress": True, "bytes": 8}),
        ("dataBreakpointInfo", {"name": "x" * 100_000, "frameId": frame}),
        ("setDataBreakpoints", {"breakpoints": [{"dataId": f"{buf}/{n}"}
                                                for n in range(20_000)]}),
        ("setDataBreakpoints", {"breakpoints": [{"dataId": "0x10/" + "9" * 5000}]}),
        ("stepBack", {"threadId": 0}),
        ("reverseContinue", {"threadId": 10**30}),
        ("ptdebug/captureNow", {"threadId": -1}),
        ("setInstructionBreakpoints", {"breakpoints": [{"instructionReference": "0x1",
                                                        "offset": 10**30}]}),
    ]
    for command, arguments in cases:
        started = time.monotonic()
        response = client.request(command, arguments, timeout=30)
        assert time.monotonic() - started < 20, (command, "took", time.monotonic() - started)
        body = response.get("body") or {}
        refused = response["success"] is False or all(
            not bp.get("verified") for bp in body.get("breakpoints", [])) or (
            body.get("dataId") is None)
        assert refused, (command, response)
    client.call("setDataBreakpoints", {"breakpoints": []})
    assert evaluate(client, frame, "result") == "6"
    _finish(run, client, thread_id)

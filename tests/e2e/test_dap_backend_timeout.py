"""Every forwarded request gets an answer (issue 17): a debugpy that stops answering is met
with BackendTimeout (1402) after the backend's limit, and the session goes on serving what
ptdebug answers itself. debugpy's adapter is replaced (PTDEBUG_DEBUGPY_ADAPTER) by a peer that
serves the session's start and never answers `threads`: the one layer under test is
adapter/backends/debugpy.py's limit, which real debugpy cannot be made to need on demand."""
from __future__ import annotations

import sys
import time

import pytest
from conftest import INITIALIZE

pytestmark = pytest.mark.timeout(60)

SILENT_PEER = r'''
import json, sys
def read():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return json.loads(sys.stdin.buffer.read(length))
seq = 0
def send(message):
    global seq
    seq += 1
    message["seq"] = seq
    body = json.dumps(message).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()
while True:
    request = read()
    if request.get("type") != "request" or request["command"] == "threads":
        continue  # never answered
    send({"type": "response", "request_seq": request["seq"], "command": request["command"],
          "success": True, "body": {}})
    if request["command"] == "launch":
        send({"type": "event", "event": "initialized"})
'''


def test_a_request_debugpy_never_answers_gets_backend_timeout(start_adapter, tmp_path,
                                                             monkeypatch):
    peer = tmp_path / "silent_peer.py"
    peer.write_text(SILENT_PEER)
    monkeypatch.setenv("PTDEBUG_DEBUGPY_ADAPTER", f"{sys.executable} {peer}")
    monkeypatch.setenv("PTDEBUG_FORWARD_TIMEOUT", "2")
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    program = tmp_path / "x.py"      # (the launch checks that the program exists)
    program.write_text("pass\n")
    client.call("launch", {"program": str(program), "backend": "python"})
    client.expect_event("initialized")
    started = time.monotonic()
    response = client.request("threads", timeout=10)
    took = time.monotonic() - started
    assert response["success"] is False, response
    assert response["body"]["error"]["id"] == 1402, response
    assert "'threads'" in response["message"] and "2 s" in response["message"], response
    assert 1.5 < took < 6, took
    # the session still serves: a second stalled request is answered the same way
    assert client.request("threads", timeout=10)["body"]["error"]["id"] == 1402
    client.call("disconnect", {})
    assert run.wait_exit() == 0


def test_a_debugpy_that_answers_nothing_any_more_ends_the_session_with_a_word(
        start_adapter, tmp_path, monkeypatch):
    """debugpy's adapter serves one request at a time: one it never answers holds all the
    others, and the session would answer 1402 forever. After STUCK_AFTER requests in a row
    time out with no answer to anything between them, the user is told what happened and what
    to do (an `output` event, category important), the session ends (`terminated`), later
    requests are refused at once saying why, and `disconnect` ends the adapter. An answer in
    between starts the count again."""
    from adapter.backends.debugpy import STUCK_AFTER
    peer = tmp_path / "silent_peer.py"
    peer.write_text(SILENT_PEER)
    monkeypatch.setenv("PTDEBUG_DEBUGPY_ADAPTER", f"{sys.executable} {peer}")
    monkeypatch.setenv("PTDEBUG_FORWARD_TIMEOUT", "1")
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    program = tmp_path / "x.py"      # (the launch checks that the program exists)
    program.write_text("pass\n")
    client.call("launch", {"program": str(program), "backend": "python"})
    client.expect_event("initialized")
    for _ in range(STUCK_AFTER - 1):
        assert client.request("threads", timeout=10)["body"]["error"]["id"] == 1402
    assert client.request("setExceptionBreakpoints", {"filters": []}, timeout=10)["success"]
    for _ in range(STUCK_AFTER - 1):
        assert client.request("threads", timeout=10)["body"]["error"]["id"] == 1402
    assert client.events("terminated") == []  # the answer in between reset the count
    assert client.request("threads", timeout=10)["body"]["error"]["id"] == 1402
    told = client.expect_event("output", timeout=5, pred=lambda e: "stopped answering" in
                               e["body"]["output"])["body"]
    assert told["category"] == "important", told
    assert "launch it again" in told["output"] and "PTDEBUG_DEBUGPY_LOG_DIR" in told["output"]
    client.expect_event("terminated", timeout=5)
    started = time.monotonic()
    refused = client.request("threads", timeout=10)
    assert refused["success"] is False and "stopped answering" in refused["message"], refused
    assert time.monotonic() - started < 1
    client.call("disconnect", {}, timeout=10)
    assert run.wait_exit() == 0

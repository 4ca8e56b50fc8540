"""protocol.channel over in-memory pipes: handlers by name, the one error boundary, sequence
numbers, request/response correlation, and what happens when the peer goes away."""
from __future__ import annotations

import json
import logging
import os
import threading

import jsonschema
import pytest
from dap_schema import dap_schema_path

from adapter.protocol.channel import DEFERRED, Channel
from adapter.protocol.errors import BackendGone, BackendTimeout
from adapter.protocol.framing import MessageReader, MessageWriter


class Peer:
    """The far end of a channel: raw framed messages in and out."""

    def __init__(self, read_fd: int, write_fd: int):
        self.reader = MessageReader(os.fdopen(read_fd, "rb"))
        self.writer = MessageWriter(os.fdopen(write_fd, "wb"))

    def send(self, message: dict) -> None:
        self.writer.write_message(message)

    def receive(self) -> dict:
        return self.reader.read_message()

    def close(self) -> None:
        self.writer.stream.close()


def _pair(handlers) -> tuple[Channel, Peer]:
    to_channel_r, to_channel_w = os.pipe()
    from_channel_r, from_channel_w = os.pipe()
    channel = Channel(MessageReader(os.fdopen(to_channel_r, "rb")),
                      MessageWriter(os.fdopen(from_channel_w, "wb")), handlers, "test")
    channel.start()
    return channel, Peer(from_channel_r, to_channel_w)


class Handlers:
    def __init__(self):
        self.events = []
        self.closed = threading.Event()
        self.later = []

    def threads_request(self, request):
        return {"threads": [{"id": 1, "name": "main"}]}

    def evaluate_request(self, request):
        request.arguments.require("expression", str)
        return {"result": "2", "variablesReference": 0}

    def pause_request(self, request):
        return None

    def boom_request(self, request):
        raise KeyError("a bug")

    def next_request(self, request):
        self.later.append(request)
        return DEFERRED

    def output_event(self, event):
        self.events.append(event.body["output"])

    def channel_closed(self, reason):
        self.closed.set()


@pytest.fixture
def dap_error_response():
    definitions = json.loads(dap_schema_path().read_text())[
        "definitions"]
    return jsonschema.Draft4Validator({"$ref": "#/definitions/ErrorResponse",
                                       "definitions": definitions})


def test_requests_go_to_handlers_by_name_and_seq_increases():
    _, peer = _pair(Handlers())
    peer.send({"seq": 1, "type": "request", "command": "threads"})
    peer.send({"seq": 2, "type": "request", "command": "pause", "arguments": {}})
    first, second = peer.receive(), peer.receive()
    assert first == {"seq": 1, "type": "response", "request_seq": 1, "command": "threads",
                     "success": True, "body": {"threads": [{"id": 1, "name": "main"}]}}
    assert (second["seq"], second["request_seq"], second["success"]) == (2, 2, True)
    assert "body" not in second


def test_errors_become_body_error_at_the_boundary(caplog, dap_error_response):
    _, peer = _pair(Handlers())
    caplog.set_level(logging.INFO, "ptdebug.dap")
    peer.send({"seq": 1, "type": "request", "command": "evaluate", "arguments": {}})
    peer.send({"seq": 2, "type": "request", "command": "stepBack"})
    peer.send({"seq": 3, "type": "request", "command": "boom"})
    peer.send({"seq": 4, "type": "request", "command": "evaluate", "arguments": 7})
    replies = [peer.receive() for _ in range(4)]
    for reply in replies:
        dap_error_response.validate(reply)
    ids = [r["body"]["error"]["id"] for r in replies]
    assert ids == [1200, 1300, 1999, 1200]
    assert replies[0]["body"]["error"]["format"] == "arguments.expression is required"
    assert replies[0]["body"]["error"]["showUser"] is True
    assert "KeyError" in replies[2]["message"]
    # The bug's traceback is in the log, not lost.
    assert any(r.exc_info and r.exc_info[0] is KeyError for r in caplog.records)


def test_deferred_requests_are_answered_later_exactly_once():
    handlers = Handlers()
    _, peer = _pair(handlers)
    peer.send({"seq": 5, "type": "request", "command": "next", "arguments": {"threadId": 1}})
    peer.send({"seq": 6, "type": "request", "command": "threads"})
    assert peer.receive()["request_seq"] == 6   # the deferred one did not block the next
    handlers.later[0].respond()
    assert peer.receive()["request_seq"] == 5
    with pytest.raises(RuntimeError, match="answered twice"):
        handlers.later[0].respond()


def test_responses_reach_their_callbacks_and_events_their_handlers():
    handlers = Handlers()
    channel, peer = _pair(handlers)
    got = []
    channel.send_request("stackTrace", {"threadId": 1}, got.append)
    channel.send_request("scopes", {"frameId": 1}, got.append)
    first, second = peer.receive(), peer.receive()
    peer.send({"seq": 1, "type": "event", "event": "output", "body": {"output": "x"}})
    peer.send({"seq": 2, "type": "response", "request_seq": second["seq"], "command": "scopes",
               "success": True, "body": {"scopes": []}})
    peer.send({"seq": 3, "type": "response", "request_seq": first["seq"],
               "command": "stackTrace", "success": False, "message": "no"})
    peer.send({"seq": 4, "type": "response", "request_seq": 999, "command": "x",
               "success": True})  # unknown: logged and dropped

    def answer():
        request = peer.receive()
        peer.send({"seq": 5, "type": "response", "request_seq": request["seq"],
                   "command": "threads", "success": True, "body": {"threads": []}})

    t = threading.Thread(target=answer)
    t.start()
    response = channel.request("threads", timeout=5)
    t.join()
    assert response.success and response.body["threads"] == []
    assert [r.raw["command"] for r in got] == ["scopes", "stackTrace"]
    assert got[1].error_text == "no"
    assert handlers.events == ["x"]


def test_when_the_peer_goes_away_pending_requests_fail_and_nobody_waits():
    handlers = Handlers()
    channel, peer = _pair(handlers)
    got = []
    channel.send_request("evaluate", {"expression": "1"}, got.append)
    peer.receive()
    peer.close()
    assert handlers.closed.wait(5)
    assert got and got[0].success is False and got[0].raw.get("_gone")
    with pytest.raises(BackendGone):
        channel.request("threads", timeout=5)


def test_request_times_out_instead_of_hanging():
    channel, _ = _pair(Handlers())
    with pytest.raises(BackendTimeout, match="within 0.2 s"):
        channel.request("threads", timeout=0.2)


"""Relaying a backend's response without re-encoding it: the body reaches the client byte for
byte, only the envelope (`seq`, `request_seq`) is renumbered, over real pipes between two
protocol.channel Channels. Also the parser that keeps the body's text (framing.parse_message)
against json.loads, and the writer's splice of a JsonText body."""
from __future__ import annotations

import json
import os
import threading

import jsonschema
import pytest
from dap_schema import dap_schema_path

from adapter.protocol.channel import DEFERRED, Channel
from adapter.protocol.framing import (
    JsonText,
    MessageReader,
    MessageWriter,
    ReceivedMessage,
    encode_message,
    parse_message,
)

# A backend answer written the way no json.dumps would write it again: spaces, the body
# before the envelope, an exponent, escapes, non-ASCII text, and strings that look like the
# envelope's keys, so a splice that searched the bytes for "seq" would corrupt it.
BODY_TEXT = ('{ "stackFrames" : [ {"id": 1000, "name": "main.worker \\"seq\\":99",'
             ' "line": 31, "column": 0, "source": {"path": "/tmp/caf\\u00e9/main.go",'
             ' "name": "main.go"}, "presentationHint": "normal", "x": 1.5e3 },'
             ' {"id": 1001, "name": "runtime.goexit ✓", "line": 1700, "column": 0,'
             ' "request_seq": 4} ], "totalFrames" : 2 }')


def _backend_answer(request_seq: int) -> bytes:
    return ('{ "seq": 41, "type": "response", "request_seq": ' + str(request_seq) +
            ',\n "success": true, "command": "stackTrace", "body" : ' + BODY_TEXT + ' }').encode()


def _body_first_answer(request_seq: int) -> bytes:
    return ('{"body" : ' + BODY_TEXT + ' ,\n "seq": 41, "type": "response", "request_seq": ' +
            str(request_seq) + ', "success": true, "command": "stackTrace"}').encode()


class RawPeer:
    """The far end of a channel, seen as bytes: frames written and read exactly."""

    def __init__(self, read_fd: int, write_fd: int):
        self.rfile = os.fdopen(read_fd, "rb")
        self.wfile = os.fdopen(write_fd, "wb")

    def send_bytes(self, body: bytes) -> None:
        self.wfile.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.wfile.flush()

    def send(self, message: dict) -> None:
        self.send_bytes(json.dumps(message).encode())

    def receive_bytes(self) -> bytes:
        length = None
        while True:
            line = self.rfile.readline()
            assert line, "the channel closed"
            if line == b"\r\n":
                break
            name, _, value = line.partition(b":")
            if name.lower() == b"content-length":
                length = int(value)
        return self.rfile.read(length)

    def close(self) -> None:
        self.wfile.close()


def _channel(handlers, name: str) -> tuple[Channel, RawPeer]:
    to_r, to_w = os.pipe()
    from_r, from_w = os.pipe()
    channel = Channel(MessageReader(os.fdopen(to_r, "rb")), MessageWriter(os.fdopen(from_w, "wb")),
                      handlers, name)
    channel.start()
    return channel, RawPeer(from_r, to_w)


class Forwarder:
    """Client-side handlers that forward every request to the backend channel, as the
    backends do: `relay` when nothing looked into the answer, `respond_like` after a fixup."""

    def __init__(self):
        self.backend: Channel | None = None
        self.fixup = None

    def default_request(self, request):
        fixup = self.fixup
        if fixup is None:
            relay = lambda response: request.relay(response.raw)
        else:
            def relay(response):
                fixup(response.raw)
                request.respond_like(response.raw)
        self.backend.send_request(request.command, request.raw.get("arguments"), relay)
        return DEFERRED


class BackendSide:
    def __init__(self):
        self.closed = threading.Event()

    def channel_closed(self, reason):
        self.closed.set()


@pytest.fixture
def proxy():
    forwarder = Forwarder()
    client, client_peer = _channel(forwarder, "client")
    backend, backend_peer = _channel(BackendSide(), "backend")
    forwarder.backend = backend
    yield forwarder, client_peer, backend_peer
    client_peer.close()
    backend_peer.close()
    client.join(5)
    backend.join(5)


@pytest.fixture
def response_schema():
    definitions = json.loads(dap_schema_path().read_text())[
        "definitions"]
    return lambda name: jsonschema.Draft4Validator({"$ref": f"#/definitions/{name}",
                                                    "definitions": definitions})


def _round_trip(client_peer: RawPeer, backend_peer: RawPeer, client_seq: int,
                answer=_backend_answer) -> tuple[bytes, dict]:
    client_peer.send({"seq": client_seq, "type": "request", "command": "stackTrace",
                      "arguments": {"threadId": 1}})
    forwarded = json.loads(backend_peer.receive_bytes())
    assert forwarded["arguments"] == {"threadId": 1}
    backend_peer.send_bytes(answer(forwarded["seq"]))
    data = client_peer.receive_bytes()
    return data, json.loads(data)


def test_relayed_body_is_byte_identical_and_envelope_renumbered(proxy, response_schema):
    _, client_peer, backend_peer = proxy
    for number, client_seq in enumerate((7, 8, 1000), start=1):
        data, message = _round_trip(client_peer, backend_peer, client_seq)
        assert BODY_TEXT.encode() in data  # the body's bytes, not a re-encoding of them
        assert message["seq"] == number  # the client channel's own numbering
        assert message["request_seq"] == client_seq  # the client's request, not ours to Delve
        assert message["type"] == "response" and message["command"] == "stackTrace"
        assert message["success"] is True
        assert message["body"] == json.loads(BODY_TEXT)
        assert message["body"]["stackFrames"][0]["x"] == 1500.0
        response_schema("StackTraceResponse").validate(message)


def test_a_body_not_last_is_relayed_re_encoded(proxy, response_schema):
    _, client_peer, backend_peer = proxy
    data, message = _round_trip(client_peer, backend_peer, 4, _body_first_answer)
    assert BODY_TEXT.encode() not in data  # parsed and written again, same values
    assert message["body"] == json.loads(BODY_TEXT) and message["request_seq"] == 4
    response_schema("StackTraceResponse").validate(message)


def test_a_fixed_up_body_is_re_encoded_with_the_change(proxy):
    forwarder, client_peer, backend_peer = proxy

    def fixup(response):
        response["body"]["stackFrames"][0]["name"] = "fixed"  # in place, as Delve's fixups do

    forwarder.fixup = fixup
    data, message = _round_trip(client_peer, backend_peer, 3)
    assert BODY_TEXT.encode() not in data
    assert message["body"]["stackFrames"][0]["name"] == "fixed"
    assert message["request_seq"] == 3


def test_a_failure_without_error_id_still_gets_one(proxy, response_schema):
    _, client_peer, backend_peer = proxy

    def failure(seq):
        return ('{"seq":2,"type":"response","request_seq":' + str(seq) + ',"success":false,'
                '"command":"stackTrace","message":"no thread 1","body":{"x":1}}').encode()

    _, message = _round_trip(client_peer, backend_peer, 5, failure)
    assert message["success"] is False and message["message"] == "no thread 1"
    assert message["body"]["x"] == 1 and isinstance(message["body"]["error"]["id"], int)
    response_schema("ErrorResponse").validate(message)


def test_a_failure_with_its_error_body_is_relayed_verbatim(proxy):
    _, client_peer, backend_peer = proxy
    error_body = '{"error": {"id": 2001, "format": "bad \\u00e9",  "showUser": true}}'

    def failure(seq):
        return ('{"seq":2,"type":"response","request_seq":' + str(seq) + ',"success":false,'
                '"command":"stackTrace","message":"bad","body":' + error_body + '}').encode()

    data, message = _round_trip(client_peer, backend_peer, 6, failure)
    assert error_body.encode() in data
    assert message["body"]["error"]["id"] == 2001 and message["request_seq"] == 6


@pytest.mark.parametrize("text", [
    '{"seq":1,"type":"event","event":"output","body":{"output":"hi\\n"}}',
    ' \n{ "seq" : 1 , "type" : "response", "success": true, "body" : [1, {"a": null}] } \r\n',
    '{"seq": 2.5e1, "body" : {"x": "}", "body": {"seq": 3}} }',
    '{"bo\\u0064y": 2, "body": {"y": "\\"body\\":"}}',  # the last "body" counts
    '{"seq": {"a": [1, "bodies"]}, "body": {"a": 1}}',  # an object before the body
    '{"type": "event", "event": "x\\"body\\":", "body": "\\ud83d\\ude00 ✓"}',
    '{"seq": 1, "body": {"c": NaN, "d": [], "e": {}, "f": -0.5e-3}}',
])
def test_parse_message_keeps_the_text_of_a_last_body(text):
    data = text.encode()
    message = parse_message(data)
    expected = json.loads(data)
    assert type(message) is ReceivedMessage
    assert message == expected and list(message) == list(expected)  # same keys, same order
    assert message.body_text in text and message.parsed_body is message["body"]
    assert json.loads(message.body_text) == message["body"]


@pytest.mark.parametrize("text", [
    '{"seq": 1, "type": "request", "command": "threads"}',  # no body
    '{"seq": 1, "body": {"a": 1}, "type": "event"}',  # body not last
    '{"seq": 1, "body": {"a": 1}, "body": null}',  # body repeated after it
    '{"bo\\u0064y": {"a": 1}}',  # "body" spelt with an escape
    '{"body": 1, "seq": 2, "body": {"a": 1}}',  # the first "body" is not the last key
    '{"x": {"body": 1}, "body": {"a": 1}}',  # the first "body" is inside a value
    '{"x\\"body": {"a": 1}}',  # "body" inside a key
    '{"x\\"body": 1, "body": {"a": 1}}',  # ... found before the real one: not relayed as text
    '{}',
])
def test_parse_message_equals_json_loads_without_a_last_body(text):
    message = parse_message(text.encode())
    assert type(message) is dict and message == json.loads(text)


@pytest.mark.parametrize("data", [
    b'[1, 2]', b'"text"', b'\xef\xbb\xbf{"seq": 1}', b'{"seq": 1', b'{"seq" 1}',
    b'{"seq": 1,}', b'{"seq": 1} x', b'{seq: 1}', b'{"a": "\x01"}', b'',
    b'{"seq": 01, "body": {}}', b'{"seq": "\x01", "body": {}}', b'{"body": {"a": 1}',
    b'{"body": {"a": 1}} {}', b'{"body": {"a": 1,}}', b'{"body": }', b'{"seq": 1, "body":',
    b'{"seq": +1, "body": 2}', b'{"seq": 1e, "body": 2}', b'\x0b{"body": 1}',
    b'{"body":null} , "body": {}}', b'{} "body": {}}', b' x{"body": 1}',
])
def test_parse_message_answers_and_fails_exactly_as_json_loads(data):
    try:
        expected = json.loads(data)
    except ValueError as exc:
        with pytest.raises(type(exc)) as raised:
            parse_message(data)
        assert str(raised.value) == str(exc)
    else:
        assert parse_message(data) == expected


def test_parse_message_refuses_invalid_utf8():
    with pytest.raises(UnicodeDecodeError):
        parse_message(b'{"a": "\xff"}')


def test_encode_message_splices_json_text_bodies():
    body = JsonText('{ "x" : [1, 2.50] }')
    data = encode_message({"seq": 3, "type": "response", "body": body, "success": True})
    assert data == b'{"seq":3,"type":"response","success":true,"body":{ "x" : [1, 2.50] }}'
    assert encode_message({"body": body}) == b'{"body":{ "x" : [1, 2.50] }}'
    plain = {"seq": 1, "body": "a JSON string, not text to splice"}
    assert json.loads(encode_message(plain)) == plain

"""Deeply nested JSON never ends a channel (issue 17: 1,000 levels raised RecursionError in the
reader thread): framing refuses it with NestedTooDeep carrying the message's top-level fields,
found without recursion, and the channel answers the request (or fails the pending request
a refused response was meant for), then reads the next message."""
from __future__ import annotations

import io
import json
import os
import random
import threading
import time

import pytest

from adapter.protocol.channel import Channel
from adapter.protocol.errors import NestedTooDeep
from adapter.protocol.framing import (
    MAX_JSON_DEPTH,
    MessageReader,
    MessageWriter,
    json_depth,
    top_level_fields,
)


def _framed(*bodies: bytes) -> io.BytesIO:
    return io.BytesIO(b"".join(b"Content-Length: %d\r\n\r\n%s" % (len(b), b) for b in bodies))


def _deep(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _read_in_thread(reader: MessageReader):
    """read_message on a fresh thread (a reader thread's stack, as in the adapter)."""
    box = []

    def run():
        try:
            box.append(reader.read_message())
        except BaseException as exc:  # noqa: BLE001 - the test looks at what it was
            box.append(exc)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return box[0]


@pytest.mark.parametrize("max_depth", [MAX_JSON_DEPTH, None])
def test_1000_deep_json_is_refused_with_its_envelope(max_depth):
    body = (b'{"command":"evaluate","arguments":{"expression":' + _deep(1000)
            + b'},"type":"request","seq":7}')
    reader = MessageReader(_framed(body, b'{"seq":8,"type":"event","event":"x"}'),
                           max_depth=max_depth)
    refused = _read_in_thread(reader)
    assert isinstance(refused, NestedTooDeep), refused
    assert refused.error_id == 1105
    assert refused.envelope == {"command": "evaluate", "type": "request", "seq": 7}
    assert _read_in_thread(reader)["seq"] == 8  # still in sync


def test_the_limit_is_exact_and_strings_do_not_count():
    at_limit = b'{"a":' + _deep(MAX_JSON_DEPTH - 1) + b"}"
    over = b'{"a":' + _deep(MAX_JSON_DEPTH) + b"}"
    brackets_in_strings = json.dumps({"s": "[" * 5000, "t": "\\\"[{" * 100}).encode()
    reader = MessageReader(_framed(at_limit, over, brackets_in_strings),
                           max_depth=MAX_JSON_DEPTH)
    assert reader.read_message() == json.loads(at_limit)
    with pytest.raises(NestedTooDeep, match=f"{MAX_JSON_DEPTH + 1} levels deep"):
        reader.read_message()
    assert reader.read_message() == json.loads(brackets_in_strings)


def _random_value(rng: random.Random, depth: int):
    choice = rng.random()
    if depth > 5 or choice < 0.3:
        return rng.choice([1, -2.5, "s[{", '\\"]', None, True, "", "}"])
    if choice < 0.6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {f"k{i}": _random_value(rng, depth + 1) for i in range(rng.randint(0, 3))}


def test_depth_and_top_level_fields_agree_with_the_json_module():
    rng = random.Random(17)

    def depth_of(value) -> int:
        if isinstance(value, dict):
            return 1 + max(map(depth_of, value.values()), default=0)
        if isinstance(value, list):
            return 1 + max(map(depth_of, value), default=0)
        return 0
    for n in range(2000):
        message = {f"k{i}": _random_value(rng, 1) for i in range(rng.randint(0, 5))}
        text = json.dumps(message, separators=(",", ":") if n % 2 else (", ", ": "))
        assert json_depth(text) == depth_of(message)
        assert top_level_fields(text) == {k: v for k, v in message.items()
                                          if not isinstance(v, (dict, list)) and v is not None}
    for not_an_object in ("[1, 2]", "{", '{"a": ]]]', '"x"', "", "{}}"):
        assert top_level_fields(not_an_object) in (None, {}), not_an_object


def test_finding_the_envelope_is_linear_in_a_16_mib_message():
    text = '{"command":"next","a":' + "[" * 8_000_000 + "]" * 8_000_000 + ',"seq":3}'
    started = time.perf_counter()
    assert top_level_fields(text) == {"command": "next", "seq": 3}
    assert json_depth(text) == 8_000_001
    assert time.perf_counter() - started < 10


class _Handlers:
    def threads_request(self, request):
        return {"threads": []}


def test_the_channel_answers_a_too_deep_request_and_fails_a_too_deep_response():
    to_channel_r, to_channel_w = os.pipe()
    from_channel_r, from_channel_w = os.pipe()
    channel = Channel(MessageReader(os.fdopen(to_channel_r, "rb"), max_depth=MAX_JSON_DEPTH),
                      MessageWriter(os.fdopen(from_channel_w, "wb")), _Handlers(), "test")
    channel.start()
    peer_in = MessageReader(os.fdopen(from_channel_r, "rb"))
    peer_out = os.fdopen(to_channel_w, "wb")

    def send(body: bytes) -> None:
        peer_out.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        peer_out.flush()
    try:
        send(b'{"seq":1,"type":"request","command":"evaluate","arguments":' + _deep(500)[:-1]
             + b"]}")
        answer = peer_in.read_message()
        assert answer["request_seq"] == 1 and answer["success"] is False
        assert answer["body"]["error"]["id"] == 1200
        outcome = []
        channel.send_request("variables", {"variablesReference": 1}, outcome.append)
        ours = peer_in.read_message()
        send(b'{"seq":2,"type":"response","request_seq":%d,"command":"variables",'
             b'"success":true,"body":{"v":' % ours["seq"] + _deep(300) + b"}}")
        send(b'{"seq":3,"type":"request","command":"threads"}')
        assert peer_in.read_message()["body"] == {"threads": []}
        assert outcome and outcome[0].success is False
        assert "refused" in outcome[0].raw["message"]
        assert not channel.closed.is_set()
    finally:
        peer_out.close()
        channel.join(5)

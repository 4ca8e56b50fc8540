"""Content-Length framing on in-memory streams: round trips, limits, and broken input."""
from __future__ import annotations

import io

import pytest

from adapter.protocol.errors import InvalidJson, InvalidMessage, MalformedHeader, MessageTooLarge
from adapter.protocol.framing import MAX_HEADER_LINE, MessageReader, MessageWriter


def _reader(data: bytes, **kw) -> MessageReader:
    return MessageReader(io.BytesIO(data), **kw)


def _frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def test_round_trip_of_several_messages_with_unicode():
    out = io.BytesIO()
    writer = MessageWriter(out)
    messages = [{"seq": 1, "type": "event", "event": "output", "body": {"output": "héllo ✓"}},
                {"seq": 2, "type": "request", "command": "threads"}]
    for m in messages:
        writer.write_message(m)
    reader = _reader(out.getvalue())
    assert [reader.read_message() for _ in messages] == messages
    assert reader.read_message() is None


def test_content_length_counts_bytes_not_characters():
    out = io.BytesIO()
    MessageWriter(out).write_message({"s": "✓"})
    header, body = out.getvalue().split(b"\r\n\r\n")
    assert int(header.split(b":")[1]) == len(body) == len('{"s":"✓"}'.encode())


def test_other_headers_and_lower_case_names_are_accepted():
    data = b"Content-Type: application/vscode-jsonrpc\r\ncontent-length: 2\r\n\r\n{}"
    assert _reader(data).read_message() == {}


class _CountingStream(io.BytesIO):
    def __init__(self, data):
        super().__init__(data)
        self.largest_read = 0

    def read(self, n=-1):
        self.largest_read = max(self.largest_read, n if n is not None else -1)
        return super().read(n)


def test_an_absurd_content_length_is_refused_before_reading_the_body():
    stream = _CountingStream(b"Content-Length: 104857600\r\n\r\n" + b"x" * 100)
    with pytest.raises(MessageTooLarge, match="104857600"):
        MessageReader(stream).read_message()
    assert stream.largest_read <= 0  # no body read was even attempted


def test_the_limit_is_inclusive():
    assert _reader(_frame(b"{}"), max_content_length=2).read_message() == {}
    with pytest.raises(MessageTooLarge):
        _reader(_frame(b"{ }"), max_content_length=2).read_message()


@pytest.mark.parametrize("data", [
    b"Content-Lenght: 2\r\n\r\n{}",                    # no Content-Length at all
    b"Content-Length: -2\r\n\r\n{}",
    b"Content-Length: 2x\r\n\r\n{}",
    b"Content-Length 2\r\n\r\n{}",                     # no colon
    b"Content-Length: 2\r\n",                          # stream ends in the header
    b"Content-Length: 10\r\n\r\n{}",                   # stream ends in the body
    b"X" * (MAX_HEADER_LINE + 10) + b"\r\n\r\n",       # an endless header line
    b"A: b\r\n" * 40 + b"\r\n",                        # endless header lines
])
def test_malformed_headers(data):
    with pytest.raises(MalformedHeader):
        _reader(data).read_message()


def test_invalid_json_leaves_the_stream_in_sync():
    reader = _reader(_frame(b"{nope") + _frame(b"\xff") + _frame(b"[1]") + _frame(b'{"a":1}'))
    with pytest.raises(InvalidJson):
        reader.read_message()
    with pytest.raises(InvalidJson):
        reader.read_message()
    with pytest.raises(InvalidMessage):
        reader.read_message()
    assert reader.read_message() == {"a": 1}


def test_a_stray_blank_line_between_messages_is_tolerated():
    reader = _reader(_frame(b"{}") + b"\r\n" + _frame(b"[]"[:0] + b'{"b":2}'))
    assert reader.read_message() == {}
    assert reader.read_message() == {"b": 2}

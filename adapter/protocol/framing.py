"""DAP base-protocol framing: `Content-Length: N\\r\\n\\r\\n` followed by N bytes of UTF-8 JSON.

Layer: protocol (bottom). Reads and writes whole messages on binary streams (pipes, sockets,
in-memory buffers); knows nothing about requests, sequence numbers or handlers.

Limits, because the peer may be anything that can open the port: a header line is at most
`MAX_HEADER_LINE` bytes, a header at most `MAX_HEADER_LINES` lines, and a body at most
`max_content_length` bytes. An over-large Content-Length is refused *before* anything is
allocated or read. Errors after which the stream cannot be trusted (bad header, huge length,
truncated body) are `MalformedHeader`/`MessageTooLarge`; a body that is not JSON is `InvalidJson`,
after which reading may go on with the next message, since its length was honoured.
See the "Base protocol" section of the DAP overview.

Nesting: Python's json parser recurses, and JSON nested 1,000 levels deep ended the reader
thread with a RecursionError, and with it the session. A reader given `max_depth` (the client's:
`MAX_JSON_DEPTH`) refuses deeper messages (`NestedTooDeep`) before parsing them; the check costs
two `bytes.count` calls for a message with fewer brackets than the limit, and one linear scan for
the rest. Any reader turns the parser's RecursionError into `NestedTooDeep` too. Either way the
refused message's top-level fields are recovered (without recursion), so that a request is
answered and nobody waits for a response that was refused.

Relaying without re-encoding: a message read here whose body comes last (as debugpy and Delve
write them) is a `ReceivedMessage`, a dict that also keeps its `body` as the exact JSON text it
arrived in (found while parsing: the json module's C scanner parses the body once and says
where it ends; the small envelope before it is parsed on its own). A `JsonText` value put in an outgoing message's `body` is written as that text.
This is how a backend's answer reaches the client byte for byte, with only its envelope (`seq`,
`request_seq`) renumbered: encoding a large `stackTrace` or `variables` body again cost as much
as parsing it (docs/PERFORMANCE.md, the Delve section).
"""
from __future__ import annotations

import itertools
import json
import json.scanner
import re
import threading
from typing import BinaryIO

from .errors import InvalidJson, InvalidMessage, MalformedHeader, MessageTooLarge, NestedTooDeep

MAX_CONTENT_LENGTH = 16 * 1024 * 1024
"""Largest body accepted. The biggest legitimate DAP messages (a large readMemory, a long
`variables` list) are a few MB; anything claiming more is refused without reading it."""

MAX_HEADER_LINE = 1024
MAX_HEADER_LINES = 16
MAX_JSON_DEPTH = 128
"""Deepest nesting of objects and arrays accepted in a message (the fast relay's C scanner has
the same limit, fastrelay_json.h FR_JSON_MAX_DEPTH). DAP messages nest a handful of levels."""

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_loads = json.loads
_scan_value = json.scanner.make_scanner(json.JSONDecoder())
"""The C scanner behind json.loads: (value, end) of the JSON value at an index of a str."""


class ReceivedMessage(dict):
    """A message as read: the parsed JSON object, plus its `body` as the JSON text it came in.

    Made only by parse_message, which sets both attributes."""

    __slots__ = ("body_text", "parsed_body")
    body_text: str
    """The `body` value's exact JSON text."""
    parsed_body: object
    """The object parsed from `body_text`: the body is unreplaced while `self["body"]` is it."""


class JsonText(str):
    """JSON text written as it is (a relayed body), not as a JSON string, by MessageWriter.

    Only ever made from text this module parsed (`ReceivedMessage.body_text`), so what is
    written stays valid JSON."""

    __slots__ = ()


_OBJECT_START = re.compile(r"[ \t\n\r]*\{")
_BODY_KEY = re.compile(r'"body"[ \t\n\r]*:[ \t\n\r]*')
_OBJECT_END = re.compile(r"[ \t\n\r]*\}[ \t\n\r]*\Z")


def parse_message(data: bytes) -> object:
    """`json.loads(data)`; an object whose last key is `body` (how debugpy and Delve write
    every response and event) comes back as a ReceivedMessage that keeps the body's text.
    Raises what json.loads raises (ValueError, UnicodeDecodeError)."""
    text = data.decode("utf-8")
    key = text.find('"body"')
    if key > 0:
        value = _BODY_KEY.match(text, key)
        try:
            # The envelope: everything before the first "body", closed with a null body.
            # It parses to an object holding "body" only if that "body" is a top-level key
            # (one inside a nested value leaves a brace open; one inside an escaped key such
            # as "a\"body" makes a key that is not "body").
            opening = _OBJECT_START.match(text)
            head = text[opening.end() - 1:key] + '"body":null}' if opening else ""
            envelope, envelope_end = _scan_value(head, 0)
            if (value is not None and envelope_end == len(head) and type(envelope) is dict
                    and envelope.get("body", 0) is None):
                # the body, parsed once by the C scanner, which says where it ends
                body, end = _scan_value(text, value.end())
                if _OBJECT_END.match(text, end):
                    envelope["body"] = body
                    message = ReceivedMessage(envelope)
                    message.body_text = text[value.end():end]
                    message.parsed_body = body
                    return message
        except (ValueError, StopIteration):
            pass  # json.loads below says what is wrong, as it always did
    return _loads(data)


_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_JSON_RUN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[{]+|[\]}]+', re.S)
_BRACKET_STEP = {"{": 1, "[": 1, "}": -1, "]": -1}


def json_depth(text: str) -> int:
    """How deeply the JSON `text` nests objects and arrays (0 for a scalar), without parsing
    it and without recursion: strings are cut out, then the brackets are counted."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(map(_BRACKET_STEP.__getitem__, brackets)), default=0)


def top_level_fields(text: str) -> dict | None:
    """The members of the JSON object `text` whose values are scalars (nested values left out),
    read without recursion however deep the rest nests; None when that is not a JSON object.

    Linear, and without a Python step per bracket: runs of opening (or closing) brackets are
    taken whole, the place where one crosses between the top-level object (depth 1) and a
    member's value (depth 2) found by arithmetic."""
    pieces, depth, kept_from = [], 0, 0
    for token in _JSON_RUN.finditer(text):
        run = token.group()
        if run[0] == '"':
            continue
        if run[0] in "{[":
            if depth <= 1 < depth + len(run):  # a member's value opens in this run
                pieces.append(text[kept_from:token.start() + 1 - depth])
                pieces.append("null")
            depth += len(run)
        else:
            if depth - len(run) <= 1 < depth:  # back in the top-level object in this run
                kept_from = token.start() + depth - 1
            depth -= len(run)
            if depth < 0:
                return None
    if depth != 0:
        return None
    pieces.append(text[kept_from:])
    try:
        fields = _loads("".join(pieces))
    except ValueError:
        return None
    if not isinstance(fields, dict):
        return None
    return {key: value for key, value in fields.items() if value is not None}


def encode_message(message: dict) -> bytes:
    """The UTF-8 JSON of `message`; a JsonText `body` is written as the JSON text it is."""
    body = message.get("body")
    if type(body) is not JsonText:
        return _dumps(message).encode("utf-8")
    head = _dumps({key: value for key, value in message.items() if key != "body"})
    if head == "{}":
        return f'{{"body":{body}}}'.encode()
    return f'{head[:-1]},"body":{body}}}'.encode()


class MessageReader:
    """Reads one DAP message at a time from a binary stream."""

    def __init__(self, stream: BinaryIO, *, max_content_length: int = MAX_CONTENT_LENGTH,
                 max_depth: int | None = None):
        self.stream = stream
        """The byte stream (a pipe, a socket file, a BytesIO)."""
        self.max_content_length = max_content_length
        """Bodies longer than this are refused with MessageTooLarge before any is read."""
        self.max_depth = max_depth
        """Bodies nesting deeper than this are refused with NestedTooDeep before they are
        parsed (None: only what Python's parser cannot take is refused)."""

    def read_message(self) -> dict | None:
        """The next message as a dict (a ReceivedMessage when it keeps its body's text); None
        at a clean end of stream between two messages.

        Raises MalformedHeader (also for a stream cut inside a message), MessageTooLarge,
        InvalidJson (NestedTooDeep among them) or InvalidMessage; after the last two the stream
        is still in sync.
        """
        length = self._read_header()
        if length is None:
            return None
        body = self._read_exactly(length)
        try:
            if (self.max_depth is not None
                    and body.count(b"[") + body.count(b"{") > self.max_depth):
                _check_depth(body, self.max_depth)
            message = parse_message(body)
        except RecursionError:
            text = body.decode("utf-8")
            raise NestedTooDeep("the message nests objects and arrays deeper than the JSON "
                                "parser can take", top_level_fields(text)) from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise InvalidJson(f"the message body is not UTF-8 JSON ({exc}): "
                              f"{body[:80]!r}") from None
        if not isinstance(message, dict):
            raise InvalidMessage(f"a DAP message is a JSON object, got {type(message).__name__}")
        return message

    def _read_header(self) -> int | None:
        length = None
        for count in range(MAX_HEADER_LINES + 1):
            line = self.stream.readline(MAX_HEADER_LINE + 1)
            if not line:
                if count == 0:
                    return None
                raise MalformedHeader("the stream ended inside a message header")
            if len(line) > MAX_HEADER_LINE or not line.endswith(b"\n"):
                raise MalformedHeader(f"a header line longer than {MAX_HEADER_LINE} bytes "
                                      f"or cut short: {line[:60]!r}")
            line = line.rstrip(b"\r\n")
            if not line:
                if count == 0:
                    # Tolerate a stray empty line between messages, as VS Code's reader does.
                    continue
                if length is None:
                    raise MalformedHeader("a message header without Content-Length")
                return length
            name, sep, value = line.partition(b":")
            if not sep:
                raise MalformedHeader(f"a header line without 'Name: value': {line[:60]!r}")
            if name.strip().lower() == b"content-length":
                value = value.strip()
                if not value.isdigit():
                    raise MalformedHeader(f"Content-Length is not a number: {value[:40]!r}")
                length = int(value)
                if length > self.max_content_length:
                    raise MessageTooLarge(
                        f"Content-Length {length} exceeds the limit of "
                        f"{self.max_content_length} bytes; message refused unread")
        raise MalformedHeader(f"more than {MAX_HEADER_LINES} header lines")

    def _read_exactly(self, length: int) -> bytes:
        data = self.stream.read(length)
        if data is None:
            data = b""
        while len(data) < length:
            more = self.stream.read(length - len(data))
            if not more:
                raise MalformedHeader(f"the stream ended after {len(data)} of the "
                                      f"{length} bytes its Content-Length promised")
            data += more
        return data


def _check_depth(body: bytes, max_depth: int) -> None:
    """Raise NestedTooDeep (with the message's top-level fields) for a body nested deeper than
    `max_depth`. Raises UnicodeDecodeError for a body that is not UTF-8."""
    text = body.decode("utf-8")
    depth = json_depth(text)
    if depth > max_depth:
        raise NestedTooDeep(f"the message nests objects and arrays {depth} levels deep; at most "
                            f"{max_depth} are accepted", top_level_fields(text))


class MessageWriter:
    """Writes whole DAP messages; safe to call from several threads."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        """The byte stream written to; flushed after every message."""
        self.lock = threading.Lock()
        """Held while a message is written, so two threads never interleave bytes."""

    def write_message(self, message: dict) -> None:
        """Encode and write one message. Raises OSError/ValueError when the stream is closed."""
        with self.lock:
            self._write_locked(message)

    def _write_locked(self, message: dict) -> None:
        body = encode_message(message)
        # one write of the whole frame, then the flush that hands it to the peer now
        self.stream.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.stream.flush()

"""The protocol-buffers wire format, written by hand: enough to emit pprof's profile.proto
(and Perfetto's trace.proto) without a protobuf dependency.

Layer: adapter.export (serialisation helper). Knows the encoding only
(https://protobuf.dev/programming-guides/encoding/): varints, tags (field << 3 | wire type),
length-delimited fields and packed repeated varints. No message schema lives here.
"""
from __future__ import annotations

VARINT = 0
LEN = 2


_ONE_BYTE = [bytes([n]) for n in range(0x80)]


def varint(value: int) -> bytes:
    """Base-128 varint of an unsigned value; a negative int64 is its two's complement
    (10 bytes), as protobuf encodes int64 fields."""
    if 0 <= value < 0x80:
        return _ONE_BYTE[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


_KEYS: dict[int, bytes] = {}


def key(field: int, wire_type: int) -> bytes:
    tag = field << 3 | wire_type
    found = _KEYS.get(tag)
    if found is None:
        found = _KEYS[tag] = varint(tag)
    return found


class Message:
    """An encoder for one message: append fields in any order, then `bytes()`."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int(self, field: int, value: int, keep_zero: bool = False) -> Message:
        """A varint field (int64, uint64, int32, bool, enum). proto3 omits zero values."""
        if value or keep_zero:
            self._parts.append(key(field, VARINT) + varint(int(value)))
        return self

    def bytes_field(self, field: int, data: bytes) -> Message:
        self._parts += (key(field, LEN), varint(len(data)), data)  # joined once, in bytes()
        return self

    def string(self, field: int, text: str) -> Message:
        return self.bytes_field(field, text.encode("utf-8"))

    def message(self, field: int, message: Message) -> Message:
        return self.bytes_field(field, message.bytes())

    def packed(self, field: int, values) -> Message:
        """A packed repeated varint field (omitted when empty)."""
        data = b"".join(map(varint, map(int, values)))
        if data:
            self.bytes_field(field, data)
        return self

    def bytes(self) -> bytes:
        return b"".join(self._parts)


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """(value, next position) of the varint at `pos`; raises ValueError when truncated."""
    shift = result = 0
    while True:
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")


def fields(data: bytes):
    """Yields (field number, wire type, value) of a message: an int for varints, bytes for
    length-delimited fields. Only wire types 0 and 2 are expected here (ValueError else)."""
    pos = 0
    while pos < len(data):
        tag, pos = read_varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == VARINT:
            value, pos = read_varint(data, pos)
        elif wire == LEN:
            size, pos = read_varint(data, pos)
            if pos + size > len(data):
                raise ValueError(f"field {number}: length {size} runs past the message")
            value, pos = data[pos:pos + size], pos + size
        else:
            raise ValueError(f"field {number}: unexpected wire type {wire}")
        yield number, wire, value

"""The fast relay: plain requests go from the client to the backend, and their responses back,
through C threads that never take the interpreter's lock; Python handles everything else.

Layer: protocol. Wires the C core (fastrelay_core.c through _fastrelay.pyx) into Channels: the
client Channel and a backend Channel read the frames the core hands them from socket pairs,
and write through the core, so one lock per stream orders every byte written. Knows nothing of
debugpy, Delve, features or VS Code: the session decides which commands are plain (`set_plain`)
and which backend connection gets the fast path (`backend_channel`).

Why: one more Python process between a DAP client and Delve cost ~60 us a request on the
development VM before doing any work, more than the 10 % (~25 us) ptdebug may add to Delve's
answers (docs/PERFORMANCE.md, the Go section). In C the hop is two wake-ups and a scan.

The rules the core keeps (tests/adapter/protocol/test_fast_relay.py holds each one):
- Only a request that is well-formed JSON, of a command in the plain set, whose arguments
  have the kinds the DAP schema gives their own fields (validate.py, flattened; a field with a
  nested schema that is present sends the request to Python) takes the fast path; anything
  else, including what the core cannot read, reaches Python as the same bytes.
- The relay's requests to the backend are numbered from SEQ_BASE (10**9); the backend
  channel's own requests count from 1, so the two never meet. A response is renumbered back
  to the client's `request_seq`, with the client stream's next `seq`.
- Order: a request takes the fast path only while Python has handled every frame of the
  client's the core gave it (a request after one Python forwards stays after it); a response
  only while Python has handled every frame of the backend's (an event before a response stays
  before it); otherwise Python relays the response itself (`_RelayedBackendChannel`).
- The plain set can change at any moment: a request already sent keeps the path it took.
- A failed response without the error body DAP requires, and a backend connection that ends
  with requests in flight, are answered by Python (BackendGone for the latter).
"""
from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from typing import Any, BinaryIO

from .channel import Channel
from .errors import BackendGone, ProtocolError
from .framing import MAX_JSON_DEPTH, MessageReader, encode_message
from .messages import Request

log = logging.getLogger("ptdebug.dap")

try:
    from . import _fastrelay
except ImportError as exc:  # not built (setup.py builds it; scripts/bootstrap.sh runs it)
    _fastrelay = None
    _IMPORT_ERROR = str(exc)

ArgumentFields = list[tuple[str, tuple[str, ...] | None, bool, bool]]
"""(argument, JSON type names or None for any, required, has a nested schema) per field."""


class _CoreWriter:
    """A MessageWriter whose bytes go out through the core, under the core's lock."""

    def __init__(self, lock, write_locked):
        self.lock = lock
        """The core's mutex of this stream, as a context manager (Channel takes it)."""
        self._write = write_locked

    def write_message(self, message: dict) -> None:
        with self.lock:
            self._write_locked(message)

    def _write_locked(self, message: dict) -> None:
        self._write(encode_message(message))


class _CoreSeq(Iterator[int]):
    """The client stream's seq, shared with the core (read only under its client lock)."""

    def __init__(self, core):
        self._core = core

    def __next__(self) -> int:
        return self._core.next_client_seq()


class _HandoverReader:
    """The client's reader: Python's own until a backend connection takes the fast path, then
    the frames the core hands over (the bytes Python had buffered go to the core first)."""

    def __init__(self, relay: FastRelay, stream: BinaryIO):
        self.relay = relay
        self.stream = stream
        self._reader = MessageReader(stream, max_depth=MAX_JSON_DEPTH)
        self._handed: MessageReader | None = None
        self._reading = False

    def read_message(self) -> dict | None:
        if self._handed is None:
            if not self.relay.wants_client:
                return self._reader.read_message()
            self._hand_over()
        if self._reading:
            self.relay.core.mark_done(False)  # the message before this one is handled
        self._reading = True
        return self._handed.read_message()

    def _hand_over(self) -> None:
        """On the client's reader thread, between two messages: nothing is half read."""
        leftover = _take_buffered(self.stream)
        python_end, core_end = socket.socketpair()
        try:
            self.relay.core.start_client(self.stream.fileno(), core_end.fileno(), leftover)
        finally:
            core_end.close()  # the core holds its own descriptors
        self._handed = MessageReader(python_end.makefile("rb"), max_depth=MAX_JSON_DEPTH)
        self._python_end = python_end
        log.debug("client stream handed to the fast relay (%d bytes buffered)", len(leftover))


class _BackendReader:
    """A backend connection's reader: the frames the core hands over; at the end of the
    connection the relay's requests still in flight are answered BackendGone."""

    def __init__(self, relay: FastRelay, python_end: socket.socket, generation: int,
                 name: str):
        self.relay = relay
        self.generation = generation
        self.name = name
        self._python_end = python_end
        self._reader = MessageReader(python_end.makefile("rb"))
        self._reading = False

    def read_message(self) -> dict | None:
        if self._reading:
            self.relay.core.mark_done(True)
        self._reading = True
        try:
            message = self._reader.read_message()
        except (ProtocolError, OSError):
            self.relay.fail_inflight(self.generation, self.name)
            raise
        if message is None:
            self.relay.fail_inflight(self.generation, self.name)
        return message


class _RelayedBackendChannel(Channel):
    """A backend Channel whose connection the core also uses: a response to one of the core's
    requests that reaches Python (it had to wait for Python's turn, or needs Python's error
    body) is relayed to the client here."""

    def __init__(self, relay: FastRelay, reader: _BackendReader, writer: _CoreWriter,
                 handlers: Any, name: str):
        super().__init__(reader, writer, handlers, name)
        self.relay = relay
        self.generation = reader.generation

    def _dispatch(self, raw: dict) -> None:
        request_seq = raw.get("request_seq")
        if (raw.get("type") == "response" and type(request_seq) is int
                and request_seq >= _fastrelay.SEQ_BASE
                and self.relay.relay_claimed(self.generation, raw)):
            return
        super()._dispatch(raw)

    def retarget(self, handlers: Any) -> None:
        """A backend retiring this connection: no more fast requests go to it."""
        self.relay.core.detach_backend(self.generation)
        super().retarget(handlers)


class FastRelay:
    """The fast relay of one session's client streams (create with `for_streams`)."""

    def __init__(self, client_in: BinaryIO, client_out: BinaryIO):
        self.core = _fastrelay.Core(client_out.fileno())
        """The C core: locks, writers, pumps, plain set, requests in flight."""
        self.client_in = client_in
        self.wants_client = False
        """Set once a backend connection takes fast requests: the client's reader hands its
        stream to the core before reading the next message."""
        self.client: Channel | None = None
        """The client Channel (made by client_channel)."""

    @classmethod
    def for_streams(cls, client_in: BinaryIO, client_out: BinaryIO) -> FastRelay | None:
        """A relay over these streams, or None when they are not file descriptors, the core
        is not built, or PTDEBUG_FAST_RELAY=0 (the pure Python path, for comparison)."""
        if os.environ.get("PTDEBUG_FAST_RELAY", "1") == "0":
            return None
        if _fastrelay is None:
            log.warning("the fast relay is not built (%s): every request goes through Python",
                        _IMPORT_ERROR)
            return None
        try:
            client_in.fileno()
            client_out.fileno()
        except (AttributeError, OSError, ValueError):
            return None
        return cls(client_in, client_out)

    def colocate(self, cpu: int) -> None:
        """Run the core's thread on `cpu` (now, or from its start)."""
        self.core.set_cpu(cpu)

    def client_channel(self, handlers: Any, name: str = "client") -> Channel:
        """The Channel to the client: it writes through the core and shares its seq."""
        client_writer = _CoreWriter(self.core.client_lock, self.core.write_client_locked)
        channel = Channel(_HandoverReader(self, self.client_in), client_writer, handlers, name)
        channel._seq = _CoreSeq(self.core)  # one numbering for Python's messages and the core's
        self.client = channel
        return channel

    def backend_channel(self, sock: socket.socket, handlers: Any, name: str) -> Channel:
        """A Channel over a backend's DAP socket whose plain requests the core serves."""
        python_end, core_end = socket.socketpair()
        try:
            generation = self.core.attach_backend(sock.fileno(), core_end.fileno())
        finally:
            core_end.close()
        writer = _CoreWriter(self.core.backend_lock, self.core.write_backend_locked)
        channel = _RelayedBackendChannel(
            self, _BackendReader(self, python_end, generation, name), writer, handlers, name)
        self.wants_client = True
        return channel

    def set_plain(self, commands: dict[str, ArgumentFields]) -> None:
        """The commands the core may send straight on, with their arguments' fields."""
        self.core.set_plain({
            command: [(arg, _mask(kinds), required, nested)
                      for arg, kinds, required, nested in fields]
            for command, fields in commands.items()})

    def relay_claimed(self, generation: int, raw: dict) -> bool:
        """Relay to the client a response to one of the core's requests; False if it is not."""
        claimed = self.core.claim(generation, raw["request_seq"])
        if claimed is None:
            return False
        client_seq, command = claimed
        Request({"type": "request", "seq": client_seq, "command": command},
                self.client).relay(raw)
        return True

    def fail_inflight(self, generation: int, name: str) -> None:
        for client_seq, command in self.core.take_inflight(generation):
            Request({"type": "request", "seq": client_seq, "command": command},
                    self.client).fail(BackendGone(f"{name} went away before answering "
                                                  f"{command!r}"))

    def stats(self) -> dict[str, int]:
        """How many frames took which path (fast requests, fast responses, ...)."""
        return self.core.stats()


def fits(fields: ArgumentFields | None) -> bool:
    """Whether a command's argument fields fit the core's tables."""
    return (_fastrelay is not None and fields is not None
            and len(fields) <= _fastrelay.MAX_ARGS
            and all(len(name.encode()) <= _fastrelay.MAX_NAME for name, *_ in fields))


def _mask(kinds: tuple[str, ...] | None) -> int:
    if kinds is None:
        return _fastrelay.ANY_KIND
    mask = 0
    for kind in kinds:
        mask |= _fastrelay.KINDS.get(kind, 0)
    return mask


def _take_buffered(stream: BinaryIO) -> bytes:
    """The bytes a buffered reader holds beyond what was read from it, without waiting for
    more (the descriptor is non-blocking while its buffer is emptied)."""
    peek = getattr(stream, "peek", None)
    if peek is None:
        return b""
    fd = stream.fileno()
    blocking = os.get_blocking(fd)
    os.set_blocking(fd, False)
    try:
        data = peek(0) or b""
        taken = stream.read(len(data)) if data else b""
    finally:
        os.set_blocking(fd, blocking)
    return taken or b""

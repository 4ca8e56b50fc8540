"""A DAP channel: one peer, sequence numbers, request/response correlation, handlers by name.

Layer: protocol. Turns framed messages into calls on a handler object and back. Knows nothing
about debugpy, Delve, features or VS Code specifics.

- Outgoing messages get this side's `seq` (1, 2, 3, ... per channel, as the DAP overview says),
  assigned under the writer's lock so the numbers on the wire always increase.
- Incoming requests go to `handlers.<command>_request(request)`, falling back to
  `handlers.default_request`; events to `<event>_event`, falling back to `default_event`.
  A handler returns the response body (or None), or `DEFERRED` when it will answer later.
- This is the one boundary where an `AdapterError` becomes a failed response with
  `body.error = {id, format, showUser}`; any other exception is logged with its traceback and
  answered as `InternalError`.
- Responses to requests this side sent are passed to the callback given to `send_request`; when
  the channel closes, every callback still pending gets a failed response, so nobody waits on a
  peer that is gone.
"""
from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any

from .errors import (
    AdapterError,
    BackendGone,
    BackendTimeout,
    InternalError,
    InvalidJson,
    InvalidMessage,
    InvalidRequest,
    NestedTooDeep,
    ProtocolError,
    UnsupportedRequest,
)
from .framing import MessageReader, MessageWriter
from .messages import Event, Request, Response, check_message

log = logging.getLogger("ptdebug.dap")

DEFERRED = object()
"""Returned by a request handler that has arranged to answer the request later itself."""

ResponseCallback = Callable[[Response], None]


class Channel:
    """One DAP connection. Call `start()` to begin reading on a background thread."""

    def __init__(self, reader: MessageReader, writer: MessageWriter, handlers: Any, name: str):
        self.reader = reader
        self.writer = writer
        self.handlers = handlers
        """The object whose `<command>_request` / `<event>_event` methods handle messages."""
        self.name = name
        """Used in log lines and thread names: 'client', 'debugpy', ..."""
        self._seq = itertools.count(1)
        self._pending: dict[int, tuple[str, ResponseCallback]] = {}
        self._pending_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.closed = threading.Event()
        """Set once the peer is gone (end of stream, fatal framing error, write failure)."""
        self.close_reason = ""
        """Why the channel closed, for log lines and the `terminated` decision."""
        self._handler_cache: dict[str, Callable | None] = {}

    # --- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._read_loop, name=f"dap-{self.name}",
                                        daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def retarget(self, handlers: Any) -> None:
        """Send what arrives from now on to `handlers` (a backend retiring a connection whose
        last messages are no longer the session's)."""
        self.handlers = handlers
        self._handler_cache = {}

    def on_reader_thread(self) -> bool:
        return threading.current_thread() is self._thread

    # --- sending --------------------------------------------------------------------------
    def send(self, message: dict) -> bool:
        """Stamp `seq` on `message` and write it; False (and a log line) when the peer is gone."""
        writer = self.writer
        try:
            with writer.lock:
                message["seq"] = next(self._seq)
                writer._write_locked(message)
            return True
        except (OSError, ValueError) as exc:
            if not self.closed.is_set():
                log.info("%s: cannot write %s (%s)", self.name,
                         message.get("command") or message.get("event"), exc)
            return False

    def send_event(self, event: str, body: dict | None = None) -> bool:
        message = {"type": "event", "event": event}
        if body is not None:
            message["body"] = body
        return self.send(message)

    def send_request(self, command: str, arguments: dict | None,
                     on_response: ResponseCallback) -> None:
        """Send a request; `on_response(response)` runs on the reader thread when it answers."""
        message = {"type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        writer = self.writer
        with self._pending_lock:
            if self.closed.is_set():
                on_response(self._gone_response(command))
                return
        try:
            with writer.lock:
                seq = message["seq"] = next(self._seq)
                with self._pending_lock:
                    self._pending[seq] = (command, on_response)
                writer._write_locked(message)
        except (OSError, ValueError) as exc:
            log.info("%s: cannot send %s (%s)", self.name, command, exc)
            with self._pending_lock:
                entry = self._pending.pop(seq, None)
            if entry is not None:
                on_response(self._gone_response(command))

    def request(self, command: str, arguments: dict | None = None,
                timeout: float = 10.0) -> Response:
        """Send a request and wait for its response (never from this channel's reader thread).

        Raises BackendTimeout after `timeout` seconds, BackendGone if the peer goes away.
        A failed response is returned, not raised: the caller decides what it means.
        """
        if self.on_reader_thread():
            raise RuntimeError("Channel.request() on its own reader thread would deadlock")
        done = threading.Event()
        box: list[Response] = []

        def on_response(response: Response) -> None:
            box.append(response)
            done.set()

        self.send_request(command, arguments, on_response)
        if not done.wait(timeout):
            raise BackendTimeout(f"{self.name} did not answer {command!r} within {timeout:g} s")
        response = box[0]
        if response.raw.get("_gone"):
            raise BackendGone(f"{self.name} went away before answering {command!r}")
        return response

    def _gone_response(self, command: str) -> Response:
        error = BackendGone(f"{self.name} is gone ({self.close_reason or 'closed'}); "
                            f"{command!r} was not answered")
        return Response({"type": "response", "seq": 0, "request_seq": 0, "command": command,
                         "success": False, "message": error.message,
                         "body": error.to_error_body(), "_gone": True}, self)

    # --- receiving ------------------------------------------------------------------------
    def _read_loop(self) -> None:
        reason = "end of stream"
        try:
            while True:
                try:
                    raw = self.reader.read_message()
                except NestedTooDeep as exc:
                    self._refuse_too_deep(exc)
                    continue
                except (InvalidJson, InvalidMessage) as exc:
                    self._report_invalid(exc)
                    continue
                if raw is None:
                    break
                self._dispatch(raw)
        except ProtocolError as exc:
            reason = f"{type(exc).__name__} [{exc.error_id}]: {exc.message}"
            log.error("%s: closing the connection: %s", self.name, reason)
        except (OSError, ValueError) as exc:
            reason = f"read failed: {exc}"
        except Exception:  # a bug in a handler outside the guarded dispatch
            log.exception("%s: reader thread failed", self.name)
            reason = "internal error"
        finally:
            self._close(reason)

    def _close(self, reason: str) -> None:
        with self._pending_lock:
            self.close_reason = reason
            self.closed.set()
            pending, self._pending = self._pending, {}
        log.debug("%s: closed (%s); %d requests unanswered", self.name, reason, len(pending))
        for command, callback in pending.values():
            self._call_safely(callback, self._gone_response(command))
        hook = getattr(self.handlers, "channel_closed", None)
        if hook is not None:
            self._call_safely(hook, reason)

    def _report_invalid(self, exc: AdapterError) -> None:
        log.warning("%s: dropped a message: %s [%d]", self.name, exc.message, exc.error_id)
        hook = getattr(self.handlers, "invalid_message", None)
        if hook is not None:
            self._call_safely(hook, exc)

    def _refuse_too_deep(self, exc: NestedTooDeep) -> None:
        """A message nested too deeply to be parsed still gets its answer: a request a failed
        response (1200), a response to one of ours a failure passed to whoever waits on it."""
        fields = exc.envelope or {}
        seq = fields.get("seq")
        if (fields.get("type") == "request" and isinstance(fields.get("command"), str)
                and type(seq) is int):
            request = Request({"type": "request", "seq": seq, "command": fields["command"]},
                              self)
            self._dispatch_request(request, failure=InvalidRequest(
                f"request {seq} ({fields['command']}) was refused: {exc.message}"))
            return
        request_seq = fields.get("request_seq")
        if fields.get("type") == "response" and type(request_seq) is int:
            with self._pending_lock:
                entry = self._pending.pop(request_seq, None)
            if entry is not None:
                log.warning("%s: the response to %s was refused: %s", self.name, entry[0],
                            exc.message)
                self._call_safely(entry[1], Response(
                    {"type": "response", "seq": 0, "request_seq": request_seq,
                     "command": entry[0], "success": False,
                     "message": f"the response was refused: {exc.message}"}, self))
                return
        self._report_invalid(exc)

    def _dispatch(self, raw: dict) -> None:
        try:
            kind = check_message(raw)
        except InvalidRequest as exc:
            # A request we can name but whose arguments are not an object: answer it.
            self._dispatch_request(Request(raw, self), failure=exc)
            return
        except InvalidMessage as exc:
            self._report_invalid(exc)
            return
        if kind == "request":
            self._dispatch_request(Request(raw, self))
        elif kind == "response":
            with self._pending_lock:
                entry = self._pending.pop(raw["request_seq"], None)
            if entry is None:
                log.warning("%s: response to unknown request %s (%s) dropped", self.name,
                            raw["request_seq"], raw["command"])
                return
            self._call_safely(entry[1], Response(raw, self))
        else:
            handler = self._handler(raw["event"], "event")
            if handler is not None:
                self._call_safely(handler, Event(raw, self))

    def _dispatch_request(self, request: Request, failure: AdapterError | None = None) -> None:
        """The one place where exceptions become failed responses."""
        try:
            if failure is not None:
                raise failure
            handler = self._handler(request.command, "request")
            if handler is None:
                raise UnsupportedRequest(f"{request.command!r} is not supported")
            result = handler(request)
            if result is not DEFERRED and not request.answered:
                request.respond(result)
        except AdapterError as exc:
            log.info("%s: %s failed: %s [%d]", self.name, request.command, exc.message,
                     exc.error_id)
            self._fail_once(request, exc)
        except Exception as exc:
            log.exception("%s: internal error while handling %s", self.name, request.command)
            self._fail_once(request, InternalError(
                f"internal error in ptdebug while handling {request.command!r}: "
                f"{type(exc).__name__}: {exc} (traceback in the adapter log)"))

    def _fail_once(self, request: Request, error: AdapterError) -> None:
        if request.answered:
            log.error("%s: %s failed after it was answered: %s", self.name, request.command,
                      error.message)
        else:
            request.fail(error)

    def _handler(self, name: str, kind: str) -> Callable | None:
        key = f"{name}_{kind}"
        try:
            return self._handler_cache[key]
        except KeyError:
            pass
        handler = getattr(self.handlers, key, None) if key.isidentifier() else None
        if handler is None:
            handler = getattr(self.handlers, f"default_{kind}", None)
        if len(self._handler_cache) < 512:
            self._handler_cache[key] = handler
        return handler

    def _call_safely(self, fn: Callable, arg: Any) -> None:
        try:
            fn(arg)
        except Exception:
            log.exception("%s: handler %s failed", self.name, getattr(fn, "__name__", fn))

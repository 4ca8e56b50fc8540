"""DAP messages as the adapter handles them: Request, Response, Event, and the Payload dict.

Layer: protocol. A message keeps the JSON object it came in as (`raw`), because most of what
the adapter sees is forwarded unchanged and must not be modelled. `Payload` is that forwarded
data's view: a dict whose missing keys raise `InvalidRequest` naming the path
(`arguments.threadId is required`), so a handler that reads a field never turns a client's
mistake into an internal error. What the adapter answers itself is typed in `schema.py`.
"""
from __future__ import annotations

from typing import Any, Protocol

from .errors import AdapterError, BackendRequestFailed, InvalidMessage, InvalidRequest
from .framing import JsonText, ReceivedMessage

_TYPE_NAMES = {str: "a string", int: "an integer", bool: "a boolean", dict: "an object",
               list: "an array", float: "a number"}


class Payload(dict):
    """A JSON object from the peer. `p["x"]` raises InvalidRequest when `x` is missing."""

    __slots__ = ("path",)

    def __init__(self, data: dict | None = None, path: str = "arguments"):
        super().__init__(data or ())
        self.path = path

    def __getitem__(self, key: str) -> Any:
        try:
            value = dict.__getitem__(self, key)
        except KeyError:
            raise InvalidRequest(f"{self.path}.{key} is required") from None
        if isinstance(value, dict) and not isinstance(value, Payload):
            return Payload(value, f"{self.path}.{key}")
        return value

    def require(self, key: str, kind: type) -> Any:
        """`self[key]`, checked to be of `kind` (an int is never a bool here)."""
        value = self[key]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise InvalidRequest(f"{self.path}.{key} must be {_TYPE_NAMES.get(kind, kind)}, "
                                 f"got {value!r}")
        return value


class Sender(Protocol):
    """Where an answer goes: the Channel the request came in on (channel.py builds these
    messages, so it sits above this module and is passed in)."""

    def send(self, message: dict) -> object: ...


class Message:
    """One DAP message; `raw` is the JSON object exactly as received or to be sent."""

    __slots__ = ("channel", "raw")

    def __init__(self, raw: dict, channel: Sender | None = None):
        self.raw = raw
        self.channel = channel

    @property
    def seq(self) -> int:
        return self.raw["seq"]


class Request(Message):
    """An incoming request. Answer it once: `respond`, `fail`, or `respond_like` a response."""

    __slots__ = ("answered",)

    def __init__(self, raw: dict, channel: Sender | None = None):
        super().__init__(raw, channel)
        self.answered = False
        """True once a response has been sent; a second answer is a bug and raises."""

    @property
    def command(self) -> str:
        return self.raw["command"]

    @property
    def arguments(self) -> Payload:
        return Payload(self.raw.get("arguments"), "arguments")

    def respond(self, body: dict | None = None) -> None:
        self._answer({"success": True} if body is None else {"success": True, "body": body})

    def fail(self, error: AdapterError) -> None:
        self._answer({"success": False, "message": error.message,
                      "body": error.to_error_body()})

    def relay(self, response: dict) -> None:
        """`respond_like(response)` for a response nobody has looked into: its body, when it
        is the one parsed on arrival, is written as the exact text it came in (no re-encoding;
        only the envelope, `seq` and `request_seq`, is this channel's). Callers that ran a fixup
        or an observer on the response, which may change the body in place, use respond_like."""
        self.respond_like(response, verbatim=True)

    def respond_like(self, response: dict, verbatim: bool = False) -> None:
        """Answer with the outcome of another peer's response (forwarding).

        A failure without `body.error` (debugpy sends only `message`) gets one, with the id of
        BackendRequestFailed: DAP's ErrorResponse requires the body, and clients want an id."""
        success = response.get("success", False)
        answer = {"success": success}
        if "message" in response:
            answer["message"] = response["message"]
        body = response.get("body")
        if not success and not (isinstance(body, dict) and isinstance(body.get("error"), dict)):
            text = str(response.get("message") or "the backend reported a failure")
            body = dict(body) if isinstance(body, dict) else {}
            body.update(BackendRequestFailed(text).to_error_body())
        elif (verbatim and body is not None and type(response) is ReceivedMessage
              and body is response.parsed_body):
            body = JsonText(response.body_text)
        if body is not None:
            answer["body"] = body
        self._answer(answer)

    def _answer(self, fields: dict) -> None:
        if self.answered:
            raise RuntimeError(f"request {self.seq} ({self.command}) answered twice")
        self.answered = True
        message = {"type": "response", "request_seq": self.raw["seq"],
                   "command": self.raw["command"]}
        message.update(fields)
        assert self.channel is not None, "a request that came in has its channel"
        self.channel.send(message)


class Response(Message):
    """A response to a request this side sent."""

    __slots__ = ()

    @property
    def request_seq(self) -> int:
        return self.raw["request_seq"]

    @property
    def success(self) -> bool:
        return bool(self.raw.get("success"))

    @property
    def body(self) -> Payload:
        return Payload(self.raw.get("body"), f"{self.raw.get('command')} response body")

    @property
    def error_text(self) -> str:
        """What went wrong, from `body.error.format` or `message`."""
        error = (self.raw.get("body") or {}).get("error") or {}
        return str(error.get("format") or self.raw.get("message") or "failed")


class Event(Message):
    """An event from the peer."""

    __slots__ = ()

    @property
    def event(self) -> str:
        return self.raw["event"]

    @property
    def body(self) -> Payload:
        return Payload(self.raw.get("body"), f"{self.raw.get('event')} event body")


def check_message(raw: dict) -> str:
    """The message's type after checking the fields its type requires; raises InvalidMessage."""
    kind = raw.get("type")
    seq = raw.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise InvalidMessage(f"message 'seq' must be an integer, got {seq!r}")
    if kind == "request":
        if not isinstance(raw.get("command"), str):
            raise InvalidMessage(f"request {seq} has no string 'command'")
        arguments = raw.get("arguments")
        if arguments is not None and not isinstance(arguments, dict):
            raise InvalidRequest(f"request {seq} ({raw['command']}): 'arguments' must be an "
                                 f"object, got {type(arguments).__name__}")
    elif kind == "response":
        if not isinstance(raw.get("request_seq"), int) or not isinstance(raw.get("command"), str):
            raise InvalidMessage(f"response {seq} lacks 'request_seq' or 'command'")
    elif kind == "event":
        if not isinstance(raw.get("event"), str):
            raise InvalidMessage(f"event {seq} has no string 'event'")
    else:
        raise InvalidMessage(f"message {seq}: 'type' must be request, response or event, "
                             f"got {kind!r}")
    return kind

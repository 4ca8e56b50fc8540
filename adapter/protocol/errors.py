"""The adapter's error tree: every failure a DAP client can see, each with a stable numeric id.

Layer: protocol (bottom of the adapter). Knows nothing about backends, features or hardware.

An `AdapterError` is raised anywhere below the channel and turned into a failed DAP response
with `body.error = {id, format, showUser}` in exactly one place, `Channel._dispatch`. Any other
exception reaching that boundary is a bug: the channel logs its traceback and answers
`InternalError`. The ids are a contract with the VS Code extension and the tests: never renumber
one; add new ids at the end of their block. docs/protocol.md lists them.
"""
from __future__ import annotations


class AdapterError(Exception):
    """Base of every error the adapter reports to its client.

    `error_id` is the stable number sent as `body.error.id`; `show_user` tells VS Code to show
    the text to the user (rather than only to the console); `message` is the text itself.
    """

    error_id = 1000
    show_user = False

    def __init__(self, message: str, *, show_user: bool | None = None):
        super().__init__(message)
        self.message = message
        if show_user is not None:
            self.show_user = show_user

    def to_error_body(self) -> dict:
        """The DAP `ErrorResponse.body` for this error."""
        return {"error": {"id": self.error_id, "format": self.message,
                          "showUser": bool(self.show_user)}}


# --- 11xx: the byte stream or the JSON in it is broken -------------------------------------
class ProtocolError(AdapterError):
    """The peer sent something that is not a DAP message."""
    error_id = 1100


class MalformedHeader(ProtocolError):
    """A header line without `Name: value`, or a Content-Length that is not a number.

    The stream cannot be resynchronised after this: the connection is closed."""
    error_id = 1101


class MessageTooLarge(ProtocolError):
    """A Content-Length above the limit; refused before any byte of the body is read."""
    error_id = 1102


class InvalidJson(ProtocolError):
    """The body is not UTF-8 JSON. The framing was intact, so the next message is still read."""
    error_id = 1103


class InvalidMessage(ProtocolError):
    """JSON, but not a DAP message (no `type`, a `seq` that is not an integer, ...)."""
    error_id = 1104


class NestedTooDeep(InvalidJson):
    """JSON nested deeper than framing.MAX_JSON_DEPTH. The framing was intact, so the next
    message is still read; `envelope` holds the message's top-level scalar fields (`type`,
    `seq`, `command`, `request_seq`, ...) when they could be read, so a request is answered."""
    error_id = 1105

    def __init__(self, message: str, envelope: dict | None = None):
        super().__init__(message)
        self.envelope = envelope
        """The top-level fields whose values are not objects or arrays, or None."""


# --- 12xx: a well-formed request we cannot accept as written ------------------------------
class InvalidRequest(AdapterError):
    """A required argument is missing or has the wrong type; the text names it."""
    error_id = 1200
    show_user = True


class InvalidLaunchConfig(InvalidRequest):
    """The launch or attach configuration is incomplete or contradictory."""
    error_id = 1201


class InvalidMemoryReference(InvalidRequest):
    """A memoryReference that is not an address (decimal, or hex with 0x)."""
    error_id = 1202


# --- 13xx: nobody here implements the request ----------------------------------------------
class UnsupportedRequest(AdapterError):
    """A standard DAP request that neither ptdebug nor the backend implements."""
    error_id = 1300


class NotSupportedYet(AdapterError):
    """A DAP request ptdebug answers itself, whose feature is not in this build yet."""
    error_id = 1301
    show_user = True


class UnsupportedBackend(AdapterError):
    """The configuration names a backend this build does not have."""
    error_id = 1302
    show_user = True


# --- 14xx: the backend debugger (debugpy, Delve) ------------------------------------------
class BackendError(AdapterError):
    """The backend could not be started or refused to start the session."""
    error_id = 1400
    show_user = True


class BackendGone(BackendError):
    """The backend process has exited; the session is over."""
    error_id = 1401


class BackendTimeout(BackendError):
    """The backend did not answer in time."""
    error_id = 1402


class BackendRequestFailed(BackendError):
    """The backend answered a forwarded request with a failure and no error id of its own
    (debugpy sends only `message`); its text is passed on under this id."""
    error_id = 1404
    show_user = False


class NoDebugSession(AdapterError):
    """A request that needs a launched or attached debuggee arrived before `launch`/`attach`."""
    error_id = 1403


# --- 15xx: the debuggee's memory -----------------------------------------------------------
class NoProcess(AdapterError):
    """No debuggee process id is known yet (debugpy has not sent its `process` event)."""
    error_id = 1500


class MemoryAccessError(AdapterError):
    """/proc/PID/mem refused the access (unmapped, or no permission); the text says which."""
    error_id = 1501


# --- 16xx: the client stopped it ------------------------------------------------------------
class Cancelled(AdapterError):
    """The client cancelled a long operation of ptdebug's (`cancel` with its progressId:
    protocol/progress.py)."""
    error_id = 1600
    show_user = True


class NotRecorded(AdapterError):
    """A record breakpoint's hit (or a captureNow) had nothing to record: its window was
    closed before the thread ran the breakpoint's Python line (adapter/python/line_window.py)
    or the window's first instruction: cancelled, the client leaving, another thread's record
    breakpoint stopping the program, or a captureNow's thread paused. (A stop of the user's
    meanwhile only makes the window wait for the user's continue.) The breakpoint stays
    armed."""
    error_id = 1601


# --- 19xx: bugs ----------------------------------------------------------------------------
class InternalError(AdapterError):
    """An unexpected exception inside the adapter; its traceback is in the adapter's log."""
    error_id = 1999
    show_user = True


def all_error_classes() -> list[type[AdapterError]]:
    """Every class of the tree, for the docs and for the uniqueness test of the ids."""
    seen: list[type[AdapterError]] = []
    stack = [AdapterError]
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(reversed(cls.__subclasses__()))
    return seen

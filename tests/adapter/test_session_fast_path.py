"""Session.update_fast_path: which requests the fast relay may carry, and how that follows the
session (a backend that relays untouched, the trace features waking up with a capture, a
response observer, the backend gone). The relay's own rules are in
tests/adapter/protocol/test_fast_relay.py; here the session is real, on a socket pair, and the
plain set is read back through the C core's own check."""
from __future__ import annotations

import json
import socket
from types import SimpleNamespace

import pytest

from adapter.protocol import relay as relay_module
from adapter.session import Session

pytestmark = pytest.mark.skipif(relay_module._fastrelay is None,
                                reason="the fast relay extension is not built (setup.py)")

REQUESTS = {
    "stackTrace": {"threadId": 1},
    "scopes": {"frameId": 1},
    "variables": {"variablesReference": 1},
    "evaluate": {"expression": "x", "frameId": 1},
    "threads": None,
    "next": {"threadId": 1},
    "setBreakpoints": {"source": {"path": "/x.go"}, "breakpoints": [{"line": 3}]},
    "readMemory": {"memoryReference": "0x10", "count": 4},
    "exceptionInfo": {"threadId": 1},
}


class _Backend:
    name = "delve"

    def relays_untouched(self, command: str) -> bool:
        return command != "exceptionInfo"  # as Delve: a fixup rewrites its answer


@pytest.fixture
def session():
    ours, theirs = socket.socketpair()
    session = Session(ours.makefile("rb"), ours.makefile("wb"))
    assert session.relay is not None
    yield session
    ours.close()
    theirs.close()


def plain(session: Session) -> set[str]:
    """The commands the core would send straight on, asked through its own check."""
    out = set()
    for command, arguments in REQUESTS.items():
        message = {"seq": 1, "type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        if session.relay.core.check_request(json.dumps(message).encode()):
            out.add(command)
    return out


def test_nothing_is_plain_without_a_backend(session):
    session.update_fast_path()
    assert plain(session) == set()


def test_a_backend_that_relays_untouched_gets_the_plain_requests(session):
    session.backend = _Backend()
    session.update_fast_path()
    # readMemory is answered by ptdebug, exceptionInfo is fixed up, setBreakpoints is
    # intercepted by record breakpoints whatever the state
    assert plain(session) == {"stackTrace", "scopes", "variables", "evaluate", "threads", "next"}


def test_a_capture_wakes_the_trace_features_up(session):
    session.backend = _Backend()
    session.update_fast_path()
    session.recording.captures.append(SimpleNamespace(id=1))
    for listener in session.recording._listeners:  # what a new capture announces
        if getattr(listener, "__self__", None) is None:
            listener(session.recording.captures[-1])
    # the trace scope, reverse stepping and record breakpoints now look at these
    assert not plain(session) & {"stackTrace", "scopes", "variables", "evaluate", "next"}


def test_a_response_watch_takes_its_command_back(session):
    session.backend = _Backend()
    session.update_fast_path()
    watching = [True]
    session.routes.add("data_breakpoints", "threads", watch=lambda request: None,
                       active=lambda command: watching[0])
    session.update_fast_path()
    assert "threads" not in plain(session)
    watching[0] = False
    session.update_fast_path()
    assert "threads" in plain(session)


def test_a_backend_gone_ends_the_fast_path(session):
    session.backend = _Backend()
    session.update_fast_path()
    session.backend_gone("test")
    assert plain(session) == set()

"""A request for a feature that plugs in once the debuggee's pid is known (data breakpoints)
waits for it instead of being refused (issue 14: a Go session's `dataBreakpointInfo` at the
first stop was answered 1301 "not available" because the adapter had not learnt the pid from
Delve yet). The session is real, on a socket pair; the backend is a stand-in that says it
serves data breakpoints itself, as Delve's `initialize` does, and records what it forwards."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from adapter.protocol.channel import DEFERRED
from adapter.protocol.errors import NotSupportedYet
from adapter.protocol.messages import Request
from adapter.session import Session


class _DelveLike:
    name = "delve"
    native_data_breakpoints = True

    def __init__(self):
        self.forwarded: list[str] = []

    def relays_untouched(self, command: str) -> bool:
        return False

    def forward(self, request, observe=None) -> None:
        self.forwarded.append(request.command)


@pytest.fixture
def session():
    ours, theirs = socket.socketpair()
    session = Session(ours.makefile("rb"), ours.makefile("wb"))
    yield session
    ours.close()
    theirs.close()


def _info_request() -> Request:
    return Request({"seq": 7, "type": "request", "command": "dataBreakpointInfo",
                    "arguments": {"name": "main.served", "frameId": 1000}})


def test_data_breakpoint_info_waits_for_the_feature_the_pid_brings(session):
    backend = session.backend = _DelveLike()
    answers: list[object] = []
    asking = threading.Thread(target=lambda: answers.append(
        session.client.handlers.dataBreakpointInfo_request(_info_request())))
    asking.start()
    time.sleep(0.3)  # the request is waiting: the pid is not known yet
    assert answers == [] and backend.forwarded == []
    session._start_features(pid=1)  # what backend_process starts once the pid is known
    asking.join(5)
    assert answers == [DEFERRED] and backend.forwarded == ["dataBreakpointInfo"]


def test_no_wait_once_the_backend_is_gone(session):
    session.backend = _DelveLike()
    session.backend.native_data_breakpoints = False
    session.backend_gone("Delve exited")
    started = time.monotonic()
    with pytest.raises(NotSupportedYet):
        session.client.handlers.dataBreakpointInfo_request(_info_request())
    assert time.monotonic() - started < 1.0

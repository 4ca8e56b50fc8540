"""The fast relay (adapter/protocol/relay.py over fastrelay_core.c): plain requests and their
responses pass outside Python, everything else through the Channels as before.

Real sockets on both sides: a test client on one socket pair, a test backend on another, the
relay between them with a client Channel whose handlers forward like Session.route (argument
checks included) and a backend Channel whose events go to the client. Each rule the relay
keeps has its test: seq ranges, order of events before responses and of requests after
Python's, malformed frames and arguments, switching a command while requests are in flight,
the backend going away, the bytes Python read ahead at the hand-over.
"""
from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from adapter.protocol import relay as relay_module
from adapter.protocol.channel import DEFERRED
from adapter.protocol.framing import MessageReader
from adapter.protocol.validate import default_checker

pytestmark = pytest.mark.skipif(relay_module._fastrelay is None,
                                reason="the fast relay extension is not built (setup.py)")

CHECKER = default_checker()
PLAIN = {command: CHECKER.fields(command) for command in ("stackTrace", "scopes", "variables",
                                                          "evaluate", "threads")}
STACK_BODY = ('{"stackFrames":[{"id":1000,"name":"main.work \\"seq\\":7 caf\\u00e9 ✓",'
              '"line":31,"column":0}],"totalFrames":1}')


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.005)


class Peer:
    """One end of a socket pair, speaking framed JSON (the test client or the test backend)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.reader = MessageReader(sock.makefile("rb"))
        self.seq = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, message: dict) -> None:
        self.send_raw(frame(json.dumps(message).encode()))

    def request(self, command: str, arguments: dict | None = None) -> int:
        self.seq += 1
        message = {"seq": self.seq, "type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        self.send(message)
        return self.seq

    def receive(self, timeout: float = 5.0) -> dict:
        self.sock.settimeout(timeout)
        message = self.reader.read_message()
        assert message is not None, "the stream ended"
        return message

    def answer(self, request: dict, body_text: str = '{"threads":[]}',
               success: bool = True) -> None:
        """A response as Delve writes it: seq first, body last, compact."""
        text = (f'{{"seq":0,"type":"response","request_seq":{request["seq"]},'
                f'"success":{"true" if success else "false"},'
                f'"command":"{request["command"]}"')
        if body_text is not None:
            text += f',"body":{body_text}'
        self.send_raw(frame((text + "}").encode()))


class Router:
    """Client handlers that forward like Session.route: arguments checked, then sent on."""

    def __init__(self):
        self.backend = None
        self.seen: list[str] = []
        self.hold = threading.Event()
        self.hold.set()
        self.relay = None
        self.on_launch = None

    def launch_request(self, request):
        self.on_launch()
        return {}

    def default_request(self, request):
        self.seen.append(request.command)
        self.hold.wait(10)
        CHECKER.check(request.command, request.raw.get("arguments"))
        self.backend.send_request(request.command, request.raw.get("arguments"),
                                  lambda response: request.relay(response.raw))
        return DEFERRED


class Events:
    """Backend handlers: events go to the client (optionally held back)."""

    def __init__(self):
        self.client = None
        self.hold = threading.Event()
        self.hold.set()

    def default_event(self, event):
        self.hold.wait(10)
        raw = dict(event.raw)
        del raw["seq"]
        self.client.send(raw)

    def channel_closed(self, reason):
        pass


@pytest.fixture
def relayed():
    """client and backend Peers, the FastRelay, its Router and Events; backend attached."""
    client_test, client_adapter = socket.socketpair()
    backend_test, backend_adapter = socket.socketpair()
    relay = relay_module.FastRelay(client_adapter.makefile("rb"), client_adapter.makefile("wb"))
    router, events = Router(), Events()
    client_channel = relay.client_channel(router)
    events.client = client_channel
    router.relay = relay

    def attach():
        router.backend = relay.backend_channel(backend_adapter, events, "backend")
        router.backend.start()
    router.on_launch = attach
    client_channel.start()
    client, backend = Peer(client_test), Peer(backend_test)
    client.request("launch", {})
    assert client.receive()["command"] == "launch"
    relay.set_plain(PLAIN)
    yield SimpleNamespace(client=client, backend=backend, relay=relay, router=router,
                          events=events)
    router.hold.set()
    events.hold.set()
    for sock in (client_test, backend_test, client_adapter, backend_adapter):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()


def test_plain_request_and_its_response_pass_outside_python(relayed):
    client, backend = relayed.client, relayed.backend
    relay, router = relayed.relay, relayed.router
    seq = client.request("stackTrace", {"threadId": 1, "levels": 20})
    sent = backend.receive()
    assert sent["seq"] >= relay_module._fastrelay.SEQ_BASE  # the relay's range
    assert sent["arguments"] == {"threadId": 1, "levels": 20}
    backend.answer(sent, STACK_BODY)
    answer = client.receive()
    assert answer["request_seq"] == seq and answer["success"] is True
    assert answer["body"] == json.loads(STACK_BODY)
    assert router.seen == []
    stats = relay.stats()
    assert stats["fast_requests"] == 1 and stats["fast_responses"] == 1


def test_other_requests_and_events_go_through_python(relayed):
    client, backend, router = relayed.client, relayed.backend, relayed.router
    seq = client.request("next", {"threadId": 1})
    sent = backend.receive()
    assert sent["seq"] < relay_module._fastrelay.SEQ_BASE  # the backend channel's own
    backend.answer(sent, None)
    assert client.receive()["request_seq"] == seq
    backend.send({"seq": 5, "type": "event", "event": "stopped", "body": {"threadId": 1}})
    assert client.receive()["event"] == "stopped"
    assert router.seen == ["next"]


def test_client_seq_increases_across_python_and_the_relay(relayed):
    client, backend = relayed.client, relayed.backend
    seqs = []
    for i in range(6):
        plain = i % 2 == 0
        client.request("threads" if plain else "next", None if plain else {"threadId": 1})
        sent = backend.receive()
        if not plain:
            backend.send({"seq": 9, "type": "event", "event": "continued",
                          "body": {"threadId": 1}})
        backend.answer(sent, None if not plain else '{"threads":[]}')
        seqs.append(client.receive()["seq"])
        if not plain:
            seqs.append(client.receive()["seq"])
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_own_requests_never_collide_with_the_relays(relayed):
    """Python's own requests to the backend (features) and relayed client requests in flight
    at once: each answer reaches the one who asked."""
    client, backend, router = relayed.client, relayed.backend, relayed.router
    own: list = []
    thread = threading.Thread(target=lambda: own.append(router.backend.request("threads", {})))
    thread.start()
    first = backend.receive()
    client_seq = client.request("threads")
    second = backend.receive()
    mine, relayed_one = sorted((first, second), key=lambda m: m["seq"])
    assert mine["seq"] < relay_module._fastrelay.SEQ_BASE <= relayed_one["seq"]
    backend.answer(relayed_one, '{"threads":[{"id":2,"name":"relayed"}]}')
    backend.answer(mine, '{"threads":[{"id":1,"name":"own"}]}')
    answer = client.receive()
    thread.join(5)
    assert answer["request_seq"] == client_seq
    assert answer["body"]["threads"][0]["name"] == "relayed"
    assert own[0].raw["body"]["threads"][0]["name"] == "own"


def test_an_event_sent_before_a_response_reaches_the_client_first(relayed):
    client, backend = relayed.client, relayed.backend
    relay, events = relayed.relay, relayed.events
    seq = client.request("evaluate", {"expression": "x", "frameId": 1})
    sent = backend.receive()
    events.hold.clear()  # Python is slow to relay the event
    backend.send({"seq": 3, "type": "event", "event": "output", "body": {"output": "hi\n"}})
    backend.answer(sent, '{"result":"1","variablesReference":0}')
    wait_for(lambda: relay.stats()["deferred_responses"] == 1)  # the core held it back
    events.hold.set()
    first, second = client.receive(), client.receive()
    assert first["type"] == "event" and first["event"] == "output"
    assert second["type"] == "response" and second["request_seq"] == seq
    assert second["body"] == {"result": "1", "variablesReference": 0}
    assert relay.stats()["deferred_responses"] == 1


def test_a_plain_request_after_one_python_handles_stays_after_it(relayed):
    client, backend, router = relayed.client, relayed.backend, relayed.router
    relay = relayed.relay
    router.hold.clear()  # Python is slow to forward `next`
    client.request("next", {"threadId": 1})
    client.request("threads")
    wait_for(lambda: relay.stats()["client_to_python"] == 2)  # `threads` waits its turn
    router.hold.set()
    first, second = backend.receive(), backend.receive()
    assert (first["command"], second["command"]) == ("next", "threads")
    assert router.seen == ["next", "threads"]  # the second waited and went through Python


@pytest.mark.parametrize("arguments, message", [
    ({"threadId": "one"}, "arguments.threadId must be an integer"),
    ({"levels": 3}, "arguments.threadId is required"),
    ({"threadId": 1.5}, "arguments.threadId must be an integer"),
    ({"threadId": True}, "arguments.threadId must be an integer"),
])
def test_bad_arguments_of_a_plain_request_get_pythons_clear_error(relayed, arguments, message):
    client, relay, router = relayed.client, relayed.relay, relayed.router
    channel_errors = []
    original = router.default_request

    def checked(request):
        try:
            return original(request)
        except Exception as exc:
            channel_errors.append(exc)
            raise
    router.default_request = checked
    seq = client.request("stackTrace", arguments)
    answer = client.receive()
    assert answer["request_seq"] == seq and answer["success"] is False
    assert message in answer["message"]
    assert relay.stats()["fast_requests"] == 0


def test_malformed_frames_go_to_python_and_the_stream_survives(relayed):
    client, backend = relayed.client, relayed.backend
    client.send_raw(frame(b'{"seq": 1, "type": "request", "command": "threads", '))  # cut JSON
    client.send_raw(frame(b'[1, 2]'))
    client.send_raw(frame(b'{"seq": 2, "type": "request", "command": "threads", '
                          b'"arguments": [1]}'))
    answer = client.receive()
    assert answer["request_seq"] == 2 and answer["success"] is False
    assert "'arguments' must be an object" in answer["message"]
    seq = client.request("threads")
    backend.answer(backend.receive())
    assert client.receive()["request_seq"] == seq


def test_a_header_the_relay_cannot_read_reaches_pythons_framing(relayed):
    client, relay = relayed.client, relayed.relay
    client.send_raw(b"Content-Length: twelve\r\n\r\n")
    # Python's reader refuses it and closes the client channel, as without the relay
    assert relay.client.closed.wait(5)
    assert "Content-Length is not a number" in relay.client.close_reason


@pytest.mark.parametrize("body, plain", [
    (b'{"seq":1,"type":"request","command":"threads"}', True),
    (b' {"seq":1, "type":"request", "command":"stackTrace", "arguments":{"threadId":4}} ',
     True),
    ((b'{"seq":1,"type":"request","command":"stackTrace","arguments":{"threadId":4,'
     b'"format":{"hex":true}}}'), True),  # format's schema is not checked by Python either
    ((b'{"seq":1,"type":"request","command":"variables","arguments":{"variablesReference":4,'
     b'"filter":"named"}}'), False),  # an enum: only Python checks it
    (b'{"seq":1,"type":"request","command":"next","arguments":{"threadId":4}}', False),
    (b'{"seq":1,"type":"event","command":"threads"}', False),
    (b'{"seq":"1","type":"request","command":"threads"}', False),
    (b'{"seq":1,"seq":2,"type":"request","command":"threads"}', False),
    ((b'{"seq":1,"type":"request","command":"stackTrace","arguments":{"threadId":4,'
     b'"threadId":"x"}}'), False),
    (b'{"seq":1,"type":"request","command":"evaluate","arguments":{"expression":"caf\\u00e9"}}',
     False),
    ('{"seq":1,"type":"request","command":"evaluate","arguments":{"expression":"é"}}'.encode(),
     False),
    (b'{"seq":1,"type":"request","command":"threads"} x', False),
    (b'{"seq":1,"type":"request","command":"threads","x":NaN}', False),
    (b'{"seq":1,"type":"request","command":"threads","x":01}', False),
    (b'{"seq":1,"type":"request","command":"threads","x":"a\x01"}', False),
    (b'{"seq":1,"type":"request","command":"threads","x":' + b"[" * 200 + b"]" * 200 + b"}",
     False),
    (b'{"seq":1,"type":"request","command":"threads","arguments":null}', True),
    (b'{"seq":1,"type":"request","command":"scopes","arguments":null}', False),
])
def test_which_requests_the_core_sends_on(relayed, body, plain):
    relay = relayed.relay
    assert relay.core.check_request(body) is plain


def test_switching_a_command_while_its_requests_are_in_flight(relayed):
    client, backend = relayed.client, relayed.backend
    relay, router = relayed.relay, relayed.router
    first = client.request("scopes", {"frameId": 1})
    in_flight = backend.receive()
    assert in_flight["seq"] >= relay_module._fastrelay.SEQ_BASE
    relay.set_plain({})  # a feature starts to intercept scopes
    second = client.request("scopes", {"frameId": 1})
    through_python = backend.receive()
    assert through_python["seq"] < relay_module._fastrelay.SEQ_BASE
    backend.answer(through_python, '{"scopes":[{"name":"B"}]}')
    backend.answer(in_flight, '{"scopes":[{"name":"A"}]}')
    answers = {m["request_seq"]: m["body"]["scopes"][0]["name"]
               for m in (client.receive(), client.receive())}
    assert answers == {first: "A", second: "B"}
    assert router.seen == ["scopes"]
    relay.set_plain(PLAIN)
    third = client.request("scopes", {"frameId": 1})
    backend.answer(backend.receive(), '{"scopes":[]}')
    assert client.receive()["request_seq"] == third
    assert router.seen == ["scopes"]


def test_a_failure_without_an_error_body_gets_one(relayed):
    client, backend = relayed.client, relayed.backend
    seq = client.request("threads")
    backend.send_raw(frame(b'{"seq":0,"type":"response","request_seq":%d,"success":false,'
                           b'"command":"threads","message":"no"}' % backend.receive()["seq"]))
    answer = client.receive()
    assert answer["request_seq"] == seq and answer["success"] is False
    assert answer["body"]["error"]["format"] == "no"


def test_the_backend_going_away_fails_the_requests_in_flight(relayed):
    client, backend = relayed.client, relayed.backend
    seq = client.request("threads")
    backend.receive()
    backend.sock.shutdown(socket.SHUT_RDWR)
    answer = client.receive()
    assert answer["request_seq"] == seq and answer["success"] is False
    assert "went away" in answer["message"]
    later = client.request("threads")
    assert client.receive()["request_seq"] == later  # Python answers it (cannot send)


def test_bytes_python_read_ahead_go_to_the_core_first():
    """The frame after `launch` arrived in the same write, so Python's buffered reader holds
    it when the backend is attached: the core must get and serve it."""
    client_test, client_adapter = socket.socketpair()
    backend_test, backend_adapter = socket.socketpair()
    relay = relay_module.FastRelay(client_adapter.makefile("rb"), client_adapter.makefile("wb"))
    router, events = Router(), Events()
    channel = relay.client_channel(router)
    events.client = channel

    def attach():
        router.backend = relay.backend_channel(backend_adapter, events, "backend")
        router.backend.start()
        relay.set_plain(PLAIN)
    router.on_launch = attach
    channel.start()
    try:
        client, backend = Peer(client_test), Peer(backend_test)
        client.send_raw(frame(b'{"seq":1,"type":"request","command":"launch"}') +
                        frame(b'{"seq":2,"type":"request","command":"threads"}'))
        sent = backend.receive()
        assert sent["command"] == "threads" and sent["seq"] >= relay_module._fastrelay.SEQ_BASE
        backend.answer(sent)
        answers = {m["request_seq"] for m in (client.receive(), client.receive())}
        assert answers == {1, 2}
        assert router.seen == []
    finally:
        for sock in (client_test, backend_test, client_adapter, backend_adapter):
            sock.close()


def test_large_frames_cross_whole(relayed):
    """A response far larger than one read (Delve's answer to a long `variables`), and a
    request too large for the fast path (it goes through Python)."""
    client, backend = relayed.client, relayed.backend
    variables = [{"name": f"v{i}", "value": "x" * 40, "variablesReference": 0}
                 for i in range(6000)]
    seq = client.request("variables", {"variablesReference": 7})
    backend.answer(backend.receive(), json.dumps({"variables": variables}))
    answer = client.receive()
    assert answer["request_seq"] == seq and answer["body"]["variables"] == variables
    seq = client.request("evaluate", {"expression": "x" * 100_000, "frameId": 1})
    sent = backend.receive()
    assert sent["seq"] < relay_module._fastrelay.SEQ_BASE  # through Python
    assert len(sent["arguments"]["expression"]) == 100_000
    backend.answer(sent, '{"result":"1","variablesReference":0}')
    assert client.receive()["request_seq"] == seq


DEADLOCK_PROBE = """
import os, threading, time
from adapter.protocol import _fastrelay
read, write = os.pipe()
core = _fastrelay.Core(write)
held = threading.Event()

def writer():
    with core.backend_lock:     # a Python thread between the halves of a backend write
        held.set()
        time.sleep(0.3)         # lets go of the GIL; needs it back to leave the lock

thread = threading.Thread(target=writer)
thread.start()
held.wait()
for call in (lambda: core.claim(1, _fastrelay.SEQ_BASE), lambda: core.take_inflight(1),
             lambda: core.detach_backend(1)):
    call()                      # each takes backend_lock: must not hold the GIL meanwhile
thread.join()
print("no deadlock")
"""


def test_calls_that_take_the_backend_lock_let_go_of_the_gil_first():
    """A Python thread holding backend_lock (Core.backend_lock, released in __exit__ after the
    GIL is taken back) and another calling claim with the GIL held deadlocked a CI run; each
    call runs in a child process here, so that a deadlock fails the test instead of hanging
    the suite."""
    done = subprocess.run([sys.executable, "-c", DEADLOCK_PROBE], capture_output=True,
                          text=True, timeout=30, cwd=pathlib.Path(__file__).resolve().parents[3])
    assert done.stdout.strip() == "no deadlock", done.stderr

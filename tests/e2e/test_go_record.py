"""Record breakpoints in a Go HTTP handler through `ptdebug dap` in front of real Delve: a
conditional record breakpoint captures one request (Delve lets go of the program, the ptrace
stepper records the goroutine's thread, a new Delve attaches after), the program serves on,
and at a later stop in the same goroutine stepping back walks the capture by Go source line."""
from __future__ import annotations

import re
import threading
import time
import urllib.request

import pytest
from conftest import PROGRAMS, top_frame
from go_support import copy_package, go_marker, output_text, start_go

pytestmark = pytest.mark.timeout(240)

GO_HTTP = PROGRAMS / "go_http"
WANTED = "usr-7a9f"


def _port(client, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(r"listening on 127\.0\.0\.1:(\d+)", output_text(client))
        if match:
            return int(match.group(1))
        client.expect_event("output", timeout=deadline - time.monotonic())
    raise AssertionError(f"the service never said where it listens: {output_text(client)!r}")


class Requests:
    """HTTP GETs from background threads (a handler may sit at a breakpoint meanwhile)."""

    def __init__(self, port: int):
        self.port = port
        self.answers: dict[str, str] = {}
        self.threads: list[threading.Thread] = []

    def get(self, request_id: str) -> None:
        def fetch():
            url = f"http://127.0.0.1:{self.port}/?id={request_id}"
            try:
                with urllib.request.urlopen(url, timeout=120) as reply:
                    self.answers[request_id] = reply.read().decode()
            except OSError as exc:  # the session ended with the request open
                self.answers.setdefault(request_id, f"failed: {exc}")
        thread = threading.Thread(target=fetch, daemon=True)
        thread.start()
        self.threads.append(thread)

    def wait(self, request_id: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while request_id not in self.answers and time.monotonic() < deadline:
            time.sleep(0.02)
        assert request_id in self.answers, f"no answer to {request_id} within {timeout} s"
        return self.answers[request_id]


def _checksum(request_id: str) -> int:
    """main.checksum of go_http, in Python: what the service must still answer."""
    total = 7
    for i, b in enumerate((request_id * 2).encode()):
        total = (total * 31 + b) & 0xFFFFFFFF
        total ^= (i << 3) & 0xFFFFFFFF
    return total


@pytest.fixture
def go_http_session(start_adapter, tmp_path):
    package = copy_package(GO_HTTP, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package),
                                "recordWindow": {"function": "main.checksum",
                                                 "untilReturn": True}},
             source=source, breakpoints={
                 "record_here": {"mode": "record", "condition": f'id == "{WANTED}"'},
                 "after": {"condition": f'id == "{WANTED}"'}})
    return run, source, Requests(_port(client))


def test_record_breakpoint_captures_one_request_and_steps_back_by_go_line(go_http_session):
    run, source, requests = go_http_session
    client = run.client
    # other requests pass the record breakpoint without a capture and are answered
    requests.get("usr-0001")
    assert requests.wait("usr-0001") == f"usr-0001 {_checksum('usr-0001'):08x}\n"
    assert not client.events("ptdebug/capture")

    requests.get(WANTED)
    try:
        capture = client.expect_event("ptdebug/capture", timeout=60)["body"]
    except TimeoutError:
        raise AssertionError(run.log()[-6000:]) from None
    assert capture["status"] == "complete", str(capture) + run.log()[-3000:]
    assert capture["instructions"] > 50 and capture["location"]["line"] == go_marker(
        source, "record_here")
    assert "main.checksum" in capture["window"]
    # the same request then stops at the normal breakpoint after the window: Delve is back,
    # and the stop is the client's breakpoint by the id it was given before the recording
    try:
        stopped = client.expect_stopped("breakpoint", timeout=30)
    except TimeoutError:
        raise AssertionError(run.log()[-2500:] + str([(m.get("event"), m.get("body")) for m in client.received if m.get("type") == "event"][-8:])) from None
    thread_id = stopped["threadId"]
    assert thread_id == capture["threadId"]
    top = top_frame(client, thread_id)
    assert top["line"] == go_marker(source, "after")

    # step back by line through checksum's loop: Go lines of the fixture, newest first
    lines = []
    for _ in range(200):
        client.call("stepBack", {"threadId": thread_id, "granularity": "line"})
        back = client.expect_stopped("step", timeout=30)
        frame = top_frame(client, thread_id)
        if frame.get("source", {}).get("path") == str(source):
            lines.append(frame["line"])
        if "start of the recorded history" in back["description"]:
            break
    # newest first: the return, then the loop body once per byte of the payload (the id
    # twice), then the function's first lines, where the recorded history starts
    loop_lines = {go_marker(source, m) for m in ("loop", "mix", "shift")}
    assert lines[0] == go_marker(source, "sum_return"), lines
    assert [line for line in lines if line == go_marker(source, "mix")] == \
        [go_marker(source, "mix")] * len(WANTED * 2), lines
    assert set(lines) == loop_lines | {go_marker(source, m) for m in (
        "sum_return", "sum_init", "checksum_entry")}, lines
    assert lines[-1] == go_marker(source, "checksum_entry"), lines

    # back to live and on: the request is answered with the right checksum
    client.call("continue", {"threadId": thread_id})
    assert requests.wait(WANTED) == f"{WANTED} {_checksum(WANTED):08x}\n"
    # the program still stops at breakpoints after the recording (a new Delve holds it)
    requests.get(WANTED)
    stopped = client.expect_stopped("breakpoint", timeout=60)
    assert top_frame(client, stopped["threadId"])["line"] in (go_marker(source, "after"),)
    client.call("disconnect", {"terminateDebuggee": True})


HANDOFF_ROUNDS = 60


def test_step_back_stays_in_the_goroutine_across_switches(start_adapter, tmp_path):
    """go_handoff (GOMAXPROCS=1: three goroutines hand a token around on one P): a record
    breakpoint in one relay goroutine records it through channel sends, where it blocks and
    the scheduler runs the others; locked to its thread for the window (issue 14 item 3), the
    goroutine comes back to the recorded thread each time, which waits in the scheduler (g0)
    meanwhile. Stepping back by line from a later stop of the same goroutine walks only its
    own lines, passing over the scheduler's stretches."""
    package = copy_package(PROGRAMS / "go_handoff", tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package), "args": [str(HANDOFF_ROUNDS)],
                                # followed through its channel sends, not closed at them
                                "recordWindow": {"instructions": 6000, "untilPark": False}},
             source=source, breakpoints={
                 "relay_send": {"mode": "record", "condition": "v == 0 && call == 1"},
                 # the first relay (it gets 0, 1, 2...; the second gets 1, 2, 3...)
                 "relay_sent": {"condition": f"v == {HANDOFF_ROUNDS - 10} && sent == v && "
                                             "call == 1"}})
    capture = client.expect_event("ptdebug/capture", timeout=120)["body"]
    assert capture["status"] == "complete", str(capture)
    stopped = client.expect_stopped("breakpoint", timeout=60)
    goroutine = stopped["threadId"]
    assert goroutine == capture["threadId"]

    relay_lines = {go_marker(source, "relay_send"), go_marker(source, "relay_sent"),
                   go_marker(source, "relay_send") - 1}  # the `for v := range in` line
    lines, crossed = [], 0
    for _ in range(60):
        client.call("stepBack", {"threadId": goroutine, "granularity": "line"})
        back = client.expect_stopped("step", timeout=30)
        frame = top_frame(client, goroutine)
        assert f"goroutine {goroutine}" in frame["name"], frame["name"]
        lines.append(frame["line"])
        crossed += "instructions other goroutines ran" in back["description"]
        if "start of this goroutine's part" in back["description"] or \
                "start of the recorded history" in back["description"]:
            break
    assert set(lines) <= relay_lines, lines
    assert go_marker(source, "relay_send") in lines and go_marker(source, "relay_sent") in lines
    assert crossed > 0, "no step crossed another goroutine's stretch"

    # the trace scope shows the time of each goroutine that ran in the window
    frame = top_frame(client, goroutine)
    scopes = client.call("scopes", {"frameId": frame["id"]})["scopes"]
    trace = next(s for s in scopes if s["name"] == "Processor Trace")
    items = {v["name"]: v for v in client.call(
        "variables", {"variablesReference": trace["variablesReference"]})["variables"]}
    per_goroutine = client.call("variables", {
        "variablesReference": items["goroutines"]["variablesReference"]})["variables"]
    names = [v["name"] for v in per_goroutine]
    # the recorded goroutine and the scheduler its thread waited in; no other goroutine ran on
    # the thread while it was held there
    assert len(names) == 2 and any("the Go scheduler" in n for n in names), names
    assert any(f"goroutine {goroutine}" in n for n in names), names
    # the threads pane names the goroutine the cursor is in
    threads = client.call("threads", {})["threads"]
    mine = next(t for t in threads if t["id"] == goroutine)
    assert "replaying capture" in mine["name"], mine

    # forward the same way (issue 14 item 5): `next` walks this goroutine's lines only, over
    # the others' stretches, until its recorded part ends (back to the live program)
    forward, crossed = [], 0
    for _ in range(len(lines) + 5):
        client.call("next", {"threadId": goroutine})
        on = client.expect_stopped("step", timeout=30)
        if "back at the live position" in on["description"]:
            break
        frame = top_frame(client, goroutine)
        assert f"goroutine {goroutine}" in frame["name"], (frame["name"], on["description"])
        forward.append(frame["line"])
        crossed += "instructions other goroutines ran" in on["description"]
    else:
        raise AssertionError(f"`next` never reached the live program: {forward}")
    assert forward and set(forward) <= relay_lines, forward
    assert crossed > 0, "no forward step crossed another goroutine's stretch"
    # `stepOut` of relay, which never returns in the window: the live program, not a return
    # another goroutine (or g0) made at the same call depth
    client.call("stepBack", {"threadId": goroutine, "granularity": "line"})
    client.expect_stopped("step", timeout=30)
    assert f"goroutine {goroutine}" in top_frame(client, goroutine)["name"]
    client.call("stepOut", {"threadId": goroutine})
    out = client.expect_stopped("step", timeout=30)
    assert "back at the live position" in out["description"], out
    client.call("disconnect", {"terminateDebuggee": True})

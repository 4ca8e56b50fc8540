"""Record breakpoints, normal breakpoints and data breakpoints together in one Go session, on
go_matvec: an HTTP service whose worker pool computes a gonum matrix-vector product per
request (gonum comes from the Go module proxy: go.mod and go.sum are committed, and the
module is downloaded once per test run). What each test shows is in its docstring."""
from __future__ import annotations

import os
import re
import subprocess
import threading
import time
import urllib.request

import pytest
from conftest import PROGRAMS, top_frame
from go_support import copy_package, go_marker, go_tool, output_text, start_go

pytestmark = pytest.mark.timeout(300)

GO_MATVEC = PROGRAMS / "go_matvec"
RECORDED = 'j.tag == "rec"'
"""The condition of every breakpoint: only requests sent with tag=rec are recorded/stopped."""


@pytest.fixture(scope="module")
def gonum_downloaded() -> None:
    """The module cache holds gonum (a fresh machine fetches it from the proxy here, so that
    the first launch's `go build` does not spend its time downloading)."""
    done = subprocess.run([go_tool(), "mod", "download"], cwd=GO_MATVEC, check=False,
                          capture_output=True,
                          text=True, timeout=240, env=dict(os.environ, GOFLAGS="-mod=mod"))
    assert done.returncode == 0, f"go mod download of gonum failed: {done.stderr}"


class Service:
    """The service a session runs: its port, and GETs sent from background threads (the
    handler may sit at a breakpoint meanwhile)."""

    def __init__(self, client, timeout: float = 60.0):
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(r"listening on 127\.0\.0\.1:(\d+)", output_text(client))
            if match:
                self.port = int(match.group(1))
                break
            assert time.monotonic() < deadline, output_text(client)
            client.expect_event("output", timeout=deadline - time.monotonic())
        self.answers: dict[str, str] = {}

    def get(self, request_id: str, tag: str = "") -> str:
        key = f"{request_id}/{tag}"

        def fetch():
            url = f"http://127.0.0.1:{self.port}/?id={request_id}&tag={tag}"
            try:
                with urllib.request.urlopen(url, timeout=120) as reply:
                    self.answers[key] = reply.read().decode()
            except OSError as exc:
                self.answers.setdefault(key, f"failed: {exc}")
        threading.Thread(target=fetch, daemon=True).start()
        return key

    def wait(self, key: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while key not in self.answers and time.monotonic() < deadline:
            time.sleep(0.02)
        assert key in self.answers, f"no answer to {key} within {timeout} s"
        return self.answers[key]


def _launch(start_adapter, tmp_path, window: dict, breakpoints: dict):
    package = copy_package(GO_MATVEC, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    start_go(run.client, "launch", {"program": str(package), "recordWindow": window},
             source=source, breakpoints=breakpoints)
    return run, source, Service(run.client)


def _set_breakpoints(client, source, breakpoints: dict) -> None:
    body = client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": [
        {"line": go_marker(source, name), **extra} for name, extra in breakpoints.items()]})
    assert all(b["verified"] for b in body["breakpoints"]), body


def _watch_served(client, source, thread_id: int) -> dict:
    """A write data breakpoint on main.served, set at a stop of `thread_id`; then continue:
    the stop it gives (in the worker that counts the request)."""
    frame = top_frame(client, thread_id)
    info = client.call("dataBreakpointInfo", {"name": "main.served", "frameId": frame["id"]})
    body = client.call("setDataBreakpoints", {"breakpoints": [
        {"dataId": info["dataId"], "accessType": "write"}]})
    assert body["breakpoints"][0]["verified"] is True, body
    client.call("continue", {"threadId": thread_id})
    hit = client.expect_stopped("data breakpoint", timeout=30)
    assert top_frame(client, hit["threadId"])["line"] in (go_marker(source, "count"),
                                                           go_marker(source, "count") + 1)
    return hit


def test_data_breakpoint_then_record_breakpoint_then_data_breakpoint(
        gonum_downloaded, start_adapter, tmp_path):
    """Issue 14: dataBreakpointInfo at the first stop is answered by Delve's feature (it was
    refused 1301 while the adapter had not learnt the debuggee's pid yet); after a data
    breakpoint was set and cleared, a record breakpoint records (it failed with `ptrace
    (PTRACE_POKEUSER) EINVAL`: Delve leaves the debug-register slots as 8-byte write watches);
    after the recording, a data breakpoint works again in the Delve that came back."""
    run, source, service = _launch(start_adapter, tmp_path, {"instructions": 400_000},
                                   {"norm": {"condition": RECORDED}})
    client = run.client
    first = service.get("usr-7a9f", "rec")  # at once: the first stop comes early
    stopped = client.expect_stopped("breakpoint", timeout=60)
    hit = _watch_served(client, source, stopped["threadId"])
    client.call("setDataBreakpoints", {"breakpoints": []})
    _set_breakpoints(client, source, {"record_here": {"mode": "record", "condition": RECORDED},
                                      "count": {"condition": RECORDED}})
    client.call("continue", {"threadId": hit["threadId"]})
    reference = service.wait(first)  # stopped twice, not recorded: the program's answer
    assert reference.startswith("usr-7a9f "), reference

    second = service.get("usr-7a9f", "rec")
    try:
        capture = client.expect_event("ptdebug/capture", timeout=90)["body"]
    except TimeoutError:
        raise AssertionError(output_text(client)[-2000:] + run.log()[-3000:]) from None
    # the normal breakpoint inside the window closes it, and stops (as without data breakpoints)
    assert f"breakpoint at main.go:{go_marker(source, 'count')}" in capture["endReason"], capture
    assert capture["instructions"] > 100
    stopped = client.expect_stopped("breakpoint", timeout=60)
    assert top_frame(client, stopped["threadId"])["line"] == go_marker(source, "count")
    assert stopped["threadId"] == capture["threadId"]
    # and a data breakpoint again, in the Delve attached after the recording
    _set_breakpoints(client, source, {"norm": {"condition": RECORDED}})
    client.call("continue", {"threadId": stopped["threadId"]})
    assert service.wait(second) == reference
    third = service.get("usr-7a9f", "rec")
    stopped = client.expect_stopped("breakpoint", timeout=60)
    hit = _watch_served(client, source, stopped["threadId"])
    client.call("setDataBreakpoints", {"breakpoints": []})
    client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": []})
    client.call("continue", {"threadId": hit["threadId"]})
    assert service.wait(third) == reference
    assert service.wait(service.get("usr-7a9f")) == reference  # no tag: no breakpoint at all
    assert "did not record" not in output_text(client), output_text(client)
    client.call("disconnect", {"terminateDebuggee": True})


def test_normal_breakpoint_inside_a_record_window_stops(gonum_downloaded, start_adapter,
                                                        tmp_path):
    """Issue 14, build 2: a record breakpoint at the top of the worker's job and a normal
    breakpoint a few lines later with the same condition. The recorded thread reaches the
    normal one inside the window: the window closes there, Delve takes the program back and
    the user gets that stop (it was passed over while Delve was away); the capture ends at the
    stop, so stepBack at once walks back to the record breakpoint's line."""
    run, source, service = _launch(start_adapter, tmp_path, {"instructions": 400_000}, {
        "record_here": {"mode": "record", "condition": RECORDED},
        "norm": {"condition": RECORDED}})
    client = run.client
    reference = service.wait(service.get("usr-7a9f"))  # no tag: nothing stops, nothing records
    recorded = service.get("usr-7a9f", "rec")
    try:
        capture = client.expect_event("ptdebug/capture", timeout=120)["body"]
        stopped = client.expect_stopped("breakpoint", timeout=60)
    except TimeoutError:
        raise AssertionError(output_text(client)[-2000:] + run.log()[-3000:]) from None
    assert "breakpoint at main.go:" in capture["endReason"], capture
    assert stopped["threadId"] == capture["threadId"]
    top = top_frame(client, stopped["threadId"])
    assert top["line"] == go_marker(source, "norm"), top
    assert "closed early at the breakpoint at main.go" in output_text(client)

    lines = []
    for _ in range(40):
        client.call("stepBack", {"threadId": stopped["threadId"], "granularity": "line"})
        back = client.expect_stopped("step", timeout=30)
        frame = top_frame(client, stopped["threadId"])
        if frame.get("source", {}).get("path") == str(source):
            lines.append(frame["line"])
        if "start of the recorded history" in back["description"]:
            break
    assert lines[0] == go_marker(source, "product"), lines
    assert lines[-1] == go_marker(source, "record_here"), lines

    client.call("continue", {"threadId": stopped["threadId"]})
    assert service.wait(recorded) == reference
    client.call("disconnect", {"terminateDebuggee": True})


@pytest.mark.parametrize("granularity", ["line", "instruction"])
def test_step_back_by_line_from_the_live_stop_steps_over_a_call(gonum_downloaded, start_adapter,
                                                                tmp_path, granularity):
    """Issue 34, item 4: a window from `served++` to the normal breakpoint on the next line but
    one, so that the recorded history ends inside sync.(*Mutex).Unlock's return. Stepping back
    by line from the stop is a reverse step-over, as Delve's and rr's reverse `next`: it stays in
    main.process and reaches the Unlock line, then `served++` (it entered Unlock and walked its
    lines first). By instruction it still enters the callee: Unlock's last instruction."""
    run, source, service = _launch(start_adapter, tmp_path, {"instructions": 400_000}, {
        "count": {"mode": "record", "condition": RECORDED},
        "reply": {"condition": RECORDED}})
    client = run.client
    service.get("usr-7a9f", "rec")
    client.expect_event("ptdebug/capture", timeout=120)
    stopped = client.expect_stopped("breakpoint", timeout=60)
    thread = stopped["threadId"]
    assert top_frame(client, thread)["line"] == go_marker(source, "reply")
    if granularity == "instruction":
        client.call("stepBack", {"threadId": thread, "granularity": "instruction"})
        client.expect_stopped("step", timeout=30)
        assert top_frame(client, thread)["name"].startswith("sync.(*Mutex).Unlock")
    else:
        seen = []
        for _ in ("unlock", "count"):
            client.call("stepBack", {"threadId": thread, "granularity": "line"})
            client.expect_stopped("step", timeout=30)
            frame = top_frame(client, thread)
            seen.append((frame["name"].split(" [")[0], frame["line"]))
        assert seen == [("main.process", go_marker(source, "unlock")),
                        ("main.process", go_marker(source, "count"))], seen
    client.call("disconnect", {"terminateDebuggee": True})

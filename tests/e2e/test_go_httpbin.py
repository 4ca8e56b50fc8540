"""A real third-party Go program from the module proxy, go-httpbin (mccutchen/go-httpbin/v2),
built at test time and launched in mode exec: a record breakpoint at the top of its base64
handler and a normal breakpoint a few lines later, both conditional on the request's query.
The window closes at the normal breakpoint and the user gets that stop (issue 14 saw it passed
over while Delve was away, with the default window too); stepBack walks back to the record
breakpoint's line, and the request is answered as without ptdebug."""
from __future__ import annotations

import os
import subprocess
import time
import urllib.request

import pytest
from conftest import PROGRAMS, top_frame
from dapclient import free_port
from go_support import go_tool, output_text, start_go

pytestmark = pytest.mark.timeout(400)

MODULE = PROGRAMS / "go_httpbin"
COMMAND = "github.com/mccutchen/go-httpbin/v2/cmd/go-httpbin"
CONDITION = 'r.URL.RawQuery == "trace=1"'


@pytest.fixture(scope="module")
def httpbin(tmp_path_factory) -> tuple:
    """(binary, handlers.go): go-httpbin built for debugging from the module proxy."""
    out = tmp_path_factory.mktemp("httpbin") / "go-httpbin"
    env = dict(os.environ, GOFLAGS="-mod=mod", CGO_ENABLED="0")
    built = subprocess.run([go_tool(), "build", "-gcflags=all=-N -l", "-o", str(out), COMMAND],
                           cwd=MODULE, env=env, capture_output=True, text=True, timeout=300,
                           check=False)
    assert built.returncode == 0, f"building go-httpbin failed: {built.stderr}"
    where = subprocess.run([go_tool(), "list", "-m", "-f", "{{.Dir}}",
                            "github.com/mccutchen/go-httpbin/v2"], cwd=MODULE, env=env,
                           capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    return out, os.path.join(where, "httpbin", "handlers.go")


def _line(path: str, after: str, text: str) -> int:
    """The 1-based line of the first line containing `text` after the line containing `after`
    (third-party source has no markers)."""
    with open(path) as f:
        lines = f.read().splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    return next(i for i in range(start, len(lines)) if text in lines[i]) + 1


def _get(url: str, answers: dict, key: str) -> None:
    import threading

    def fetch():
        try:
            with urllib.request.urlopen(url, timeout=120) as reply:
                answers[key] = reply.read().decode()
        except OSError as exc:
            answers[key] = f"failed: {exc}"
    threading.Thread(target=fetch, daemon=True).start()


def _wait(answers: dict, key: str, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while key not in answers and time.monotonic() < deadline:
        time.sleep(0.05)
    assert key in answers, f"no answer to {key}"
    return answers[key]


def test_httpbin_handler_record_then_normal_breakpoint(httpbin, start_adapter):
    binary, handlers = httpbin
    record_line = _line(handlers, "func (h *HTTPBin) Base64(", "newBase64Helper(")
    stop_line = _line(handlers, "func (h *HTTPBin) Base64(", 'Get("content-type")')
    port = free_port()
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(binary), "mode": "exec",
                                "args": ["-host", "127.0.0.1", "-port", str(port)],
                                "recordWindow": {"instructions": 300_000}})
    body = client.call("setBreakpoints", {"source": {"path": handlers}, "breakpoints": [
        {"line": record_line, "mode": "record", "condition": CONDITION},
        {"line": stop_line, "condition": CONDITION}]})
    assert all(b["verified"] for b in body["breakpoints"]), body
    base = f"http://127.0.0.1:{port}/base64/encode/cHRkZWJ1Zy1odHRwYmlu"
    answers: dict = {}
    deadline = time.monotonic() + 60
    while "plain" not in answers or answers["plain"].startswith("failed"):
        assert time.monotonic() < deadline, answers
        answers.pop("plain", None)
        _get(base, answers, "plain")
        _wait(answers, "plain")
        time.sleep(0.2)
    _get(base + "?trace=1", answers, "traced")
    try:
        capture = client.expect_event("ptdebug/capture", timeout=120)["body"]
        stopped = client.expect_stopped("breakpoint", timeout=60)
    except TimeoutError:
        raise AssertionError(output_text(client)[-2000:] + run.log()[-3000:]) from None
    assert f"handlers.go:{stop_line}" in capture["endReason"], capture
    assert stopped["threadId"] == capture["threadId"]
    assert top_frame(client, stopped["threadId"])["line"] == stop_line
    lines = []
    for _ in range(60):
        client.call("stepBack", {"threadId": stopped["threadId"], "granularity": "line"})
        back = client.expect_stopped("step", timeout=30)
        frame = top_frame(client, stopped["threadId"])
        if frame.get("source", {}).get("path") == handlers:
            lines.append(frame["line"])
        if "start of the recorded history" in back["description"]:
            break
    assert lines and lines[-1] == record_line, lines
    client.call("continue", {"threadId": stopped["threadId"]})
    assert _wait(answers, "traced") == answers["plain"]
    client.call("disconnect", {"terminateDebuggee": True})

"""Helpers of the record-breakpoint and reverse-stepping end-to-end tests: the shipped demo
service (adapter/demo_assets) with its native helper compiled here with gcc -g, and a session
driven to the stop that follows a conditional record breakpoint."""
from __future__ import annotations

import pathlib
import subprocess
import sys

from conftest import INITIALIZE, PROGRAMS, ROOT, marker_line
from dapclient import DapClient

ASSETS = ROOT / "adapter" / "demo_assets"
SERVICE = ASSETS / "service.py"
KVCACHE = ASSETS / "kvcache.c"


def line_of(path: pathlib.Path, marker: str) -> int:
    """The line holding `@marker` (as `# @x` or `/* @x */`)."""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.rstrip().endswith((f"# @{marker}", f"/* @{marker} */")):
            return number
    raise LookupError(f"no @{marker} in {path}")


def build_kvcache(directory: pathlib.Path) -> str:
    library = directory / "libkvcache.so"
    subprocess.run(["gcc", "-g", "-O0", "-shared", "-fPIC", "-o", str(library), str(KVCACHE)],
                   check=True)
    return str(library)


def record_session(client: DapClient, library: str, *, record_condition: str,
                   stop_condition: str, rounds: int = 60, window: dict | None = None) -> dict:
    """Launch the service with a record breakpoint at @request (condition `record_condition`)
    and a normal one at @after_request (`stop_condition`); return the body of the first
    `stopped` event, which must be the normal one."""
    initialize = client.call("initialize", INITIALIZE)
    assert {m["mode"] for m in initialize["breakpointModes"]} == {"normal", "record"}
    launch_seq = client.send_request("launch", {
        "program": str(SERVICE), "args": [library, str(rounds)], "console": "internalConsole",
        "recordWindow": window or {"function": "kv_update", "timeout": 15}})
    client.expect_event("initialized")
    answer = client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": line_of(SERVICE, "request"), "mode": "record", "condition": record_condition},
        {"line": line_of(SERVICE, "after_request"), "condition": stop_condition}]})
    assert [b["verified"] for b in answer["breakpoints"]] == [True, True], answer
    assert "record" in answer["breakpoints"][0]["message"], answer
    client.call("configurationDone", {})
    assert client.expect_response(launch_seq)["success"]
    return client.expect_stopped("breakpoint", timeout=40)


def launch_service(client: DapClient, library: str, window: dict,
                   breakpoints: list[dict], progress: bool = False) -> None:
    """Launch the service with the session's `recordWindow` and these breakpoints on it (each
    {"marker": NAME, ...DAP fields}); returns once the launch is answered (it runs). With
    `progress` the client says it reports progress (supportsProgressReporting)."""
    client.call("initialize", {**INITIALIZE, "supportsProgressReporting": progress})
    launch_seq = client.send_request("launch", {
        "program": str(SERVICE), "args": [library, "60"], "console": "internalConsole",
        "recordWindow": window})
    client.expect_event("initialized")
    client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": line_of(SERVICE, bp["marker"]), **{k: v for k, v in bp.items() if k != "marker"}}
        for bp in breakpoints]})
    client.call("configurationDone", {})
    assert client.expect_response(launch_seq)["success"]


def stop_ready_with_data_breakpoints(run, client: DapClient, library: str, window: dict) -> dict:
    """Launch the service stopped at @ready, with data breakpoints available (the feature's
    capabilities announced); returns the stop's body."""
    launch_service(client, library, window, [{"marker": "ready"}])
    ready = client.expect_stopped("breakpoint")
    run.track()
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    return ready


def launch_onnx_service(client: DapClient, tmp_path: pathlib.Path, **config) -> None:
    """Launch tests/fixtures/programs/dap_onnx_kv_service.py (3 requests, 0.3 s apart) with
    `config` added, a record breakpoint on `# @embed` and a normal one on `# @after`, both for
    the second request only; returns once the launch is answered."""
    service = PROGRAMS / "dap_onnx_kv_service.py"
    client.call("initialize", INITIALIZE)
    launch = client.send_request("launch", {
        "program": str(service), "args": ["3", "0.3"], "python": sys.executable,
        "console": "internalConsole", "captures": str(tmp_path / "captures"), **config})
    client.expect_event("initialized")
    answer = client.call("setBreakpoints", {"source": {"path": str(service)}, "breakpoints": [
        {"line": marker_line(service, "embed"), "mode": "record", "condition": "position == 1"},
        {"line": marker_line(service, "after"), "condition": "position == 1"}]})
    assert all(b["verified"] for b in answer["breakpoints"]), answer
    client.call("configurationDone", {})
    assert client.expect_response(launch)["success"]


def assert_steps_back_by_instruction(client: DapClient, thread: int, total: int) -> None:
    """Three stepBacks by instruction from the end of a capture of `total` instructions land
    on the three instructions recorded last, in turn."""
    import re
    positions = []
    for _ in range(3):
        client.call("stepBack", {"threadId": thread, "granularity": "instruction"})
        step = client.expect_stopped("step")
        found = re.search(r"instruction (\d+) of (\d+)", step["description"])
        assert found, step
        positions.append((int(found.group(1)), int(found.group(2))))
    assert positions == [(total - 1, total), (total - 2, total), (total - 3, total)], positions

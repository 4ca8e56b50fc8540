"""Captures outlive their session: a Python session's capture (the demo service's native helper,
recorded by a record breakpoint) and a Go session's (an HTTP handler, Delve handing the thread
over) are in the captures directory after the adapter has exited, export, and decode the same
path after the bundle was packed (`ptdebug captures pack`: its images are in the captures
store beside it), copied elsewhere and the recorded program's files were removed (the
Go binary ptdebug built is removed by ptdebug itself at the end of the session). Before,
record_breakpoints.close removed /tmp/ptdebug-captures-*, and a Go capture's manifest named
/tmp/ptdebug-go-*/__debug_bin, gone with the session."""
from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys

import pytest
from conftest import INITIALIZE, ROOT
from record_support import SERVICE, build_kvcache, line_of

pytestmark = pytest.mark.timeout(300)


def ptdebug(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "adapter.cli", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, f"ptdebug {args}: {run.stdout}\n{run.stderr}"
    return run.stdout


def decoded_ips(bundle: pathlib.Path) -> list[str]:
    return [line for line in ptdebug("decode", str(bundle), "--format", "ips").splitlines()
            if line.strip() and not line.startswith("[")]


def check_self_contained(bundle: pathlib.Path, elsewhere: pathlib.Path,
                         originals: list[pathlib.Path]) -> None:
    """The bundle names every image its decode reads in the captures store beside it (issue
    33: one copy for all the captures of the directory), and `ptdebug captures pack` makes it
    self-contained: the packed copy, moved to `elsewhere` with the captures directory (store
    included) and the program's files `originals` removed, decodes the same path."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["status"] == "complete", manifest.get("partial_reason")
    assert manifest["images"] and all(i["file"].startswith(("../.store/images/", "images/"))
                                      for i in manifest["images"]), manifest["images"]
    assert any(i["file"].startswith("../.store/images/") for i in manifest["images"])
    before = decoded_ips(bundle)
    assert len(before) > 20
    packed = elsewhere.parent / "packed"
    ptdebug("captures", "--dir", str(bundle.parent), "pack", bundle.name, "-o", str(packed))
    shutil.copytree(packed, elsewhere)
    shutil.rmtree(packed)
    shutil.rmtree(bundle.parent)
    for original in originals:
        original.unlink(missing_ok=True)
    assert decoded_ips(elsewhere) == before


def test_a_python_sessions_capture_is_kept_in_the_workspace(start_adapter, tmp_path):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    library = pathlib.Path(build_kvcache(tmp_path))
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    launch = client.send_request("launch", {
        "program": str(SERVICE), "args": [str(library), "20"], "console": "internalConsole",
        "cwd": str(workspace), "recordWindow": {"function": "kv_update", "timeout": 15}})
    client.expect_event("initialized")
    client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": line_of(SERVICE, "request"), "mode": "record", "condition": "request_id == 3"},
        {"line": line_of(SERVICE, "after_request"), "condition": "request_id == 4"}]})
    client.call("configurationDone", {})
    assert client.expect_response(launch)["success"]
    client.expect_stopped("breakpoint", timeout=60)
    assert client.events("ptdebug/capture"), run.log()[-6000:]
    bundle = pathlib.Path(client.events("ptdebug/capture")[0]["body"]["bundle"])
    assert bundle.parent == workspace / ".ptdebug" / "captures", bundle
    assert "service-capture-1" in bundle.name
    assert (workspace / ".ptdebug" / ".gitignore").read_text().splitlines()[-1] == "*"
    client.call("disconnect", {"terminateDebuggee": True})
    assert run.wait_exit() == 0
    # after the session: there, exportable, and it decodes without the program's library
    assert (bundle / "manifest.json").is_file()
    ptdebug("export", "pprof", str(bundle), "-o", str(tmp_path / "profile.pb.gz"))
    assert (tmp_path / "profile.pb.gz").stat().st_size > 0
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert any(i["path"] == str(library) for i in manifest["images"])
    check_self_contained(bundle, tmp_path / "moved" / bundle.name, [library])


def test_a_sessions_limit_removes_older_captures_never_a_pinned_one_nor_its_own(
        start_adapter, tmp_path):
    """`capturesLimit` far below what the directory holds: once the session's capture is kept,
    the older unpinned capture is removed, the pinned one and the session's own (leased) stay,
    and an output event says so (issue 33)."""
    workspace = tmp_path / "workspace"
    captures = workspace / ".ptdebug" / "captures"
    program = tmp_path / "hotpath"
    subprocess.run(["gcc", "-O0", "-g", "-o", str(program),
                    str(ROOT / "tests/fixtures/programs/hotpath.c")], check=True)
    for name in ("20000101-000000-old-capture-1", "20000101-000001-kept-capture-1"):
        ptdebug("record", "--backend", "stepper", "--from", "serve", "--until-return", "-o",
                str(captures / name), "--", str(program), "2")
    ptdebug("captures", "--dir", str(captures), "pin", "20000101-000001-kept-capture-1")
    library = pathlib.Path(build_kvcache(tmp_path))
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    launch = client.send_request("launch", {
        "program": str(SERVICE), "args": [str(library), "20"], "console": "internalConsole",
        "cwd": str(workspace), "capturesLimit": "1KB",
        "recordWindow": {"function": "kv_update", "timeout": 15}})
    client.expect_event("initialized")
    client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": line_of(SERVICE, "request"), "mode": "record", "condition": "request_id == 3"},
        {"line": line_of(SERVICE, "after_request"), "condition": "request_id == 4"}]})
    client.call("configurationDone", {})
    assert client.expect_response(launch)["success"]
    client.expect_stopped("breakpoint", timeout=60)
    assert client.events("ptdebug/capture"), run.log()[-6000:]
    bundle = pathlib.Path(client.events("ptdebug/capture")[0]["body"]["bundle"])
    # the limit is kept once the capture is stored, after its announcement
    prepared = client.expect_event("ptdebug/capturePrepared", timeout=60)["body"]
    assert prepared["bundle"] == str(bundle) and prepared["problems"] == [], prepared
    said = [e["body"]["output"] for e in client.events("output")
            if "reached their limit" in e["body"].get("output", "")]
    assert said and "removed 20000101-000000-old-capture-1" in said[0] and \
        "still over it (what is left is pinned or in use)" in said[0], said
    listing = json.loads(ptdebug("captures", "--dir", str(captures), "--json"))
    assert [(c["name"], c["pinned"], c["in_use"]) for c in listing["items"]] == [
        ("20000101-000001-kept-capture-1", True, False), (bundle.name, False, True)]
    client.call("disconnect", {"terminateDebuggee": True})
    assert run.wait_exit() == 0
    listing = json.loads(ptdebug("captures", "--dir", str(captures), "--json"))
    assert [c["in_use"] for c in listing["items"]] == [False, False]
    assert (bundle / "manifest.json").is_file()


def test_a_go_sessions_capture_is_kept_with_the_built_binary(start_adapter, tmp_path):
    from go_support import copy_package, go_marker, start_go
    from test_go_record import GO_HTTP, WANTED, Requests, _port
    package = copy_package(GO_HTTP, tmp_path)
    source = package / "main.go"
    kept = tmp_path / "kept captures"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package), "captures": str(kept),
                                "recordWindow": {"function": "main.checksum",
                                                 "untilReturn": True}},
             source=source, breakpoints={
                 "record_here": {"mode": "record", "condition": f'id == "{WANTED}"'}})
    requests = Requests(_port(client))
    requests.get(WANTED)
    try:
        capture = client.expect_event("ptdebug/capture", timeout=90)["body"]
    except TimeoutError:
        raise AssertionError(run.log()[-5000:]) from None
    assert capture["status"] == "complete" and capture["location"]["line"] == go_marker(
        source, "record_here")
    bundle = pathlib.Path(capture["bundle"])
    assert bundle.parent == kept
    requests.wait(WANTED)
    manifest = json.loads((bundle / "manifest.json").read_text())
    built = [pathlib.Path(i["path"]) for i in manifest["images"]
             if i["path"].endswith("__debug_bin")]
    assert built, manifest["images"]
    client.call("disconnect", {"terminateDebuggee": True})
    assert run.wait_exit() == 0
    assert not built[0].exists(), "ptdebug's temporary Go build outlived the session"
    ptdebug("export", "perfetto", str(bundle), "-o", str(tmp_path / "trace.json"))
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    check_self_contained(bundle, tmp_path / "elsewhere" / bundle.name, [])


def test_an_adapter_killed_mid_recording_leaves_a_bundle_marked_partial(start_adapter,
                                                                        tmp_path):
    """SIGKILL to the adapter while a long window records: no temporary folder, and the
    capture's bundle says it is partial and why (the recorder outlives the adapter and
    finishes the manifest once its target is gone)."""
    import os
    import signal
    import time
    started = time.time()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    library = build_kvcache(tmp_path)
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    launch = client.send_request("launch", {
        "program": str(SERVICE), "args": [library, "40"], "console": "internalConsole",
        # a window that lasts (not closed when handle() returns): the adapter is killed in it
        "cwd": str(workspace), "recordWindow": {"instructions": 300000, "untilReturn": False}})
    client.expect_event("initialized")
    client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
        {"line": line_of(SERVICE, "request"), "mode": "record", "condition": "request_id == 2"}]})
    client.call("configurationDone", {})
    assert client.expect_response(launch)["success"]
    captures = workspace / ".ptdebug" / "captures"
    deadline = time.monotonic() + 30
    while not (captures.is_dir() and any(not p.name.startswith(".") for p in captures.iterdir())) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    bundle = next(p for p in captures.iterdir() if not p.name.startswith("."))
    time.sleep(1.0)
    run.track()
    assert json.loads((bundle / "manifest.json").read_text())["status"] == "partial"
    os.kill(run.proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    manifest = {}
    while time.monotonic() < deadline:
        manifest = json.loads((bundle / "manifest.json").read_text())
        if manifest.get("partial_reason") != "recording in progress":
            break
        time.sleep(0.2)
    assert manifest["status"] == "partial" and manifest["partial_reason"] not in (
        None, "recording in progress"), manifest
    assert not [p for p in pathlib.Path("/tmp").glob("ptdebug-captures-*")
                if p.stat().st_mtime >= started]  # what the captures went to before
    run.assert_nothing_left(timeout=30)

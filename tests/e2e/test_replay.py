"""Replaying a trace bundle through `ptdebug dap` (`"request": "launch", "replay": PATH`), with
no program running: a C program recorded by `ptdebug record` (the ptrace stepper), a perf.data
built around a real Intel PT recording imported by `ptdebug import`, and a Go program recorded
with goroutine ids. Stepping by instruction must follow exactly the path `ptdebug decode
--format ips` gives; source lines, disassembly and the Processor Trace scope come from the
bundle; a Go bundle's threads are its goroutines. Every message is checked against the DAP
schema by the test client."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest
from conftest import INITIALIZE, PROGRAMS, ROOT

pytestmark = pytest.mark.timeout(240)

HOTPATH = PROGRAMS / "hotpath.c"
HELLO = "dynamorio-drpt2trace/test_simple.raw-2022-07-07-x86_64-hello"


def marker(path: pathlib.Path, name: str) -> int:
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.rstrip().endswith((f"// @{name}", f"# @{name}")):
            return number
    raise LookupError(f"no @{name} in {path}")


def ptdebug(*args: str) -> str:
    run = subprocess.run([sys.executable, "-m", "adapter.cli", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, f"ptdebug {args}: {run.stdout}\n{run.stderr}"
    return run.stdout


def decoded_ips(bundle: pathlib.Path) -> list[int]:
    """The path `ptdebug decode --format ips` gives (its `[...]` lines are events)."""
    return [int(line, 16) for line in ptdebug("decode", str(bundle), "--format",
                                              "ips").splitlines()
            if line.strip() and not line.startswith("[")]


@pytest.fixture(scope="module")
def c_bundle(tmp_path_factory) -> pathlib.Path:
    work = tmp_path_factory.mktemp("replay_c")
    program = work / "hotpath"
    subprocess.run(["gcc", "-O0", "-g", "-no-pie", "-o", str(program), str(HOTPATH)], check=True)
    bundle = work / "hotpath.bundle"
    ptdebug("record", "--backend", "stepper", "--from", "serve", "--until-return", "-o",
            str(bundle), "--", str(program), "2")
    return bundle


@pytest.fixture(scope="module")
def imported_bundle(traces_dir, tmp_path_factory) -> pathlib.Path:
    """`ptdebug import` of a perf.data around DynamoRIO's real Intel PT recording of hello
    (tests/adapter/capture/test_perfdata.py builds the file the same way)."""
    sys.path.insert(0, str(ROOT / "tests" / "adapter" / "capture"))
    try:
        from test_perfdata import _hello_perf_data
    finally:
        sys.path.pop(0)
    work = tmp_path_factory.mktemp("replay_import")
    folder = _hello_perf_data(traces_dir, work / "hello.data")
    bundle = work / "hello.bundle"
    ptdebug("import", str(work / "hello.data"), "-o", str(bundle), "--sysroot", str(folder))
    return bundle


def start_replay(run, bundle: pathlib.Path, **config) -> dict:
    """initialize, launch the replay, configurationDone; the body of the entry stop."""
    client = run.client
    client.call("initialize", INITIALIZE)
    client.call("launch", {"replay": str(bundle), **config})
    client.expect_event("initialized")
    breakpoints = config.pop("_breakpoints", None)
    if breakpoints:
        client.call("setBreakpoints", breakpoints)
    client.call("configurationDone", {})
    stopped = client.expect_stopped("entry")
    assert "replay of" in stopped["description"], stopped
    return stopped


def top(client, thread_id: int) -> dict:
    return client.call("stackTrace", {"threadId": thread_id, "levels": 20})["stackFrames"][0]


def ip_of(client, thread_id: int) -> int:
    return int(top(client, thread_id)["instructionPointerReference"], 16)


def step(client, command: str, thread_id: int, granularity: str = "instruction") -> dict:
    client.call(command, {"threadId": thread_id, "granularity": granularity})
    return client.expect_stopped()


def recorded_position(stopped: dict) -> int:
    """The history position a replay stop names ("... instruction N of M in capture ...")."""
    return int(re.search(r"instruction (\d+) of \d+", stopped["description"]).group(1))


def end_session(run) -> None:
    run.client.call("disconnect", {})
    assert run.wait_exit() == 0


def test_c_recording_replays_exactly_the_decoded_path(start_adapter, c_bundle):
    ips = decoded_ips(c_bundle)
    assert len(ips) > 300
    run = start_adapter()
    client = run.client
    stopped = start_replay(run, c_bundle, stopOnEntry=True)
    thread_id = stopped["threadId"]
    threads = client.call("threads")["threads"]
    assert len(threads) == 1 and "[recorded]" in threads[0]["name"]
    assert client.events("capabilities")[-1]["body"]["capabilities"].get("supportsStepBack") \
        or any(e["body"]["capabilities"].get("supportsStepBack")
               for e in client.events("capabilities"))
    capture = client.events("ptdebug/capture")[0]["body"]
    assert capture["bundle"] == str(c_bundle) and capture["instructions"] == len(ips)
    # forward by instruction from the first recorded instruction: the decoded path
    assert ip_of(client, thread_id) == ips[0]
    walked = [ips[0]]
    for _ in range(120):
        stop = step(client, "next", thread_id)
        assert stop["reason"] == "step" and stop["threadId"] == thread_id
        walked.append(ip_of(client, thread_id))
    assert walked == ips[:121]
    # and back again
    back = []
    for _ in range(60):
        step(client, "stepBack", thread_id)
        back.append(ip_of(client, thread_id))
    assert back == ips[60:120][::-1]
    # stepping back at the first instruction stays there and says why
    for _ in range(61):
        stop = step(client, "stepBack", thread_id)
    assert "start of the recorded history" in stop["description"]
    assert ip_of(client, thread_id) == ips[0]
    end_session(run)


def test_c_recording_shows_lines_disassembly_breakpoints_and_the_trace_scope(start_adapter,
                                                                            c_bundle):
    ips = decoded_ips(c_bundle)
    request_line = marker(HOTPATH, "request")
    run = start_adapter()
    client = run.client
    stopped = start_replay(run, c_bundle, _breakpoints={
        "source": {"path": str(HOTPATH)},
        "breakpoints": [{"line": request_line}, {"line": 1}]})
    thread_id = stopped["threadId"]
    # without stopOnEntry the replay starts where the recording ended
    assert ip_of(client, thread_id) == ips[-1]
    stop = step(client, "next", thread_id)
    assert "end of the recorded history" in stop["description"]
    assert ip_of(client, thread_id) == ips[-1]
    step(client, "stepBack", thread_id)
    assert ip_of(client, thread_id) == ips[-2]
    # reverse-continue to the breakpoint set in the source: a recorded hit of @request
    client.call("reverseContinue", {"threadId": thread_id})
    hit = client.expect_stopped("breakpoint")
    frame = top(client, thread_id)
    assert frame["source"]["path"] == str(HOTPATH) and frame["line"] == request_line, frame
    assert frame["name"].startswith("serve")
    position = recorded_position(hit)
    assert ips[position] == int(frame["instructionPointerReference"], 16)
    # the line before it, by line steps, is a line of hotpath.c too
    step(client, "stepBack", thread_id, "line")
    assert top(client, thread_id)["source"]["path"] == str(HOTPATH)
    # continue replays forward to the same hit
    client.call("continue", {"threadId": thread_id})
    assert recorded_position(client.expect_stopped("breakpoint")) == position
    # the callers come from the recorded calls
    frames = client.call("stackTrace", {"threadId": thread_id})["stackFrames"]
    assert [f["name"].split(" ")[0] for f in frames[:2]] == ["serve", "main"] or \
        frames[0]["name"].startswith("serve")
    # disassembly from the bundle's images, with symbols and source lines
    body = client.call("disassemble", {"memoryReference": frame["instructionPointerReference"],
                                       "instructionCount": 8, "resolveSymbols": True})
    first = body["instructions"][0]
    assert int(first["address"], 16) == ips[position] and first["instructionBytes"]
    assert first.get("symbol") == "serve" and first["line"] == request_line
    # the Processor Trace scope of a recorded frame
    scopes = client.call("scopes", {"frameId": frame["id"]})["scopes"]
    assert [s["name"] for s in scopes][-1] == "Processor Trace"
    variables = client.call("variables", {"variablesReference": scopes[-1]["variablesReference"]})
    shown = {v["name"]: v["value"] for v in variables["variables"]}
    assert shown["position"].startswith(f"instruction {position} of {len(ips)}")
    # nothing was recorded of values, and the replay says so
    answer = client.request("evaluate", {"expression": "total", "frameId": frame["id"]})
    assert answer["success"] is False and "not recorded" in answer["message"]
    # a breakpoint at a line without recorded code is not verified
    answered = client.call("setBreakpoints", {"source": {"path": str(HOTPATH)},
                                              "breakpoints": [{"line": 1}]})
    assert answered["breakpoints"][0]["verified"] is False
    end_session(run)


def test_reverse_continue_honours_hit_conditions_and_names_the_breakpoint(start_adapter,
                                                                         c_bundle):
    """Issue 14 item 5: hit counts are decided on the recorded hits (counted from the start
    of the recording), a condition on values cannot be and every hit stops, saying so; the
    stop names the breakpoint in hitBreakpointIds, backwards and forwards."""
    request_line = marker(HOTPATH, "request")
    source = {"path": str(HOTPATH)}
    run = start_adapter()
    client = run.client
    thread_id = start_replay(run, c_bundle)["threadId"]
    answered = client.call("setBreakpoints", {"source": source,
                                              "breakpoints": [{"line": request_line}]})
    plain_id = answered["breakpoints"][0]["id"]
    client.call("reverseContinue", {"threadId": thread_id})
    last = client.expect_stopped("breakpoint")
    assert last["hitBreakpointIds"] == [plain_id], last
    assert "hit 2 in the recorded history" in last["description"], last
    last_position = recorded_position(last)

    answered = client.call("setBreakpoints", {"source": source, "breakpoints": [
        {"line": request_line, "hitCondition": "== 1"}]})
    counted_id = answered["breakpoints"][0]["id"]
    step(client, "next", thread_id)  # off the hit: the next reverseContinue passes hit 2
    client.call("reverseContinue", {"threadId": thread_id})
    first = client.expect_stopped("breakpoint")
    assert recorded_position(first) < last_position, first
    assert first["hitBreakpointIds"] == [counted_id]
    assert "hit 1 in the recorded history, hit condition '== 1' holds" in first["description"]
    client.call("reverseContinue", {"threadId": thread_id})
    assert "no breakpoint hit before this point" in client.expect_stopped("step")["description"]
    client.call("continue", {"threadId": thread_id})  # forwards: hit 1 again, not hit 2
    assert recorded_position(client.expect_stopped("breakpoint")) == recorded_position(first)

    client.call("setBreakpoints", {"source": source, "breakpoints": [
        {"line": request_line, "condition": "total > 1000"}]})
    client.call("continue", {"threadId": thread_id})
    second = client.expect_stopped("breakpoint")
    assert recorded_position(second) == last_position
    assert "condition 'total > 1000' not evaluated: the recording holds no values" \
        in second["description"], second
    end_session(run)


@pytest.mark.parametrize("asked", [True, False], ids=["progress", "no_progress"])
def test_the_replays_decode_shows_progress_to_a_client_that_asked(start_adapter, c_bundle,
                                                                 monkeypatch, asked):
    """Issue 15 item 6: DAP progress events around the decode of the launch (every decode
    reports once PTDEBUG_PROGRESS_DELAY is 0; by default only those over 0.5 s), none for a
    client that did not announce supportsProgressReporting."""
    monkeypatch.setenv("PTDEBUG_PROGRESS_DELAY", "0")
    run = start_adapter()
    client = run.client
    capabilities = client.call("initialize", {**INITIALIZE, "supportsProgressReporting": asked})
    assert capabilities["supportsCancelRequest"] is True
    client.call("launch", {"replay": str(c_bundle)})
    client.expect_event("initialized")
    client.call("configurationDone", {})
    client.expect_stopped("entry")
    names = [m["event"] for m in client.received if m["type"] == "event"
             and m["event"].startswith("progress")]
    if not asked:
        assert names == []
    else:
        assert names[0] == "progressStart" and names[-1] == "progressEnd", names
        start = client.events("progressStart")[0]["body"]
        assert start["title"] == f"ptdebug: decoding {c_bundle.name}"
        assert client.events("progressEnd")[0]["body"]["progressId"] == start["progressId"]
    assert client.call("cancel", {"progressId": "ptdebug-1"}) == {}  # over: a no-op
    end_session(run)


def test_imported_real_intel_pt_replays_like_libipt(start_adapter, imported_bundle, traces_dir):
    ips = decoded_ips(imported_bundle)
    libipt = [int(line.split()[0], 16) for line in
              (traces_dir / HELLO / "pt.libipt-2.0.5.insn.txt").read_text().splitlines()
              if line and not line.startswith("[")]
    assert ips == libipt and len(ips) == 8
    run = start_adapter()
    client = run.client
    thread_id = start_replay(run, imported_bundle, stopOnEntry=True)["threadId"]
    assert "hello" in client.call("threads")["threads"][0]["name"]
    walked = [ip_of(client, thread_id)]
    for _ in range(len(ips) - 1):
        step(client, "next", thread_id)
        walked.append(ip_of(client, thread_id))
    assert walked == ips
    back = []
    for _ in range(len(ips) - 1):
        step(client, "stepBack", thread_id)
        back.append(ip_of(client, thread_id))
    assert back == ips[:-1][::-1]
    body = client.call("disassemble", {"memoryReference": hex(ips[0]), "instructionCount": 3})
    assert all(i["instructionBytes"] for i in body["instructions"])
    end_session(run)


def test_a_bundle_that_is_not_there_fails_the_launch_naming_it(start_adapter, tmp_path):
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    answer = client.request("launch", {"replay": str(tmp_path / "nothing")})
    assert answer["success"] is False and str(tmp_path / "nothing") in answer["message"]
    assert answer["body"]["error"]["id"] == 1201
    end_session(run)


# --- Go ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def go_bundle(tmp_path_factory):
    """The channel-handoff program recorded by the stepper with the goid probe, as
    tests/adapter/export/test_perfetto_goroutines.py records it."""
    from adapter.capture import record, stepper
    from adapter.golang.stepper_probe import probe_for
    go = shutil.which("go") or "/usr/local/go/bin/go"
    work = tmp_path_factory.mktemp("replay_go")
    package = work / "go_handoff"
    shutil.copytree(PROGRAMS / "go_handoff", package)
    binary = work / "handoff"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=package, check=True,
                   env=dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod"))
    proc = subprocess.Popen([str(binary), "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, GODEBUG="asyncpreemptoff=1"))
    try:
        assert proc.stdout.readline() == b"ready\n"
        probe = probe_for(proc.pid)

        def release():
            time.sleep(1.0)
            proc.stdin.write(b"go\n")
            proc.stdin.flush()
        threading.Thread(target=release, daemon=True).start()
        try:
            result = record.record_stepper(
                str(work / "handoff.bundle"), pid=proc.pid, start="main.handoff",
                end=stepper.EndCondition(until_return=True), ptw_probe=probe,
                trigger_timeout=60, wait_for_exit=False)
        finally:
            probe.close()
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    return pathlib.Path(result.bundle), package


def test_go_recording_replays_its_goroutines(start_adapter, go_bundle):
    bundle, package = go_bundle
    run = start_adapter()
    client = run.client
    start_replay(run, bundle)
    threads = client.call("threads")["threads"]
    history = client.call("ptdebug/goroutineHistory", {"bundle": str(bundle)})
    # without `bundle`, a replay answers for the bundle it replays
    assert client.call("ptdebug/goroutineHistory", {}) == history
    recorded = {g["goid"] for g in history["goroutines"] if g["goid"] > 0}
    assert len(recorded) >= 3, history
    assert {t["id"] for t in threads} == recorded
    assert all(t["name"].startswith(f"goroutine {t['id']}") for t in threads), threads
    listed = client.call("ptdebug/goroutines")["goroutines"]
    assert {g["id"] for g in listed} == recorded
    # each goroutine's stack is in the recording, at the last instruction it ran there; a
    # goroutine of the program's own code shows its Go source
    sources = set()
    for thread in threads:
        frames = client.call("stackTrace", {"threadId": thread["id"]})["stackFrames"]
        assert frames and "[recorded, insn" in frames[0]["name"]
        assert f"goroutine {thread['id']}" in frames[0]["name"], frames[0]
        sources.update(f.get("source", {}).get("path") for f in frames)
    assert str(package / "main.go") in sources, sources
    # stepping back by line in a goroutine keeps to it
    worker = max(threads, key=lambda t: t["id"])["id"]
    stop = step(client, "stepBack", worker, "line")
    assert f"goroutine {worker}" in stop["description"], stop
    end_session(run)


def test_a_stream_too_long_to_decode_whole_replays_its_end_and_says_so(start_adapter,
                                                                      tmp_path, monkeypatch):
    """A recording longer than the adapter decodes whole (PTDEBUG_WHOLE_DECODE_LIMIT here, in
    place of the 2 x 10^7 default) replays from its end: the user is told what is loaded, and
    stepping back walks the recorded path's last instructions."""
    work = tmp_path / "long"
    work.mkdir()
    program = work / "hotpath"
    subprocess.run(["gcc", "-O0", "-g", "-no-pie", "-o", str(program), str(HOTPATH)], check=True)
    bundle = work / "long.bundle"
    ptdebug("record", "--backend", "stepper", "--count", "60000", "-o", str(bundle), "--",
            str(program), "2")
    ips = decoded_ips(bundle)
    assert len(ips) == 60000
    monkeypatch.setenv("PTDEBUG_WHOLE_DECODE_LIMIT", "20000")
    run = start_adapter()
    client = run.client
    stopped = start_replay(run, bundle)
    note = client.expect_event("output", pred=lambda e: "instructions were recorded" in
                               e["body"]["output"])["body"]["output"]
    loaded_from = int(re.search(r"from instruction ([\d,]+)", note).group(1).replace(",", ""))
    assert "60,000 instructions were recorded" in note and 40000 <= loaded_from < 60000
    thread_id = stopped["threadId"]
    assert ip_of(client, thread_id) == ips[-1]  # the replay starts where the recording ended
    back = []
    for _ in range(30):
        step(client, "stepBack", thread_id)
        back.append(ip_of(client, thread_id))
    assert back == ips[-31:-1][::-1]
    # reverse-continue with no breakpoint: the start of the loaded part; a step back from
    # there loads the part before it (Recording.load_window) and goes on exactly
    client.call("reverseContinue", {"threadId": thread_id})
    start = client.expect_stopped("step")
    assert recorded_position(start) == loaded_from, start
    assert ip_of(client, thread_id) == ips[loaded_from]
    stepped = step(client, "stepBack", thread_id)
    client.expect_event("output", pred=lambda e: "are loaded now" in e["body"]["output"])
    assert recorded_position(stepped) == loaded_from - 1, stepped
    assert ip_of(client, thread_id) == ips[loaded_from - 1]
    forward = []
    for _ in range(3):  # and forward again over the seam
        step(client, "stepIn", thread_id)
        forward.append(ip_of(client, thread_id))
    assert forward == ips[loaded_from:loaded_from + 3]
    end_session(run)


def test_a_recording_loaded_in_part_searches_its_other_parts_for_breakpoints(start_adapter,
                                                                          tmp_path,
                                                                          monkeypatch):
    """Issue 15 item 4 in a debug session: reverseContinue from the loaded end of a long
    recording finds a hit in a part not loaded (serve()'s first line, run once at the start),
    loading the parts before one by one; continue from there goes through the parts after it
    to the recording's end. Every stop is at the recorded path's instruction."""
    work = tmp_path / "parts"
    work.mkdir()
    program = work / "hotpath"
    subprocess.run(["gcc", "-O0", "-g", "-no-pie", "-o", str(program), str(HOTPATH)], check=True)
    bundle = work / "parts.bundle"
    ptdebug("record", "--backend", "stepper", "--from", "serve", "--until-return", "-o",
            str(bundle), "--", str(program), "150")
    ips = decoded_ips(bundle)
    assert len(ips) > 40000
    monkeypatch.setenv("PTDEBUG_WHOLE_DECODE_LIMIT", "12000")
    run = start_adapter()
    client = run.client
    thread_id = start_replay(run, bundle, _breakpoints={
        "source": {"path": str(HOTPATH)}, "breakpoints": [{"line": marker(HOTPATH, "total"),
                                                           "hitCondition": "1"}]})["threadId"]
    note = client.expect_event("output", pred=lambda e: "instructions were recorded" in
                               e["body"]["output"])["body"]["output"]
    loaded_from = int(re.search(r"from instruction ([\d,]+)", note).group(1).replace(",", ""))
    client.call("reverseContinue", {"threadId": thread_id})
    hit = client.expect_stopped("breakpoint")
    position = recorded_position(hit)
    assert position < loaded_from and position < 100, hit  # serve's first line, at its start
    assert ip_of(client, thread_id) == ips[position]
    # the part loaded now begins at the recording's start: hits are counted from there
    assert "hit 1 in the recorded history, hit condition '1' holds" in hit["description"], hit
    assert recorded_position(step(client, "stepIn", thread_id)) == position + 1
    assert ip_of(client, thread_id) == ips[position + 1]
    client.call("continue", {"threadId": thread_id})
    end = client.expect_stopped("step")
    assert "end of the recorded history" in end["description"], end
    assert recorded_position(end) == len(ips) - 1
    assert ip_of(client, thread_id) == ips[-1]
    end_session(run)

"""Replay in Python terms through `ptdebug dap` (issue 13 item 3): a pure-Python program
(tests/fixtures/programs/py_attribution.py: `score()` calling `weight()` and `clamp()`, with a
loop and a branch) recorded by `ptdebug record --python on` (the ptrace stepper with the
Python frame probe) around the call of score(), from os.getppid() right before it to
os.getpgrp() right after it, then replayed (`"replay": PATH`). The stack shows the recorded
Python frames; stepping back by line from the end walks exactly the reverse of the line
sequence `sys.settrace` reports for the same call in a separate run, in Python frames of the
fixture only; next / stepIn / stepOut move by Python line and function; a breakpoint on a
helper's line is reached by reverseContinue and continue. Every message is checked against
the DAP schema by the test client."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from conftest import PROGRAMS
from test_replay import end_session, marker, ptdebug, recorded_position, start_replay

pytestmark = pytest.mark.timeout(240)

FIXTURE = PROGRAMS / "py_attribution.py"


@pytest.fixture(scope="module")
def py_bundle(tmp_path_factory) -> pathlib.Path:
    bundle = tmp_path_factory.mktemp("replay_py") / "py.bundle"
    out = ptdebug("record", "--backend", "stepper", "--python", "on", "--from", "getppid",
                  "--until", "getpgrp", "-o", str(bundle), "--", sys.executable, str(FIXTURE))
    assert "complete" in out, out
    return bundle


@pytest.fixture(scope="module")
def settrace_lines() -> list[tuple[str, int]]:
    """(function, line) of the innermost frame after each sys.settrace event of the same
    call, in a separate run, from the line marked @before to the one marked @after."""
    out = subprocess.run([sys.executable, str(FIXTURE), "settrace"], capture_output=True,
                         text=True, check=True, timeout=60).stdout
    stacks = [[tuple(f) for f in stack] for stack in json.loads(out)]
    first = stacks.index([("main", marker(FIXTURE, "before"))])
    last = stacks.index([("main", marker(FIXTURE, "after"))])
    return [stack[-1] for stack in stacks[first:last + 1]]


def python_top(client, thread_id: int) -> tuple[str, int, dict, list[dict]]:
    """(function, line) of the innermost recorded Python frame, that frame, and the stack."""
    frames = client.call("stackTrace", {"threadId": thread_id})["stackFrames"]
    python = [f for f in frames if "[recorded Python" in f["name"]]
    assert python, frames
    frame = python[0]
    # the first frame with a source is that Python frame (the native frames above it, C the
    # line called into, have none): VS Code shows the Python line
    assert next(f for f in frames if f.get("source")) is frame, frames
    return frame["name"].split(" ")[0], frame["line"], frame, frames


def move(client, command: str, thread_id: int, granularity: str = "line") -> dict:
    client.call(command, {"threadId": thread_id, "granularity": granularity})
    return client.expect_stopped()


def test_step_back_by_line_walks_settrace_in_reverse(start_adapter, py_bundle, settrace_lines):
    run = start_adapter()
    client = run.client
    thread_id = start_replay(run, py_bundle)["threadId"]
    name, line, frame, frames = python_top(client, thread_id)
    assert (name, line) == settrace_lines[-1]
    # the whole recorded Python stack under it, callers at their calls, no interpreter frames
    python_names = [f["name"].split(" ")[0] for f in frames if "[recorded Python" in f["name"]]
    assert python_names == ["main", "<module>"]
    assert not any(f["name"].startswith("_PyEval_EvalFrameDefault") for f in frames)
    walked = [(name, line)]
    for _ in range(len(settrace_lines) + 2):
        stopped = move(client, "stepBack", thread_id)
        assert stopped["reason"] == "step"
        if "start of the recorded history" in stopped["description"]:
            break
        assert "stepped back one Python line" in stopped["description"], stopped
        name, line, frame, _ = python_top(client, thread_id)
        assert frame["source"]["path"] == str(FIXTURE)
        walked.append((name, line))
    assert walked == settrace_lines[::-1]
    assert recorded_position(stopped) == 0
    # by instruction it is still one machine instruction
    stopped = move(client, "next", thread_id, "instruction")
    assert recorded_position(stopped) == 1
    # a recorded Python frame says plainly that its values were not recorded
    scopes = client.call("scopes", {"frameId": frame["id"]})["scopes"]
    assert scopes[0]["name"] == "Locals (not recorded)" and scopes[-1]["name"] == \
        "Processor Trace"
    note = client.call("variables", {"variablesReference": scopes[0]["variablesReference"]})
    assert "main's local variables were not recorded" in note["variables"][0]["value"]
    end_session(run)


def test_next_step_in_and_step_out_move_by_python_line_and_function(start_adapter, py_bundle,
                                                                      settrace_lines):
    run = start_adapter()
    client = run.client
    thread_id = start_replay(run, py_bundle, stopOnEntry=True)["threadId"]
    mark = {name: marker(FIXTURE, name) for name in ("before", "call", "after", "score_for",
                                                      "score_add", "score_ret")}
    assert python_top(client, thread_id)[:2] == ("main", mark["before"])
    stopped = move(client, "next", thread_id)
    assert "stepped one Python line" in stopped["description"], stopped
    assert python_top(client, thread_id)[:2] == ("main", mark["call"])
    # stepIn: into score(), at its first line as settrace saw it
    move(client, "stepIn", thread_id)
    k = settrace_lines.index(("main", mark["call"]))
    assert python_top(client, thread_id)[:2] == settrace_lines[k + 1]
    assert settrace_lines[k + 1][0] == "score"
    # next over calls: score's own lines, never weight's or clamp's
    seen = []
    for _ in range(4):
        move(client, "next", thread_id)
        seen.append(python_top(client, thread_id)[:2])
    assert all(name == "score" for name, _ in seen), seen
    assert ("score", mark["score_add"]) in seen
    # the Processor Trace scope: the Python frame, its line's run, score's lines' cost
    stopped = move(client, "next", thread_id)
    _, line, frame, _ = python_top(client, thread_id)
    scope = client.call("scopes", {"frameId": frame["id"]})["scopes"][-1]
    shown = {v["name"]: v for v in client.call(
        "variables", {"variablesReference": scope["variablesReference"]})["variables"]}
    assert shown["Python frame"]["value"].startswith(f"score (py_attribution.py:{line}), 3 ")
    run_text = shown["Python line run"]["value"]
    assert f"instructions {recorded_position(stopped)}.." in run_text
    assert "0 of them before this point" in run_text
    assert shown["Python line run"]["type"] == "stepper time, not CPU time"
    per_line = {v["name"]: v["value"] for v in client.call("variables", {
        "variablesReference": shown["Python lines of score"]["variablesReference"]})["variables"]}
    for name in ("score_for", "score_add", "score_ret"):
        executions = settrace_lines.count(("score", mark[name])) if name != "score_add" else 3
        assert per_line[f"line {mark[name]}"].endswith(f"in {executions} executions"), per_line
    assert all(int(text.split(" ")[0]) > 0 for text in per_line.values())
    # stepIn at score_add goes into weight(); stepOut comes back to score's next line
    while python_top(client, thread_id)[:2] != ("score", mark["score_add"]):
        move(client, "next", thread_id)
    move(client, "stepIn", thread_id)
    entered = settrace_lines[settrace_lines.index(("score", mark["score_add"])) + 1]
    assert entered[0] == "weight"   # its first line as settrace's call event shows it
    assert python_top(client, thread_id)[:2] == entered
    stopped = move(client, "stepOut", thread_id)
    assert "stepped out to the caller's next Python line" in stopped["description"], stopped
    here = python_top(client, thread_id)[:2]
    assert here[0] == "score" and here[1] != mark["score_add"], here
    # and from main's last line, next reaches the end of the recording
    client.call("continue", {"threadId": thread_id})
    client.expect_stopped()
    end_session(run)


def test_python_breakpoint_reached_by_reverse_continue_and_continue(start_adapter, py_bundle,
                                                                    settrace_lines):
    weight_mul = marker(FIXTURE, "weight_mul")
    runs = settrace_lines.count(("weight", weight_mul))
    assert runs == 3  # score(3): one a loop iteration
    blank = marker(FIXTURE, "clamp_x") + 1   # the empty line after clamp()
    assert not FIXTURE.read_text().splitlines()[blank - 1].strip()
    run = start_adapter()
    client = run.client
    thread_id = start_replay(run, py_bundle, _breakpoints={
        "source": {"path": str(FIXTURE)},
        "breakpoints": [{"line": weight_mul}]})["threadId"]
    answered = client.call("setBreakpoints", {"source": {"path": str(FIXTURE)},
                                              "breakpoints": [{"line": weight_mul},
                                                              {"line": blank}]})["breakpoints"]
    assert [b["verified"] for b in answered] == [True, False]
    assert "no recorded Python code" in answered[1]["message"]
    # a condition cannot be evaluated on recorded data, and the answer says so
    answered = client.call("setBreakpoints", {"source": {"path": str(FIXTURE)},
                                              "breakpoints": [{"line": weight_mul,
                                                               "condition": "i == 2"}]})
    assert "condition is not evaluated in a replay" in answered["breakpoints"][0]["message"]
    back = []
    for _ in range(runs + 1):
        client.call("reverseContinue", {"threadId": thread_id})
        stopped = client.expect_stopped()
        if stopped["reason"] != "breakpoint":
            assert "start of the recorded history" in stopped["description"]
            break
        assert python_top(client, thread_id)[:2] == ("weight", weight_mul)
        back.append(recorded_position(stopped))
    assert len(back) == runs and back == sorted(back, reverse=True)
    forward = []
    for _ in range(runs + 1):
        client.call("continue", {"threadId": thread_id})
        stopped = client.expect_stopped()
        if stopped["reason"] != "breakpoint":
            assert "end of the recorded history" in stopped["description"]
            break
        assert python_top(client, thread_id)[:2] == ("weight", weight_mul)
        forward.append(recorded_position(stopped))
    assert forward == back[::-1]
    end_session(run)

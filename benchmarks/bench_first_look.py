"""The first look after a capture (issue 14, item 7): from the `stopped` event that follows a
Go record breakpoint's capture to the answers of `stackTrace`, `scopes`, the first `variables`
of the "Processor Trace" scope, `threads` and `ptdebug/goroutines`, for captures of about
30,000 and about 1 million instructions. Target: 200 ms each.

What runs: a `ptdebug dap` session in front of Delve on a Go program written here, whose
`work(n)` calls `burn(n)`, a loop of 64 straight-line statements per iteration (few branches,
so the ptrace stepper records a million instructions in seconds instead of the ~100 s real Go
code takes here). A record breakpoint on the line calling `work` records `main.work` until it
returns (the goid probe writes goroutine ids, so the capture has a goroutine index); a normal
breakpoint on the next line stops there. The program calls `work` twice, with the two sizes,
and each call is recorded and stopped at. Then the same in two Python sessions (debugpy), on
benchmarks/bench_reverse's program: a record breakpoint on a ctypes call of a C loop of the
same sizes, the next line stopping. Nothing else is timed: the requests are sent one after
another, as VS Code sends them at a stop, the clock started when `stopped` arrived.

    .venv/bin/python -m benchmarks.bench_first_look [--quick] [--json]
    ptdebug bench first_look
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

from benchmarks.dap_client import BlockingDapClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
PTDEBUG = [sys.executable, "-m", "adapter.cli", "dap", "--log-level", "ERROR"]
TARGET_MS = 200.0
SCOPE_NAME = "Processor Trace"

_ROUND = "\t\tx = x*2654435761 + 0x9e3779b9\n\t\tx ^= x >> 13\n"
PROGRAM = """package main

import (
\t"fmt"
\t"os"
\t"strconv"
)

//go:noinline
func burn(n int, x uint32) uint32 {
\tfor i := 0; i < n; i++ {
%s\t}
\treturn x
}

//go:noinline
func work(n int) uint32 {
\ta := uint32(n + 1)
\tb := burn(n, a)
\treturn a ^ b
}

func main() {
\ttotal := uint32(0)
\tfor k, arg := range os.Args[1:] {
\t\tn, _ := strconv.Atoi(arg)
\t\tr := work(n) // @record
\t\ttotal += r + uint32(k) // @after
\t}
\tfmt.Println(total)
}
""" % (_ROUND * 64)

INSTRUCTIONS_PER_ITERATION = 456
"""Instructions of one iteration of burn's loop built with -N -l (Go 1.26, amd64): measured
from a capture; the sizes asked for are approximate, the figures give the exact count."""
PYTHON_INSTRUCTIONS_PER_ITERATION = 320
"""The same for bench_reverse's C loop (gcc -O1)."""


def _marker(text: str, name: str, prefix: str = "// @") -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1)
                if line.endswith(f"{prefix}{name}"))


def _timed(client: BlockingDapClient, command: str, arguments: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    body = client.call(command, arguments)
    return (time.perf_counter() - start) * 1e3, body


def _first_look(client, thread_id: int, go: bool = True) -> dict:
    """The requests of a stop, timed in ms, right after its `stopped` event (`client`: a
    BlockingDapClient or adapter.demo.DapPeer: `call(command, arguments)` -> body)."""
    figures = {}
    figures["threads_ms"], _ = _timed(client, "threads", {})
    figures["stackTrace_ms"], stack = _timed(client, "stackTrace", {
        "threadId": thread_id, "startFrame": 0, "levels": 20})
    frame = stack["stackFrames"][0]["id"]
    figures["scopes_ms"], scopes = _timed(client, "scopes", {"frameId": frame})
    trace = next((s for s in scopes["scopes"] if s["name"] == SCOPE_NAME), None)
    if trace is None:
        raise RuntimeError(f"no {SCOPE_NAME} scope at the stop: {scopes}")
    figures["trace_scope_variables_ms"], variables = _timed(
        client, "variables", {"variablesReference": trace["variablesReference"]})
    names = {v["name"]: v for v in variables["variables"]}
    if go:
        if "goroutines" not in names:
            raise RuntimeError(f"the trace scope has no goroutine items: {sorted(names)}")
        figures["goroutines_item_ms"], _ = _timed(client, "variables", {
            "variablesReference": names["goroutines"]["variablesReference"]})
        figures["ptdebug_goroutines_ms"], _ = _timed(client, "ptdebug/goroutines", {})
    else:
        figures["locals_ms"], _ = _timed(client, "variables", {
            "variablesReference": scopes["scopes"][0]["variablesReference"]})
    return {key: round(value, 1) for key, value in figures.items()}


def _summary(capture: dict, figures: dict) -> dict:
    slowest = max(figures.values())
    return {"instructions": capture["instructions"], **figures, "slowest_ms": slowest,
            "target_met": slowest <= TARGET_MS}


def python_first_look(size: int) -> dict:
    """The same in a Python session (debugpy): benchmarks/bench_reverse's program, whose
    ctypes call of a small C library's `work(n)` is recorded from its entry to its return by a
    record breakpoint, then the next line stops."""
    from adapter.demo import DapPeer
    from benchmarks.bench_reverse import LIBRARY, PROGRAM
    iterations = max(1, size // PYTHON_INSTRUCTIONS_PER_ITERATION)
    with tempfile.TemporaryDirectory(prefix="bench-first-look-py-") as directory:
        root = pathlib.Path(directory)
        (root / "burn.c").write_text(LIBRARY)
        program = root / "program.py"
        program.write_text(PROGRAM)
        library = str(root / "libburn.so")
        subprocess.run(["gcc", "-O1", "-g", "-shared", "-fPIC", "-o", library,
                        str(root / "burn.c")], check=True)
        with open(root / "adapter.log", "wb") as log:
            dap = DapPeer([sys.executable, "-m", "adapter.cli", "dap"], log)
            try:
                dap.call("initialize", {"adapterID": "ptdebug", "linesStartAt1": True,
                                        "columnsStartAt1": True, "pathFormat": "path"})
                launch = dap.send("launch", {"program": str(program),
                                             "args": [library, str(iterations)],
                                             "console": "internalConsole",
                                             "cwd": directory,
                                             "recordWindow": {"function": "work",
                                                              "timeout": 30}})
                dap.event("initialized", "launch")
                dap.call("setBreakpoints", {"source": {"path": str(program)}, "breakpoints": [
                    {"line": _marker(PROGRAM, "record", "# @"), "mode": "record"},
                    {"line": _marker(PROGRAM, "after", "# @")}]})
                dap.call("configurationDone", {})
                dap.response(launch, "launch")
                capture = dap.event("ptdebug/capture", "the capture", timeout=600)
                if capture.get("status") != "complete":
                    raise RuntimeError(f"Python capture of ~{size} instructions: {capture}")
                stopped = dap.event("stopped", "the stop after the capture", timeout=60)
                return _summary(capture, _first_look(dap, stopped["threadId"], go=False))
            finally:
                try:
                    dap.send("disconnect", {"terminateDebuggee": True})
                finally:
                    dap.close()


def run(quick: bool = False) -> dict:
    sizes = [30_000] + ([] if quick else [1_000_000])
    iterations = [max(1, size // INSTRUCTIONS_PER_ITERATION) for size in sizes]
    tmp = tempfile.mkdtemp(prefix="bench-first-look-")
    package = pathlib.Path(tmp) / "burn"
    package.mkdir()
    source = package / "main.go"
    source.write_text(PROGRAM)
    (package / "go.mod").write_text("module burn\n\ngo 1.21\n")
    adapter = subprocess.Popen(PTDEBUG, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=ROOT)
    client = BlockingDapClient(adapter.stdout, adapter.stdin)
    results = {}
    try:
        client.call("initialize", {"adapterID": "ptdebug", "clientID": "bench",
                                   "linesStartAt1": True, "columnsStartAt1": True})
        client.call("launch", {"backend": "go", "program": str(package),
                               "args": [str(n) for n in iterations],
                               "captures": str(pathlib.Path(tmp) / "captures"),
                               "recordWindow": {"function": "main.work", "untilReturn": True}})
        client.wait_event("initialized")
        text = source.read_text()
        client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": [
            {"line": _marker(text, "record"), "mode": "record"},
            {"line": _marker(text, "after")}]})
        client.call("configurationDone", {})
        for size in sizes:
            capture = client.wait_event("ptdebug/capture")["body"]
            if capture.get("status") != "complete":
                raise RuntimeError(f"capture of ~{size} instructions: {capture}")
            stopped = client.wait_event("stopped")["body"]
            results[f"go_capture_{size}"] = _summary(capture, _first_look(
                client, stopped["threadId"]))
            client.call("continue", {"threadId": stopped["threadId"]})
        client.send("disconnect", {"terminateDebuggee": True})
        adapter.stdin.close()
        adapter.wait(30)
    finally:
        if adapter.poll() is None:
            adapter.kill()
            adapter.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    for size in sizes:
        results[f"python_capture_{size}"] = python_first_look(size)
    return {"target_ms": TARGET_MS, **results}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    result = run(quick="--quick" in argv)
    if "--json" in argv:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:12} {value}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

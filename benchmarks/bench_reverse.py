"""Reverse stepping through `ptdebug dap` on a capture of about 5 million instructions: the
time from a `stepBack` / `reverseContinue` request to its `stopped` event, beside the round
trip of a `threads` request in the same session (the DAP hop both pay).

What runs: a Python program calls `work(n)` of a small C library (built here with gcc -O1 -g)
through ctypes; `work` calls `burn(n)`, a loop of ~330 straight-line instructions per
iteration, then returns. A record breakpoint on the calling line records `work` from its entry
to its return with the ptrace stepper (the window's size is set by `n`); the program then stops
at the next line. Measured on that stop: stepBack by line inside `work` (each a query over the
5 M-instruction history), the stepBack by line that steps back over the whole `burn` call (a
scan of every instruction of it: the worst case), stepBack by instruction, and a
reverseContinue with no breakpoint in the history (a scan of the whole history to its start).

    .venv/bin/python -m benchmarks.bench_reverse [--quick] [--json]
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

from adapter.demo import DapPeer

LIBRARY = r'''
#define R(x) x = x * 2654435761u + 0x9e3779b9u; x ^= x >> 13;
#define R8(x) R(x) R(x) R(x) R(x) R(x) R(x) R(x) R(x)
#define R64(x) R8(x) R8(x) R8(x) R8(x) R8(x) R8(x) R8(x) R8(x)
unsigned burn(unsigned n)
{
    unsigned x = n;
    for (unsigned i = 0; i < n; i++) {
        R64(x)
    }
    return x;
}
unsigned work(unsigned n)
{
    unsigned a = n + 1;
    unsigned b = burn(n);
    unsigned c = a ^ b;
    return c;
}
'''

PROGRAM = '''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.work.restype = ctypes.c_uint
n = int(sys.argv[2])
result = lib.work(n)  # @record
print(result)  # @after
'''


def _line(text: str, marker: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if f"@{marker}" in line)


def _position(body: dict) -> int:
    return int(re.search(r"instruction (\d+) of", body["description"]).group(1))


def _timed(dap: DapPeer, command: str, arguments: dict) -> tuple[float, dict]:
    start = time.perf_counter()
    dap.send(command, arguments)
    body = dap.event("stopped", command)
    return time.perf_counter() - start, body


def run(quick: bool = False) -> dict:
    iterations = 1600 if quick else 16000  # ~5.1 M instructions
    with tempfile.TemporaryDirectory(prefix="ptdebug-bench-reverse-") as directory:
        root = pathlib.Path(directory)
        (root / "burn.c").write_text(LIBRARY)
        (root / "program.py").write_text(PROGRAM)
        library = str(root / "libburn.so")
        subprocess.run(["gcc", "-O1", "-g", "-shared", "-fPIC", "-o", library,
                        str(root / "burn.c")], check=True)
        with open(root / "adapter.log", "wb") as log:
            dap = DapPeer([sys.executable, "-m", "adapter.cli", "dap"], log)
            try:
                return _measure(dap, root, library, iterations)
            finally:
                try:
                    dap.send("disconnect", {"terminateDebuggee": True})
                finally:
                    dap.close()


def _measure(dap: DapPeer, root: pathlib.Path, library: str, iterations: int) -> dict:
    program = str(root / "program.py")
    dap.call("initialize", {"adapterID": "ptdebug", "linesStartAt1": True,
                            "columnsStartAt1": True, "pathFormat": "path"})
    launch = dap.send("launch", {"program": program, "args": [library, str(iterations)],
                                 "console": "internalConsole",
                                 "recordWindow": {"function": "work", "timeout": 30}})
    dap.event("initialized", "launch")
    dap.call("setBreakpoints", {"source": {"path": program}, "breakpoints": [
        {"line": _line(PROGRAM, "record"), "mode": "record"},
        {"line": _line(PROGRAM, "after")}]})
    started = time.perf_counter()
    dap.call("configurationDone", {})
    dap.response(launch, "launch")
    capture = dap.event("ptdebug/capture", "the capture", timeout=600)
    recorded_s = time.perf_counter() - started
    thread_id = dap.event("stopped", "the stop after the capture", timeout=60)["threadId"]

    hops = []
    for _ in range(30):
        start = time.perf_counter()
        dap.call("threads", {})
        hops.append(time.perf_counter() - start)

    line_steps, over_call = [], None
    previous = None
    for _ in range(12):
        took, body = _timed(dap, "stepBack", {"threadId": thread_id, "granularity": "line"})
        position = _position(body)
        if previous is not None and previous - position > capture["instructions"] // 2:
            over_call = took
        else:
            line_steps.append(took)
        previous = position
        if "start of the recorded history" in body["description"]:
            break
    instruction_steps = []
    for _ in range(20):
        took, _ = _timed(dap, "stepBack", {"threadId": thread_id, "granularity": "instruction"})
        instruction_steps.append(took)
    # Forward to the end of the history, then reverseContinue over all of it.
    for _ in range(40):
        took, body = _timed(dap, "next", {"threadId": thread_id})
        if "live position" in body.get("description", ""):
            break
    whole, body = _timed(dap, "reverseContinue", {"threadId": thread_id})

    hop = statistics.median(hops)

    def ms(value: float) -> float:
        return round(value * 1000, 2)

    return {
        "history instructions": capture["instructions"],
        "recording (stepper) + decoding, s": round(recorded_s, 2),
        "threads round trip (the DAP hop), median ms": ms(hop),
        "stepBack line inside work, median / max ms": f"{ms(statistics.median(line_steps))} / "
                                                       f"{ms(max(line_steps))}",
        "stepBack line over the whole burn() call, ms": ms(over_call) if over_call else "n/a",
        "stepBack instruction, median / max ms": f"{ms(statistics.median(instruction_steps))}"
                                                  f" / {ms(max(instruction_steps))}",
        "reverseContinue over the whole history (no hit), ms": ms(whole),
        "worst stepBack / threads round trip": round(
            max([over_call or 0, whole, *line_steps]) / hop, 1),
        "target": "stepBack -> stopped under 50 ms on 5 M instructions",
    }


if __name__ == "__main__":
    figures = run(quick="--quick" in sys.argv)
    if "--json" in sys.argv:
        print(json.dumps(figures, indent=2))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    os._exit(0)

"""Data-breakpoint stop latency, side by side in one session on one service: from the write
(stamped by the program with time.monotonic() just before it) to the `stopped` event at the
client, against debugpy's own `pause` -> `stopped` on the same service.

Role: benchmark; figures go to docs/PERFORMANCE.md. Drives `ptdebug dap` (stdio) in front of
real debugpy with tests/fixtures/programs/dap_watch_service.py's looping writer (`loop`: it
writes kv[3, 7] every millisecond). CLOCK_MONOTONIC is one clock for every process of the
machine, so the program's stamp and the client's arrival time compare directly.

    .venv/bin/python -m benchmarks.bench_data_breakpoint [--rounds N] [--json] [--adapter-log F]

The first hit of a session is reported apart (`first_write_to_stopped_ms`), and so is the
first `setDataBreakpoints` (`first_set_data_breakpoints_ms`): it waits for what the first hit
needs (the symbol tables the adapter starts reading at the first `dataBreakpointInfo`).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import time

from benchmarks.dap_client import BlockingDapClient

ROOT = pathlib.Path(__file__).resolve().parents[1]
SERVICE = ROOT / "tests" / "fixtures" / "programs" / "dap_watch_service.py"


def _marker(name: str) -> int:
    for number, line in enumerate(SERVICE.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# @{name}"):
            return number
    raise LookupError(name)


def _python_frame(client: BlockingDapClient, thread_id: int) -> int:
    frames = client.call("stackTrace", {"threadId": thread_id, "levels": 40})
    return next(f["id"] for f in frames["stackFrames"] if "instructionPointerReference" not in f)


def run(rounds: int = 20, adapter_log: str | None = None) -> dict:
    """`adapter_log`: write the adapter's DEBUG log there (each stop's time split in two:
    write -> the debuggee's stop message at the adapter, and the adapter's own time)."""
    command = [sys.executable, "-m", "adapter.cli", "dap"]
    if adapter_log:
        command += ["--log-file", adapter_log, "--log-level", "DEBUG"]
    proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    client = BlockingDapClient(proc.stdout, proc.stdin)
    try:
        client.call("initialize", {"adapterID": "ptdebug", "linesStartAt1": True})
        launch = client.send("launch", {"program": str(SERVICE), "args": ["loop"],
                                        "console": "internalConsole"})
        client.wait_event("initialized")
        client.call("setBreakpoints", {"source": {"path": str(SERVICE)},
                                       "breakpoints": [{"line": _marker("armed")}]})
        client.call("configurationDone", {})
        client.wait_response(launch)
        main_thread = client.wait_event("stopped")["body"]["threadId"]
        frame = _python_frame(client, main_thread)
        info = client.call("dataBreakpointInfo", {"name": "kv[3, 7]", "frameId": frame})
        asked = time.monotonic()
        client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
        set_ms = (time.monotonic() - asked) * 1000
        client.call("continue", {"threadId": main_thread})
        writes = []
        for _ in range(rounds):
            stopped = client.wait_event("stopped")
            arrived = time.monotonic()
            body = stopped["body"]
            assert body["reason"] == "data breakpoint", body
            writer = _python_frame(client, body["threadId"])
            stamp = float(client.call("evaluate", {"expression": "written_at", "frameId": writer,
                                                   "context": "repl"})["result"])
            writes.append((arrived - stamp) * 1000)
            client.call("continue", {"threadId": body["threadId"]})
        client.call("setDataBreakpoints", {"breakpoints": []})
        pauses = []
        for _ in range(rounds):
            time.sleep(0.05)
            sent = time.monotonic()
            client.call("pause", {"threadId": main_thread})
            stopped = client.wait_event("stopped")
            pauses.append((time.monotonic() - sent) * 1000)
            client.call("continue", {"threadId": stopped["body"]["threadId"]})
        client.call("pause", {"threadId": main_thread})
        stopped = client.wait_event("stopped")
        frame = _python_frame(client, stopped["body"]["threadId"])
        client.call("evaluate", {"expression": "globals().update(stop=True)", "frameId": frame,
                                 "context": "repl"})
        client.call("continue", {"threadId": stopped["body"]["threadId"]})
        client.wait_event("exited")
        client.call("disconnect", {})
    finally:
        proc.stdin.close()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"rounds": rounds, "first_set_data_breakpoints_ms": round(set_ms, 2),
            "first_write_to_stopped_ms": round(writes[0], 2),
            "write_to_stopped_ms": _stats(writes[1:] or writes),
            "debugpy_pause_to_stopped_ms": _stats(pauses)}


def _stats(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"median": round(statistics.median(ordered), 2), "min": round(ordered[0], 2),
            "max": round(ordered[-1], 2),
            "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--adapter-log", metavar="PATH",
                        help="write the adapter's DEBUG log (per-stop timings) to PATH")
    args = parser.parse_args(argv)
    result = run(args.rounds, args.adapter_log)
    if args.json:
        print(json.dumps(result))
    else:
        for name in ("first_set_data_breakpoints_ms", "first_write_to_stopped_ms",
                     "write_to_stopped_ms",
                     "debugpy_pause_to_stopped_ms"):
            print(f"{name}: {result[name]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

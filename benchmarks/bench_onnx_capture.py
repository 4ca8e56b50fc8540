"""A capture of an onnxruntime request ready when its window ends (issue 33, benchmark (a)),
through `ptdebug dap` in front of real debugpy.

The service: tests/fixtures/programs/dap_onnx_kv_service.py (onnxruntime on CPU, a model built
with onnx.helper, a threaded HTTP server, a KV cache written per request). A record breakpoint
on the handler's `# @embed` line (the line before the model runs; the window closes after two
Python lines, so it runs through `session.run` and onnxruntime's C++), a normal breakpoint on
`# @after`. Each captured request: the stop at `@after` is answered with `stackTrace`, then
`stepBack` (by line), then `continue`. Figures, per capture, then their medians:
  window_end_to_event_ms        the window's last instruction (the recorder's CLOCK_MONOTONIC
                                stamp, from the adapter's log) -> `ptdebug/capture` at the client
  window_end_to_stack_ms        ... -> the first `stackTrace` of the stop answered
  window_end_to_step_back_ms    ... -> the first `stepBack` answered (target: <= 1,000 ms)
  request_to_event_ms           the service's send stamp -> `ptdebug/capture`
  window_ms                     the window's own recording time (the capture's durationNs)
  instructions                  what the window recorded
The adapter's INFO line per capture (the log) times each step between the stop and `kept`.

    .venv/bin/python -m benchmarks.bench_onnx_capture [--rounds N] [--json] [--log FILE]
        [--captures DIR]
    ptdebug bench onnx_capture [--quick]
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.dap_client import BlockingDapClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
SERVICE = ROOT / "tests" / "fixtures" / "programs" / "dap_onnx_kv_service.py"
GAP_S = 0.5
"""Between a request's answer and the next request."""
WINDOW = {"untilReturn": True, "instructions": 5_000_000}
TARGET_MS = 1000.0


def _marker(name: str) -> int:
    for number, line in enumerate(SERVICE.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# @{name}"):
            return number
    raise LookupError(name)


def _read(client: BlockingDapClient) -> dict:
    """The next message, stamped with time.monotonic() on arrival (`_at`)."""
    message = client._read()
    message["_at"] = time.monotonic()
    return message


def _wait(client: BlockingDapClient, pending: list[dict], pred) -> dict:
    for i, message in enumerate(pending):
        if pred(message):
            return pending.pop(i)
    while True:
        message = _read(client)
        if pred(message):
            return message
        pending.append(message)


def _call(client: BlockingDapClient, pending: list[dict], command: str, arguments: dict) -> dict:
    seq = client.send(command, arguments)
    answer = _wait(client, pending, lambda m: m["type"] == "response" and m["request_seq"] == seq)
    if not answer["success"]:
        raise RuntimeError(f"{command} failed: {answer.get('message')} {answer.get('body')}")
    return answer


def _window_ends(log_text: str) -> dict[int, float]:
    """capture number (1, 2, ... in the order they were kept) -> CLOCK_MONOTONIC of its
    window's end, from the adapter's INFO lines (`capture of thread N ...: ... window
    recorded (...) +X ms ... (stop at T)`)."""
    ends = {}
    number = 0
    for line in log_text.splitlines():
        found = re.search(r"(capture .*?): (.*) \(stop at ([\d.]+)\)", line)
        if not found:
            continue
        number += 1
        at = float(found.group(3))
        for step in found.group(2).split(", "):
            piece = re.match(r"(.*) \+([\d.]+) ms$", step)
            if piece is None:
                continue
            at += float(piece.group(2)) / 1e3
            if piece.group(1).startswith("window recorded"):
                ends[number] = at
                break
    return ends


def _session(rounds: int, log_file: str, captures: str) -> list[dict]:
    pathlib.Path(log_file).write_text("")  # its lines are this run's only
    argv = [sys.executable, "-m", "adapter.cli", "dap", "--log-level", "INFO",
            "--log-file", log_file]
    adapter = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=ROOT)
    client = BlockingDapClient(adapter.stdout, adapter.stdin)
    pending: list[dict] = []
    rows = []
    try:
        _call(client, pending, "initialize", {"adapterID": "ptdebug", "clientID": "bench",
                                              "linesStartAt1": True, "columnsStartAt1": True})
        launch = client.send("launch", {
            "program": str(SERVICE), "args": [str(rounds + 1), str(GAP_S)],
            "python": sys.executable, "console": "internalConsole",
            "captures": captures, "recordWindow": WINDOW})
        _wait(client, pending, lambda m: m.get("event") == "initialized")
        # request 0 warms the runtime up (its first run allocates); 1.. are captured
        _call(client, pending, "setBreakpoints", {
            "source": {"path": str(SERVICE)}, "breakpoints": [
                {"line": _marker("embed"), "mode": "record", "condition": "position >= 1"},
                {"line": _marker("after"), "condition": "position >= 1"}]})
        _call(client, pending, "configurationDone", {})
        _wait(client, pending, lambda m: m["type"] == "response"
              and m["request_seq"] == launch)
        for _ in range(rounds):
            event = _wait(client, pending, lambda m: m.get("event") == "ptdebug/capture")
            stop = _wait(client, pending, lambda m: m.get("event") == "stopped")
            thread = stop["body"]["threadId"]
            stack = _call(client, pending, "stackTrace", {"threadId": thread,
                                                          "levels": 20})
            back = _call(client, pending, "stepBack", {"threadId": thread})
            _wait(client, pending, lambda m: m.get("event") == "stopped")
            top = _call(client, pending, "stackTrace", {"threadId": thread, "levels": 1})
            frame = top["body"]["stackFrames"][0]
            rows.append({"capture": event["body"], "event_at": event["_at"],
                         "stack_at": stack["_at"], "step_back_at": back["_at"],
                         "step_back_line": frame.get("line")})
            _call(client, pending, "continue", {"threadId": thread})
        client.send("disconnect", {"terminateDebuggee": True})
        adapter.stdin.close()
        adapter.wait(60)
    finally:
        if adapter.poll() is None:
            adapter.kill()
            adapter.wait()
    sent = {}
    for message in pending:
        text = (message.get("body") or {}).get("output", "") if message.get(
            "event") == "output" else ""
        for found in re.finditer(r"request (\d+) sent at ([\d.]+)", text):
            sent[int(found.group(1))] = float(found.group(2))
    ends = _window_ends(pathlib.Path(log_file).read_text())
    for n, row in enumerate(rows, 1):
        row["window_end"] = ends.get(row["capture"]["id"])
        row["sent"] = sent.get(n)
    return rows


def run(quick: bool = False, rounds: int | None = None, log: str | None = None,
        captures: str | None = None) -> dict:
    """The figures (`ptdebug bench onnx_capture`: 4 captured requests, 2 with quick)."""
    rounds = rounds or (2 if quick else 4)
    with tempfile.TemporaryDirectory() as scratch:
        rows = _session(rounds, log or str(pathlib.Path(scratch) / "adapter.log"),
                        captures or str(pathlib.Path(scratch) / "captures"))
    if any(r["window_end"] is None for r in rows):
        raise RuntimeError("the adapter's log names no window end for some capture")

    def ms(key: str, since: str) -> list[float]:
        return [round(1e3 * (r[key] - r[since]), 1) for r in rows]

    figures = {"rounds": rounds,
               "instructions": [r["capture"]["instructions"] for r in rows],
               "window_ms": [round(r["capture"]["durationNs"] / 1e6, 1) for r in rows],
               "status": [r["capture"]["status"] for r in rows],
               "preparing": [r["capture"].get("preparing") for r in rows],
               "window_end_to_event_ms": ms("event_at", "window_end"),
               "window_end_to_stack_ms": ms("stack_at", "window_end"),
               "window_end_to_step_back_ms": ms("step_back_at", "window_end"),
               "request_to_event_ms": ms("event_at", "sent") if all(
                   r["sent"] for r in rows) else None,
               "step_back_lines": [r["step_back_line"] for r in rows]}
    for key in ("window_end_to_event_ms", "window_end_to_stack_ms",
                "window_end_to_step_back_ms"):
        figures[key.replace("_ms", "_median_ms")] = statistics.median(figures[key])
    figures["target_ms"] = TARGET_MS
    figures["met"] = max(figures["window_end_to_step_back_ms"]) <= TARGET_MS
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--log", help="keep the adapter's log here")
    parser.add_argument("--captures", help="keep the captures in this directory")
    args = parser.parse_args(argv)
    result = run(rounds=args.rounds, log=args.log, captures=args.captures)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:30} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

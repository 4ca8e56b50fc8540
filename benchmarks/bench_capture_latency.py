"""What a record breakpoint costs the request it captures (issue 13, item 5), measured by the
program itself, through `ptdebug dap` in front of real debugpy.

The service: tests/fixtures/programs/py_request_service.py (a worker thread answering a queue
of requests; each request's latency stamped with time.monotonic by the program). Two record
breakpoints in its handler: at `# @record_small` a window of 2,000 instructions when
`kind == "small"`, at `# @record_large` one of 200,000 instructions when `kind == "large"`.
Requests of kind "plain" pass both conditional breakpoints without a capture: the same request,
uncaptured. The kinds alternate (plain, small, plain, large) in one run. Figures:
  plain_median_ms                  an uncaptured request (debugpy evaluates both conditions)
  small_extra_ms / large_extra_ms  median captured latency - median uncaptured latency
  small_window_ms / large_window_ms  the window's recording time (the capture's durationNs:
                                   first to last recorded instruction)
  small_fixed_ms / large_fixed_ms  median of (captured latency - uncaptured median - its
                                   window's recording time): the fixed cost (target <= 50 ms)
  *_instructions                   what the windows recorded

    .venv/bin/python -m benchmarks.bench_capture_latency [--rounds N] [--json]
    ptdebug bench capture_latency [--quick]

PTDEBUG_BENCH_LOG=FILE keeps the adapter's log, whose INFO lines time each capture's steps.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

from benchmarks.dap_client import BlockingDapClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
SERVICE = ROOT / "tests" / "fixtures" / "programs" / "py_request_service.py"
PTDEBUG = [sys.executable, "-m", "adapter.cli", "dap", "--log-level", "ERROR"]
WINDOWS = {"small": 2_000, "large": 200_000}
GAP_S = 1.0
"""Between requests: the previous capture is decoded and kept before the next request."""


def _marker(name: str) -> int:
    for number, line in enumerate(SERVICE.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# @{name}"):
            return number
    raise LookupError(name)


def _session(kinds: list[str]) -> tuple[list[dict], list[dict]]:
    """Run the service with the record breakpoints: (its request lines, the captures)."""
    argv = list(PTDEBUG)
    if os.environ.get("PTDEBUG_BENCH_LOG"):
        argv[argv.index("--log-level") + 1] = os.environ.get("PTDEBUG_BENCH_LOG_LEVEL", "INFO")
        argv += ["--log-file", os.environ["PTDEBUG_BENCH_LOG"]]
    adapter = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=ROOT)
    client = BlockingDapClient(adapter.stdout, adapter.stdin)
    try:
        client.call("initialize", {"adapterID": "ptdebug", "clientID": "bench",
                                   "linesStartAt1": True, "columnsStartAt1": True})
        launch = client.send("launch", {"program": str(SERVICE),
                                        "args": [",".join(kinds), str(GAP_S), "60"],
                                        "console": "internalConsole"})
        client.wait_event("initialized")
        client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
            {"line": _marker(f"record_{kind}"), "mode": "record",
             "condition": f"kind == {kind!r}", "recordWindow": {"instructions": count}}
            for kind, count in WINDOWS.items()]})
        client.call("configurationDone", {})
        client.wait_response(launch)
        # until every request is answered and every capture announced (the service stays
        # alive meanwhile), or the program ends
        expected = sum(kind != "plain" for kind in kinds)
        while True:
            answered = len(_request_lines(client.events))
            announced = sum(e["event"] == "ptdebug/capture" for e in client.events)
            if (answered == len(kinds) and announced == expected) or any(
                    e["event"] in ("terminated", "exited") or _problem(e)
                    for e in client.events):
                break
            message = client._read()
            if message["type"] == "event":
                client.events.append(message)
        client.send("disconnect", {"terminateDebuggee": True})
        adapter.stdin.close()
        adapter.wait(30)
    finally:
        if adapter.poll() is None:
            adapter.kill()
            adapter.wait()
    captures = sorted((e["body"] for e in client.events if e["event"] == "ptdebug/capture"),
                      key=lambda body: body["id"])
    problems = [_problem(e) for e in client.events if _problem(e)]
    if problems:
        raise RuntimeError("; ".join(problems))
    return _request_lines(client.events), captures


def _request_lines(events: list[dict]) -> list[dict]:
    """The service's per-request JSON lines, from its `output` events."""
    lines = []
    for event in events:
        if event["event"] == "output" and (event.get("body") or {}).get("category") != \
                "important":
            for text in event["body"].get("output", "").splitlines():
                if text.startswith('{"n"'):
                    lines.append(json.loads(text))
    return lines


def _problem(event: dict) -> str | None:
    """What ptdebug told the user went wrong (an `important` output event), or None."""
    body = event.get("body") or {}
    if event["event"] == "output" and body.get("category") == "important":
        return body.get("output", "").strip()
    return None


def run(quick: bool = False, rounds: int | None = None) -> dict:
    """The figures (`ptdebug bench capture_latency`: 4 captures of each window, 2 with quick)."""
    rounds = rounds or (2 if quick else 4)
    kinds = ["plain", "plain"] + ["plain", "small", "plain", "large"] * rounds
    requests, captures = _session(kinds)
    if len(requests) != len(kinds):
        raise RuntimeError(f"{len(requests)} of {len(kinds)} requests answered")
    if len(captures) != 2 * rounds:
        raise RuntimeError(f"{len(captures)} captures for {2 * rounds} captured requests")
    plain = [r["seconds"] for r in requests[2:] if r["kind"] == "plain"]
    base = statistics.median(plain)
    figures: dict = {"rounds": rounds, "plain_median_ms": round(base * 1e3, 3),
                     "plain_max_ms": round(max(plain) * 1e3, 3)}
    captured = [r for r in requests if r["kind"] != "plain"]
    for kind in WINDOWS:
        pairs = [(r["seconds"], c) for r, c in zip(captured, captures) if r["kind"] == kind]
        for _, capture in pairs:
            if capture["status"] != "complete":
                raise RuntimeError(f"{kind} capture {capture['id']}: {capture}")
        extra = [seconds - base for seconds, _ in pairs]
        window = [c["durationNs"] / 1e9 for _, c in pairs]
        fixed = [e - w for e, w in zip(extra, window)]
        figures[f"{kind}_instructions"] = int(statistics.median(
            c["instructions"] for _, c in pairs))
        figures[f"{kind}_extra_ms"] = round(statistics.median(extra) * 1e3, 1)
        figures[f"{kind}_window_ms"] = round(statistics.median(window) * 1e3, 1)
        figures[f"{kind}_fixed_ms"] = round(statistics.median(fixed) * 1e3, 1)
        figures[f"{kind}_fixed_max_ms"] = round(max(fixed) * 1e3, 1)
    figures["target_fixed_ms"] = 50
    figures["met"] = max(figures[f"{k}_fixed_ms"] for k in WINDOWS) <= 50
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(rounds=args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:24} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Go record breakpoints: what a capture costs the program, measured from outside.

A `ptdebug dap` session on tests/fixtures/programs/go_http (an HTTP service; ptdebug builds it
and Delve attaches) with a record breakpoint at `// @record_here` whose condition matches only
the recorded requests (`len(id) == 4`), window `main.checksum` until it returns. A prober
thread sends requests that do not match, one after the other, all the time; between them the
benchmark sends recorded requests, one at a time. Side by side in one run:

* the latency of a probe request while nothing is recorded (each one passes the conditional
  breakpoint: Delve stops the program to evaluate the condition, and continues);
* the latency of a recorded request (its goroutine: Delve's stop, hand-over, the stepper's
  window, the parked end, a new Delve attaching) and the time until `ptdebug/capture` arrives;
* the longest latency of a probe that overlapped a recording (the rest of the program: stopped
  by the first Delve until it detaches and by the new Delve while it attaches and gets the
  breakpoints back; a probe that reaches the parked pc spins there until the park ends).

    .venv/bin/python -m benchmarks.bench_go_record_pause [--rounds N] [--json]
    ptdebug bench go_record_pause [--quick]

PTDEBUG_BENCH_LOG=FILE keeps the adapter's log, whose INFO lines time the steps (thread
parked, a new Delve starting, the end park undone, Delve back).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from benchmarks.dap_client import BlockingDapClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
GO_HTTP = ROOT / "tests" / "fixtures" / "programs" / "go_http"
PTDEBUG = [sys.executable, "-m", "adapter.cli", "dap", "--log-level", "ERROR"]


def _marker(path: pathlib.Path, name: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"// @{name}"):
            return number
    raise LookupError(name)


def _get(port: int, request_id: str) -> float:
    """Seconds for one request (its answer read)."""
    start = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/?id={request_id}", timeout=120) as r:
        r.read()
    return time.perf_counter() - start


class Prober(threading.Thread):
    """Requests that pass the record breakpoint without a capture, back to back:
    (start, seconds) of each."""

    def __init__(self, port: int):
        super().__init__(daemon=True)
        self.port = port
        self.samples: list[tuple[float, float]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            start = time.perf_counter()
            self.samples.append((start, _get(self.port, "probe-01")))
            time.sleep(0.002)


def _percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def run(quick: bool = False, rounds: int | None = None) -> dict:
    """The figures (`ptdebug bench go_record_pause`: 5 recorded requests, 2 with quick)."""
    rounds = rounds or (2 if quick else 5)
    tmp = tempfile.mkdtemp(prefix="bench-go-record-")
    package = pathlib.Path(tmp) / "go_http"
    shutil.copytree(GO_HTTP, package)
    source = package / "main.go"
    argv = list(PTDEBUG)
    if os.environ.get("PTDEBUG_BENCH_LOG"):  # keep the adapter's log (its INFO lines time
        argv[argv.index("--log-level") + 1] = "INFO"  # the hand-over's steps)
        argv += ["--log-file", os.environ["PTDEBUG_BENCH_LOG"]]
    adapter = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=ROOT)
    client = BlockingDapClient(adapter.stdout, adapter.stdin)
    try:
        client.call("initialize", {"adapterID": "ptdebug", "clientID": "bench",
                                   "linesStartAt1": True, "columnsStartAt1": True})
        client.call("launch", {"backend": "go", "program": str(package),
                               "recordWindow": {"function": "main.checksum",
                                                "untilReturn": True}})
        client.wait_event("initialized")
        client.call("setBreakpoints", {"source": {"path": str(source)}, "breakpoints": [
            {"line": _marker(source, "record_here"), "mode": "record",
             "condition": "len(id) == 4"}]})
        client.call("configurationDone", {})
        port = None
        while port is None:
            text = client.wait_event("output")["body"].get("output", "")
            if "listening on 127.0.0.1:" in text:
                port = int(text.rsplit(":", 1)[1])
        prober = Prober(port)
        prober.start()
        time.sleep(3.0)  # the baseline: probes only
        recorded, captured, windows = [], [], []
        for number in range(rounds):
            answer: list[float] = []
            start = time.perf_counter()
            fetch = threading.Thread(target=lambda out, rid: out.append(_get(port, rid)),
                                     args=(answer, f"r{number:03d}"), daemon=True)
            fetch.start()
            capture = client.wait_event("ptdebug/capture")["body"]
            if capture.get("status") != "complete":
                raise RuntimeError(f"capture {number}: {capture}")
            captured.append(time.perf_counter() - start)
            fetch.join(120)
            recorded.append(answer[0])
            windows.append((start, start + answer[0]))
            time.sleep(1.0)
        prober.stop.set()
        prober.join(30)
        client.send("disconnect", {"terminateDebuggee": True})
        adapter.stdin.close()
        adapter.wait(30)
    finally:
        if adapter.poll() is None:
            adapter.kill()
            adapter.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    first = windows[0][0]
    baseline = [s for t, s in prober.samples if t + s < first - 0.5]
    during = [s for t, s in prober.samples
              if any(t < end and t + s > begin for begin, end in windows)]
    base_median = _percentile(baseline, 0.5)
    return {
        "rounds": rounds,
        "probe_baseline_median_ms": round(base_median * 1e3, 2),
        "probe_baseline_p99_ms": round(_percentile(baseline, 0.99) * 1e3, 2),
        "probes_baseline": len(baseline),
        "recorded_request_median_s": round(_percentile(recorded, 0.5), 3),
        "recorded_request_max_s": round(max(recorded), 3),
        "capture_event_median_s": round(_percentile(captured, 0.5), 3),
        "probe_during_recording_max_s": round(max(during), 3) if during else None,
        "probe_during_recording_median_ms": round(_percentile(during, 0.5) * 1e3, 2)
        if during else None,
        "probes_during_recording": len(during),
        "recorded_over_baseline": round(_percentile(recorded, 0.5) / base_median, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run(rounds=args.rounds)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key:36} {value}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())

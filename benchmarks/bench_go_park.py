"""A Go window's park -> Delve answering (issue 34, "Show that it is fast" (c); target <= 100 ms),
side by side in one run with what bringing a Delve back costs by itself.

- ptdebug: `ptdebug dap` attach {pid} to tests/fixtures/programs/go_window (built with
  `-gcflags=all=-N -l`), a record breakpoint at `park_here` (`recordWindow {instructions:
  300000, timeBound: 20}`). Each round asks /park?id=rN: the window opens on the handler's
  goroutine and closes where it parks on its channel (`runtime.gopark`). As soon as the window
  records (a poller sees a thread of the program traced by a process that is no Delve), the
  client sends `setExceptionBreakpoints {filters: []}`, which only a Delve answers
  (it waits while Delve is away, adapter/backends/delve_away.py; Delve refuses it while the
  program runs, "debuggee is running", which is Delve answering all the same). Measured: from the moment the
  recorder lets go of the thread at the park (a poller reads every thread's TracerPid in
  /proc, each millisecond: no thread traced) to that answer.
- reference, the same binary started plainly: `dlv attach PID --headless ...` from its start
  to its first JSON-RPC answer (GetVersion), which is what a new Delve costs at the least
  (Delve accepts connections once it has attached), then its Detach; and ptdebug's own hold of
  every thread (adapter/hw/hold.py: PTRACE_SEIZE + PTRACE_INTERRUPT of each, then detach), the
  least a hand-back by ptrace could cost.

Role: benchmark; figures go to docs/PERFORMANCE.md.

    .venv/bin/python -m benchmarks.bench_go_park [--rounds N] [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from adapter.backends.delve_process import HEADLESS, LISTENING, find_dlv
from adapter.backends.delve_rpc import DelveRpc
from adapter.hw import hold, procfs
from benchmarks.dap_client import BlockingDapClient, end_adapter

ROOT = pathlib.Path(__file__).resolve().parents[1]
GO_WINDOW = ROOT / "tests" / "fixtures" / "programs" / "go_window"
ADAPTER = [sys.executable, "-m", "adapter.cli", "dap"] + (["--log-file", os.environ["BENCH_GO_PARK_LOG"], "--log-level", "DEBUG"] if os.environ.get("BENCH_GO_PARK_LOG") else [])
TARGET_S = 0.1


def _build(out_dir: pathlib.Path) -> pathlib.Path:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    out = out_dir / "go_window"
    subprocess.run([go, "build", "-gcflags=all=-N -l", "-o", str(out), "."], cwd=GO_WINDOW,
                   check=True, env=dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod"))
    return out


def _start(binary: pathlib.Path) -> tuple[subprocess.Popen, int]:
    """go_window running; (process, port)."""
    proc = subprocess.Popen([str(binary)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    match = re.search(rb"listening on 127\.0\.0\.1:(\d+)", proc.stdout.readline())
    if match is None:
        raise RuntimeError("go_window did not say where it listens")
    return proc, int(match.group(1))


def _marker(name: str) -> int:
    for number, line in enumerate((GO_WINDOW / "main.go").read_text().splitlines(), 1):
        if line.rstrip().endswith(f"// @{name}"):
            return number
    raise LookupError(name)


def _tracers(pid: int) -> set[int]:
    """The TracerPid of every thread of `pid` (0: not traced)."""
    tracers = set()
    for tid in procfs.tasks(pid):
        try:
            tracers.add(procfs.status(pid, tid).tracer_pid)
        except OSError:
            continue  # the thread ended meanwhile
    return tracers


def _is_delve(pid: int) -> bool:
    try:
        return procfs.stat(pid).comm == "dlv"
    except OSError:
        return False


class _ReleaseWatch:
    """Polls the program's threads each millisecond: `recording` is set once a thread is
    traced by a process that is not a Delve (the recorder holds it: the window records);
    `released` is then the monotonic time at which no thread was traced any more (the
    recorder let go of it at the park, before a new Delve attached)."""

    def __init__(self, pid: int):
        self.pid = pid
        self.recording = threading.Event()
        self.released: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            tracers = _tracers(self.pid) - {0}
            if not self.recording.is_set():
                if any(not _is_delve(t) for t in tracers):
                    self.recording.set()
            elif not tracers:
                self.released = time.monotonic()
                return
            time.sleep(0.001)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def _ptdebug_rounds(binary: pathlib.Path, rounds: int) -> list[dict]:
    proc, port = _start(binary)
    adapter = subprocess.Popen(ADAPTER, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL,
                               env=dict(os.environ, PTDEBUG_PROGRESS_DELAY="0"))
    client = BlockingDapClient(adapter.stdout, adapter.stdin)
    results = []
    try:
        client.call("initialize", {"adapterID": "ptdebug", "linesStartAt1": True,
                                   "columnsStartAt1": True, "pathFormat": "path",
                                   "supportsProgressReporting": True})
        attach = client.send("attach", {"backend": "go", "pid": proc.pid})
        client.wait_event("initialized")
        client.call("setBreakpoints", {"source": {"path": str(GO_WINDOW / "main.go")},
                                       "breakpoints": [{"line": _marker("park_here"),
                                                        "mode": "record", "recordWindow": {
                                                            "instructions": 300_000,
                                                            "timeBound": 20}}]})
        client.call("configurationDone", {})
        client.wait_response(attach)
        for number in range(rounds):
            watch = _ReleaseWatch(proc.pid)
            threading.Thread(target=_ask, args=(port, f"/park?id=r{number}"),
                             daemon=True).start()
            if not watch.recording.wait(120):
                raise RuntimeError(f"round {number}: no window recorded within 120 s")
            asked = client.send("setExceptionBreakpoints", {"filters": []})
            try:
                client.wait_response(asked)
            except RuntimeError as exc:
                # Delve's own refusal ("debuggee is running") is Delve answering all the same
                if "debuggee is running" not in str(exc):
                    raise
            answered = time.monotonic()
            watch.stop()
            capture = client.wait_event("ptdebug/capture")["body"]
            if not capture["endReason"].endswith(" parked") or watch.released is None:
                raise RuntimeError(f"round {number}: the window did not end at the park: "
                                   f"{capture['endReason']}")
            print(f"round {number}: {answered - watch.released:.3f} s", file=sys.stderr)
            results.append({"park_to_delve_s": answered - watch.released,
                            "end_reason": capture["endReason"]})
            time.sleep(0.5)  # the capture's decoding and preparing, before the next window
        client.call("disconnect", {"terminateDebuggee": True})
    finally:
        end_adapter(adapter)
        proc.kill()
        proc.wait()
    return results


def _ask(port: int, path: str) -> None:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=300).read()
    except OSError:
        pass  # the parked requests never end: the program is killed with them open


def _reference_rounds(binary: pathlib.Path, rounds: int) -> list[dict]:
    proc, _port = _start(binary)
    results = []
    try:
        for _ in range(rounds):
            started = time.monotonic()
            dlv = subprocess.Popen([find_dlv(), "attach", str(proc.pid), *HEADLESS],
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            match = None
            while match is None:
                line = dlv.stdout.readline()
                if not line:
                    raise RuntimeError("dlv attach ended before it listened")
                match = LISTENING.search(line)
            rpc = DelveRpc(match.group(1).decode(), int(match.group(2)))
            rpc.version()
            attached = time.monotonic() - started
            rpc.detach(kill=False, timeout=10)
            rpc.close()
            dlv.wait(10)
            began = time.monotonic()
            held = hold.hold_all(proc.pid)
            hold.let_go(held)
            print(f"reference: dlv attach {attached:.3f} s", file=sys.stderr)
            results.append({"dlv_attach_s": attached, "hold_all_s": time.monotonic() - began,
                            "threads": len(held)})
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_go_park.") as tmp:
        binary = _build(pathlib.Path(tmp))
        reference = _reference_rounds(binary, args.rounds)
        ptdebug = _ptdebug_rounds(binary, args.rounds)
    park = [r["park_to_delve_s"] for r in ptdebug]
    attach = [r["dlv_attach_s"] for r in reference]
    held = [r["hold_all_s"] for r in reference]
    summary = {"rounds": args.rounds, "ptdebug": ptdebug, "reference": reference,
               "park_to_delve_median_s": statistics.median(park),
               "dlv_attach_median_s": statistics.median(attach),
               "hold_all_median_s": statistics.median(held),
               "target_s": TARGET_S, "met": max(park) <= TARGET_S}
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    print(f"park -> Delve answering (ptdebug): median {summary['park_to_delve_median_s']:.3f} s "
          f"({', '.join(f'{s:.3f}' for s in park)})")
    print(f"dlv attach -> first JSON-RPC answer (reference): median "
          f"{summary['dlv_attach_median_s']:.3f} s ({', '.join(f'{s:.3f}' for s in attach)})")
    print(f"ptdebug's hold of every thread ({reference[0]['threads']} threads): median "
          f"{1e3 * summary['hold_all_median_s']:.2f} ms")
    print(f"target <= {TARGET_S:g} s: {'met' if summary['met'] else 'not met'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

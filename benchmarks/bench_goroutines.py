"""Go: building the goroutine index of a 5-million-instruction history, and DAP request latency
through `ptdebug dap` in front of Delve against Delve alone.

Index: a real stepper recording of tests/fixtures/programs/go_handoff (three goroutines
handing a token over channels, the goid probe writing PTWRITEs) is decoded; its instruction
column and goid observations are repeated to 5 M instructions (1 M with --quick), keeping the
real density of switches and observations. Timed side by side in the same run: the index
build, and the History the index sits beside (History.from_columns of the same columns), best
of 5. Target: under 1 s.

DAP: three sessions on the same Go binary stopped at the same breakpoint: one straight to a
headless Delve (DAP remote attach), one through `ptdebug dap` (which runs its own headless
Delve) with the fast relay carrying the plain requests (adapter/protocol/relay.py), and one
through `ptdebug dap` with PTDEBUG_FAST_RELAY=0 (every request through Python, for
comparison); the request mix of bench_dap.py (stackTrace, scopes, variables, evaluate) goes to
each in turn, the order rotating every cycle. Target: at most +10 % at the median and at p99
(the fast relay's session against the straight one). PTDEBUG_BENCH_LOG=DIR keeps the adapters'
logs (their last line counts the frames each path took).

    .venv/bin/python -m benchmarks.bench_goroutines [--quick] [--json]
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

from benchmarks.bench_dap import CYCLE, PTDEBUG, _stats
from benchmarks.dap_client import BlockingDapClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "fixtures" / "programs"


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        raise RuntimeError("the Go toolchain is missing")
    return go


def _build(name: str, tmp: str, debug: bool) -> tuple[str, str]:
    package = os.path.join(tmp, name)
    shutil.copytree(PROGRAMS / name, package)
    binary = os.path.join(tmp, name + "_bin")
    flags = ["-gcflags=all=-N -l"] if debug else []
    subprocess.run([_go(), "build", *flags, "-o", binary, "."], cwd=package, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    return binary, package


# --- the index --------------------------------------------------------------------------------
def _record_handoff(tmp: str):
    from adapter.capture import record, stepper
    from adapter.golang.stepper_probe import probe_for
    binary, _ = _build("go_handoff", tmp, debug=False)
    proc = subprocess.Popen([binary, "3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, GODEBUG="asyncpreemptoff=1"))
    proc.stdout.readline()

    def release():
        time.sleep(1.0)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    probe = probe_for(proc.pid)  # before the release: reading the layout takes a while
    threading.Thread(target=release, daemon=True).start()
    try:
        result = record.record_stepper(os.path.join(tmp, "handoff.bundle"), pid=proc.pid,
                                       start="main.handoff", ptw_probe=probe,
                                       end=stepper.EndCondition(until_return=True),
                                       trigger_timeout=60, wait_for_exit=False)
    finally:
        probe.close()
    proc.wait(60)
    return result.bundle, binary


def _best(fn, rounds: int = 5) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_index(instructions: int, tmp: str) -> dict:
    import numpy as np

    from adapter.golang.goroutine_index import GoroutineIndex
    from adapter.golang.runtime_layout import RuntimeLayout
    from adapter.recording.recording import Recording
    from pt_decoder.history import History
    bundle, binary = _record_handoff(tmp)
    (thread,) = Recording.open(bundle).goroutines().values()
    layout = RuntimeLayout.from_elf(binary)
    base_ip = np.frombuffer(thread.history.ips(), dtype=np.uint64)
    base_n = base_ip.size
    copies = -(-instructions // base_n)
    ip = np.tile(base_ip, copies)[:instructions].copy()
    samples = [(p + k * base_n, v) for k in range(copies) for p, v in thread.samples
               if p + k * base_n < instructions]
    time_col = np.arange(instructions, dtype=np.uint64) * 3
    cycles_col = time_col.copy()
    flags = np.zeros(instructions, dtype=np.uint8)
    index = GoroutineIndex.build(ip, samples, layout.g_stores)
    build_s = _best(lambda: GoroutineIndex.build(ip, samples, layout.g_stores))
    history_s = _best(lambda: History.from_columns(ip, time_col, cycles_col, flags), rounds=3)
    summaries_s = _best(lambda: index.summaries(time_col, cycles_col), rounds=3)
    positions = np.random.default_rng(7).integers(0, instructions, 100_000).tolist()
    start = time.perf_counter()
    for p in positions:
        index.goid_at(p)
    query_us = (time.perf_counter() - start) / len(positions) * 1e6
    return {"instructions": instructions, "recorded_instructions": base_n,
            "observations": len(samples), "segments": len(index.starts),
            "goroutine_switches": len(index.switches()),
            "build_s": round(build_s, 4), "build_ns_per_insn": round(build_s / instructions * 1e9, 1),
            "history_from_columns_s": round(history_s, 4),
            "build_vs_history": round(build_s / history_s, 3),
            "summaries_s": round(summaries_s, 4), "goid_at_us": round(query_us, 2),
            "target_s": 1.0, "meets_target": build_s < 1.0}


# --- DAP through ptdebug vs straight to Delve -------------------------------------------------
class _GoSession(BlockingDapClient):
    """A Delve session (through ptdebug or not) stopped at `// @work` of go_session."""

    def __init__(self, rfile, wfile, source: str, start: dict, request: str):
        super().__init__(rfile, wfile)
        self.call("initialize", {"clientID": "bench", "adapterID": "go", "linesStartAt1": True,
                                 "columnsStartAt1": True, "pathFormat": "path"})
        seq = self.send(request, start)
        self.wait_response(seq)
        line = next(i for i, text in enumerate(open(source), 1)
                    if text.rstrip().endswith("// @work"))
        self.call("setBreakpoints", {"source": {"path": source},
                                     "breakpoints": [{"line": line, "condition": "j.id == 5"}]})
        self.call("configurationDone", {})
        thread = self.wait_event("stopped")["body"]["threadId"]
        frame = self.call("stackTrace", {"threadId": thread})["stackFrames"][0]["id"]
        scopes = self.call("scopes", {"frameId": frame})["scopes"]
        self.arguments = {
            "stackTrace": {"threadId": thread, "startFrame": 0, "levels": 20},
            "scopes": {"frameId": frame},
            "variables": {"variablesReference": scopes[0]["variablesReference"]},
            "evaluate": {"expression": "j.value * 2 + j.id", "frameId": frame,
                         "context": "repl"},
        }


PATHS = ("direct", "direct_one_cpu", "ptdebug", "ptdebug_no_colocation",
         "ptdebug_python_only")
"""Straight to Delve; straight to a Delve kept on one CPU (what ptdebug does to its own Delve,
for a fair view of what the colocation alone gives); through ptdebug with the fast relay and
Delve sharing a CPU (the default); the same with PTDEBUG_COLOCATE=0; through ptdebug without
the fast relay."""
ADAPTER_ENV = {"ptdebug": {},
               "ptdebug_no_colocation": {"PTDEBUG_COLOCATE": "0"},
               "ptdebug_python_only": {"PTDEBUG_FAST_RELAY": "0", "PTDEBUG_COLOCATE": "0"}}


def _adapter(name: str) -> subprocess.Popen:
    argv = list(PTDEBUG)
    log_dir = os.environ.get("PTDEBUG_BENCH_LOG")
    if log_dir:
        argv[argv.index("--log-level") + 1] = "INFO"
        argv += ["--log-file", os.path.join(log_dir, f"{name}.log")]
    env = dict(os.environ, **ADAPTER_ENV[name])
    return subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=ROOT, env=env)


def _rotating(sessions: dict, requests: int) -> dict:
    """`requests` timed requests on each session, one CYCLE on each in turn (the order
    rotating every cycle), after a warm-up; each path's figures and what ptdebug adds."""
    samples = {name: {c: [] for c in CYCLE} for name in sessions}
    names = list(sessions)
    for _ in range(20):  # warm every path up (imports, caches) before measuring
        for command in CYCLE:
            for session in sessions.values():
                session.timed(command)
    for i in range(requests // len(CYCLE)):
        order = names[i % len(names):] + names[:i % len(names)]
        for name in (order if i // len(names) % 2 == 0 else order[::-1]):
            for command in CYCLE:
                samples[name][command].append(sessions[name].timed(command))
    result: dict = {}
    for name in names:
        every = [v for values in samples[name].values() for v in values]
        result[name] = _stats(every)
        result[name]["per_command_median_us"] = {c: _stats(v)["median_us"]
                                                 for c, v in samples[name].items()}
    for name, base, prefix in (("ptdebug", "direct", "added"),
                               ("ptdebug", "direct_one_cpu", "added_vs_one_cpu_direct"),
                               ("ptdebug_no_colocation", "direct", "no_colocation_added"),
                               ("ptdebug_python_only", "direct", "python_only_added")):
        if name not in result or base not in result:
            continue
        for q in ("median_us", "p99_us"):
            added = result[name][q] - result[base][q]
            result[f"{prefix}_{q}"] = round(added, 1)
            result[f"{prefix}_{q.replace('_us', '')}"] = round(added / result[base][q], 4)
    return result


def bench_dap(requests: int, tmp: str) -> dict:
    from adapter.backends.delve_process import find_dlv
    binary, package = _build("go_session", tmp, debug=True)
    source = os.path.join(package, "main.go")
    one_cpu = max(os.sched_getaffinity(0))
    delves = {name: subprocess.Popen(
        [find_dlv(), "exec", binary, "--headless", "--accept-multiclient", "--api-version=2",
         "--listen=127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        # before exec, so every thread of the Go runtime inherits it
        preexec_fn=(lambda: os.sched_setaffinity(0, {one_cpu})) if name == "direct_one_cpu"  # noqa: PLW1509
        else None)
        for name in ("direct", "direct_one_cpu")}
    adapters = {name: _adapter(name) for name in PATHS if name.startswith("ptdebug")}
    try:
        sessions = {}
        for name, dlv in delves.items():
            port = int(re.search(rb"127\.0\.0\.1:(\d+)", dlv.stdout.readline()).group(1))
            threading.Thread(target=dlv.stdout.read, daemon=True).start()  # drain its output
            sock = socket.create_connection(("127.0.0.1", port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sessions[name] = _GoSession(sock.makefile("rb"), sock.makefile("wb"), source,
                                        {"mode": "remote"}, "attach")
        for name, adapter in adapters.items():
            sessions[name] = _GoSession(adapter.stdout, adapter.stdin, source,
                                        {"backend": "go", "program": binary, "mode": "exec"},
                                        "launch")
        result = _rotating(sessions, requests)
        for name, adapter in adapters.items():
            sessions[name].send("disconnect", {"terminateDebuggee": True})
            adapter.stdin.close()
            adapter.wait(20)
    finally:
        for proc in (*adapters.values(), *delves.values()):
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    result["target_added_max"] = 0.10
    result["meets_target"] = result["added_median"] <= 0.10 and result["added_p99"] <= 0.10
    return result


def run(quick: bool = False) -> dict:
    instructions = 1_000_000 if quick else 5_000_000
    requests = int(os.environ.get("BENCH_DAP_REQUESTS", "0")) or (400 if quick else 4_000)
    with tempfile.TemporaryDirectory(prefix="bench_goroutines_") as tmp:
        return {"index": bench_index(instructions, tmp),
                "dap_vs_delve": {"requests_per_path": requests, "mix": list(CYCLE),
                                 **bench_dap(requests, tmp)}}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    result = run(quick="--quick" in argv)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The DBI recorder beside the same work run natively, in one process, in one run (issue 32).

Each workload runs for ever in units of fixed work and prints each unit's duration
(CLOCK_MONOTONIC ns). The benchmark takes the median unit while the thread runs natively,
then opens a DBI window on it (adapter/capture/dbi.py: Frida's Stalker writing block ids into
the ring, the drain encoding them into PT as they come) for a few seconds and takes the
median unit again, then closes the window and takes native units once more. Figures per
workload:
  native_unit_ms / recorded_unit_ms / slowdown     the cost of recording the thread
  recorded_insn_per_s      instructions the window recorded (and encoded) per second
  drain_lag_blocks         blocks written but not yet encoded when the window ended (the
                           drain keeps up when this stays small)
  pt_bytes_per_insn        the size of the PT written
  stop_ms                  unfollow until the thread left Stalker's code
  written_blocks_per_s / encoded_blocks_per_s   what the thread wrote into the ring, and
                           what the drain encoded, per second (a window whose drain falls
                           64M blocks behind ends there: window_ended_by says so)
Workloads: `c` (benchmarks/c/dbi_work.c, a branchy loop with calls and indirect calls),
`cpython` (a pure-Python loop), `blas` (numpy matmul, OpenBLAS on one thread, so that the
thread followed does the work). Then `damage`: tests/fixtures/programs/dbi_zmm.c and
dbi_numpy_matmul.py under 30 short windows, counting rounds whose registers changed and
numpy results that differ (docs/recording.md: why DBI is not chosen automatically).
`python -m benchmarks.bench_dbi [--quick]` or `ptdebug bench dbi`.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from adapter.capture import dbi, dbi_repair

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "fixtures" / "programs"

# The Python workloads run on a worker thread, as the C one does (the main thread waits:
# DBI attaches only while it is in a system call); each prints "t TID" first.
CPYTHON_WORK = r"""
import threading, time
def unit(n):
    acc = 0
    for i in range(n):
        if i % 3:
            acc += i * i % 7
        else:
            acc ^= i
    return acc
def work():
    print("t", threading.get_native_id(), flush=True)
    while True:
        t = time.monotonic_ns(); unit(20000); print("u", time.monotonic_ns() - t, flush=True)
threading.Thread(target=work, daemon=True).start()
while True:
    time.sleep(1)
"""
BLAS_WORK = r"""
import threading, time, numpy as np
a = np.random.default_rng(1).standard_normal((160, 160)); b = a.T.copy()
def work():
    print("t", threading.get_native_id(), flush=True)
    while True:
        t = time.monotonic_ns()
        for _ in range(4): a @ b
        print("u", time.monotonic_ns() - t, flush=True)
threading.Thread(target=work, daemon=True).start()
while True:
    time.sleep(1)
"""


class _Units:
    """Reads "u NS" lines of a workload in a thread; `since(t)` = units that ended after t."""

    def __init__(self, proc):
        self.proc = proc
        self.units: list[tuple[float, int]] = []
        self.tid = int(proc.stdout.readline().split()[1])      # "t TID": the worker thread
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("u "):
                self.units.append((time.monotonic(), int(line.split()[1])))

    def between(self, t0: float, t1: float) -> list[int]:
        return [ns for at, ns in self.units if t0 < at <= t1]


def _measure(argv, seconds: float, env=None) -> dict:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    units = _Units(proc)
    try:
        time.sleep(1.0)                                     # warm up
        t0 = time.monotonic()
        time.sleep(seconds / 2)
        native_before = units.between(t0, time.monotonic())
        session = dbi.DbiSession(proc.pid)
        try:
            window = session.window(units.tid)
            w0 = time.monotonic()
            ended_by = f"{seconds:g} s"
            try:
                while time.monotonic() - w0 < seconds:
                    window.drain()
                    time.sleep(0.002)
            except dbi.DbiError as exc:          # the drain fell behind: the window ends
                ended_by = str(exc)
            w1 = time.monotonic()
            lag = window.count() - window.read
            s0 = time.monotonic()
            settled = window.stop_following()
            stop_ms = (time.monotonic() - s0) * 1000
            recorded = units.between(w0 + 0.2, w1)
            instructions = window.encoder.instructions
            pt_bytes = sum(map(len, window.stream))
        finally:
            session.close()
        t2 = time.monotonic()
        time.sleep(seconds / 2)
        native_after = units.between(t2 + 0.2, time.monotonic())
    finally:
        proc.kill()
        proc.wait()
    native = statistics.median(native_before + native_after)
    inside = statistics.median(recorded) if recorded else None
    return {
        "native_unit_ms": round(native / 1e6, 3),
        "recorded_unit_ms": round(inside / 1e6, 3) if inside else None,
        "slowdown": round(inside / native, 1) if inside else None,
        "recorded_units": len(recorded),
        "recorded_insn_per_s": int(instructions / (w1 - w0)),
        "drain_lag_blocks": lag,
        "pt_bytes_per_insn": round(pt_bytes / instructions, 3) if instructions else None,
        "stop_ms": round(stop_ms, 1), "left_stalker": settled,
        "window_s": round(w1 - w0, 2), "window_ended_by": ended_by,
        "written_blocks_per_s": int((window.read + lag) / (w1 - w0)),
        "encoded_blocks_per_s": int(window.read / (w1 - w0)),
    }


def _damage(quick: bool) -> dict:
    windows = 10 if quick else 30
    out = {"windows": windows}
    with tempfile.TemporaryDirectory() as tmp:
        if dbi_repair.cpu_has_avx512():
            exe = pathlib.Path(tmp) / "dbi_zmm"
            subprocess.run(["gcc", "-O1", "-pthread", "-mavx512f", "-mavx512bw", "-o", str(exe),
                            str(PROGRAMS / "dbi_zmm.c")], check=True)
            out["zmm"] = _windows_then_report([str(exe)], windows)
        out["numpy"] = _windows_then_report([sys.executable,
                                             str(PROGRAMS / "dbi_numpy_matmul.py")], windows)
    return out


def _windows_then_report(argv, windows: int) -> str:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        tid = int(proc.stdout.readline().split()[1])           # "ready TID"
        session = dbi.DbiSession(proc.pid)
        try:
            for _ in range(windows):
                window = session.window(tid)
                time.sleep(0.05)
                window.stop_following()
        finally:
            session.close()
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=60)[0].strip()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run(quick: bool = False) -> dict:
    seconds = 2.0 if quick else 4.0
    with tempfile.TemporaryDirectory() as tmp:
        exe = pathlib.Path(tmp) / "dbi_work"
        subprocess.run(["gcc", "-O1", "-pthread", "-o", str(exe),
                        str(ROOT / "benchmarks/c/dbi_work.c")], check=True)
        figures = {"c": _measure([str(exe), "400000"], seconds)}
    figures["cpython"] = _measure([sys.executable, "-c", CPYTHON_WORK], seconds)
    figures["blas"] = _measure([sys.executable, "-c", BLAS_WORK], seconds,
                               env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    figures["damage"] = _damage(quick)
    return figures


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))

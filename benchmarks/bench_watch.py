"""Hardware watchpoints: what an armed watch costs the target, and what one hit costs.

Side by side in one run, in one target process (tests/fixtures/programs/watch_bench.c),
alternating phases with and without the watch so that drift on this shared machine hits
both sides alike. The target runs on one CPU and ptdebug on the other(s), so what is
measured is the target's own slowdown, not ptdebug's CPU time on a shared core.
- never_hit: a memory-bound phase (read-modify-write over a 32 MiB buffer) with and
  without a write watch on a word it never touches, in adjacent pairs; the figure is the
  median of the per-pair ratios of the target thread's CPU time (target: under 1 %).
- trap_floor: the debug exception alone (a counting breakpoint event: no sample, no
  wakeup): what any tool pays per hit on this machine, before its own work.
- perf_hit_batch / perf_hit_each (target thread CPU time, which holds the exception and
  the sample, VM exit included, and leaves out other tenants): ptdebug's perf mechanism, every hit sampled (IP, TID,
  time, registers, call chain) and read back; the reader woken once per half ring
  ("batch") or at every hit ("each", the CLI's default, so values are read at once).
- ptrace_hit (wall time, fastest phases): ptdebug as tracer, the thread stops at each
  hit while ptdebug reads DR6, the registers, the bytes and the call chain, then resumes it.
Per hit: N stores to a watched word, spaced by fixed work so that the kernel's sample
throttle (perf_event_max_sample_rate) is never reached; (time armed - time unarmed) / N. magic-trace quotes about 8 us per trigger hit on bare metal.
- arm: adding one watch (freeze the threads, open per thread x CPU, release).

Layer: benchmarks (may import any layer). `run(quick) -> dict`; `ptdebug bench watch`.
"""
from __future__ import annotations

import os
import pathlib
import platform
import re
import statistics
import subprocess
import tempfile
import time

from adapter import watch_traced as wt
from adapter import watchpoints as wp
from adapter.hw import perf

SOURCE = pathlib.Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "programs" / "watch_bench.c"


class _Workload:
    def __init__(self, binary: str, mebibytes: int):
        self.proc = subprocess.Popen([binary, str(mebibytes)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        self.addr = {k: int(v, 16) for k, v in re.findall(r"(\w+)=(0x[0-9a-f]+)", ready)}
        self.pid = self.proc.pid

    def send(self, command: str) -> None:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def result_ns(self, clock: str = "wall") -> int:
        """The last phase's wall time, or ("cpu") the target thread's CPU time, which
        leaves out what other tenants of this shared machine took. A hit's cost is
        wall time (a thread in a ptrace-stop uses no CPU but is held up); an armed
        watch's cost on a memory-bound phase is best seen in CPU time."""
        fields = self.proc.stdout.readline().split()
        return int(fields[1] if clock == "wall" else fields[3])

    def phase(self, command: str, clock: str = "wall") -> int:
        self.send(command)
        return self.result_ns(clock)

    def close(self) -> None:
        self.send("quit")
        self.proc.wait(timeout=30)


def _build(tmp: str) -> str:
    binary = os.path.join(tmp, "watch_bench")
    subprocess.run(["gcc", "-O2", "-g", "-o", binary, str(SOURCE)], check=True)
    return binary


def _never_hit(work: _Workload, pairs: int, passes: int) -> dict:
    """Pairs of adjacent phases, one with the watch armed and one without (order
    alternating), compared pair by pair: the median of the per-pair ratios stays
    put while the other tenants of a shared machine come and go."""
    work.phase(f"mem {passes}")  # warm the buffer and the caches
    watcher = wp.PerfWatcher(work.pid)
    watch = None
    ratios, off_all, on_all = [], [], []
    try:
        for k in range(pairs):
            times = {}
            for armed in ((False, True) if k % 2 == 0 else (True, False)):
                if armed:
                    watch = watcher.add(wp.WatchRequest(work.addr["idle"], 8, wp.Access.WRITE))
                # Arming holds the threads in a ptrace-stop for a moment; a short
                # phase after every change lets caches and scheduling settle alike.
                work.phase("mem 1", "cpu")
                times[armed] = work.phase(f"mem {passes}", "cpu")
                if armed:
                    watcher.remove(watch)
                    watch = None
            ratios.append(times[True] / times[False])
            off_all.append(times[False])
            on_all.append(times[True])
        assert watcher.poll(0) == [], "the never-hit watch was hit"
    finally:
        watcher.close()
    q1, _, q3 = statistics.quantiles(ratios, n=4)
    # The standard error of a median is about 1.25 sigma / sqrt(n), sigma about IQR / 1.35;
    # twice that is what this run can tell apart from zero.
    resolution = 2 * 1.2533 * ((q3 - q1) / 1.349) / len(ratios) ** 0.5
    return {"slowdown_percent": round((statistics.median(ratios) - 1) * 100, 2),
            "resolution_percent": round(resolution * 100, 2),
            "pair_ratio_iqr_percent": round((q3 - q1) * 100, 2),
            "unwatched_median_ms": round(statistics.median(off_all) / 1e6, 2),
            "watched_median_ms": round(statistics.median(on_all) / 1e6, 2), "pairs": pairs}


def _hits_phase(work: _Workload, hits: int, spin: int) -> int:
    # CPU time: the debug exception and the sample are the thread's own time (the
    # VM's exit included), and other tenants' time slices are left out.
    return work.phase(f"hits {hits} {spin}", "cpu")


def _trap_floor(work: _Workload, rounds: int, hits: int, spin: int) -> dict:
    """The debug exception alone: a counting breakpoint event (no sample, no wakeup)."""
    off, on = [], []
    for _ in range(rounds):
        off.append(_hits_phase(work, hits, spin))
        attr = perf.breakpoint_attr(work.addr["hot"], 8, perf.HW_BREAKPOINT_W, inherit=False)
        attr.sample_period, attr.sample_type = 0, 0
        fd = perf.perf_event_open(attr, work.pid)
        try:
            on.append(_hits_phase(work, hits, spin))
            assert perf.read_count(fd) == hits
        finally:
            os.close(fd)
    return {"per_hit_us": round((statistics.median(on) - statistics.median(off)) / hits / 1e3, 2)}


def _perf_per_hit(work: _Workload, rounds: int, hits: int, spin: int, wakeup: str) -> dict:
    off, on, reported, lost = [], [], [], 0
    for _ in range(rounds):
        off.append(_hits_phase(work, hits, spin))
        with wp.PerfWatcher(work.pid, ring_pages=256, wakeup=wakeup) as watcher:
            watcher.add(wp.WatchRequest(work.addr["hot"], 8, wp.Access.WRITE))
            work.send(f"hits {hits} {spin}")
            seen = 0
            deadline = time.monotonic() + 60
            while seen < hits and time.monotonic() < deadline:
                for item in watcher.poll(0.01):
                    if isinstance(item, wp.LostHits):
                        lost += max(item.count, 1)
                    else:
                        seen += 1
            on.append(work.result_ns("cpu"))
            reported.append(seen)
    per_hit_us = (statistics.median(on) - statistics.median(off)) / hits / 1e3
    return {"per_hit_us": round(per_hit_us, 2), "hits_per_phase": hits,
            "hits_reported_min": min(reported), "lost": lost,
            "unwatched_phase_ms": round(statistics.median(off) / 1e6, 2),
            "watched_phase_ms": round(statistics.median(on) / 1e6, 2), "rounds": rounds}


def _ptrace_per_hit(work: _Workload, rounds: int, hits: int, spin: int) -> dict:
    """Wall time: a thread in a ptrace-stop uses no CPU, it waits. The fastest phase
    of each side is the least disturbed by other tenants; medians are given too."""
    off, on = [], []
    for _ in range(rounds):
        off.append(work.phase(f"hits {hits} {spin}"))
        session = wt.TracedWatchSession(work.pid)
        try:
            session.add(wp.WatchRequest(work.addr["hot"], 8, wp.Access.WRITE))
            session.start()
            work.send(f"hits {hits} {spin}")
            for _ in range(hits):
                session.resume(session.wait_hit())
        finally:
            session.close()
        on.append(work.result_ns())
    return {"per_hit_us": round((min(on) - min(off)) / hits / 1e3, 1),
            "per_hit_us_median": round((statistics.median(on) - statistics.median(off)) / hits / 1e3, 1),
            "hits_per_phase": hits, "rounds": rounds,
            "unwatched_phase_ms": round(min(off) / 1e6, 2), "watched_phase_ms": round(min(on) / 1e6, 2)}


def _arm_time(work: _Workload, rounds: int) -> dict:
    times = []
    for _ in range(rounds):
        with wp.PerfWatcher(work.pid) as watcher:
            start = time.perf_counter()
            watcher.add(wp.WatchRequest(work.addr["hot"], 8, wp.Access.WRITE))
            times.append(time.perf_counter() - start)
    return {"arm_ms": round(statistics.median(times) * 1e3, 2), "cpus": len(wp.online_cpus())}


def run(quick: bool = False) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        binary = _build(tmp)
        work = _Workload(binary, 32)
        mine = os.sched_getaffinity(0)
        try:
            if len(cpus) >= 2:
                # The target on one CPU, ptdebug on another: what is measured is the
                # target's own slowdown, not the reader's CPU time on a shared core.
                os.sched_setaffinity(work.pid, {cpus[0]})
                os.sched_setaffinity(0, set(cpus[1:]))
            rounds = 3 if quick else 7
            hits, spin = (1000, 20000) if quick else (5000, 20000)
            figures = {
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Linux {platform.release()}, "
                           f"{_cpu_model()}",
                "never_hit": _never_hit(work, 40 if quick else 150, 2),
                "trap_floor": _trap_floor(work, rounds, hits, spin),
                "perf_hit_batch": _perf_per_hit(work, rounds, hits, spin, "batch"),
                "perf_hit_each": _perf_per_hit(work, rounds, hits, spin, "each"),
                "ptrace_hit": _ptrace_per_hit(work, rounds, hits // 10, spin),
                "arm": _arm_time(work, rounds),
                "magic_trace_per_hit_us": 8.0,
            }
        finally:
            os.sched_setaffinity(0, mine)
            if work.proc.poll() is None:
                work.close()
    return figures


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"

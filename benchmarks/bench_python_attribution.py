"""What Python attribution costs the ptrace stepper: the same Python call recorded with the
Python frame probe (adapter/python/frame_probe.py: PTWRITE samples of the running frame at
every stop) and without it, side by side in one run.

The call: `score(N)` of tests/fixtures/programs/py_attribution.py in the interpreter running
the benchmark (CPython 3.11 here), from os.getppid() to before os.getpgrp(), launched with
ASLR off and PYTHONHASHSEED=0 so that every run executes the same instructions. Per round,
in alternating order, each on a fresh process stopped at the same trigger: the recorder's
loop (ThreadRecorder.run) without a probe and with the Python probe, with planted INT3
breakpoints (a launched single-threaded program) and with debug registers (an attached or
multi-threaded one). Paths are checked equal first. Best round kept. Figures:
  *_insn_per_s               instructions recorded per second of the loop
  attribution_cost_*         1 - rate with / rate without (target: <= 0.25)
  probe_share_*              the time spent inside the probe / the recording's time, in
                             the same run (immune to what other processes do to the
                             rates between runs on a shared machine)
  probe_us_per_call, probe_us_per_read  the probe's own cost (a read: at the first stop
                             after a bytecode dispatch; other calls return at once)
`python -m benchmarks.bench_python_attribution [--quick]`.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys
import time

from adapter.capture import stepper
from adapter.capture.target import Target
from adapter.python.frame_probe import probe_for

FIXTURE = pathlib.Path(__file__).resolve().parent.parent / \
    "tests/fixtures/programs/py_attribution.py"
_DEVNULL = os.open(os.devnull, os.O_WRONLY)


class _Timed:
    """The probe, with the time spent in it added up."""

    def __init__(self, probe):
        self.probe = probe
        self.seconds = 0.0
        self.calls = 0

    def __call__(self, regs):
        t0 = time.perf_counter()
        try:
            return self.probe(regs)
        finally:
            self.seconds += time.perf_counter() - t0
            self.calls += 1


def _record(n: int, python: bool, breakpoints: str):
    env = dict(os.environ, PYTHONHASHSEED="0")
    target = Target.launch([sys.executable, str(FIXTURE), str(n)], env=env, no_aslr=True,
                           output_fd=_DEVNULL)
    probe = None
    try:
        tid = target.run_to(target.resolve("getppid"), timeout=60)
        until = target.resolve("getpgrp")
        target.keep_only(tid, follow_clones=breakpoints == "int3")
        probe = _Timed(probe_for(target.pid)) if python else None
        rec = stepper.ThreadRecorder(tid, target.pid, stepper.EndCondition(until=until),
                                     ptw_probe=probe, breakpoints=breakpoints)
        t0 = time.perf_counter()
        result = rec.run()
        seconds = time.perf_counter() - t0
    finally:
        if probe is not None:
            probe.probe.close()
        target.release()
        target.wait_launched(60)
    return result, seconds, probe


def run(quick: bool = False) -> dict:
    n = 20 if quick else 60
    rounds = 2 if quick else 5
    best: dict[str, float] = {}
    share: dict[str, list[float]] = {"int3": [], "dr": []}
    per_call: list[float] = []
    per_read: list[float] = []
    seconds: dict[str, float] = {}
    stops: dict[str, int] = {}
    reference = None
    samples = codes = probe_reads = probe_skipped = 0
    for r in range(rounds):
        for breakpoints in ("int3", "dr"):
            order = (False, True) if r % 2 == 0 else (True, False)
            for python in order:
                rec, s, probe = _record(n, python, breakpoints)
                if rec.partial_reason:
                    raise AssertionError(f"the recording ended early: {rec.partial_reason}")
                if reference is None:
                    reference = list(rec.ips)
                elif list(rec.ips) != reference:
                    raise AssertionError("two recordings of the same call differ")
                key = f"{breakpoints}_{'python' if python else 'plain'}"
                rate = len(rec.ips) / s
                if rate > best.get(key, 0):
                    best[key], seconds[key], stops[key] = rate, s, rec.stops
                if python:
                    inner = probe.probe
                    samples, codes = len(rec.ptw), len(inner.codes)
                    probe_reads, probe_skipped = inner.reads, inner.skipped
                    share[breakpoints].append(probe.seconds / s)
                    per_call.append(probe.seconds / max(probe.calls, 1) * 1e6)
                    per_read.append(probe.seconds / max(inner.reads, 1) * 1e6)
    out = {"python": sys.version.split()[0], "call": f"score({n})",
           "instructions": len(reference), "rounds": rounds, "python_samples": samples,
           "code_objects": codes, "probe_reads": probe_reads,
           "probe_calls_without_a_read": probe_skipped}
    for breakpoints in ("int3", "dr"):
        plain, python = f"{breakpoints}_plain", f"{breakpoints}_python"
        out[f"{plain}_insn_per_s"] = round(best[plain])
        out[f"{python}_insn_per_s"] = round(best[python])
        out[f"attribution_cost_{breakpoints}"] = round(1 - best[python] / best[plain], 3)
        out[f"probe_share_{breakpoints}"] = [round(min(share[breakpoints]), 3),
                                             round(max(share[breakpoints]), 3)]
        out[f"stops_{breakpoints}"] = stops[python]
    out["probe_us_per_call"] = round(min(per_call), 1)
    out["probe_us_per_read"] = round(min(per_read), 1)
    return out


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=1))

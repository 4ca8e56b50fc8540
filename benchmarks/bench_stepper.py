"""The ptrace stepper recorder beside plain per-instruction single-stepping.

Both record the same deterministic call (`work` of tests/fixtures/programs/
rec_work.c, from its entry to its return, ASLR off), interleaved round by
round in one run; the best round of each is kept. Figures:
  single_step_insn_per_s   PTRACE_SINGLESTEP of every instruction (the baseline
                           the issue names: ~10,000/s in this VM)
  stepper_insn_per_s       the recorder's loop (ThreadRecorder.run) alone, with
                           planted INT3 breakpoints (what `record` uses for a
                           program it launches with one thread)
  stepper_debug_registers_insn_per_s  the same with debug-register breakpoints
                           (what it uses for attached or multi-threaded targets)
  stepper_end_to_end_insn_per_s  `record_stepper`: launch, trigger, record,
                           PT encoding, images copied, bundle written
  stepper_exact_returns_insn_per_s  the recorder stopping at every return
                           (--exact-returns), to show what the shadow stack buys
  ratio_* = stepper rate / single-step rate; instructions per stop.
Every run's paths are checked equal to the single-step path first.
`python -m benchmarks.bench_stepper [--quick]` or `ptdebug bench stepper`.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from adapter.capture import blocks, record, stepper
from adapter.capture.target import Target
from adapter.hw import ptrace as pt

SOURCE = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/programs/rec_work.c"


def _build(out_dir: pathlib.Path) -> str:
    exe = out_dir / "rec_work"
    subprocess.run(["gcc", "-O1", "-g", "-o", str(exe), str(SOURCE)], check=True)
    return str(exe)


_DEVNULL = os.open(os.devnull, os.O_WRONLY)  # the program's output must not mix with ours


def _at_trigger(argv, follow_clones=False):
    target = Target.launch(argv, no_aslr=True, output_fd=_DEVNULL)
    tid = target.run_to(target.resolve("work"))
    target.keep_only(tid, follow_clones=follow_clones)
    return target, tid, pt.getregs(tid)


def _single_step(argv) -> tuple[list[int], float]:
    target, tid, regs = _at_trigger(argv)
    try:
        with pt.Memory(tid) as mem:
            ret = mem.read_u64(regs.rsp)
            code = blocks.CodeCache(mem.read)
            t0 = time.perf_counter()
            ips, _ = stepper.single_step_path(tid, until=ret, until_rsp=regs.rsp + 8,
                                              collapse_rep=lambda ip: code.insn(ip).rep)
            seconds = time.perf_counter() - t0
    finally:
        target.release()
        target.wait_launched(30)
    return list(ips), seconds


def _recorder(argv, predict_returns=True, breakpoints="int3"):
    target, tid, regs = _at_trigger(argv, follow_clones=breakpoints == "int3")
    try:
        with pt.Memory(tid) as mem:
            ret = mem.read_u64(regs.rsp)
        rec = stepper.ThreadRecorder(tid, target.pid, stepper.EndCondition(until_return=True),
                                     predict_returns=predict_returns, entry_rsp=regs.rsp,
                                     return_address=ret, breakpoints=breakpoints)
        t0 = time.perf_counter()
        result = rec.run()
        seconds = time.perf_counter() - t0
    finally:
        target.release()
        target.wait_launched(30)
    return result, seconds


def _end_to_end(argv, out: pathlib.Path) -> tuple[stepper.Recording, float]:
    t0 = time.perf_counter()
    result = record.record_stepper(str(out), command=argv, start="work",
                                   end=stepper.EndCondition(until_return=True), no_aslr=True,
                                   output_fd=_DEVNULL)
    return result.recording, time.perf_counter() - t0


def intel_pt_costs(threads: int = 16, rounds: int = 5) -> dict:
    """Per-thread set-up (perf_event_open + ring and AUX mmaps + enable) and
    per-snapshot cost (disable + copy the newest AUX bytes) of the intel_pt
    backend, on a child process with `threads` sleeping threads. Only where
    the intel_pt PMU exists; elsewhere says why it did not run."""
    from adapter.capture import intel_pt as ipt
    from adapter.hw import perf
    try:
        pmu, formats, caps = ipt.require_pmu()
    except ipt.IntelPtError as exc:
        return {"skipped": str(exc)}
    config = ipt.config_from_formats(formats, ipt.PtOptions().terms(caps))
    child = subprocess.Popen([sys.executable, "-c",
                              "import threading, time\n"
                              f"[threading.Thread(target=time.sleep, args=(60,)).start() "
                              f"for _ in range({threads - 1})]\ntime.sleep(60)"])
    try:
        time.sleep(0.5)
        tids = sorted(int(t) for t in __import__("os").listdir(f"/proc/{child.pid}/task"))
        setup, snap = [], []
        for _ in range(rounds):
            events = []
            t0 = time.perf_counter()
            for tid in tids:
                ev = ipt.PtEvent(ipt.perf_event_open(ipt.pt_attr(pmu, config), tid), tid,
                                 aux_pages=1024, snapshot=True)
                ipt.ioctl(ev.fd, perf.IOC_ENABLE)
                events.append(ev)
            setup.append((time.perf_counter() - t0) / len(tids))
            time.sleep(0.05)
            t0 = time.perf_counter()
            for ev in events:
                ev.take_snapshot()
            snap.append((time.perf_counter() - t0) / len(tids))
            for ev in events:
                ev.close()
        return {"threads": len(tids), "setup_us_per_thread": round(min(setup) * 1e6, 1),
                "snapshot_us_per_thread_4MiB_aux": round(min(snap) * 1e6, 1)}
    finally:
        child.kill()
        child.wait()


def run(quick: bool = False) -> dict:
    rounds_arg = "10" if quick else "40"
    repeats = 2 if quick else 3
    best = {"single": 0.0, "rec": 0.0, "exact": 0.0, "e2e": 0.0, "dr": 0.0}
    stops = {}
    with tempfile.TemporaryDirectory(prefix="bench_stepper") as tmp:
        tmp = pathlib.Path(tmp)
        argv = [_build(tmp), rounds_arg, "1"]
        n = 0
        for r in range(repeats):
            ref, s_single = _single_step(argv)
            n = len(ref)
            rec, s_rec = _recorder(argv)
            exact, s_exact = _recorder(argv, predict_returns=False)
            dr, s_dr = _recorder(argv, breakpoints="dr")
            e2e, s_e2e = _end_to_end(argv, tmp / f"b{r}")
            for what, got in (("recorder", rec), ("exact", exact), ("end_to_end", e2e),
                              ("debug registers", dr)):
                if list(got.ips) != ref:
                    raise AssertionError(f"{what} path differs from the single-step path")
            best["single"] = max(best["single"], n / s_single)
            best["rec"] = max(best["rec"], n / s_rec)
            best["exact"] = max(best["exact"], n / s_exact)
            best["e2e"] = max(best["e2e"], n / s_e2e)
            best["dr"] = max(best["dr"], n / s_dr)
            stops = {"stepper": rec.stops, "exact_returns": exact.stops,
                     "single_steps_in_stepper": rec.single_steps}
    return {
        "intel_pt": intel_pt_costs(4 if quick else 16, 2 if quick else 5),
        "instructions": n,
        "rounds": repeats,
        "single_step_insn_per_s": round(best["single"]),
        "stepper_insn_per_s": round(best["rec"]),
        "stepper_exact_returns_insn_per_s": round(best["exact"]),
        "stepper_end_to_end_insn_per_s": round(best["e2e"]),
        "stepper_debug_registers_insn_per_s": round(best["dr"]),
        "ratio_stepper_vs_single_step": round(best["rec"] / best["single"], 2),
        "ratio_exact_returns_vs_single_step": round(best["exact"] / best["single"], 2),
        "ratio_end_to_end_vs_single_step": round(best["e2e"] / best["single"], 2),
        "ratio_debug_registers_vs_single_step": round(best["dr"] / best["single"], 2),
        "instructions_per_stop": round(n / max(stops["stepper"], 1), 2),
        "instructions_per_stop_exact_returns": round(n / max(stops["exact_returns"], 1), 2),
        "single_steps_in_stepper": stops["single_steps_in_stepper"],
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=1))

"""`ptdebug decode --format ips` end to end against libipt's instruction decoder printing
every IP, on the same 5 M-instruction stream (issue 15, benchmark (a)).

Run: `.venv/bin/python -m benchmarks.bench_decode_output [--quick] [--json]` or
`ptdebug bench decode_output`. Results go to docs/PERFORMANCE.md.

The stream is benchmarks/corpus.py's recipe at 0.75 MiB (5,094,124 instructions of the
real static-glibc hello path, timing on; 0.25 MiB with --quick), cached in
~/.cache/ptdebug. Both sides are whole processes, timed from start to exit, with stdout
redirected to a regular file in a temporary directory (not /dev/null: the bytes are
written, and then compared):
  libipt        benchmarks/c/insn_driver.c `ips`: pt_insn_sync_forward/next/event as
                ptxed loops, printf("%" PRIx64 "\\n") per instruction through stdio's
                buffered stdout (gcc -O2 -lipt, built here)
  ptdebug       the `ptdebug` console script: `ptdebug decode STREAM --elf ... --format ips`
Rounds are interleaved and each keeps its best (and median) round, so a busy shared
machine slows both alike. The IP lines must be identical (ptdebug's `[...]` event lines
aside). Also reported, ptdebug only: --format ptxed, ptxed --time, jsonl and
`ptdebug dump` on the same stream, and each process's peak RSS.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from benchmarks.bench_insn import _sections, build_driver
from benchmarks.corpus import DECODE, cached_stream

TARGET = 2.0            # ptdebug end to end vs libipt printing every IP


def _ptdebug_argv() -> list[str]:
    """The installed console script when there is one (what a user runs), else the module."""
    script = pathlib.Path(sys.executable).with_name("ptdebug")
    if script.is_file():
        return [sys.executable, str(script)]
    return [sys.executable, "-c", "import sys; from adapter.cli import main; sys.exit(main())"]


def _decode_options(elf: str) -> list[str]:
    eax, ebx = DECODE["cpuid_0x15"]
    return ["--elf", elf, "--cpu", DECODE["cpu"], "--mtc-freq", str(DECODE["mtc_freq"]),
            "--nom-freq", str(DECODE["nom_freq"]), "--cpuid-0x15.eax", str(eax),
            "--cpuid-0x15.ebx", str(ebx)]


def _timed(argv: list[str], out_path: pathlib.Path) -> tuple[float, int | None]:
    """(seconds from start to exit, peak RSS in KiB or None) of one process writing its
    stdout to out_path. The peak RSS comes from GNU time when it is installed: a child
    forked straight from this Python process would count this process's pages, which
    the kernel's high-water mark keeps across exec."""
    gnu_time = shutil.which("time") or ("/usr/bin/time" if os.path.exists("/usr/bin/time") else None)
    with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss_file:
        wrapped = [gnu_time, "-f", "%M", "-o", rss_file.name, *argv] if gnu_time else argv
        with open(out_path, "wb") as out:
            start = time.perf_counter()
            run = subprocess.run(wrapped, stdout=out, stderr=subprocess.PIPE, check=False)
            seconds = time.perf_counter() - start
        if run.returncode:
            raise RuntimeError(f"{' '.join(argv[:3])} ... exited {run.returncode}: "
                               f"{run.stderr.decode(errors='replace').strip()}")
        text = rss_file.read().strip().splitlines()
    peak = int(text[-1]) if gnu_time and text and text[-1].isdigit() else None
    return seconds, peak


def _ip_lines_equal(ptdebug_out: pathlib.Path, libipt_out: pathlib.Path) -> int:
    """Check ptdebug's IP lines equal libipt's; returns how many there are."""
    with open(ptdebug_out, "rb") as a, open(libipt_out, "rb") as b:
        ours = [line for line in a if not line.startswith(b"[")]
        theirs = b.readlines()
    if ours != theirs:
        first = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y), min(len(ours), len(theirs)))
        raise RuntimeError(f"ptdebug and libipt print different IPs (first difference at line {first}; "
                           f"{len(ours)} vs {len(theirs)} lines)")
    return len(ours)


def run(quick: bool = False) -> dict:
    size_mb = 0.25 if quick else 0.75
    rounds = 3 if quick else 7
    stream, info = cached_stream(size_mb)
    elf = info["elf"]
    family, model = (int(x) for x in DECODE["cpu"].split("/")[:2])
    eax, ebx = DECODE["cpuid_0x15"]
    decode_argv = _ptdebug_argv() + ["decode", str(stream)] + _decode_options(elf)
    runs: dict[str, list[float]] = {}
    rss: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="bench_decode_output_") as tmp:
        tmp = pathlib.Path(tmp)
        exe = build_driver(tmp)
        libipt_argv = [str(exe), "ips", str(stream), str(family), str(model), str(DECODE["mtc_freq"]),
                       str(DECODE["nom_freq"]), str(eax), str(ebx), "1"] + _sections(elf)
        measures = {
            "libipt_insn_print_ips": libipt_argv,
            "ptdebug_decode_ips": decode_argv + ["--format", "ips"],
        }
        extra = {
            "ptdebug_decode_ptxed": decode_argv + ["--format", "ptxed"],
            "ptdebug_decode_ptxed_time": decode_argv + ["--format", "ptxed", "--time", "--event:time"],
            "ptdebug_decode_jsonl": decode_argv + ["--format", "jsonl"],
            "ptdebug_dump": _ptdebug_argv() + ["dump", str(stream)],
        }
        sizes: dict[str, int] = {}
        for round_ in range(rounds):
            for name, argv in (measures | (extra if round_ < 2 else {})).items():
                seconds, peak = _timed(argv, tmp / f"{name}.out")
                runs.setdefault(name, []).append(seconds)
                if peak is not None:
                    rss[name] = max(rss.get(name, 0), peak)
                sizes[name] = (tmp / f"{name}.out").stat().st_size
        lines = _ip_lines_equal(tmp / "ptdebug_decode_ips.out", tmp / "libipt_insn_print_ips.out")
    best = {name: min(times) for name, times in runs.items()}
    result = {
        "stream": {"bytes": info["bytes"], "instructions": info["instructions"], "source": info["source"],
                   "path": str(stream)},
        "output": "stdout redirected to a regular file (temporary directory on local disk)",
        "ip_lines_identical": lines,
        "processes": {name: {"best_s": round(best[name], 3), "median_s": round(statistics.median(times), 3),
                             "rounds": len(times),
                             "peak_rss_mb": round(rss[name] / 1024, 1) if name in rss else None,
                             "output_mb": round(sizes[name] / 1e6, 1),
                             # dump prints packets, not instructions: its rate is the trace's MB/s
                             **({"trace_mb_per_s": round(info["bytes"] / best[name] / 1e6, 1)}
                                if name == "ptdebug_dump" else
                                {"minsn_per_s": round(info["instructions"] / best[name] / 1e6, 1)})}
                      for name, times in runs.items()},
        "ptdebug_vs_libipt": round(best["libipt_insn_print_ips"] / best["ptdebug_decode_ips"], 2),
        "ptdebug_vs_libipt_median": round(statistics.median(runs["libipt_insn_print_ips"])
                                          / statistics.median(runs["ptdebug_decode_ips"]), 2),
        "target": TARGET,
        "commands": {"ptdebug": " ".join(measures["ptdebug_decode_ips"][1:]),
                     "libipt": " ".join(["insn_driver"] + libipt_argv[1:])},
        "machine": _machine(),
    }
    if quick:
        # ptdebug's fixed start-up (interpreter, imports, ELF) weighs 3x more on the
        # 1.7 M-instruction stream: the target is stated for the 5 M one
        result["target_met"] = None
        result["target_note"] = "the target applies to the 5 M-instruction stream (run without --quick)"
    else:
        result["target_met"] = result["ptdebug_vs_libipt"] >= TARGET
    return result


def _machine() -> dict:
    try:
        from benchmarks.bench_packets import machine
        return machine()
    except ImportError:
        return {"cores": os.cpu_count()}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if shutil.which("gcc") is None:
        print("gcc is missing (scripts/bootstrap.sh installs it)", file=sys.stderr)
        return 1
    result = run(quick="--quick" in argv)
    if "--json" in argv:
        print(json.dumps(result, indent=1))
        return 0
    for name, r in result["processes"].items():
        rate = (f"{r['minsn_per_s']:6.1f} M insn/s" if "minsn_per_s" in r
                else f"{r['trace_mb_per_s']:6.1f} MB/s of trace")
        print(f"{name:28s} best {r['best_s']:6.3f} s  median {r['median_s']:6.3f} s  {rate}  "
              f"peak RSS {r['peak_rss_mb']} MB  out {r['output_mb']} MB")
    print(f"ptdebug decode --format ips vs libipt printing every IP: {result['ptdebug_vs_libipt']}x best, "
          f"{result['ptdebug_vs_libipt_median']}x median (target {TARGET}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

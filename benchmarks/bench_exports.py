"""Offline views of a bundle (pprof, Perfetto, hot lines, latency) against decoding the same
bundle, side by side in one run: each view's time as a ratio of the decode it builds on.

Records `tests/fixtures/programs/hotpath.c` (gcc -O0 -g) with the ptrace stepper (not timed),
then times, best of 3: Recording.open (decode every stream), the pprof profile, the
Perfetto JSON, the hot-lines model (line table included) and a latency query.
"""
from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _best(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best


def run(quick: bool = False) -> dict:
    from adapter.export.latency import measure, resolve
    from adapter.export.perfetto import trace_events
    from adapter.export.pprof import build_profile
    from adapter.lsp.hotlines import HotLines
    from adapter.recording.recording import Recording

    requests = 100 if quick else 1000
    with tempfile.TemporaryDirectory() as tmp:
        program = pathlib.Path(tmp) / "hotpath"
        subprocess.run(["gcc", "-O0", "-g", "-no-pie", "-o", str(program),
                        str(ROOT / "tests/fixtures/programs/hotpath.c")], check=True)
        bundle = pathlib.Path(tmp) / "bundle"
        subprocess.run([sys.executable, "-m", "adapter.cli", "record", "--backend", "stepper",
                        "--from", "serve", "--until-return", "--max-instructions", "5000000",
                        "-o", str(bundle), "--", str(program), str(requests)],
                       check=True, capture_output=True, cwd=ROOT)

        decode = _best(lambda: Recording.open(bundle))
        decoded = Recording.open(bundle)
        n = decoded.total_instructions

        def fresh():  # the views cache per-thread columns: time each on a fresh decode
            return Recording.open(bundle)

        def timed(view) -> float:
            best = float("inf")
            for _ in range(3):
                d = fresh()
                started = time.perf_counter()
                view(d)
                best = min(best, time.perf_counter() - started)
            return best

        pprof = timed(build_profile)
        perfetto = timed(trace_events)
        hot = timed(HotLines.from_decoded)
        latency = timed(lambda d: measure(d, resolve(d, "handle"), resolve(d, "checksum")))
    figures = {"instructions": n, "decode_s": round(decode, 4),
               "decode_insn_per_s": round(n / decode)}
    for name, seconds in (("pprof", pprof), ("perfetto", perfetto), ("hot_lines", hot),
                          ("latency", latency)):
        figures[f"{name}_s"] = round(seconds, 4)
        figures[f"{name}_vs_decode"] = round(seconds / decode, 2)
        figures[f"{name}_insn_per_s"] = round(n / seconds)
    return figures


if __name__ == "__main__":
    import json
    print(json.dumps(run("--quick" in sys.argv), indent=1))

"""The multi-megabyte benchmark stream: a real program's instruction path, as timed PT.

Shared by the packet benchmark (bench_packets.py) and the instruction-flow benchmark.
The real recordings are too small to time a decoder on (the largest is 14 KB), so the
stream is built from one of them: the 59,234-instruction path of DynamoRIO's static-glibc
"hello", recorded with Intel PT on a real Skylake and decoded by libipt (the reference
decode `pt.libipt-2.0.5.insn.txt.gz` beside it), re-encoded by ptdebug's FlowEncoder with
timing on (TSC/TMA/CBR in PSB+, MTC, CYC before every TNT/TIP) and a PSB+ every 4 KiB, as
perf's default `intel_pt/cyc/` recording does. Each pass gives every instruction its own
cycle cost (a seeded mix of 1-3 cycle instructions, cache-miss stalls, rare long stalls),
so the CYC and MTC payloads vary as on hardware; passes are appended (each one a trace
window: PSB+, TIP.PGE ... TIP.PGD) until the stream reaches the requested size.

Decode the stream with: its ELF `hello` (at its own addresses), cpu 6/85/7 (any works),
mtc_freq 3, nom_freq 36, cpuid_0x15 (2, 300) -- `info["decode"]` has them. Its exact
instruction flow is `recorded_path()[0]` repeated `info["passes"]` times (libipt decodes
exactly that; checked when the recipe was written).
"""
from __future__ import annotations

import gzip
import json
import os
import pathlib
import random
import time
from itertools import accumulate

from pt_decoder.flow_encoder import FlowEncoder
from pt_decoder.image import Image

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = pathlib.Path(os.environ.get("PTDEBUG_SHARED", ROOT.parent / "shared")).resolve()
SOURCE = "traces/dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"
VERSION = 2            # bump when the stream's recipe changes (invalidates cached copies)
DECODE = {"cpu": "6/85/7", "mtc_freq": 3, "nom_freq": 36, "cpuid_0x15": [2, 300]}
CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME", pathlib.Path.home() / ".cache")) / "ptdebug"


def source_dir() -> pathlib.Path:
    folder = SHARED / SOURCE
    if not (folder / "hello").is_file():
        raise FileNotFoundError(f"the benchmark's source recording is missing: {folder} "
                                f"(set PTDEBUG_SHARED to the shared data directory)")
    return folder


def recorded_path() -> tuple[list[int], pathlib.Path]:
    """The real instruction path (one IP per retired instruction) and its ELF."""
    folder = source_dir()
    with gzip.open(folder / "pt.libipt-2.0.5.insn.txt.gz", "rt") as fh:
        ips = [int(line.split()[0], 16) for line in fh if line[0] in "0123456789abcdef"]
    return ips, folder / "hello"


def _cycle_costs(rng: random.Random, n: int) -> list[int]:
    """Per-instruction core cycles: mostly 1-3, L2/L3 misses, rare long stalls."""
    common = (1, 1, 1, 1, 2, 2, 3, 4)
    out = rng.choices(common, k=n)
    for i in rng.sample(range(n), n // 40):
        out[i] = rng.randrange(10, 60)
    for i in rng.sample(range(n), n // 2000):
        out[i] = rng.randrange(200, 3000)
    return out


def _encoder() -> tuple[list[int], pathlib.Path, FlowEncoder]:
    """(the real path, its ELF, a FlowEncoder with the stream's timing and PSB period)."""
    ips, elf = recorded_path()
    image = Image()
    image.add_elf(str(elf))
    fe = FlowEncoder(image.read, timing=True, cyc=True, psb_period=4096,
                     mtc_freq=DECODE["mtc_freq"], nom_freq=DECODE["nom_freq"],
                     cpuid_0x15=tuple(DECODE["cpuid_0x15"]))
    return ips, elf, fe


def _passes(fe: FlowEncoder, ips: list[int], rng: random.Random, tsc: int):
    """The encoded passes of the path, one after another without end: each a trace window
    (PSB+, TIP.PGE ... TIP.PGD) with its own cycle costs, the clock going on between them."""
    while True:
        tscs = list(accumulate(_cycle_costs(rng, len(ips)), initial=tsc))[1:]
        yield fe.encode(ips, tscs=tscs)
        tsc = tscs[-1] + rng.randrange(10_000, 1_000_000)   # time between windows


def realistic_stream(path_out: str | os.PathLike, size_mb: float = 8.0, seed: int = 1) -> dict:
    """Write the benchmark stream (at least size_mb MiB) to path_out; returns its info.

    A stream already at path_out with a matching `path_out.json` (same recipe, size and
    seed) is reused. info: bytes, instructions, passes, seconds to build, decode options,
    source, elf."""
    path_out = pathlib.Path(path_out)
    want = {"version": VERSION, "size_mb": size_mb, "seed": seed}
    meta = path_out.with_name(path_out.name + ".json")
    if path_out.is_file() and meta.is_file():
        info = json.loads(meta.read_text())
        if {k: info.get(k) for k in want} == want and path_out.stat().st_size == info["bytes"]:
            return info
    ips, elf, fe = _encoder()
    target = int(size_mb * (1 << 20))
    start = time.perf_counter()
    written = passes = 0
    tmp = path_out.with_name(path_out.name + ".tmp")
    with open(tmp, "wb") as fh:
        for data in _passes(fe, ips, random.Random(seed), 0x1_0000_0000):
            if written >= target:
                break
            fh.write(data)
            written += len(data)
            passes += 1
    os.replace(tmp, path_out)
    info = {**want, "bytes": written, "passes": passes, "instructions": passes * len(ips),
            "build_s": round(time.perf_counter() - start, 2), "decode": DECODE,
            "source": SOURCE, "elf": str(elf)}
    meta.write_text(json.dumps(info, indent=1))
    return info


def _segment(job: tuple) -> str:
    """One segment of large_stream: realistic_stream's passes from its own seed, its clock
    starting at `tsc` (written to `path`; returns it)."""
    path, passes, seed, tsc = job
    ips, _elf, fe = _encoder()
    with open(path, "wb") as fh:
        for _, data in zip(range(passes), _passes(fe, ips, random.Random(seed), tsc)):
            fh.write(data)
    return path


SEGMENT_TSC_SPAN = 1 << 44
"""Clock distance between the starts of two segments of large_stream: far more than a
segment's passes take (about 10^9 ticks per 1,000 passes), so time never runs back."""


def large_stream(instructions: int, workers: int | None = None) -> tuple[pathlib.Path, dict]:
    """A stream of at least `instructions` instructions in the cache directory, made of
    realistic_stream's passes (the real path, re-encoded with timing) by `workers` processes
    at once, each writing a segment with its own seed and a clock that starts after the
    segment before it ends. Built once (minutes for 10^9 instructions), then reused."""
    from concurrent.futures import ProcessPoolExecutor
    ips, elf = recorded_path()
    passes = -(-instructions // len(ips))
    workers = workers or os.cpu_count() or 1
    segments = max(workers, -(-passes // 1000))
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"bench-large-v{VERSION}-{passes}p.pt"
    want = {"version": VERSION, "passes": passes, "segments": segments}
    meta = path.with_name(path.name + ".json")
    if path.is_file() and meta.is_file():
        info = json.loads(meta.read_text())
        if {k: info.get(k) for k in want} == want and path.stat().st_size == info["bytes"]:
            return path, info
    start = time.perf_counter()
    share = [passes // segments + (1 if k < passes % segments else 0) for k in range(segments)]
    jobs = [(f"{path}.{k}.tmp", share[k], 1000 + k, 0x1_0000_0000 + k * SEGMENT_TSC_SPAN)
            for k in range(segments)]
    with ProcessPoolExecutor(workers) as pool:
        parts = list(pool.map(_segment, jobs))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                while block := f.read(1 << 24):
                    out.write(block)
            os.unlink(part)
    os.replace(tmp, path)
    info = {**want, "bytes": path.stat().st_size, "instructions": passes * len(ips),
            "build_s": round(time.perf_counter() - start, 1), "decode": DECODE,
            "source": SOURCE, "elf": str(elf)}
    meta.write_text(json.dumps(info, indent=1))
    return path, info


def cached_stream(size_mb: float = 8.0, seed: int = 1) -> tuple[pathlib.Path, dict]:
    """realistic_stream() in the user's cache directory (~/.cache/ptdebug)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"bench-stream-v{VERSION}-{size_mb:g}mb-s{seed}.pt"
    return path, realistic_stream(path, size_mb, seed)


if __name__ == "__main__":
    import sys
    out = sys.argv[1] if len(sys.argv) > 1 else "bench-stream.pt"
    mb = float(sys.argv[2]) if len(sys.argv) > 2 else 8.0
    print(json.dumps(realistic_stream(out, mb), indent=1))

"""Packet-decoding throughput: ptdebug's packet layer against libipt's pt_pkt_next.

Run: `.venv/bin/python -m benchmarks.bench_packets [--quick] [--json]` or `ptdebug bench`
(which calls `run(quick)`). Results go to docs/PERFORMANCE.md.

All decoders read the same stream, benchmarks/corpus.py's realistic one (a real program's
recorded instruction path re-encoded with timing packets; 8 MiB, 2 MiB with --quick),
from memory, start at the first PSB and decode to the end:
  libipt        benchmarks/c/pt_pkt_bench.c, compiled here with gcc -O2 -lipt: the
                pt_pkt_sync_forward + pt_pkt_next loop ptdump runs, in C
  count         PacketDecoder.count(): the Cython inner loop (next_c per packet, no GIL, no
                Python object), what the event layer above runs
  kinds         PacketDecoder.kinds(): the same loop writing each packet's kind to a bytes
  records       PacketDecoder.records(): the same loop writing every packet as a packed
                PtPacket record (for numpy.frombuffer / struct.iter_unpack)
  python_iter   `for packet in decoder`: one Python Packet object per packet
Also reported: how fast FlowEncoder turns the recorded path into PT (million instructions
per second), the rate that bounds building such streams.
The methods are interleaved round by round and each keeps its best round, so that a busy
shared machine slows all of them alike. Packet counts must agree (the run fails if not).
"""
from __future__ import annotations

import json
import os
import pathlib
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time

from benchmarks.corpus import DECODE, cached_stream, recorded_path
from pt_decoder.flow_encoder import FlowEncoder
from pt_decoder.image import Image
from pt_decoder.packet import RECORD_FORMAT, PacketDecoder

_RECORD_SIZE = struct.calcsize(RECORD_FORMAT)

HERE = pathlib.Path(__file__).resolve().parent
DRIVER = HERE / "c" / "pt_pkt_bench.c"
TARGET = 1.5           # ptdebug's Cython loop vs libipt's pt_pkt_next


def build_driver(out_dir: pathlib.Path) -> pathlib.Path:
    """Compile the libipt driver; raises RuntimeError saying what is missing."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("gcc is missing: scripts/bootstrap.sh installs build-essential")
    exe = out_dir / "pt_pkt_bench"
    run = subprocess.run([gcc, "-O2", "-o", str(exe), str(DRIVER), "-lipt"],
                         capture_output=True, text=True)
    if run.returncode:
        raise RuntimeError(f"cannot build {DRIVER.name} against libipt (libipt-dev "
                           f"installed?): {run.stderr.strip()}")
    return exe


def _libipt(exe: pathlib.Path, stream: pathlib.Path, repeats: int) -> tuple[float, int]:
    out = subprocess.run([str(exe), str(stream), str(repeats)], capture_output=True,
                         text=True, check=True).stdout
    result = json.loads(out)
    if result["errors"]:
        raise RuntimeError(f"libipt found {result['errors']} errors in the benchmark stream")
    return result["best_s"], result["packets"]


def _best(fn, repeats: int) -> tuple[float, int]:
    best, n = float("inf"), 0
    for _ in range(repeats):
        start = time.perf_counter()
        n = fn()
        best = min(best, time.perf_counter() - start)
    return best, n


def _count(data) -> int:
    packets, errors = PacketDecoder(data).count()
    if errors:
        raise RuntimeError(f"ptdebug found {errors} errors in the benchmark stream")
    return packets


def _kinds(data) -> int:
    return len(PacketDecoder(data).kinds())


def _records(data) -> int:
    return len(PacketDecoder(data).records()) // _RECORD_SIZE


def _python_iter(data) -> int:
    dec = PacketDecoder(data)
    dec.sync_forward()
    n = 0
    for _packet in dec:
        n += 1
    return n


def flow_encoder_rate() -> float:
    """FlowEncoder's speed on the corpus recipe (one pass of the real path, timing and CYC
    on, instruction decode cache warm): millions of instructions per second."""
    ips, elf = recorded_path()
    image = Image()
    image.add_elf(str(elf))
    fe = FlowEncoder(image.read, timing=True, cyc=True, mtc_freq=DECODE["mtc_freq"],
                     nom_freq=DECODE["nom_freq"], cpuid_0x15=tuple(DECODE["cpuid_0x15"]))
    tscs = list(range(1 << 32, (1 << 32) + 3 * len(ips), 3))
    fe.encode(ips, tscs=tscs)
    seconds, _ = _best(lambda: len(fe.encode(ips, tscs=tscs)), 3)
    return round(len(ips) / seconds / 1e6, 2)


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            "kernel": platform.release()}


def run(quick: bool = False) -> dict:
    size_mb = 2.0 if quick else 8.0
    rounds = 3 if quick else 5
    stream, info = cached_stream(size_mb)
    data = stream.read_bytes()
    mb = len(data) / 1e6
    best = {"libipt": float("inf"), "count": float("inf"), "kinds": float("inf"),
            "records": float("inf"), "python_iter": float("inf")}
    counts = {}
    with tempfile.TemporaryDirectory(prefix="bench_packets_") as tmp:
        exe = build_driver(pathlib.Path(tmp))
        for _ in range(rounds):
            for name, measure in (
                    ("libipt", lambda: _libipt(exe, stream, 3)),
                    ("count", lambda: _best(lambda: _count(data), 3)),
                    ("kinds", lambda: _best(lambda: _kinds(data), 2)),
                    ("records", lambda: _best(lambda: _records(data), 2)),
                    ("python_iter", lambda: _best(lambda: _python_iter(data), 1))):
                seconds, n = measure()
                best[name] = min(best[name], seconds)
                counts[name] = n
    if len(set(counts.values())) != 1:
        raise RuntimeError(f"the decoders disagree on the packet count: {counts}")
    mbs = {name: round(mb / s, 1) for name, s in best.items()}
    ratio = {name: round(mbs[name] / mbs["libipt"], 2) for name in mbs}
    return {
        "stream_mb": round(mb, 2), "packets": counts["libipt"],
        "instructions_encoded": info["instructions"],
        "mb_per_s": mbs,
        "mpackets_per_s": {name: round(counts["libipt"] / s / 1e6, 1) for name, s in best.items()},
        "ratio_vs_libipt": ratio,
        "target": f"count >= {TARGET}x libipt",
        "target_met": ratio["count"] >= TARGET,
        "flow_encoder_minsn_per_s": flow_encoder_rate(),
        "machine": machine(),
        "stream": str(stream),
    }


if __name__ == "__main__":
    figures = run(quick="--quick" in sys.argv)
    print(json.dumps(figures, indent=1) if "--json" in sys.argv else
          "\n".join(f"{k}: {v}" for k, v in figures.items()))

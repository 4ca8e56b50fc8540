"""The decoder and bundle fuzzer's worker: feeds mutated PT streams to the instruction decoder,
and mutated bundles (manifest fields, nesting, files: /dev/zero, FIFOs, links, escaping
paths, mutated streams) to the command-line entry points `decode`, `dump`, `export`,
`latency`, for a given time, in one process with a memory limit and a hang watchdog.

Run by tests/pt_decoder/test_decoder_bundle_fuzz.py; runnable by hand for a longer run:

    .venv/bin/python tests/pt_decoder/fuzz_worker.py decoder --seconds 600 --seed 1
    .venv/bin/python tests/pt_decoder/fuzz_worker.py bundles --seconds 600 --seed 1

Rules (any break exits 1 with the input, hex or as a bundle directory kept, and the
traceback): the decoder raises nothing but PtError; a command returns 0, 1 or 2 and never
lets an exception out; a refusal (2) is one line on stderr; no input takes longer than
HANG_SECONDS (faulthandler dumps the stacks and exits 1); memory stays under MEMORY_LIMIT
(a MemoryError is a failure). Prints one JSON line of figures at the end.
"""
from __future__ import annotations

import argparse
import contextlib
import faulthandler
import io
import json
import os
import pathlib
import random
import resource
import shutil
import sys
import tempfile
import time
import traceback

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "adapter" / "capture")]

from bundle_samples import BASE, CODE, loop_stream, write_loop_bundle  # noqa: E402

from pt_decoder.errors import PtError  # noqa: E402

HANG_SECONDS = 30
"""Longest a batch of 200 decoder inputs, or one bundle through all four commands, may take."""
MEMORY_LIMIT = 3 << 30
SNIPPETS = [bytes([0x02, 0x82] * 8), bytes([0x02, 0x23]), bytes([0x99, 0x01]),
            bytes([0x0D, 0, 0, 0x40, 0]), bytes([0x2D, 5, 0]), bytes([0x11, 0, 0x40]),
            bytes([0x4D, 7, 0, 0x40, 0]), bytes([0x01, 0]), bytes([0x02, 0xA3]) + bytes(6),
            bytes([0x19]) + bytes(7), bytes([0x02, 0x03, 1, 0]), bytes([0x03, 0xFF]),
            bytes([0x6]), bytes([0xAA]), bytes([0x02, 0xC8, 1, 2, 3, 4, 5])]


def mutate_bytes(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """One to four random edits: bit flips, byte sets, cuts, duplications, splices, snippets."""
    out = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.random()
        position = rng.randrange(len(out) + 1)
        if choice < 0.3 and out:
            index = rng.randrange(len(out))
            out[index] ^= 1 << rng.randrange(8)
        elif choice < 0.45 and out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        elif choice < 0.55:
            del out[position:position + rng.randint(1, 32)]
        elif choice < 0.65 and out:
            start = rng.randrange(len(out))
            out[position:position] = out[start:start + rng.randint(1, 64)]
        elif choice < 0.8:
            out[position:position] = rng.choice(SNIPPETS)
        elif choice < 0.9:
            other = rng.choice(pool)
            start = rng.randrange(len(other) + 1)
            out[position:position] = other[start:start + rng.randint(1, 256)]
        else:
            out[position:position] = rng.randbytes(rng.randint(1, 16))
    return bytes(out[:1 << 16])


def fuzz_decoder(seconds: float, seed: int, stop_after: int | None) -> dict:
    from pt_decoder.image import Image
    from pt_decoder.insn import InsnDecoder
    rng = random.Random(seed)
    image = Image()
    image.add_section(BASE, CODE, "loop")
    seeds = [loop_stream()]
    shared = pathlib.Path(os.environ.get("PTDEBUG_SHARED", ROOT.parent / "shared")) / "traces"
    for path in sorted(shared.glob("synthetic-oracle/*.pt"))[:4]:
        seeds.append(path.read_bytes()[:1 << 14])
    pool = list(seeds)
    figures = {"inputs": 0, "instructions": 0, "gaps": 0, "pt_errors": 0, "bytes": 0}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and (stop_after is None or figures["inputs"] < stop_after):
        faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)  # per batch of 200
        for _ in range(200):
            data = mutate_bytes(rng, rng.choice(pool), pool)
            figures["inputs"] += 1
            figures["bytes"] += len(data)
            try:
                flow = InsnDecoder(data, image).decode()
            except PtError:
                figures["pt_errors"] += 1
                continue
            except BaseException:
                _fail("decoder", data.hex())
            figures["instructions"] += len(flow)
            figures["gaps"] += len(flow.gaps())
            if len(pool) < 64 and len(flow) > 4 and rng.random() < 0.01:
                pool.append(data)  # an input that decodes far is a good parent
    return figures


# --- bundles ----------------------------------------------------------------------------------
def _random_json(rng: random.Random, depth: int = 0):
    choice = rng.random()
    if choice < 0.15:
        return rng.choice([None, True, False])
    if choice < 0.35:
        return rng.choice([0, -1, 1 << 64, 1 << 70, -(1 << 63), 2 ** 63 - 1, 7, 0x400000])
    if choice < 0.5:
        return rng.choice([1.5, -0.0, 1e308])
    if choice < 0.75:
        return rng.choice(["", "../../../../etc/passwd", "/dev/zero", "/etc/hostname",
                           "streams/100.pt", "images/loop.bin", "x" * 300, "\u00e9\u0000",
                           "streams", "/", ".", "..", "manifest.json"])
    if depth > 3:
        return []
    if choice < 0.88:
        return [_random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["file", "tid", "size", "path", "load_address", "family"]):
            _random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def _paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _paths(item, prefix + (index,))


def mutate_bundle(rng: random.Random, root: pathlib.Path) -> str:
    """Break the loop bundle at `root` in one to three ways; returns what was done."""
    manifest = json.loads((root / "manifest.json").read_text())
    done = []
    for _ in range(rng.randint(1, 3)):
        if not isinstance(manifest, dict):
            break  # replaced by something else: nothing left to edit
        choice = rng.random()
        paths = [p for p in _paths(manifest) if p]
        if choice < 0.45 and paths:
            path = rng.choice(paths)
            parent = manifest
            for key in path[:-1]:
                parent = parent[key]
            if rng.random() < 0.2:
                del parent[path[-1]]
                done.append(f"del {path}")
            else:
                parent[path[-1]] = _random_json(rng)
                done.append(f"set {path}")
        elif choice < 0.55:
            key = rng.choice(["streams", "images", "sideband", "threads"])
            entry = rng.choice(["file", "load_address", "tid", "size", "offset"])
            target = manifest.get(key)
            if isinstance(target, list) and target and isinstance(target[0], dict):
                target[0][entry] = _random_json(rng)
                done.append(f"{key}[0].{entry}")
        elif choice < 0.65:
            kind = rng.choice(["fifo", "zero", "link_out", "dir"])
            name = rng.choice(["streams/100.pt", "images/loop.bin", "manifest.json"])
            target = root / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            elif target.exists() or target.is_symlink():
                target.unlink()
            if kind == "fifo":
                os.mkfifo(target)
            elif kind == "zero":
                os.symlink("/dev/zero", target)
            elif kind == "link_out":
                os.symlink("/etc/hostname", target)
            else:
                target.mkdir()
            done.append(f"{kind} at {name}")
            if name == "manifest.json":
                return "; ".join(done)
        elif choice < 0.8:
            stream = root / "streams" / "100.pt"
            if stream.is_file() and not stream.is_symlink():
                data = stream.read_bytes()
                stream.write_bytes(mutate_bytes(rng, data, [data]))
                done.append("stream bytes")
        elif choice < 0.9:
            depth = rng.choice([40, 1000, 100_000])
            manifest[rng.choice(["stats", "cpu", "x"])] = json.loads(
                "[" * min(depth, 50) + "]" * min(depth, 50)) if depth < 100 else None
            text = json.dumps(manifest)
            text = text[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
            (root / "manifest.json").write_text(text)
            done.append(f"nesting {depth}")
            return "; ".join(done)
        else:
            manifest = _random_json(rng) if rng.random() < 0.3 else manifest
            done.append("manifest replaced" if not isinstance(manifest, dict) else "kept")
    (root / "manifest.json").write_text(json.dumps(manifest))
    return "; ".join(done)


def _commands(root: pathlib.Path, scratch: pathlib.Path):
    from adapter.commands import export as export_cli
    from adapter.commands import latency as latency_cli
    from pt_decoder.tools import decode, dump
    return [("decode", decode.main, [str(root), "--format", "ips"]),
            ("dump", dump.main, [str(root)]),
            ("export", export_cli.main, ["pprof", str(root), "-o", str(scratch / "o.pb"),
                                         "--force"]),
            ("latency", latency_cli.main, [str(root), "--from", hex(BASE + 5),
                                           "--to", hex(BASE + 7)])]


def fuzz_bundles(seconds: float, seed: int, stop_after: int | None) -> dict:
    rng = random.Random(seed)
    scratch = pathlib.Path(tempfile.mkdtemp(prefix="ptdebug-bundle-fuzz-"))
    template = write_loop_bundle(scratch / "template")
    figures = {"bundles": 0, "runs": 0, "exit": {}}
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and (stop_after is None
                                               or figures["bundles"] < stop_after):
            root = scratch / "case"
            if root.exists() or root.is_symlink():
                shutil.rmtree(root)
            shutil.copytree(template, root)
            faulthandler.dump_traceback_later(HANG_SECONDS, exit=True)  # per bundle
            what = mutate_bundle(rng, root)
            figures["bundles"] += 1
            for name, main, argv in _commands(root, scratch):
                out, err = io.StringIO(), io.StringIO()
                try:
                    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                        status = main(argv)
                except SystemExit as exc:  # argparse
                    status = exc.code
                except BaseException:
                    kept = shutil.copytree(root, scratch / f"failed-{name}", symlinks=True)
                    _fail(f"bundle {name} ({what}); bundle kept at {kept}", "")
                figures["runs"] += 1
                figures["exit"][f"{name}:{status}"] = figures["exit"].get(f"{name}:{status}",
                                                                          0) + 1
                lines = err.getvalue().strip().splitlines()
                if status not in (0, 1, 2) or "Traceback" in err.getvalue() or (
                        status == 2 and len(lines) != 1):
                    kept = shutil.copytree(root, scratch / f"failed-{name}", symlinks=True)
                    print(f"FAIL bundle {name} ({what}): exit {status}, stderr:\n"
                          f"{err.getvalue()}\nbundle kept at {kept}", file=sys.stderr)
                    sys.exit(1)
    finally:
        if not any(p.name.startswith("failed-") for p in scratch.iterdir()):
            shutil.rmtree(scratch, ignore_errors=True)
    return figures


def _fail(what: str, data_hex: str) -> None:
    print(f"FAIL {what}: {traceback.format_exc()}\ninput: {data_hex}", file=sys.stderr)
    sys.stderr.flush()
    os._exit(1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("target", choices=("decoder", "bundles"))
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inputs", type=int, default=None, help="stop after this many")
    args = parser.parse_args()
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    # a hang: every thread's stack on stderr and exit 1 (armed again for each batch)
    started = time.monotonic()
    run = fuzz_decoder if args.target == "decoder" else fuzz_bundles
    figures = run(args.seconds, args.seed, args.inputs)
    faulthandler.cancel_dump_traceback_later()
    figures.update(target=args.target, seed=args.seed,
                   seconds=round(time.monotonic() - started, 1),
                   peak_rss_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())

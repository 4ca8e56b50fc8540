"""`ptdebug bench [--json] [--quick] [NAME...]`: run every benchmark and print its figures.

Layer: tooling above everything (benchmarks may import any layer). Discovers the modules
`benchmarks/bench_*.py`; each has `run(quick: bool) -> dict` of figures measured side by
side with its reference in the same run. Prints one block per benchmark, or with --json
one object {name: figures}. A benchmark that fails is reported with its error (and the
exit status is 1); the others still run.
"""
from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import sys
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent


def discover() -> list[str]:
    """Names of the benchmarks (bench_packets -> 'packets'), sorted."""
    return sorted(p.stem[len("bench_"):] for p in HERE.glob("bench_*.py"))


def _lines(value, indent: str = "  ") -> list[str]:
    if isinstance(value, dict):
        out = []
        for key, item in value.items():
            if isinstance(item, dict):
                out.append(f"{indent}{key}:")
                out += _lines(item, indent + "  ")
            else:
                out.append(f"{indent}{key}: {item}")
        return out
    return [f"{indent}{value}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ptdebug bench", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"benchmarks to run (default: all of {', '.join(discover())})")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer rounds")
    args = parser.parse_args(argv)
    names = args.names or discover()
    unknown = sorted(set(names) - set(discover()))
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; "
                     f"known: {', '.join(discover())}")
    results: dict[str, dict] = {}
    status = 0
    for name in names:
        start = time.perf_counter()
        try:
            module = importlib.import_module(f"benchmarks.bench_{name}")
            figures = module.run(quick=args.quick)
        except Exception as exc:          # report and go on with the other benchmarks
            figures = {"error": f"{type(exc).__name__}: {exc}"}
            if not args.json:
                traceback.print_exc(file=sys.stderr)
            status = 1
        figures = {**figures, "wall_s": round(time.perf_counter() - start, 1)}
        results[name] = figures
        if not args.json:
            print(f"{name}:")
            print("\n".join(_lines(figures)), flush=True)
    if args.json:
        print(json.dumps(results, indent=1))
    return status


if __name__ == "__main__":
    sys.exit(main())

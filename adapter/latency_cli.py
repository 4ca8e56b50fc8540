"""`ptdebug latency BUNDLE --from A --to B [--png FILE] [--json]`: the time between two code
points of a recording, as P50/P90/P99 (and min, max, mean) in nanoseconds and cycles, with an
optional histogram drawn to a PNG.

Layer: command line over adapter.export.latency (which says what a code point is and how A
and B are paired). Exit status: 0 printed, 1 the bundle could not be decoded or no interval
was found, 2 bad arguments or a code point that names nothing.
"""
from __future__ import annotations

import argparse
import json
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptdebug latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", help="the trace bundle directory")
    parser.add_argument("--from", dest="source", required=True, metavar="A",
                        help="start point: FUNCTION, FILE:LINE or 0xADDR")
    parser.add_argument("--to", dest="target", required=True, metavar="B",
                        help="end point: FUNCTION, FILE:LINE or 0xADDR")
    parser.add_argument("--png", metavar="FILE", help="draw the histogram of the times here")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


def main(argv: list[str]) -> int:
    options = build_parser().parse_args(argv)
    from adapter.export.latency import CodePointError, measure, resolve
    from adapter.export.trace import DecodedBundle
    decoded = DecodedBundle.open_for_command(options.bundle, "latency")
    if decoded is None:
        return 1
    try:
        source = resolve(decoded, options.source)
        target = resolve(decoded, options.target)
    except CodePointError as exc:
        print(f"ptdebug latency: {exc}", file=sys.stderr)
        return 2
    report = measure(decoded, source, target)
    summary = report.summary()
    if options.json:
        print(json.dumps(summary, indent=1))
    else:
        print(f"from {source.describe()}\n  to {target.describe()}")
        print(f"{summary['count']} interval(s) on {len(summary['threads'])} thread(s)")
        if report.intervals:
            print(f"{'':6}{'time':>14}{'cycles':>16}")
            for key in ("min", "p50", "p90", "p99", "max", "mean"):
                print(f"{key.upper():6}{_ns(summary['ns'][key]):>14}{summary['cycles'][key]:>16,.0f}")
    if not report.intervals:
        print("ptdebug latency: no interval: B never ran after A in the recording",
              file=sys.stderr)
        return 1
    if options.png:
        from adapter.export.png import histogram_png
        values = [i.ns for i in report.intervals]
        marks = {"P50": report.percentile(50), "P90": report.percentile(90),
                 "P99": report.percentile(99)}
        try:
            with open(options.png, "wb") as f:
                f.write(histogram_png(values, marks))
        except OSError as exc:
            print(f"ptdebug latency: cannot write {options.png}: {exc.strerror}", file=sys.stderr)
            return 1
        print(f"histogram: {options.png}")
    return 0


def _ns(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3f} ms"
    if value >= 1e3:
        return f"{value / 1e3:.3f} us"
    return f"{value:.0f} ns"

"""`ptdebug latency BUNDLE --from A --to B [--png FILE] [--json]`: the time between two code
points of a recording, as P50/P90/P99 (and min, max, mean) in instructions, nanoseconds and
cycles, with an optional histogram drawn to a PNG. A stepper recording's time and cycles are
labelled stepper time (not CPU time), in the text and in --json (`clock`, `units`, `note`).

Layer: command line over adapter.export.latency (which says what a code point is and how A
and B are paired). Exit status: 0 printed, 1 no interval was found or the PNG not written,
2 bad arguments, a bundle that cannot be read, or a code point that names nothing. An existing
PNG is replaced only with --force.
"""
from __future__ import annotations

import argparse
import json
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptdebug latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("bundle", help="the trace bundle directory")
    parser.add_argument("--from", dest="source", required=True, metavar="A",
                        help="start point: FUNCTION, FILE:LINE or 0xADDR")
    parser.add_argument("--to", dest="target", required=True, metavar="B",
                        help="end point: FUNCTION, FILE:LINE or 0xADDR")
    parser.add_argument("--png", metavar="FILE", help="draw the histogram of the times here")
    parser.add_argument("--force", action="store_true", help="replace the --png FILE if it exists")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    options = parser.parse_args(argv)
    if options.png and os.path.lexists(options.png) and not options.force:
        parser.error(f"{options.png} exists; give --force to replace it")
    from adapter.export.latency import CodePointError, measure, resolve
    from adapter.recording.recording import Recording
    decoded = Recording.open_for_command(options.bundle, "latency")
    if decoded is None:  # missing, not a bundle, unreadable: bad input
        return 2
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
            stepper = report.stepper_note is not None
            time_header, cycles_header = (("stepper time", "stepper cycles") if stepper
                                          else ("time", "cycles"))
            print(f"{'':6}{'instructions':>14}{time_header:>14}{cycles_header:>16}")
            for key in ("min", "p50", "p90", "p99", "max", "mean"):
                print(f"{key.upper():6}{summary['instructions'][key]:>14,.0f}"
                      f"{_ns(summary['ns'][key]):>14}{summary['cycles'][key]:>16,.0f}")
            if stepper:  # what the two right-hand columns are, in words
                print(f"note: {report.stepper_note}")
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
        print(f"histogram: {options.png}"
              + (" (of stepper time, not CPU time)" if report.stepper_note else ""))
    return 0


def _ns(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.3f} ms"
    if value >= 1e3:
        return f"{value / 1e3:.3f} us"
    return f"{value:.0f} ns"

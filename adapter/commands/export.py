"""`ptdebug export pprof|perfetto BUNDLE -o FILE`: a trace bundle for the tools users already
have: a gzipped pprof profile weighted by cycles (`go tool pprof -top FILE`, flame graphs), or
a Perfetto / chrome://tracing timeline of calls per thread. A stepper recording's cycles are
stepper time (adapter/recording/recording.py): the output says so, and its profile's default sample
type is instructions.

Layer: command line over adapter.export. Checks the arguments once, decodes the bundle,
writes the file and says what it wrote (--json: as one JSON object). While it works, a
progress bar on stderr when stderr is a terminal (pt_decoder/tools/progress.py). Exit
status: 0 written, 1 the file could not be written, 2 bad arguments or a bundle that cannot
be read. An existing FILE is replaced only with --force.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

FORMATS = ("pprof", "perfetto")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ptdebug export", description=__doc__.split("\n\n")[0])
    parser.add_argument("format", choices=FORMATS,
                        help="pprof: gzipped profile.proto; perfetto: Chrome trace-event JSON")
    parser.add_argument("bundle", help="the trace bundle directory (from ptdebug record)")
    parser.add_argument("-o", "--output", required=True, metavar="FILE", help="file to write")
    parser.add_argument("--trace-format", choices=("json", "proto"), default=None,
                        help="perfetto: Chrome trace JSON or Perfetto protobuf (default: proto "
                             "for FILE ending .perfetto-trace/.pftrace/.pb/.proto, else json)")
    parser.add_argument("--force", action="store_true", help="replace FILE if it exists")
    parser.add_argument("--json", action="store_true",
                        help="say what was written as one JSON object")
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    options = parser.parse_args(argv)
    if os.path.lexists(options.output) and not options.force:
        parser.error(f"{options.output} exists; give --force to replace it")
    from pt_decoder.tools.progress import Progress
    # a bar on stderr when it is a terminal: the decode per thread, then the writing
    with Progress(1000, "export", unit=None) as bar:
        return _export(options, bar)


def _export(options, bar) -> int:
    from adapter.recording.recording import STEPPER_TIME, Recording
    decoded = Recording.open_for_command(options.bundle, "export", progress=bar.phase)
    if decoded is None:  # missing, not a bundle, unreadable: bad input
        return 2
    if decoded.manifest.get("status") == "partial":
        bar.print(f"ptdebug export: note: the bundle is partial "
                  f"({decoded.manifest.get('partial_reason')}); exporting what was recorded")
    bar.phase(f"writing {options.format}")
    try:
        if options.format == "pprof":
            from adapter.export.pprof import write_pprof
            size = write_pprof(decoded, options.output)
            what = (f"{size} bytes, {decoded.total_cycles} ns of {STEPPER_TIME} (sample type "
                    f"{decoded.cycles_name}; the default is instructions)" if decoded.stepper
                    else f"{size} bytes, {decoded.total_cycles} cycles")
        else:
            from adapter.export.perfetto import write_perfetto
            slices = write_perfetto(decoded, options.output, options.trace_format)
            what = f"{slices} call slices"
    except OSError as exc:
        bar.close()
        print(f"ptdebug export: cannot write {options.output}: {exc.strerror}", file=sys.stderr)
        return 1
    bar.close()
    if options.json:
        print(json.dumps({"output": os.path.abspath(options.output), "format": options.format,
                          "instructions": decoded.total_instructions,
                          "threads": len(decoded.threads), "cycles": decoded.total_cycles,
                          "clock": "stepper" if decoded.stepper else "tsc",
                          **({"note": decoded.timing_note()} if decoded.stepper else {}),
                          "bytes": os.path.getsize(options.output)}))
        return 0
    print(f"wrote {os.path.abspath(options.output)}: {options.format}, "
          f"{decoded.total_instructions} instructions on {len(decoded.threads)} thread(s), {what}")
    if decoded.stepper:
        print(f"note: {decoded.timing_note()}")
    return 0

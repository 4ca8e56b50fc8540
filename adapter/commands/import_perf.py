"""`ptdebug import perf.data -o BUNDLE`: a `perf record -e intel_pt//u` file as a bundle.

Layer: adapter.commands (command line over adapter.capture.perfdata). Exit status 0 when
the bundle is complete, 1 when it is partial (perf lost data, a file was not
the one recorded) or cannot be written, 2 for bad arguments or an input that
is not a readable perf.data file with Intel PT data. An existing BUNDLE is
replaced only with --force; --json prints the result as one JSON object. A stream of more
than 1 MiB is counted before the command ends (its PSB index kept in the bundle: adapter.
recording.index_streams), so that opening the bundle does not count it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from adapter.capture import perfdata


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="ptdebug import",
                                description="Import a perf.data file with Intel PT data "
                                            "into a trace bundle.")
    p.add_argument("perf_data", metavar="perf.data")
    p.add_argument("-o", "--output", required=True, metavar="BUNDLE")
    p.add_argument("--sysroot", metavar="DIR",
                   help="find the recorded programs' files under DIR (recorded elsewhere)")
    p.add_argument("--no-copy-images", action="store_true",
                   help="reference the files by path instead of copying them into the bundle")
    p.add_argument("--force", action="store_true", help="replace BUNDLE if it exists")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = p.parse_args(argv)
    if os.path.lexists(args.output) and not args.force:
        p.error(f"{args.output} exists; give --force to replace it")
    try:
        perf = perfdata.PerfData(args.perf_data)
        manifest = perfdata.to_bundle(
            perf, args.output, copy_images=not args.no_copy_images, sysroot=args.sysroot,
            log=lambda msg: print(f"ptdebug import: {msg}", file=sys.stderr))
    except perfdata.PerfDataError as exc:  # the input is not what it should be
        print(f"ptdebug import: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # writing the bundle failed
        print(f"ptdebug import: cannot write {args.output}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    streams = manifest["streams"]
    from adapter.recording.recording import TraceError, index_streams
    try:  # a long stream is counted now, not at the bundle's first opening
        for file, instructions in index_streams(args.output):
            print(f"ptdebug import: {file}: {instructions:,} instructions (indexed)",
                  file=sys.stderr)
    except TraceError as exc:
        print(f"ptdebug import: not indexed (it will be when first opened): {exc}",
              file=sys.stderr)
    if args.json:
        print(json.dumps({"status": manifest["status"], "bundle": os.path.abspath(args.output),
                          "streams": len(streams),
                          "pt_bytes": sum(s["size"] for s in streams),
                          "images": len(manifest["images"]),
                          "partial_reason": manifest.get("partial_reason")}))
    else:
        print(f"{manifest['status']}: {len(streams)} stream(s), "
              f"{sum(s['size'] for s in streams)} bytes of PT, {len(manifest['images'])} "
              f"image(s) in {args.output}")
    if manifest["status"] != "complete":
        print(f"ptdebug import: partial: {manifest['partial_reason']}", file=sys.stderr)
        return 1
    return 0

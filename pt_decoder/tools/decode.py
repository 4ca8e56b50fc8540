"""`ptdebug decode`: the instruction flow of a PT stream, as ptxed prints it.

Layer: pt_decoder.tools (command line). Parses ptxed-like options, builds an
Image and an InsnDecoder, and streams the flow out piece by piece through the
compiled writer (tools/text_out.pyx; item lines from tools/ptxed_format), with
a progress bar on stderr when it is a terminal (tools/progress.py). Knows no DAP and
never imports adapter: a bundle directory is read through its manifest.json
(format "ptdebug-bundle", documented in adapter/capture/bundle.py).

    ptdebug decode TRACE (--elf FILE[:BASE] | --raw FILE[:FROM[-TO]]:BASE)...
                   [--cpu F/M[/S]] [--mtc-freq N] [--nom-freq N]
                   [--cpuid-0x15.eax N] [--cpuid-0x15.ebx N]
                   [--format ptxed|ips|jsonl] [--time] [--event:ip]
                   [--event:time] [--event:tick] [--quiet] [--stat] [--stat:insn]
                   [--parallel N]
    ptdebug decode BUNDLE_DIR [same options]
"""
from __future__ import annotations

import argparse
import os
import sys
import time as _time

from pt_decoder import bundle_reader
from pt_decoder.errors import PtError, errstr

FORMATS = ("ptxed", "ips", "jsonl")


def _int(text: str) -> int:
    return int(text, 0)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ptdebug decode", description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="raw PT stream file, or a ptdebug bundle directory")
    ap.add_argument("--elf", action="append", default=[], metavar="FILE[:BASE]",
                    help="map the ELF's executable segments (at p_vaddr + BASE)")
    ap.add_argument("--raw", action="append", default=[], metavar="FILE[:FROM[-TO]]:BASE",
                    help="map a raw file (or the byte range FROM..TO of it) at BASE")
    ap.add_argument("--cpu", help="F/M[/S]: the traced CPU, for its errata")
    ap.add_argument("--mtc-freq", type=_int, default=None, metavar="N",
                    help="IA32_RTIT_CTL.MTCFreq: one MTC per 2^N crystal clock ticks")
    ap.add_argument("--nom-freq", type=_int, default=None, metavar="N",
                    help="nominal core:bus ratio (calibrates CYC with CBR)")
    ap.add_argument("--cpuid-0x15.eax", dest="cpuid_eax", type=_int, default=None, metavar="N",
                    help="CPUID leaf 0x15 EAX (TSC:crystal ratio denominator)")
    ap.add_argument("--cpuid-0x15.ebx", dest="cpuid_ebx", type=_int, default=None, metavar="N",
                    help="CPUID leaf 0x15 EBX (TSC:crystal ratio numerator)")
    ap.add_argument("--format", choices=FORMATS, default="ptxed")
    ap.add_argument("--time", action="store_true", help="print each instruction's TSC before it")
    ap.add_argument("--event:ip", dest="event_ip", action="store_true", help="print events' IPs")
    ap.add_argument("--event:time", dest="event_time", action="store_true", help="print events' TSC")
    ap.add_argument("--event:tick", dest="event_tick", action="store_true",
                    help="report time changes at branches as tick events")
    ap.add_argument("--quiet", action="store_true", help="print nothing of the flow")
    ap.add_argument("--stat", action="store_true", help="print statistics at the end")
    ap.add_argument("--stat:insn", dest="stat_insn", action="store_true", help="count instructions")
    for n in range(4):
        ap.add_argument("--filter:addr%d_cfg" % n, dest="filter%d_cfg" % n, type=_int, default=0,
                        help=argparse.SUPPRESS if n else "address filter n configuration (1 filter, 2 stop)")
        ap.add_argument("--filter:addr%d_a" % n, dest="filter%d_a" % n, type=_int, default=0,
                        help=argparse.SUPPRESS if n else "address filter n start (inclusive)")
        ap.add_argument("--filter:addr%d_b" % n, dest="filter%d_b" % n, type=_int, default=0,
                        help=argparse.SUPPRESS if n else "address filter n end (inclusive)")
    ap.add_argument("--no-inst", dest="no_inst", action="store_true",
                    help="accepted for ptxed compatibility (ptdebug prints no disassembly)")
    ap.add_argument("--insn-decoder", dest="insn_decoder", action="store_true",
                    help="accepted for ptxed compatibility (the instruction flow is always used)")
    ap.add_argument("--parallel", type=int, default=1, metavar="N",
                    help="decode the PSB-delimited pieces on N processes (0: all cores)")
    return ap


def parse_cpu(text: str) -> tuple[int, int, int]:
    parts = text.split("/")
    if len(parts) not in (2, 3):
        raise ValueError(f"--cpu {text!r}: expected FAMILY/MODEL[/STEPPING]")
    nums = [int(p, 0) for p in parts]
    return nums[0], nums[1], nums[2] if len(nums) == 3 else 0


def _split_base(spec: str) -> tuple[str, int]:
    path, sep, base = spec.rpartition(":")
    if sep and path and not os.path.exists(spec):
        return path, int(base, 0)
    return spec, 0


def build_image(elfs: list[str], raws: list[str]):
    from pt_decoder.image import Image
    image = Image()
    for spec in elfs:
        path, base = _split_base(spec)
        image.add_elf(path, base)
    for spec in raws:
        # ptxed syntax: file[:from[-to]]:base
        parts = spec.split(":")
        if len(parts) == 3:
            path, rng, base = parts
            lo, _, hi = rng.partition("-")
            offset = int(lo, 0)
            size = int(hi, 0) - offset if hi else None
            image.add_raw(path, int(base, 0), offset, size)
        else:
            path, base = _split_base(spec)
            image.add_raw(path, base)
    return image


def decoder_options(args, cpu_text: str | None, out) -> dict:
    """InsnDecoder keyword arguments from the options; writes ptxed's config error
    for an unknown CPU to `out` (a JSON record in --format jsonl)."""
    from pt_decoder.event import cpu_errata
    opts = {}
    if cpu_text:
        family, model, stepping = parse_cpu(cpu_text)
        try:
            opts["errata"] = cpu_errata(family, model, stepping)
        except PtError as e:
            from pt_decoder.tools.ptxed_format import config_error_line
            out.write(config_error_line(args.format, errstr(e.code)) + "\n")
    for name, value in (("mtc_freq", args.mtc_freq), ("nom_freq", args.nom_freq),
                        ("cpuid_0x15_eax", args.cpuid_eax), ("cpuid_0x15_ebx", args.cpuid_ebx)):
        if value is not None:
            opts[name] = value
    if args.event_tick:
        opts["tick"] = True
    filters = [(getattr(args, "filter%d_cfg" % n), getattr(args, "filter%d_a" % n),
                getattr(args, "filter%d_b" % n)) for n in range(4)]
    if any(cfg for cfg, _, _ in filters):
        opts["addr_filters"] = filters
    return opts


CHUNK_INSNS = 1 << 18
"""Instructions decoded per piece while printing: the memory the output path
holds (about 25 bytes each) whatever the length of the trace."""

PARALLEL_PIECE_BYTES = 64 * 1024
"""Trace bytes per piece of --parallel (a few hundred thousand instructions at
typical densities; pieces are cut at PSBs); at most 2 x N pieces in flight."""


def write_stream(data, image, opts: dict, args, sink, on_progress=None) -> int:
    """Decode one stream and write its flow to `sink` (a text_out.TextSink) in
    args.format, piece by piece; returns the number of instructions.

    The serial decode streams CHUNK_INSNS at a time; --parallel streams pieces
    of PARALLEL_PIECE_BYTES of trace, a few decoded ahead on the other cores.
    on_progress(bytes_of_the_stream_decoded) is called after each piece."""
    from pt_decoder.insn import InsnDecoder
    from pt_decoder.tools import ptxed_format as fmt
    if args.quiet and args.parallel == 1:
        total = InsnDecoder(data, image, **opts).count()[0]
    elif args.quiet:
        from pt_decoder.parallel import decode_parallel
        total = decode_parallel(data, image, workers=args.parallel or None, count_only=True, **opts)
    elif args.parallel != 1:
        from pt_decoder.parallel import decode_parallel_pieces
        item_text = fmt.item_text(args.format, args.event_ip, args.event_time)
        total = 0
        for piece in decode_parallel_pieces(data, image, workers=args.parallel or None,
                                            piece_bytes=PARALLEL_PIECE_BYTES, on_piece=on_progress, **opts):
            sink.write_flow(piece, args.format, item_text, insn_time=args.time)
            total += len(piece)
    else:
        item_text = fmt.item_text(args.format, args.event_ip, args.event_time)
        decoder = InsnDecoder(data, image, **opts)
        total = 0
        for piece in decoder.chunks(CHUNK_INSNS, views=True):
            sink.write_flow(piece, args.format, item_text, insn_time=args.time)
            total += len(piece)
            if on_progress is not None:
                on_progress(decoder.offset)
    if on_progress is not None:
        on_progress(len(data))
    return total


def read_bundle_manifest(root: str) -> dict:
    """The checked manifest.json of a bundle directory (also `ptdebug dump`'s way in;
    pt_decoder/bundle_reader.py checks it). Raises OSError, or ValueError naming the field."""
    return bundle_reader.read_manifest(root)


def bundle_path(root: str, entry: dict, image: bool = False) -> str:
    """The file a manifest entry (stream, or `image`) names: a regular file inside the bundle
    (an image may be referenced at its recorded path). Raises ValueError naming it."""
    if image:
        return bundle_reader.image_file(root, entry)
    return bundle_reader.stream_file(root, entry)


def bundle_cpu(manifest: dict) -> str | None:
    """The traced CPU as --cpu's F/M/S, or None when it is not an Intel CPU or unknown."""
    cpu = manifest.get("cpu") or {}
    if cpu.get("vendor", "GenuineIntel") == "GenuineIntel" and cpu.get("family"):
        return "%d/%d/%d" % (cpu["family"], cpu["model"], cpu.get("stepping", 0))
    return None


def _bundle_streams(root: str, args):
    """(tid, data, image, cpu, timing) per stream of a bundle directory."""
    from pt_decoder.image import Image
    manifest = read_bundle_manifest(root)
    image = Image()
    for entry in manifest.get("images", []):
        image.add_raw(bundle_path(root, entry, image=True), entry["load_address"], entry.get("offset", 0), entry.get("size"))
    cpu_text = bundle_cpu(manifest)
    timing = manifest.get("timing") or {}
    for stream in manifest.get("streams", []):
        yield stream.get("tid"), bundle_reader.stream_bytes(root, stream), image, cpu_text, timing


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = sys.stdout
    try:
        bundle = os.path.isdir(args.trace)
        if bundle:
            jobs = list(_bundle_streams(args.trace, args))
            for name, key in (("mtc_freq", "mtc_freq"), ("nom_freq", "nom_freq"),
                              ("cpuid_eax", "cpuid_0x15_eax"), ("cpuid_ebx", "cpuid_0x15_ebx")):
                for _, _, _, _, timing in jobs[:1]:
                    if getattr(args, name) is None and timing.get(key) is not None:
                        setattr(args, name, timing[key])
        else:
            # a regular file only, opened without blocking (/dev/zero, a FIFO: issue 17)
            data = bundle_reader.read_regular_file(args.trace, "trace", bundle_reader.MAX_STREAM_BYTES)
            if not data:
                raise ValueError(f"{args.trace} is empty")
            jobs = [(None, data, build_image(args.elf, args.raw), args.cpu, {})]
    except (OSError, ValueError, PtError) as e:
        # bad input (exit 2), said in one line: "PATH: No such file or directory", not "[Errno 2]"
        reason = f"{e.filename}: {e.strerror}" if isinstance(e, OSError) and e.strerror else e
        sys.stderr.write("ptdebug decode: %s\n" % reason)
        return 2
    from pt_decoder.tools.progress import Progress
    from pt_decoder.tools.ptxed_format import stat_line, stream_header
    from pt_decoder.tools.text_out import TextSink
    sink = TextSink(out)
    total = 0
    started = _time.perf_counter()
    progress = Progress(sum(len(job[1]) for job in jobs), "decode")
    done_before = 0
    try:
        for tid, data, image, cpu_text, _timing in jobs:
            if bundle and not args.quiet:
                sink.write(stream_header(args.format, tid) + "\n")
            try:
                opts = decoder_options(args, args.cpu or cpu_text, sink)
            except ValueError as e:
                sink.flush()
                sys.stderr.write("ptdebug decode: %s\n" % e)
                return 2
            total += write_stream(data, image, opts, args, sink,
                                  lambda done, base=done_before: progress.update(base + done))
            done_before += len(data)
        if args.stat or args.stat_insn:
            sink.write(stat_line(args.format, total) + "\n")
        sink.flush()
        if total == 0:  # as ptxed, exit 0; unlike it, say so
            sys.stderr.write("ptdebug decode: no instruction decoded from %d bytes of trace (no "
                             "PSB to start at, or no code mapped at its addresses)\n" % done_before)
    except BrokenPipeError:
        # The reader went away (`| head`): not an error; stdout is closed quietly.
        progress.close()
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        progress.close()
    if os.environ.get("PTDEBUG_DECODE_TIMING"):
        sys.stderr.write("decoded %d instructions in %.3f s\n" % (total, _time.perf_counter() - started))
    return 0


if __name__ == "__main__":
    sys.exit(main())

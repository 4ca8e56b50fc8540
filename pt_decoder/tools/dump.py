"""`ptdebug dump TRACE [options]`: the packets of a trace, one a line, as libipt's ptdump.

Layer: pt_decoder.tools (a command over the packet layer). It parses ptdump's
options, maps the trace file without copying it, drives
`pt_decoder.packet.PacketDecoder` like ptdump drives pt_pkt_next (sync at the
first PSB, print, on an error print `[offset: error decoding packet: ...]`
and resync at the next PSB), and keeps ptdump's side tracking: last-IP
(--lastip), time and calibration (--time/--tcal, ptdump_time.py). Columns are
formatted by ptdump_format.py, or, when no time is tracked, by its compiled
twin ptdump_text.pyx straight into a 1 MiB output buffer (text_out.pyx). A
bundle directory dumps each stream of its manifest. A progress bar goes to
stderr when it is a terminal (progress.py). It knows nothing of events or
instructions.

Exit status: 0 after a dump (decoding errors are part of the output, as in
ptdump), 2 for a bad command line or a trace that cannot be read.
"""
from __future__ import annotations

import mmap
import os
import re
import stat
import sys
from dataclasses import dataclass, field

from pt_decoder.errors import ErrorCode, PtError, errstr
from pt_decoder.packet import Kind, PacketDecoder
from pt_decoder.tools import ptdump_format as fmt
from pt_decoder.tools.ptdump_time import TimeCalibration, TimeConfig, TimeError, TimeTracker

PROG = "ptdebug dump"

USAGE = f"""usage: {PROG} [<options>] <ptfile>[:<from>[-<to>]]
       {PROG} [<options>] <bundle directory>

Print the Intel PT packets of <ptfile> (- for standard input), one a line,
in libipt ptdump's format. <from>-<to> selects a byte range of the file.
A ptdebug bundle directory dumps each of its streams after a
`[stream tid N]` line, with the CPU and timing of its manifest.

options:
  --help|-h                 this text.
  --no-sync                 don't sync to the first PSB; assume a packet boundary
                            at the beginning of the trace.
  --quiet                   don't print anything but errors.
  --no-pad                  don't show PAD packets.
  --no-timing               don't show timing packets.
  --no-cyc                  don't show CYC packets and ignore them when tracking time.
  --no-offset               don't show the offset as the first column.
  --raw                     show raw packet bytes.
  --lastip                  show last IP updates on packets with IP payloads.
  --exec-mode               show the current execution mode on mode.exec packets.
  --time                    show the estimated TSC on timing packets.
  --tcal                    show time calibration information.
  --time-delta              show timing information as delta.
  --no-tcal                 skip timing calibration (CYC packets then give errors).
  --no-wall-clock           suppress the no-time error and print relative time.
  --cpu none|auto|f/m[/s]   decode for this cpu (family/model[/stepping]): errata.
  --mtc-freq <n>            the MTC frequency (IA32_RTIT_CTL[17:14]).
  --nom-freq <n>            the nominal frequency (MSR_PLATFORM_INFO[15:8]).
  --cpuid-0x15.eax <n>      the value of cpuid[0x15].eax.
  --cpuid-0x15.ebx <n>      the value of cpuid[0x15].ebx.
  --packets libipt-2.0.5|sdm
                            the packet set: libipt 2.0.5's (default, as ptdump 2.0.5:
                            0xd9 is a bad opcode) or the SDM's (adds BBP, BIP, BEP,
                            CFE, EVD and TRIG).
"""


class UsageError(Exception):
    """A bad command line (exit status 2)."""


# ---------------------------------------------------------------------------
# CPU errata (libipt pt_cpu_errata; Intel specification updates). Only SKZ84
# and SKL168 change what the dump prints; the rest are for the higher layers.

_ERRATA_BY_MODEL = [
    ((0x3D, 0x47, 0x4F, 0x56), ("bdm70", "bdm64")),
    ((0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6),
     ("bdm70", "skd007", "skd022", "skd010", "skl014", "skl168")),
    ((0x55, 0x6A, 0x6C, 0x8F), ("bdm70", "skl014", "skd022", "skz84")),
    ((0x66, 0x7D, 0x7E, 0x8C, 0x8D, 0xA7, 0xA8), ("bdm70", "skl014", "skd022")),
    ((0x97, 0x9A, 0xBF), ("bdm70", "skl014", "skd022", "apl11")),
    ((0x5C, 0x5F), ("apl12", "apl11")),
    ((0x7A, 0x86, 0x96, 0x9C), ("apl11",)),
]


def cpu_errata(family: int, model: int) -> frozenset[str] | None:
    """The PT errata of an Intel family/model, or None if the CPU is unknown."""
    if family == 6:
        for models, errata in _ERRATA_BY_MODEL:
            if model in models:
                return frozenset(errata)
    return None


def parse_cpu(text: str) -> tuple[int, int, int]:
    """'f/m[/s]' (C integer syntax: 6/0x55/4) -> (family, model, stepping)."""
    parts = text.split("/")
    if len(parts) not in (2, 3):
        raise ValueError(text)
    values = [int(p, 0) for p in parts] + [0] * (3 - len(parts))
    family, model, stepping = values
    if not (0 <= family <= 0xFFFF and 0 <= model <= 0xFF and 0 <= stepping <= 0xFF):
        raise ValueError(text)
    return family, model, stepping


def host_cpu() -> tuple[str, int, int, int]:
    """(vendor, family, model, stepping) of this machine from /proc/cpuinfo."""
    info: dict[str, str] = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if not line.strip():
                break
            key, _, value = line.partition(":")
            info[key.strip()] = value.strip()
    return (info.get("vendor_id", ""), int(info.get("cpu family", 0)),
            int(info.get("model", 0)), int(info.get("stepping", 0)))


# ---------------------------------------------------------------------------

@dataclass
class Options:
    show_offset: bool = True
    show_raw: bool = False
    show_last_ip: bool = False
    show_exec_mode: bool = False
    track_time: bool = False
    show_time: bool = False
    show_tcal: bool = False
    time_delta: bool = False
    quiet: bool = False
    no_pad: bool = False
    no_sync: bool = False
    no_tcal: bool = False
    no_wall_clock: bool = False
    no_timing: bool = False
    no_cyc: bool = False
    sdm_packets: bool = False
    cpu: tuple[int, int, int] | None = None      # Intel family/model/stepping
    time: TimeConfig = field(default_factory=TimeConfig)
    errata: frozenset[str] = frozenset()
    trace: str = ""
    begin: int = 0
    end: int | None = None


_FLAGS = {
    "--no-sync": "no_sync", "--quiet": "quiet", "--no-pad": "no_pad",
    "--no-timing": "no_timing", "--no-cyc": "no_cyc", "--raw": "show_raw",
    "--lastip": "show_last_ip", "--exec-mode": "show_exec_mode",
    "--time-delta": "time_delta", "--no-tcal": "no_tcal", "--no-wall-clock": "no_wall_clock",
}
_NUMBERS = {  # option -> (TimeConfig attribute, largest value)
    "--mtc-freq": ("mtc_freq", 0xFF), "--nom-freq": ("nom_freq", 0xFF),
    "--cpuid-0x15.eax": ("cpuid_0x15_eax", 0xFFFFFFFF),
    "--cpuid-0x15.ebx": ("cpuid_0x15_ebx", 0xFFFFFFFF),
}


def _value(argv: list[str], i: int, opt: str) -> str:
    if i >= len(argv) or argv[i].startswith("--"):
        raise UsageError(f"{opt}: missing argument")
    return argv[i]


def _split_range(arg: str) -> tuple[str, int, int | None]:
    """'file:from-to' / 'file:from' -> (file, from, to); a ':' that is not a range
    stays part of the file name (ptdump's rule)."""
    name, sep, rng = arg.rpartition(":")
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)(?:-(0[xX][0-9a-fA-F]+|\d+))?", rng) if sep else None
    if not m:
        return arg, 0, None
    begin = int(m.group(1), 0)
    end = int(m.group(2), 0) if m.group(2) else None
    if end is not None and end <= begin:
        raise UsageError(f"bad range in {arg}: the end must be after the start")
    return name, begin, end


def parse_args(argv: list[str]) -> Options | None:
    """ptdump's command line -> Options; None for --help. Raises UsageError."""
    o = Options()
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-") or arg == "-":
            if i < len(argv):
                raise UsageError(f"the trace file must come last (after {arg!r}: {argv[i]!r})")
            o.trace, o.begin, o.end = _split_range(arg)
            break
        if arg in ("-h", "--help"):
            return None
        if arg in _FLAGS:
            setattr(o, _FLAGS[arg], True)
        elif arg == "--no-offset":
            o.show_offset = False
        elif arg in ("--time", "--tcal"):
            if (arg == "--time" and o.show_tcal) or (arg == "--tcal" and o.show_time):
                raise UsageError("specify either --time or --tcal")
            o.track_time = True
            o.show_time = o.show_time or arg == "--time"
            o.show_tcal = o.show_tcal or arg == "--tcal"
        elif arg in _NUMBERS:
            attr, limit = _NUMBERS[arg]
            text = _value(argv, i, arg)
            i += 1
            try:
                value = int(text, 0)
            except ValueError:
                raise UsageError(f"{arg}: bad argument: {text}") from None
            if not 0 <= value <= limit:
                raise UsageError(f"{arg}: value out of range (0..{limit}): {text}")
            setattr(o.time, attr, value)
        elif arg == "--cpu":
            text = _value(argv, i, arg)
            i += 1
            if text == "none":
                o.cpu = None
            elif text == "auto":
                vendor, fam, model, step = host_cpu()
                o.cpu = (fam, model, step) if vendor == "GenuineIntel" else None
            else:
                try:
                    o.cpu = parse_cpu(text)
                except ValueError:
                    raise UsageError(f"--cpu: cpu must be given as f/m[/s], not {text!r}") from None
        elif arg == "--packets":
            text = _value(argv, i, arg)
            i += 1
            if text not in ("libipt-2.0.5", "sdm"):
                raise UsageError(f"--packets: expected libipt-2.0.5 or sdm, not {text!r}")
            o.sdm_packets = text == "sdm"
        else:
            raise UsageError(f"unknown option: {arg}")
    if not o.trace:
        raise UsageError("no trace file given")
    return o


# ---------------------------------------------------------------------------

class LastIp:
    """ptdump's own last-IP tracking (libipt pt_last_ip): unlike the decoder it
    is not reset at PSB, only when the dump resynchronises after an error."""

    def __init__(self) -> None:
        self.ip = 0
        self.have_ip = False
        self.suppressed = False

    def update(self, ipc: int, raw: int) -> None:
        if ipc == 0:
            self.suppressed = True
            return
        if ipc == 3:
            self.ip = fmt.sext48(raw)
        elif ipc == 6:
            self.ip = raw
        else:
            keep = {1: ~0xFFFF, 2: ~0xFFFFFFFF, 4: ~0xFFFFFFFFFFFF}[ipc]
            self.ip = (self.ip & keep & 0xFFFFFFFFFFFFFFFF) | raw
        self.have_ip = True
        self.suppressed = False


PROGRESS_PACKETS = 1 << 16
"""Packets the compiled writer dumps between two progress updates."""


class Dumper:
    """ptdump's dump loop and tracking over one buffer; lines go to `sink`
    (a text_out.TextSink). Without time tracking the packets are formatted by
    the compiled writer (ptdump_text.pyx); with --time/--tcal, here."""

    def __init__(self, data, opts: Options, sink, on_progress=None) -> None:
        self.data = data
        self.opts = opts
        self.sink = sink
        self.on_progress = on_progress
        self.fast = None if opts.track_time else _packet_text(opts)
        self.reset()

    def emit(self, line: str) -> None:
        self.sink.write(line + "\n")

    def reset(self) -> None:
        if self.fast is not None:
            self.fast.reset()
        self.last_ip = LastIp()
        self.tcal = TimeCalibration()
        self.time = TimeTracker()
        self.shown_tsc = 0
        self.shown_fcr = 0
        self.in_header = False

    def diag(self, offset: int, text: str, code: ErrorCode | None = None) -> None:
        self.emit(fmt.diag(offset, text, errstr(code) if code is not None else None))

    def run(self) -> None:
        o = self.opts
        dec = PacketDecoder(self.data, sdm_packets=o.sdm_packets,
                            errata_skz84="skz84" in o.errata)
        if o.no_sync:
            dec.seek(0)
        elif dec.sync_forward() is None:
            return
        while self.dump_packets(dec):
            if self.on_progress is not None:
                self.on_progress(dec.offset)
            if dec.sync_forward() is None:
                return
            self.reset()

    def dump_packets(self, dec: PacketDecoder) -> bool:
        """Dump until the end (False) or a decoding error (True)."""
        if self.fast is not None:
            stop = self.fast.run(dec, self.sink, PROGRESS_PACKETS)
            while stop is True:
                if self.on_progress is not None:
                    self.on_progress(dec.offset)
                stop = self.fast.run(dec, self.sink, PROGRESS_PACKETS)
            if stop is None:
                return False
            offset, code = stop
            self.diag(offset, "error decoding packet", ErrorCode(code))
            return True
        while True:
            offset = dec.offset
            try:
                pkt = dec.next()
            except PtError as exc:
                if exc.code == ErrorCode.EOS:     # a cut-off last packet ends the dump
                    return False
                self.diag(offset, "error decoding packet", exc.code)
                return True
            if pkt is None:
                return False
            self.dump_one(pkt)

    def dump_one(self, pkt) -> None:
        o = self.opts
        line = fmt.Line(offset=pkt.offset)
        if o.show_raw:
            line.raw, cut = fmt.raw_bytes(self.data, pkt.offset, pkt.size)
            if cut:
                self.diag(pkt.offset, "truncating raw packet")
        fmt.describe(pkt, line)
        self.track(pkt, line)
        if line.skip or o.quiet:
            return
        self.emit(fmt.render(line, show_offset=o.show_offset))

    # ---- tracking, in ptdump's order (diagnostics print before the line) ----

    def track(self, pkt, line: fmt.Line) -> None:
        o, kind, cfg = self.opts, pkt.kind_id, self.opts.time
        if kind == Kind.PSB:
            if o.track_time:
                self.tcal.update_psb(cfg)
            self.in_header = True
        elif kind == Kind.PSBEND:
            self.in_header = False
        elif kind == Kind.PAD:
            line.skip = o.no_pad
        elif kind in (Kind.TIP, Kind.TIP_PGE, Kind.TIP_PGD, Kind.FUP):
            if o.show_last_ip:
                self.track_last_ip(pkt, line)
        elif kind == Kind.MODE_EXEC:
            if o.show_exec_mode:
                line.set_track("em", fmt.exec_mode(pkt))
        elif kind in (Kind.TSC, Kind.CBR, Kind.TMA, Kind.MTC):
            if o.track_time:
                self.track_timing(pkt, line)
            line.skip = o.no_timing
        elif kind == Kind.CYC:
            if o.track_time and not o.no_cyc:
                self.track_cyc(pkt, line)
            line.skip = o.no_timing or o.no_cyc

    def track_last_ip(self, pkt, line: fmt.Line) -> None:
        self.last_ip.update(pkt.ipc, pkt.payload)
        if not self.last_ip.have_ip:
            line.set_track("ip", "<unavailable>")
            self.diag(pkt.offset, "error tracking last-ip", ErrorCode.NOIP)
        elif self.last_ip.suppressed:
            line.set_track("ip", "<suppressed>")
        else:
            line.set_track("ip", f"{self.last_ip.ip:016x}")

    def _try(self, offset: int, text: str, fn, *args) -> bool:
        try:
            fn(*args)
            return True
        except TimeError as exc:
            self.diag(offset, text, exc.code)
            return False

    def track_timing(self, pkt, line: fmt.Line) -> None:
        o, cfg, kind, off = self.opts, self.opts.time, pkt.kind_id, pkt.offset
        if kind == Kind.TSC:
            if not o.no_tcal:
                upd = self.tcal.header_tsc if self.in_header else self.tcal.update_tsc
                self._try(off, "error calibrating time", upd, pkt.payload, cfg)
            self._try(off, "error updating time", self.time.update_tsc, pkt.payload, cfg)
        elif kind == Kind.CBR:
            if not o.no_tcal:
                upd = self.tcal.header_cbr if self.in_header else self.tcal.update_cbr
                self._try(off, "error calibrating time", upd, pkt.payload, cfg)
            self._try(off, "error updating time", self.time.update_cbr, pkt.payload, cfg)
            line.skip_time = True
        elif kind == Kind.TMA:
            if not o.no_tcal:
                self._try(off, "error calibrating time", self.tcal.update_tma,
                          pkt.payload, pkt.aux, cfg)
            self._try(off, "error updating time", self.time.update_tma,
                      pkt.payload, pkt.aux, cfg)
            line.skip_tcal = True
        else:  # MTC
            if not o.no_tcal:
                self._try(off, "error calibrating time", self.tcal.update_mtc, pkt.payload, cfg)
            self._try(off, "error updating time", self.time.update_mtc, pkt.payload, cfg)
        self.show_time(off, line)

    def track_cyc(self, pkt, line: fmt.Line) -> None:
        o, cfg, off = self.opts, self.opts.time, pkt.offset
        fcr = 0
        if not o.no_tcal:
            try:
                fcr = self.tcal.query_fcr()
            except TimeError as exc:
                self.diag(off, "calibration error", exc.code)
            self._try(off, "error calibrating time", self.tcal.update_cyc, pkt.payload, cfg)
        updated = self._try(off, "error updating time", self.time.update_cyc, pkt.payload, cfg, fcr)
        if updated and not fcr:
            self.diag(off, "error updating time: no calibration")
        line.skip_tcal = True
        self.show_time(off, line)

    def show_time(self, offset: int, line: fmt.Line) -> None:
        o = self.opts
        if o.show_tcal and not line.skip_tcal:
            try:
                fcr = self.tcal.query_fcr()
            except TimeError as exc:
                line.set_track("fcr", "<unavailable>")
                self.diag(offset, "error printing time", exc.code)
            else:
                value = fcr / (1 << 8)
                if o.time_delta:
                    line.set_track("fcr", f"{value - self.shown_fcr / (1 << 8):+.3f}")
                    self.shown_fcr = fcr
                else:
                    line.set_track("fcr", f"{value:.3f}")
        if o.show_time and not line.skip_time:
            try:
                tsc = self.time.query_tsc()
            except TimeError as exc:
                if not (exc.code == ErrorCode.NO_TIME and o.no_wall_clock):
                    self.diag(offset, "error printing time", exc.code)
                    line.set_track("tsc", "<unavailable>")
                    return
                tsc = self.time.tsc
            if o.time_delta:
                old = self.shown_tsc
                line.set_track("tsc", f"+{tsc - old:x}" if old <= tsc else f"-{old - tsc:x}")
                self.shown_tsc = tsc
            else:
                line.set_track("tsc", f"{tsc:016x}")


# ---------------------------------------------------------------------------

def open_trace(path: str, begin: int = 0, end: int | None = None):
    """The trace's bytes without copying: an mmap (or memoryview slice of it).
    Raises OSError / ValueError with a message naming the file."""
    if path == "-":
        data = sys.stdin.buffer.read()
        if not data:
            raise ValueError("standard input is empty")
        return memoryview(data)[begin:end]
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):  # a FIFO or a device: never waited on (issue 17)
        raise ValueError(f"{path} is not a regular file")
    size = st.st_size
    if size == 0:
        raise ValueError(f"{path} is empty")
    if begin >= size:
        raise ValueError(f"bad offset {begin:#x} into {path} ({size} bytes)")
    if end is not None and end > size:
        raise ValueError(f"bad range end {end:#x} in {path} ({size} bytes)")
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    if begin == 0 and end is None:
        return mapped
    return memoryview(mapped)[begin:end]


def _packet_text(opts: Options):
    """The compiled writer (ptdump_text.PacketText) for options without time tracking."""
    from pt_decoder.tools import ptdump_text as pt
    bits = 0
    for flag, bit in ((opts.show_offset, pt.SHOW_OFFSET), (opts.show_raw, pt.SHOW_RAW),
                      (opts.show_last_ip, pt.SHOW_LAST_IP), (opts.show_exec_mode, pt.SHOW_EXEC_MODE),
                      (opts.quiet, pt.QUIET), (opts.no_pad, pt.NO_PAD), (opts.no_timing, pt.NO_TIMING),
                      (opts.no_cyc, pt.NO_CYC)):
        if flag:
            bits |= bit
    return pt.PacketText(bits)


def bundle_jobs(opts: Options) -> list[tuple[object, object]]:
    """(tid, mapped stream) per stream of the bundle directory opts.trace. The
    manifest's CPU and timing fill what the command line left unset."""
    from pt_decoder.tools.decode import bundle_cpu, bundle_path, read_bundle_manifest
    if opts.begin or opts.end is not None:
        raise ValueError("a byte range applies to a trace file, not to a bundle directory")
    manifest = read_bundle_manifest(opts.trace)
    cpu = bundle_cpu(manifest)
    if opts.cpu is None and cpu:
        opts.cpu = parse_cpu(cpu)
    timing = manifest.get("timing") or {}
    for attr in ("mtc_freq", "nom_freq", "cpuid_0x15_eax", "cpuid_0x15_ebx"):
        if not getattr(opts.time, attr) and timing.get(attr):
            setattr(opts.time, attr, int(timing[attr]))
    return [(stream.get("tid"), open_trace(bundle_path(opts.trace, stream)))
            for stream in manifest.get("streams", [])]


def dump(data, opts: Options, sink, on_progress=None) -> None:
    """Dump `data` (any buffer) with `opts`, writing the lines to `sink` (a
    text_out.TextSink); on_progress(offset) after each stretch between resyncs
    (and at the end)."""
    if opts.cpu is not None:
        errata = cpu_errata(opts.cpu[0], opts.cpu[1])
        if errata is None:
            sink.write(fmt.diag(0, "failed to determine errata", errstr(ErrorCode.BAD_CPU)) + "\n")
            errata = frozenset()
        opts.errata = errata
        opts.time.skl168 = "skl168" in errata
    Dumper(data, opts, sink, on_progress).run()
    if on_progress is not None:
        on_progress(len(data))


def main(argv: list[str] | None = None, out=None) -> int:
    out = sys.stdout if out is None else out
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        opts = parse_args(argv)
    except UsageError as exc:
        print(f"{PROG}: {exc}.\n{PROG}: use --help for the options.", file=sys.stderr)
        return 2
    if opts is None:
        out.write(USAGE)
        return 0
    try:
        if os.path.isdir(opts.trace):
            jobs = bundle_jobs(opts)
        else:
            jobs = [(None, open_trace(opts.trace, opts.begin, opts.end))]
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        if isinstance(exc, OSError) and exc.filename and str(exc.filename) != opts.trace:
            reason = f"{reason}: {exc.filename}"         # a file the bundle's manifest names
        print(f"{PROG}: cannot read trace {opts.trace}: {reason}", file=sys.stderr)
        return 2  # bad input, as for every command (adapter/cli.py)
    from pt_decoder.tools.progress import Progress
    from pt_decoder.tools.text_out import TextSink
    sink = TextSink(out)
    progress = Progress(sum(len(data) for _, data in jobs), "dump")
    done = 0
    try:
        for tid, data in jobs:
            if tid is not None:
                sink.write(f"[stream tid {tid}]\n")
            dump(data, opts, sink, lambda offset, base=done: progress.update(base + offset))
            done += len(data)
        sink.flush()
    except BrokenPipeError:
        return 0
    finally:
        progress.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

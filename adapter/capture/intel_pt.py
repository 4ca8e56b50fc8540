"""The Intel PT capture backend: perf_event_open(2) on the intel_pt PMU, the
AUX area, sideband, and the bundle.

Layer: adapter.capture (a capture backend over adapter.hw.perf, the one
binding of struct perf_event_attr, perf_event_open(2) and the perf ioctls).
It knows the perf ABI and the bundle writer, not how PT is decoded.

What it does:
  * the event config from the PMU's own sysfs `format/*` strings
    (`config_from_formats`), so new kernels that move a field keep working;
  * one PT event per thread of the target (pid = tid, cpu = -1), each with a
    ring buffer and an AUX area, in full mode (the reader advances aux_tail)
    or snapshot mode (the AUX area mapped read-only: the kernel overwrites it
    and the newest `aux_size` bytes are taken when the recording ends);
  * a sideband event (software dummy, task/mmap2/comm/context-switch) whose
    FORK records name new threads, for which new PT events are opened
    (tracing of a new thread starts a few microseconds after it does);
  * address-range filters (PERF_EVENT_IOC_SET_FILTER, perf's syntax
    "filter|start|stop ADDR[/SIZE][@FILE]");
  * enable/disable by ioctl, and on Linux 6.13+ windows that open and close
    inside the kernel: the PT event starts paused (attr.aux_start_paused) and
    hardware-breakpoint events in its group carry aux_resume / aux_pause;
  * sideband records (MMAP2, COMM, ITRACE_START, AUX, LOST, SWITCH) into the
    bundle's images, threads and partial marks.

What was tested where: the attr encoding against the format strings of the
kernel's intel_pt driver, the ring and AUX readers on bytes the tests write,
the sideband conversion on a real recording's records, and the clear error
where the PMU is absent (these machines). Opening real PT events, AUX
mmaps, filters and pause/resume were NOT run here (no Intel PT in this VM);
docs/recording.md says how to check them on an Intel host.
"""
from __future__ import annotations

import ctypes
import dataclasses
import errno
import mmap
import os
import re
import signal
import struct
import time

from adapter.capture import perfdata
from adapter.hw import cpu as cpu_mod
from adapter.hw import perf, procfs

PAGE = mmap.PAGESIZE

SIDEBAND_SAMPLE_TYPE = (perfdata.SAMPLE_TID | perfdata.SAMPLE_TIME | perfdata.SAMPLE_CPU |
                        perfdata.SAMPLE_IDENTIFIER)


class IntelPtError(Exception):
    """Intel PT capture is impossible or failed; the text says why and what to do."""


# --- the config word from sysfs format strings -------------------------------------------

_FORMAT = re.compile(r"^(config|config1|config2|config3):(.+)$")


def parse_format(text: str) -> tuple[str, list[tuple[int, int]]]:
    """"config:14-17" -> ("config", [(14, 17)]); lists like "config:0-3,8" too."""
    m = _FORMAT.match(text.strip())
    if not m:
        raise IntelPtError(f"unexpected PMU format string {text!r}")
    ranges = []
    for part in m.group(2).split(","):
        lo, _, hi = part.partition("-")
        ranges.append((int(lo), int(hi or lo)))
    return m.group(1), ranges


def config_from_formats(formats: dict[str, str], values: dict[str, int]) -> dict[str, int]:
    """Place each term's value in the config words its format string names
    (low bits of the value into the first range). Raises IntelPtError for a
    term the PMU does not have or a value that does not fit."""
    words = {"config": 0, "config1": 0, "config2": 0, "config3": 0}
    for term, value in values.items():
        if term not in formats:
            raise IntelPtError(f"the intel_pt PMU of this kernel has no {term!r} term "
                               f"(it has: {', '.join(sorted(formats))})")
        word, ranges = parse_format(formats[term])
        width = sum(hi - lo + 1 for lo, hi in ranges)
        if not 0 <= int(value) < (1 << width):
            raise IntelPtError(f"{term}={value} does not fit in its {width} bit(s)")
        v = int(value)
        for lo, hi in ranges:
            n = hi - lo + 1
            words[word] |= (v & ((1 << n) - 1)) << lo
            v >>= n
    return words


@dataclasses.dataclass
class PtOptions:
    """The trace configuration, as perf's intel_pt//u terms."""
    branch: bool = True
    tsc: bool = True
    mtc: bool = True
    mtc_period: int = 3
    cyc: bool = False
    cyc_thresh: int = 1
    noretcomp: bool = False
    psb_period: int = 3         # PSB every 2^(n+11) bytes
    ptw: bool = False
    fup_on_ptw: bool = False
    pwr_evt: bool = False

    def terms(self, caps: dict[str, int] | None = None) -> dict[str, int]:
        """The format terms to set (pt=1 always). With `caps` (sysfs caps/*),
        features the CPU lacks are refused with the reason."""
        terms = {"pt": 1, "branch": int(self.branch), "tsc": int(self.tsc)}
        wanted = [("mtc", self.mtc, "mtc"), ("cyc", self.cyc, "psb_cyc"),
                  ("ptw", self.ptw, "ptwrite"), ("pwr_evt", self.pwr_evt, "power_event_trace")]
        for term, on, cap in wanted:
            if on:
                if caps is not None and not caps.get(cap):
                    raise IntelPtError(f"{term} needs the CPU capability {cap}, which "
                                       "caps/ says this CPU lacks")
                terms[term] = 1
        if self.mtc:
            terms["mtc_period"] = self.mtc_period
        if self.cyc:
            terms["cyc_thresh"] = self.cyc_thresh
        if self.noretcomp:
            terms["noretcomp"] = 1
        if self.fup_on_ptw:
            terms["fup_on_ptw"] = 1
        terms["psb_period"] = self.psb_period
        return terms


def pt_attr(pmu_type: int, config: dict[str, int], *, start_disabled: bool = True,
            enable_on_exec: bool = False, start_paused: bool = False,
            kernel: bool = False) -> perf.PerfEventAttr:
    """The PT event's attr (user space only unless `kernel`)."""
    a = perf.PerfEventAttr()
    a.type = pmu_type
    a.size = perf.PERF_ATTR_SIZE_VER8
    a.config, a.config1, a.config2, a.config3 = (config["config"], config["config1"],
                                                 config["config2"], config["config3"])
    a.flags = (perf.FLAG_EXCLUDE_HV | perf.FLAG_EXCLUDE_GUEST
               | (0 if kernel else perf.FLAG_EXCLUDE_KERNEL))
    a.flags |= perf.FLAG_DISABLED if start_disabled or enable_on_exec else 0
    a.flags |= perf.FLAG_ENABLE_ON_EXEC if enable_on_exec else 0
    a.aux_action = perf.AUX_START_PAUSED if start_paused else 0
    return a


def sideband_attr(enable_on_exec: bool) -> perf.PerfEventAttr:
    """A software dummy event that only produces the sideband records."""
    a = perf.PerfEventAttr()
    a.type = perf.PERF_TYPE_SOFTWARE
    a.size = perf.PERF_ATTR_SIZE_VER8
    a.config = perf.PERF_COUNT_SW_DUMMY
    a.sample_type = SIDEBAND_SAMPLE_TYPE
    a.flags = (perf.FLAG_MMAP | perf.FLAG_MMAP2 | perf.FLAG_COMM | perf.FLAG_COMM_EXEC
               | perf.FLAG_TASK | perf.FLAG_SAMPLE_ID_ALL | perf.FLAG_CONTEXT_SWITCH
               | perf.FLAG_EXCLUDE_KERNEL | perf.FLAG_EXCLUDE_HV | perf.FLAG_INHERIT
               | (perf.FLAG_DISABLED | perf.FLAG_ENABLE_ON_EXEC if enable_on_exec else 0))
    return a


def window_breakpoint_attr(addr: int, action: int) -> perf.PerfEventAttr:
    """An execute breakpoint in the PT event's group that pauses or resumes
    the trace in the kernel when `addr` runs (Linux 6.13+, aux_pause/resume)."""
    a = perf.PerfEventAttr()
    a.type = perf.PERF_TYPE_BREAKPOINT
    a.size = perf.PERF_ATTR_SIZE_VER8
    a.bp_type = perf.HW_BREAKPOINT_X
    a.bp_addr = addr
    a.bp_len = 8                    # sizeof(long), the kernel's only length for execute
    a.sample_period = 1
    a.flags = perf.FLAG_EXCLUDE_KERNEL | perf.FLAG_EXCLUDE_HV
    a.aux_action = action
    return a


def perf_event_open(attr: perf.PerfEventAttr, pid: int, cpu: int = -1, group_fd: int = -1,
                    flags: int = 0) -> int:
    """perf.perf_event_open, with a failure raised as IntelPtError saying
    what the errno usually means for a PT, sideband or window event."""
    try:
        return perf.perf_event_open(attr, pid, cpu, group_fd, flags)
    except OSError as exc:
        err = exc.errno
        hint = {errno.EACCES: "perf_event_paranoid forbids it (see `ptdebug doctor`)",
                errno.EPERM: "perf_event_paranoid forbids it (see `ptdebug doctor`)",
                errno.ENOENT: "the PMU does not know this event",
                errno.EOPNOTSUPP: "the PMU cannot do this (a missing capability?)",
                errno.EINVAL: "the kernel refused the attributes (aux_pause/resume need "
                              "Linux 6.13+)",
                errno.ESRCH: "the thread is gone"}.get(err, "")
        raise IntelPtError(f"perf_event_open(type {attr.type}, pid {pid}) failed: "
                           f"{os.strerror(err)}{'; ' + hint if hint else ''}") from None


def ioctl(fd: int, request: int, arg=0) -> None:
    """perf.ioctl (request one of perf.IOC_*), with a failure raised as IntelPtError."""
    try:
        perf.ioctl(fd, request, arg)
    except OSError as exc:
        raise IntelPtError(f"ioctl({request:#x}) on perf event failed: "
                           f"{os.strerror(exc.errno)}") from None


def set_filter(fd: int, spec: str) -> None:
    """PERF_EVENT_IOC_SET_FILTER: perf's address filter syntax, e.g.
    "filter 0x401000/0x200@/usr/bin/prog" or "start 0x1234@/lib/x.so"."""
    if not re.match(r"^\s*(filter|start|stop|tracestop)\s+\S+", spec):
        raise IntelPtError(f"bad address filter {spec!r}: want 'filter|start|stop "
                           "ADDR[/SIZE][@FILE]'")
    ioctl(fd, perf.IOC_SET_FILTER, ctypes.c_char_p(spec.encode()))


# --- ring buffers ------------------------------------------------------------------------

# struct perf_event_mmap_page: data_head, data_tail, data_offset, data_size,
# aux_head, aux_tail, aux_offset, aux_size at byte 1024 onwards.
MMAP_PAGE_RING = struct.Struct("<8Q")
RING_FIELDS_AT = 1024


def ring_copy(buf, size: int, start: int, end: int) -> bytes:
    """Bytes [start, end) of a ring of `size` bytes (positions grow forever
    and wrap modulo size), oldest first."""
    if end - start > size:
        start = end - size   # the writer overwrote the rest
    a, b = start % size, end % size
    if end == start:
        return b""
    if a < b:
        return bytes(buf[a:b])
    return bytes(buf[a:size]) + bytes(buf[0:b])


def parse_ring_records(data: bytes) -> list[dict]:
    """The sideband records of a ring's data (as ring_copy returns them)."""
    return [r for _, r, _ in perfdata.iter_records(data, SIDEBAND_SAMPLE_TYPE, True)]


def snapshot_bytes(aux, aux_size: int, aux_head: int) -> bytes:
    """An overwrite-mode AUX area at the moment it was stopped: the newest
    `aux_size` bytes, oldest first (decoders sync at the first PSB)."""
    if aux_head < aux_size:
        return bytes(aux[:aux_head])
    return ring_copy(aux, aux_size, aux_head - aux_size, aux_head)


class PtEvent:
    """One PT event with its ring buffer and AUX area."""

    def __init__(self, fd: int, tid: int, data_pages: int = 16, aux_pages: int = 1024,
                 snapshot: bool = False):
        self.fd = fd
        self.tid = tid
        self.snapshot = snapshot
        self.ring = mmap.mmap(fd, PAGE * (1 + data_pages), mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)
        self.data_size = PAGE * data_pages
        self.aux_size = PAGE * aux_pages
        self.aux_offset = PAGE * (1 + data_pages)
        struct.pack_into("<QQ", self.ring, RING_FIELDS_AT + 48, self.aux_offset, self.aux_size)
        # full mode maps AUX writable (the reader moves aux_tail); a read-only
        # mapping makes the kernel overwrite (snapshot mode), perf_event_open(2)
        prot = mmap.PROT_READ if snapshot else mmap.PROT_READ | mmap.PROT_WRITE
        try:
            self.aux = mmap.mmap(fd, self.aux_size, mmap.MAP_SHARED, prot,
                                 offset=self.aux_offset)
        except OSError as exc:
            self.ring.close()
            raise IntelPtError(f"cannot map a {self.aux_size >> 10} KiB AUX area: "
                               f"{exc.strerror} (raise ulimit -l or perf_event_mlock_kb)")
        self.chunks: list[bytes] = []

    def fields(self) -> dict:
        names = ("data_head", "data_tail", "data_offset", "data_size", "aux_head", "aux_tail",
                 "aux_offset", "aux_size")
        return dict(zip(names, MMAP_PAGE_RING.unpack_from(self.ring, RING_FIELDS_AT)))

    def drain(self) -> list[dict]:
        """Move new AUX bytes into `chunks` (full mode) and return new records."""
        f = self.fields()
        base = PAGE
        data = ring_copy(memoryview(self.ring)[base:base + self.data_size], self.data_size,
                         f["data_tail"], f["data_head"])
        struct.pack_into("<Q", self.ring, RING_FIELDS_AT + 8, f["data_head"])
        if not self.snapshot and f["aux_head"] != f["aux_tail"]:
            self.chunks.append(ring_copy(self.aux, self.aux_size, f["aux_tail"], f["aux_head"]))
            struct.pack_into("<Q", self.ring, RING_FIELDS_AT + 40, f["aux_head"])
        return parse_ring_records(data)

    def take_snapshot(self) -> bytes:
        ioctl(self.fd, perf.IOC_DISABLE)
        data = snapshot_bytes(self.aux, self.aux_size, self.fields()["aux_head"])
        self.chunks.append(data)
        return data

    def close(self) -> None:
        for m in (self.aux, self.ring):
            try:
                m.close()
            except (BufferError, ValueError):
                pass
        os.close(self.fd)


def require_pmu() -> tuple[int, dict, dict]:
    """(type, formats, caps) of the intel_pt PMU, or IntelPtError saying why not."""
    pmu = cpu_mod.pmu_type("intel_pt")
    if pmu is None:
        ident = cpu_mod.cpu_id()
        why = ("this CPU is " + ident.vendor) if ident.vendor != "GenuineIntel" else \
            ("this machine is a VM without Intel PT passed through"
             if cpu_mod.virtualization()["vm"] else "the intel_pt driver is not loaded")
        raise IntelPtError(f"no intel_pt PMU here ({cpu_mod.PMU_ROOT}/intel_pt is missing: "
                           f"{why}); use --backend stepper (see `ptdebug doctor`)")
    return pmu, cpu_mod.pmu_formats("intel_pt"), cpu_mod.pmu_caps("intel_pt")


def sideband_to_bundle(writer, records: list[dict], *, copy_images: bool = True) -> list[str]:
    """Images (executable MMAP/MMAP2), threads (COMM), the threads' processes' perf maps,
    and partial marks (LOST, truncated AUX) from sideband records; returns the problems
    found."""
    problems = []
    seen = set()
    for rec in records:
        kind = rec["type"]
        if kind == "COMM":
            writer.add_thread(rec["tid"], rec["pid"], rec["comm"])
        elif kind in ("MMAP", "MMAP2") and rec.get("executable"):
            name = rec["filename"]
            key = (rec["addr"], rec["len"], name)
            if key in seen or not name.startswith("/") or not os.path.isfile(name):
                continue
            seen.add(key)
            size = min(rec["len"], max(0, os.path.getsize(name) - rec["pgoff"]))
            writer.add_image(name, rec["addr"], rec["pgoff"], size,
                             build_id=rec.get("build_id"), pid=rec.get("pid"))
        elif kind == "LOST":
            problems.append(f"the kernel lost {rec['lost']} sideband records")
        elif kind == "AUX" and rec.get("truncated"):
            problems.append("the AUX area overflowed (trace gap)")
        elif kind == "ITRACE_START":
            writer.add_thread(rec["tid"], rec["pid"], None)
    # JIT code's names (CPython 3.12+ under -X perf), which no image holds; a map refused is
    # a warning, not a flaw of the trace
    warnings = writer.manifest.setdefault("warnings", [])
    for pid in sorted({t["pid"] for t in writer.manifest["threads"] if t.get("pid")}):
        warnings += writer.add_perf_map(pid)
    return problems


def record_cli(args, log) -> dict:
    """`ptdebug record --backend intel_pt`: trace a command or PID for
    --duration (or until the command ends), writing a bundle. Untested here."""
    pmu, formats, caps = require_pmu()
    if args.count is not None or args.until_return:
        raise IntelPtError("--count and --until-return are stepper options; with Intel PT "
                           "use --duration, --from/--until (address windows) or filters")
    from adapter.capture.bundle import BundleWriter
    config = config_from_formats(formats, PtOptions().terms(caps))
    child = None
    if args.command:
        child = os.fork()
        if child == 0:
            try:
                os.kill(os.getpid(), signal.SIGSTOP)
                os.execvp(args.command[0], args.command)
            finally:
                os._exit(127)
        os.waitpid(child, os.WUNTRACED)
        pid = child
    else:
        pid = args.pid or args.tid
    if args.tid or child:
        threads = [pid]
    else:
        try:
            threads = procfs.tasks(pid)
        except FileNotFoundError:
            raise IntelPtError(f"no process {pid} (it is not running)") from None
    kv = cpu_mod.kernel_version()
    windows = bool(args.start) and kv >= (6, 13)
    writer = BundleWriter(args.output, "intel_pt", cpu_mod.cpu_id().as_manifest(),
                          timing=pt_timing(PtOptions()),
                          command=args.command or None, pid=pid,
                          copy_images=not args.no_copy_images)
    events, side_fds = [], []
    problems: list[str] = []
    try:
        for tid in threads:
            attr = pt_attr(pmu, config, enable_on_exec=bool(child), start_paused=windows)
            ev = PtEvent(perf_event_open(attr, tid), tid, snapshot=args.snapshot)
            events.append(ev)
            for spec in args.filter:
                set_filter(ev.fd, spec)
            if windows:
                start = _address(args.start)
                side_fds.append(perf_event_open(window_breakpoint_attr(start, perf.AUX_RESUME),
                                                tid, group_fd=ev.fd))
                if args.until:
                    side_fds.append(perf_event_open(
                        window_breakpoint_attr(_address(args.until), perf.AUX_PAUSE), tid,
                        group_fd=ev.fd))
            if not child:
                ioctl(ev.fd, perf.IOC_ENABLE)
        sb_fd = perf_event_open(sideband_attr(bool(child)), pid)
        side_ring = mmap.mmap(sb_fd, PAGE * 17, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        if child:
            os.kill(child, signal.SIGCONT)
        deadline = time.monotonic() + (args.duration or 1e12) / 1000
        records: list[dict] = []
        side_raw = bytearray()
        while time.monotonic() < deadline:
            if child and os.waitpid(child, os.WNOHANG)[0]:
                break
            for ev in events:
                records += ev.drain()
            # follow new threads: the sideband's FORK records name them
            raw = _take_ring(side_ring)
            side_raw += raw
            fresh = parse_ring_records(raw)
            records += fresh
            for rec in fresh:
                if rec["type"] == "FORK" and rec["pid"] == pid and \
                        rec["tid"] not in {e.tid for e in events}:
                    attr = pt_attr(pmu, config, start_disabled=False, start_paused=windows)
                    try:
                        events.append(PtEvent(perf_event_open(attr, rec["tid"]), rec["tid"],
                                              snapshot=args.snapshot))
                    except IntelPtError as exc:
                        problems.append(f"thread {rec['tid']} not traced: {exc}")
            time.sleep(0.01)
        for ev in events:
            if ev.snapshot:
                ev.take_snapshot()
            else:
                ioctl(ev.fd, perf.IOC_DISABLE)
                records += ev.drain()
        raw = _take_ring(side_ring)
        side_raw += raw
        records += parse_ring_records(raw)
        side_ring.close()
        os.close(sb_fd)
        for ev in events:
            writer.add_stream_bytes(ev.tid, b"".join(ev.chunks), pid=pid)
        problems += sideband_to_bundle(writer, records)
        writer.add_sideband("perf.pevent", bytes(side_raw), kind="perf-records",
                            sample_type=SIDEBAND_SAMPLE_TYPE, sample_id_all=True)
    except IntelPtError as exc:
        problems.append(str(exc))
        raise
    finally:
        for ev in events:
            ev.close()
        for fd in side_fds:
            os.close(fd)
        if child and problems:
            os.kill(child, signal.SIGKILL)
        if child:
            os.waitpid(child, 0)
        manifest = writer.finish("; ".join(problems) if problems else None)
    return manifest


def _take_ring(ring) -> bytes:
    """New records of a 16-page sideband ring; advances data_tail past them."""
    head, tail = struct.unpack_from("<QQ", ring, RING_FIELDS_AT)
    data = ring_copy(memoryview(ring)[PAGE:], PAGE * 16, tail, head)
    struct.pack_into("<Q", ring, RING_FIELDS_AT + 8, head)
    return data


def pt_timing(options: PtOptions, root=cpu_mod.PMU_ROOT) -> dict:
    """The bundle's timing parameters from the PMU's sysfs files: the nominal
    (max non-turbo) ratio and the TSC/crystal-clock ratio `tsc_art_ratio`
    ("numerator:denominator" = CPUID 0x15 EBX:EAX)."""
    pmu = root / "intel_pt"

    def read(name):
        try:
            return (pmu / name).read_text().strip()
        except OSError:
            return ""
    nom = read("max_nonturbo_ratio")
    art = read("tsc_art_ratio")
    ebx, _, eax = art.partition(":")
    nom_freq = int(nom) if nom.isdigit() else None
    return {"tsc_hz": nom_freq * 100_000_000 if nom_freq else None,
            "tsc_source": "the TSC of the recorded CPU",
            "mtc_freq": options.mtc_period if options.mtc else None,
            "nom_freq": nom_freq,
            "cpuid_0x15_eax": int(eax) if eax.isdigit() else None,
            "cpuid_0x15_ebx": int(ebx) if ebx.isdigit() else None,
            "cyc": options.cyc, "cyc_thresh": options.cyc_thresh if options.cyc else None}


def _address(spec: str) -> int:
    try:
        return int(spec, 0)
    except ValueError:
        raise IntelPtError(f"with --backend intel_pt, --from/--until take an address "
                           f"(0x...), not {spec!r}: the program is not loaded when the "
                           "events are opened") from None

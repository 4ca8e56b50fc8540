"""Reads perf.data files and perf sideband records, and turns an Intel PT
recording (`perf record -e intel_pt//u`) into a trace bundle.

Layer: adapter.capture (file formats). It knows the perf file and record
layouts and the bundle writer; it does not decode PT. The intel_pt backend
reuses `parse_record` for the records of its own ring buffers.

Layouts, from Linux tools/perf/Documentation/perf.data-file-format.txt and
include/uapi/linux/perf_event.h (perf_event_open(2) "MMAP layout"):
  header   magic "PERFILE2", header size, attr entry size, sections
           attrs / data / event_types {offset, size}, 256-bit feature bitmap
  attrs    per event: struct perf_event_attr (attr.size bytes, padded to the
           entry size minus 16) then a section of its u64 sample ids
  data     records: struct perf_event_header {u32 type, u16 misc, u16 size}
           + body; PERF_RECORD_AUXTRACE (71) is followed by `size` bytes of
           AUX data that its header.size does not count
  features after the data section: one {offset, size} per bit set in the
           bitmap, in bit order (BUILD_ID=2, OSRELEASE=4, CPUDESC=8, CPUID=9...)
Non-sample records carry a sample_id trailer when attr.sample_id_all is set:
{pid, tid} TID, time TIME, id ID, stream_id STREAM_ID, {cpu, res} CPU,
identifier IDENTIFIER, each 8 bytes, in that order, at the record's end.
"""
from __future__ import annotations

import dataclasses
import os
import struct

MAGIC = b"PERFILE2"
HEADER = struct.Struct("<8sQQ QQ QQ QQ 4Q")   # perf_file_header, 104 bytes
EVENT_HEADER = struct.Struct("<IHH")

# PERF_RECORD_* (kernel) and PERF_RECORD_* (perf tool, >= 64)
MMAP, LOST, COMM, EXIT, THROTTLE, UNTHROTTLE, FORK, READ, SAMPLE, MMAP2, AUX, \
    ITRACE_START, LOST_SAMPLES, SWITCH, SWITCH_CPU_WIDE = range(1, 16)
HEADER_ATTR, HEADER_BUILD_ID, FINISHED_ROUND, ID_INDEX = 64, 67, 68, 69
AUXTRACE_INFO, AUXTRACE, AUXTRACE_ERROR, TIME_CONV = 70, 71, 72, 79
RECORD_NAMES = {MMAP: "MMAP", LOST: "LOST", COMM: "COMM", EXIT: "EXIT", FORK: "FORK",
                SAMPLE: "SAMPLE", MMAP2: "MMAP2", AUX: "AUX", ITRACE_START: "ITRACE_START",
                LOST_SAMPLES: "LOST_SAMPLES", SWITCH: "SWITCH",
                SWITCH_CPU_WIDE: "SWITCH_CPU_WIDE", AUXTRACE_INFO: "AUXTRACE_INFO",
                AUXTRACE: "AUXTRACE", AUXTRACE_ERROR: "AUXTRACE_ERROR",
                FINISHED_ROUND: "FINISHED_ROUND", TIME_CONV: "TIME_CONV"}

MISC_MMAP_BUILD_ID = 1 << 14
MISC_SWITCH_OUT = 1 << 13
MISC_COMM_EXEC = 1 << 13
AUX_FLAG_TRUNCATED, AUX_FLAG_OVERWRITE, AUX_FLAG_PARTIAL, AUX_FLAG_COLLISION = 1, 2, 4, 8
PROT_EXEC = 4

# sample_type bits (perf_event.h)
SAMPLE_IP, SAMPLE_TID, SAMPLE_TIME, SAMPLE_ADDR, SAMPLE_READ, SAMPLE_CALLCHAIN, SAMPLE_ID, \
    SAMPLE_CPU, SAMPLE_PERIOD, SAMPLE_STREAM_ID = (1 << i for i in range(10))
SAMPLE_IDENTIFIER = 1 << 16

FEATURE_NAMES = {1: "tracing_data", 2: "build_id", 3: "hostname", 4: "osrelease",
                 5: "version", 6: "arch", 7: "nrcpus", 8: "cpudesc", 9: "cpuid",
                 10: "total_mem", 11: "cmdline", 12: "event_desc", 16: "pmu_mappings",
                 18: "auxtrace"}

# AUXTRACE_INFO type and the Intel PT private words (tools/perf/util/intel-pt.h)
AUXTRACE_INTEL_PT = 1
INTEL_PT_PRIV = ("pmu_type", "time_shift", "time_mult", "time_zero", "cap_user_time_zero",
                 "tsc_bit", "noretcomp_bit", "have_sched_switch", "snapshot_mode",
                 "per_cpu_mmaps", "mtc_bit", "mtc_freq_bits", "tsc_ctc_ratio_n",
                 "tsc_ctc_ratio_d", "cyc_bit", "max_non_turbo_ratio", "filter_str_len")


class PerfDataError(Exception):
    """A perf.data file or record that cannot be read; the text says where."""


def _cstr(data: bytes) -> str:
    return data.split(b"\0", 1)[0].decode("utf-8", "replace")


def sample_id_size(sample_type: int) -> int:
    return 8 * sum(bool(sample_type & bit) for bit in (
        SAMPLE_TID, SAMPLE_TIME, SAMPLE_ID, SAMPLE_STREAM_ID, SAMPLE_CPU, SAMPLE_IDENTIFIER))


def parse_sample_id(trailer: bytes, sample_type: int) -> dict:
    out, pos = {}, 0
    for bit, name in ((SAMPLE_TID, "pid_tid"), (SAMPLE_TIME, "time"), (SAMPLE_ID, "id"),
                      (SAMPLE_STREAM_ID, "stream_id"), (SAMPLE_CPU, "cpu"),
                      (SAMPLE_IDENTIFIER, "identifier")):
        if sample_type & bit:
            word = trailer[pos:pos + 8]
            pos += 8
            if name == "pid_tid":
                out["sample_pid"], out["sample_tid"] = struct.unpack("<ii", word)
            elif name == "cpu":
                out["cpu"] = struct.unpack_from("<I", word)[0]
            else:
                out[name] = struct.unpack("<Q", word)[0]
    return out


def parse_record(rtype: int, misc: int, body: bytes, sample_type: int = 0,
                 sample_id_all: bool = False) -> dict:
    """One record's fields as a dict ({"type": name, "misc": misc, ...}).
    Sample records are returned undecoded (their layout depends on the event)."""
    rec: dict = {"type": RECORD_NAMES.get(rtype, str(rtype)), "misc": misc}
    trailer_len = sample_id_size(sample_type) if sample_id_all and rtype < 64 \
        and rtype != SAMPLE else 0
    if trailer_len and len(body) >= trailer_len:
        rec.update(parse_sample_id(body[len(body) - trailer_len:], sample_type))
    try:
        if rtype == MMAP:
            pid, tid, addr, length, pgoff = struct.unpack_from("<IIQQQ", body)
            rec.update(pid=pid, tid=tid, addr=addr, len=length, pgoff=pgoff, prot=None,
                       filename=_cstr(body[32:]), build_id=None,
                       executable=not misc & (1 << 13))   # MISC_MMAP_DATA
        elif rtype == MMAP2:
            pid, tid, addr, length, pgoff = struct.unpack_from("<IIQQQ", body)
            build_id = None
            if misc & MISC_MMAP_BUILD_ID:
                size = body[32]
                build_id = body[36:36 + size].hex()
            prot, flags = struct.unpack_from("<II", body, 56)
            rec.update(pid=pid, tid=tid, addr=addr, len=length, pgoff=pgoff, prot=prot,
                       flags=flags, filename=_cstr(body[64:]), build_id=build_id,
                       executable=bool(prot & PROT_EXEC))
        elif rtype == COMM:
            pid, tid = struct.unpack_from("<II", body)
            rec.update(pid=pid, tid=tid, comm=_cstr(body[8:]), exec=bool(misc & MISC_COMM_EXEC))
        elif rtype in (EXIT, FORK):
            pid, ppid, tid, ptid, time = struct.unpack_from("<IIIIQ", body)
            rec.update(pid=pid, ppid=ppid, tid=tid, ptid=ptid, time=time)
        elif rtype == ITRACE_START:
            pid, tid = struct.unpack_from("<II", body)
            rec.update(pid=pid, tid=tid)
        elif rtype == AUX:
            offset, size, flags = struct.unpack_from("<QQQ", body)
            rec.update(aux_offset=offset, aux_size=size, flags=flags,
                       truncated=bool(flags & AUX_FLAG_TRUNCATED),
                       overwrite=bool(flags & AUX_FLAG_OVERWRITE),
                       partial=bool(flags & AUX_FLAG_PARTIAL),
                       collision=bool(flags & AUX_FLAG_COLLISION))
        elif rtype == LOST:
            rec.update(zip(("id", "lost"), struct.unpack_from("<QQ", body)))
        elif rtype == LOST_SAMPLES:
            rec.update(lost=struct.unpack_from("<Q", body)[0])
        elif rtype == SWITCH:
            rec.update(out=bool(misc & MISC_SWITCH_OUT))
        elif rtype == SWITCH_CPU_WIDE:
            pid, tid = struct.unpack_from("<II", body)
            rec.update(out=bool(misc & MISC_SWITCH_OUT), next_prev_pid=pid,
                       next_prev_tid=tid)
        elif rtype == AUXTRACE_INFO:
            kind, = struct.unpack_from("<I", body)
            words = struct.unpack_from(f"<{(len(body) - 8) // 8}Q", body, 8)
            rec.update(auxtrace_type=kind, priv=list(words))
            if kind == AUXTRACE_INTEL_PT:
                rec["intel_pt"] = dict(zip(INTEL_PT_PRIV, words))
        elif rtype == AUXTRACE:
            size, offset, reference, idx, tid, cpu = struct.unpack_from("<QQQIII", body)
            rec.update(size=size, offset=offset, reference=reference, idx=idx, tid=tid,
                       cpu=cpu)
        elif rtype == TIME_CONV:
            shift, mult, zero = struct.unpack_from("<QQQ", body)
            rec.update(time_shift=shift, time_mult=mult, time_zero=zero)
    except struct.error as exc:
        raise PerfDataError(f"{rec['type']} record of {len(body)} bytes is too short: "
                            f"{exc}") from None
    return rec


def iter_records(buf: bytes, sample_type: int = 0, sample_id_all: bool = True, offset=0):
    """Records from a buffer of concatenated perf records (a libipt .pevent
    sideband file, a ring buffer's data): yields (offset, record dict, raw bytes)."""
    end = len(buf)
    while offset + EVENT_HEADER.size <= end:
        rtype, misc, size = EVENT_HEADER.unpack_from(buf, offset)
        if size < EVENT_HEADER.size or offset + size > end:
            raise PerfDataError(f"record at offset {offset} has a bad size {size}")
        body = buf[offset + EVENT_HEADER.size: offset + size]
        yield offset, parse_record(rtype, misc, body, sample_type, sample_id_all), \
            buf[offset:offset + size]
        offset += size


@dataclasses.dataclass
class PerfEventAttr:
    type: int
    size: int
    config: int
    sample_type: int
    flags: int
    ids: list

    @property
    def sample_id_all(self) -> bool:
        return bool(self.flags >> 18 & 1)


MAX_PERF_DATA_BYTES = 1 << 36
"""Largest perf.data read into memory (64 GiB: beyond any recording this machine could hold)."""


class PerfData:
    """A perf.data file read into memory: attrs, records (with AUX payloads
    split out), feature sections."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        from pt_decoder.bundle_reader import ManifestError, read_regular_file
        try:
            # a regular file only, opened without blocking: /dev/zero ran `import` out of
            # memory and a FIFO hung it (issue 17)
            self.raw = read_regular_file(path, "perf.data", MAX_PERF_DATA_BYTES)
        except ManifestError as exc:
            raise PerfDataError(str(exc)) from None
        if len(self.raw) < HEADER.size or self.raw[:8] != MAGIC:
            what = "an old-format (PERFFILE) or piped" if self.raw[:8] == b"PERFFILE" \
                else "not a"
            raise PerfDataError(f"{path} is {what} perf.data file (no PERFILE2 header); "
                                "record with `perf record -o FILE` (not to a pipe)")
        (_, _, attr_size, a_off, a_size, d_off, d_size, _, _, *feat) = \
            HEADER.unpack_from(self.raw)
        self.data_offset, self.data_size = d_off, d_size
        self.feature_bits = sum(w << (64 * i) for i, w in enumerate(feat))
        if d_off + d_size > len(self.raw):
            raise PerfDataError(f"{path} is truncated: the data section ends at byte "
                                f"{d_off + d_size}, the file at {len(self.raw)} (was perf "
                                "killed before it finished writing?)")
        self.attrs = self._read_attrs(a_off, a_size, attr_size)
        self.features = self._read_features()
        self.records: list[dict] = []
        self.aux: list[tuple[dict, bytes]] = []
        self.sideband = bytearray()
        self._read_data()

    def _read_attrs(self, off: int, size: int, entry: int) -> list[PerfEventAttr]:
        attrs = []
        for pos in range(off, off + size, entry):
            a_type, a_size, config, _, sample_type, _, flags = struct.unpack_from(
                "<IIQQQQQ", self.raw, pos)
            ids_off, ids_size = struct.unpack_from("<QQ", self.raw, pos + entry - 16)
            ids = list(struct.unpack_from(f"<{ids_size // 8}Q", self.raw, ids_off))
            attrs.append(PerfEventAttr(a_type, a_size, config, sample_type, flags, ids))
        if not attrs:
            raise PerfDataError(f"{self.path} has no events")
        return attrs

    def _read_features(self) -> dict:
        out: dict = {}
        pos = self.data_offset + self.data_size
        for bit in range(256):
            if not self.feature_bits >> bit & 1:
                continue
            f_off, f_size = struct.unpack_from("<QQ", self.raw, pos)
            pos += 16
            data = self.raw[f_off:f_off + f_size]
            name = FEATURE_NAMES.get(bit, f"feature_{bit}")
            if name in ("hostname", "osrelease", "version", "arch", "cpudesc", "cpuid"):
                n, = struct.unpack_from("<I", data)
                out[name] = _cstr(data[4:4 + n])
            elif name == "nrcpus":
                out[name] = dict(zip(("online", "available"), struct.unpack_from("<II", data)))
            elif name == "cmdline":
                count, = struct.unpack_from("<I", data)
                args, p = [], 4
                for _ in range(count):
                    n, = struct.unpack_from("<I", data, p)
                    args.append(_cstr(data[p + 4:p + 4 + n]))
                    p += 4 + n
                out[name] = args
            elif name == "build_id":
                out[name] = self._build_ids(data)
            else:
                out[name] = {"offset": f_off, "size": f_size}
        return out

    @staticmethod
    def _build_ids(data: bytes) -> list[dict]:
        """perf_record_header_build_id records: header, pid, build_id[24]
        ({20 data, u8 size} when misc has PERF_RECORD_MISC_BUILD_ID_SIZE), filename."""
        out, p = [], 0
        while p + 8 <= len(data):
            _, misc, size = EVENT_HEADER.unpack_from(data, p)
            if size < 36:
                break
            pid, = struct.unpack_from("<i", data, p + 8)
            raw_id = data[p + 12:p + 36]
            n = raw_id[20] if misc & (1 << 15) else 20
            out.append({"pid": pid, "build_id": raw_id[:n].hex(),
                        "filename": _cstr(data[p + 36:p + size])})
            p += size
        return out

    def _attr_for(self, rec_id: int | None) -> PerfEventAttr:
        if rec_id is not None:
            for attr in self.attrs:
                if rec_id in attr.ids:
                    return attr
        return self.attrs[0]

    def _read_data(self) -> None:
        raw = self.raw
        pos, end = self.data_offset, self.data_offset + self.data_size
        # every event of one perf session shares sample_type's id trailer layout
        sample_type = self.attrs[0].sample_type
        id_all = self.attrs[0].sample_id_all
        while pos + EVENT_HEADER.size <= end:
            rtype, misc, size = EVENT_HEADER.unpack_from(raw, pos)
            if size < EVENT_HEADER.size or pos + size > end:
                raise PerfDataError(f"{self.path}: bad record at byte {pos} (size {size})")
            body = raw[pos + EVENT_HEADER.size:pos + size]
            rec = parse_record(rtype, misc, body, sample_type, id_all)
            rec["file_offset"] = pos
            self.records.append(rec)
            if rtype < 64 and rtype not in (SAMPLE, FINISHED_ROUND):
                self.sideband += raw[pos:pos + size]
            pos += size
            if rtype == AUXTRACE:
                payload = raw[pos:pos + rec["size"]]
                if len(payload) < rec["size"]:
                    raise PerfDataError(f"{self.path}: AUXTRACE at byte {rec['file_offset']} "
                                        f"promises {rec['size']} bytes, {len(payload)} follow")
                self.aux.append((rec, payload))
                pos += rec["size"]

    # -- what a bundle needs -------------------------------------------------------------

    def intel_pt_info(self) -> dict | None:
        for rec in self.records:
            if rec["type"] == "AUXTRACE_INFO" and "intel_pt" in rec:
                return rec["intel_pt"]
        return None

    def intel_pt_attr(self) -> PerfEventAttr | None:
        info = self.intel_pt_info()
        if info is None:
            return None
        for attr in self.attrs:
            if attr.type == info["pmu_type"]:
                return attr
        return None

    def cpu(self) -> dict:
        """From the CPUID feature ("GenuineIntel,6,85,4"), else family/model 0."""
        text = self.features.get("cpuid", "")
        parts = text.split(",")
        cpu = {"vendor": parts[0] if parts and parts[0] else "unknown", "family": 0,
               "model": 0, "stepping": 0, "model_name": self.features.get("cpudesc", "")}
        for key, value in zip(("family", "model", "stepping"), parts[1:4]):
            try:
                cpu[key] = int(value, 0)
            except ValueError:
                pass
        return cpu

    def event_names(self) -> list[str]:
        names = {0: "hardware", 1: "software", 2: "tracepoint", 3: "hw-cache", 4: "raw",
                 5: "breakpoint"}
        return [names.get(a.type, f"pmu type {a.type}") + f"/config={a.config:#x}"
                for a in self.attrs]


def to_bundle(perf: PerfData, output: str, *, copy_images: bool = True,
              sysroot: str | None = None, log=lambda msg: None) -> dict:
    """Write the Intel PT recording in `perf` as a bundle at `output`; returns
    the manifest. Raises PerfDataError when the file holds no Intel PT data."""
    from adapter.capture.bundle import BundleWriter
    info = perf.intel_pt_info()
    if info is None or not perf.aux:
        raise PerfDataError(f"{perf.path} holds no Intel PT trace (its events: "
                            f"{', '.join(perf.event_names())}); record one with "
                            "`perf record -e intel_pt//u -- PROGRAM`")
    attr = perf.intel_pt_attr()
    config = attr.config if attr is not None else 0
    timing = {
        "tsc_hz": None, "tsc_source": "the TSC of the recorded CPU",
        "mtc_freq": (config >> 14) & 0xF if config >> info["mtc_bit"] & 1 else None,
        "nom_freq": info.get("max_non_turbo_ratio") or None,
        "cpuid_0x15_eax": info.get("tsc_ctc_ratio_d") or None,
        "cpuid_0x15_ebx": info.get("tsc_ctc_ratio_n") or None,
        "cyc": bool(config >> info["cyc_bit"] & 1) if info.get("cyc_bit") else False,
        "cyc_thresh": (config >> 19) & 0xF,
        "perf_time": {k: info[k] for k in ("time_shift", "time_mult", "time_zero")},
    }
    if timing["nom_freq"]:
        timing["tsc_hz"] = timing["nom_freq"] * 100_000_000
    writer = BundleWriter(output, "perf.data", perf.cpu(), timing=timing,
                          command=perf.features.get("cmdline"), copy_images=copy_images)
    warnings: list[str] = []
    problems: list[str] = []
    per_cpu = bool(info.get("per_cpu_mmaps"))
    pid_of: dict[int, int] = {}
    for rec in perf.records:
        if rec["type"] == "COMM":
            writer.add_thread(rec["tid"], rec["pid"], rec["comm"])
            pid_of[rec["tid"]] = rec["pid"]
    for rec, payload in perf.aux:
        key = rec["cpu"] if per_cpu else rec["tid"]
        writer.add_stream_bytes(key, payload, pid=pid_of.get(rec["tid"]),
                                cpu=rec["cpu"] if per_cpu else None)
    build_ids = {b["filename"]: b["build_id"] for b in perf.features.get("build_id", [])}
    seen = set()
    for rec in perf.records:
        if rec["type"] not in ("MMAP", "MMAP2") or not rec.get("executable"):
            continue
        name = rec["filename"]
        key = (rec["addr"], rec["len"], name)
        if key in seen or name.startswith("[kernel") or not name.startswith("/"):
            if name.startswith("[") and not name.startswith("[kernel") and key not in seen:
                warnings.append(f"{name} at {rec['addr']:#x}: its bytes are not in perf.data "
                                "(code there will not decode)")
            seen.add(key)
            continue
        seen.add(key)
        local = os.path.join(sysroot, name.lstrip("/")) if sysroot else name
        if not os.path.isfile(local):
            warnings.append(f"{name} is not on this machine (looked at {local}); use "
                            "--sysroot DIR with a copy of the recorded machine's files")
            continue
        size = min(rec["len"], max(0, os.path.getsize(local) - rec["pgoff"]))
        build_id = rec.get("build_id") or build_ids.get(name)
        local_id = _file_build_id(local)
        if build_id and local_id and build_id != local_id:
            problems.append(f"{local} is not the file that was recorded (build-id "
                            f"{local_id}, recorded {build_id})")
        entry = writer.add_image(local, rec["addr"], rec["pgoff"], size,
                                 build_id=build_id or local_id, pid=rec.get("pid"))
        entry["path"] = name
    # JIT code's names (CPython 3.12+ under -X perf): each process's perf map, from the
    # recorded machine's /tmp (this machine's, or the --sysroot copy), as `perf report` does
    for pid in sorted(set(pid_of.values())):
        warnings += writer.add_perf_map(pid, os.path.join(sysroot or "/", f"tmp/perf-{pid}.map"))
    sample_type = perf.attrs[0].sample_type
    writer.add_sideband("perf.pevent", bytes(perf.sideband), kind="perf-records",
                        sample_type=sample_type, sample_id_all=perf.attrs[0].sample_id_all,
                        **timing["perf_time"])
    lost = [r for r in perf.records if r["type"] in ("LOST", "AUXTRACE_ERROR")]
    truncated = [r for r in perf.records if r["type"] == "AUX" and r.get("truncated")]
    if lost:
        problems.append(f"perf lost data {len(lost)} times (LOST/AUXTRACE_ERROR records)")
    if truncated:
        problems.append(f"the AUX area overflowed {len(truncated)} times (trace gaps; a "
                        "bigger --mmap-pages,AUX size or a filter helps)")
    writer.manifest["warnings"] = warnings
    writer.manifest["stats"] = {"aux_chunks": len(perf.aux),
                                "aux_bytes": sum(len(p) for _, p in perf.aux),
                                "snapshot_mode": bool(info.get("snapshot_mode")),
                                "records": len(perf.records)}
    for w in warnings:
        log(f"warning: {w}")
    return writer.finish("; ".join(problems) if problems else None)


def _file_build_id(path: str) -> str | None:
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    from pt_decoder.image import elf_build_id
    try:
        with open(path, "rb") as f:
            return elf_build_id(ELFFile(f))
    except (OSError, ELFError):
        return None

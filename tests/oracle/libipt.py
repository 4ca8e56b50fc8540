"""The project's own ctypes binding to Debian's libipt 2.0.5, the reference decoder.

Layer: tests only (differential oracle). ptdebug's decoder never imports it.

What it offers, in plain Python values so tests compare dicts and lists:
  available() / version()                 is libipt.so.2 here, which version
  libipt_packets(buf, ...) -> [dict]      pt_pkt_* (sync, next; resync after errors)
  libipt_encode(packets) -> bytes         pt_enc_next over the same dicts
  libipt_insns(buf, images, ...) -> [dict]  pt_insn_* over a pt_image (+ events, time)
  libipt_blocks(buf, images, ...) -> [dict] pt_blk_* likewise
  Section(...)                            one image section (a file or bytes at a vaddr)

Packet dicts: {"kind": libipt's ptdump name ("tip.pge", "tnt.8", ...), "offset", "size",
<fields named as in intel-pt.h's struct pt_packet_*>}; mode packets carry "leaf" ("exec"
or "tsx"). Decoding errors appear in the list as {"kind": "error", "offset", "code"}
(code = positive pte_* number), after which decoding continues at the next PSB as
ptdump does.

ABI notes (x86-64, GCC; tests/oracle/test_oracle_self.py checks each against a C probe
compiled with the real header):
  * pt_config_init() and pt_asid_init() are `static inline`; done here by hand.
  * Every *_next/*_event call takes the caller's struct size.
  * GCC packs a `uint32_t x:1` after a uint8_t into the same 4-byte unit (pt_packet_ptw.ip
    is bit 0 of byte 9, pt_packet_pwre.hw of byte 2, pt_block.speculative of byte 46); ctypes
    would start a new unit. So the unions are raw byte arrays here, and each field is read
    and written with struct at the offset the probe confirms (_PKT_FIELDS, _EV_FIELDS).
  * pt_insn_next()/pt_blk_next() may return an error that follows a valid instruction; the
    struct is zeroed first and kept if its iclass is not ptic_error.
  * pt_cpu_errata() answers -pte_bad_cpu for models it does not know: not an error.
"""
from __future__ import annotations

import ctypes as C
import dataclasses
import functools
import os
import struct
import tempfile
from collections.abc import Iterable, Sequence

LIBRARY = "libipt.so.2"

u8, u16, u32, u64 = C.c_uint8, C.c_uint16, C.c_uint32, C.c_uint64
PTR = C.c_void_p

# enum pt_error_code values this module acts on
PTE_NOSYNC, PTE_BAD_OPC, PTE_BAD_PACKET, PTE_EOS, PTE_BAD_CPU = 3, 4, 5, 7, 27
# enum pt_status_flag
PTS_EVENT_PENDING, PTS_IP_SUPPRESSED, PTS_EOS = 1, 2, 4

# enum pt_packet_type, in order, named as ptdump prints them.
PACKET_NAMES = ("invalid", "unknown", "pad", "psb", "psbend", "fup", "tip", "tip.pge",
                "tip.pgd", "tnt.8", "tnt.64", "mode", "pip", "vmcs", "cbr", "tsc", "tma",
                "mtc", "cyc", "stop", "ovf", "mnt", "exstop", "mwait", "pwre", "pwrx", "ptw")
PACKET_TYPE = {name: i for i, name in enumerate(PACKET_NAMES)}
MODE_LEAF = {"exec": 0x00, "tsx": 0x20}
INSN_CLASSES = ("error", "other", "call", "return", "jump", "cond_jump", "far_call",
                "far_return", "far_jump", "ptwrite")
EXEC_MODES = ("unknown", "16bit", "32bit", "64bit")
EVENT_NAMES = ("enabled", "disabled", "async_disabled", "async_branch", "paging",
               "async_paging", "overflow", "exec_mode", "tsx", "stop", "vmcs", "async_vmcs",
               "exstop", "mwait", "pwre", "pwrx", "ptwrite", "tick", "cbr", "mnt")

# --- field layouts inside the 16-byte payload union of struct pt_packet -------------------
# (name, byte offset, struct format or ("bit", n) for bit n of the byte at that offset)
_IP = (("ipc", 0, "<i"), ("ip", 8, "<Q"))
_PKT_FIELDS: dict[str, tuple] = {
    "tnt.8": (("bit_size", 0, "<B"), ("payload", 8, "<Q")),
    "tnt.64": (("bit_size", 0, "<B"), ("payload", 8, "<Q")),
    "fup": _IP, "tip": _IP, "tip.pge": _IP, "tip.pgd": _IP,
    "pip": (("cr3", 0, "<Q"), ("nr", 8, ("bit", 0))),
    "tsc": (("tsc", 0, "<Q"),),
    "cbr": (("ratio", 0, "<B"),),
    "tma": (("ctc", 0, "<H"), ("fc", 2, "<H")),
    "mtc": (("ctc", 0, "<B"),),
    "cyc": (("value", 0, "<Q"),),
    "vmcs": (("base", 0, "<Q"),),
    "mnt": (("payload", 0, "<Q"),),
    "exstop": (("ip", 0, ("bit", 0)),),
    "mwait": (("hints", 0, "<I"), ("ext", 4, "<I")),
    "pwre": (("state", 0, "<B"), ("sub_state", 1, "<B"), ("hw", 2, ("bit", 0))),
    "pwrx": (("last", 0, "<B"), ("deepest", 1, "<B"), ("interrupt", 2, ("bit", 0)),
             ("store", 2, ("bit", 1)), ("autonomous", 2, ("bit", 2))),
    "ptw": (("payload", 0, "<Q"), ("plc", 8, "<B"), ("ip", 9, ("bit", 0))),
}
_MODE_BITS = {"exec": ("csl", "csd"), "tsx": ("intx", "abrt")}

# --- field layouts inside the 24-byte variant union of struct pt_event ---------------------
_EV_FIELDS: dict[str, tuple] = {
    "enabled": (("ip", 0, "<Q"), ("resumed", 8, ("bit", 0))),
    "disabled": (("ip", 0, "<Q"),),
    "async_disabled": (("at", 0, "<Q"), ("ip", 8, "<Q")),
    "async_branch": (("from", 0, "<Q"), ("to", 8, "<Q")),
    "paging": (("cr3", 0, "<Q"), ("non_root", 8, ("bit", 0))),
    "async_paging": (("cr3", 0, "<Q"), ("non_root", 8, ("bit", 0)), ("ip", 16, "<Q")),
    "overflow": (("ip", 0, "<Q"),),
    "exec_mode": (("mode", 0, "<i"), ("ip", 8, "<Q")),
    "tsx": (("ip", 0, "<Q"), ("speculative", 8, ("bit", 0)), ("aborted", 8, ("bit", 1))),
    "stop": (),
    "vmcs": (("base", 0, "<Q"),),
    "async_vmcs": (("base", 0, "<Q"), ("ip", 8, "<Q")),
    "exstop": (("ip", 0, "<Q"),),
    "mwait": (("ip", 0, "<Q"), ("hints", 8, "<I"), ("ext", 12, "<I")),
    "pwre": (("state", 0, "<B"), ("sub_state", 1, "<B"), ("hw", 2, ("bit", 0))),
    "pwrx": (("last", 0, "<B"), ("deepest", 1, "<B"), ("interrupt", 2, ("bit", 0)),
             ("store", 2, ("bit", 1)), ("autonomous", 2, ("bit", 2))),
    "ptwrite": (("ip", 0, "<Q"), ("size", 8, "<B"), ("payload", 16, "<Q")),
    "tick": (("ip", 0, "<Q"),),
    "cbr": (("ratio", 0, "<H"),),
    "mnt": (("payload", 0, "<Q"),),
}


def _read_fields(raw: bytes, layout: Iterable[tuple]) -> dict:
    out = {}
    for name, off, fmt in layout:
        if isinstance(fmt, tuple):
            out[name] = (raw[off] >> fmt[1]) & 1
        else:
            out[name] = struct.unpack_from(fmt, raw, off)[0]
    return out


def _write_fields(raw: bytearray, layout: Iterable[tuple], values: dict) -> None:
    for name, off, fmt in layout:
        value = int(values.get(name, 0))
        if isinstance(fmt, tuple):
            if value:
                raw[off] |= 1 << fmt[1]
        else:
            struct.pack_into(fmt, raw, off, value)


# --- ctypes structures (only layouts without GCC bit-field packing snags) -----------------
class PtCpu(C.Structure):
    _fields_ = [("vendor", C.c_int), ("family", u16), ("model", u8), ("stepping", u8)]


class PtConfig(C.Structure):
    _fields_ = [("size", C.c_size_t), ("begin", PTR), ("end", PTR),
                ("decode_callback", PTR), ("decode_context", PTR),
                ("cpu", PtCpu), ("errata", u32 * 16),
                ("cpuid_0x15_eax", u32), ("cpuid_0x15_ebx", u32),
                ("mtc_freq", u8), ("nom_freq", u8),
                ("flags", u32 * 4),                  # union pt_conf_flags.variant
                ("addr_cfg", u64), ("addr", u64 * 8), ("addr_reserved", u64 * 8)]


class PtPacket(C.Structure):
    # The union holds uint64_t members, so it is 8-aligned: payload at offset 8.
    _fields_ = [("type", C.c_int), ("size", u8), ("payload", u64 * 2)]


class PtAsid(C.Structure):
    _fields_ = [("size", C.c_size_t), ("cr3", u64), ("vmcs", u64)]


class PtInsn(C.Structure):
    _fields_ = [("ip", u64), ("isid", C.c_int), ("mode", C.c_int), ("iclass", C.c_int),
                ("raw", u8 * 15), ("size", u8), ("flags", u8), ("_pad", u8 * 3)]


class PtBlock(C.Structure):
    _fields_ = [("ip", u64), ("end_ip", u64), ("isid", C.c_int), ("mode", C.c_int),
                ("iclass", C.c_int), ("ninsn", u16), ("raw", u8 * 15), ("size", u8),
                ("flags", u8), ("_pad", u8)]


class PtEvent(C.Structure):
    _fields_ = [("type", C.c_int), ("flags", u32), ("tsc", u64), ("lost_mtc", u32),
                ("lost_cyc", u32), ("reserved", u64 * 2), ("variant", u8 * 24)]


class PtVersion(C.Structure):
    _fields_ = [("major", u8), ("minor", u8), ("patch", u16), ("build", u32),
                ("ext", C.c_char_p)]


# Sizes and offsets the GCC probe must confirm (test_oracle_self.py).
EXPECTED_LAYOUT = {
    "sizeof(struct pt_config)": C.sizeof(PtConfig),
    "offsetof(struct pt_config, cpu)": PtConfig.cpu.offset,
    "offsetof(struct pt_config, errata)": PtConfig.errata.offset,
    "offsetof(struct pt_config, cpuid_0x15_eax)": PtConfig.cpuid_0x15_eax.offset,
    "offsetof(struct pt_config, mtc_freq)": PtConfig.mtc_freq.offset,
    "offsetof(struct pt_config, nom_freq)": PtConfig.nom_freq.offset,
    "offsetof(struct pt_config, flags)": PtConfig.flags.offset,
    "offsetof(struct pt_config, addr_filter)": PtConfig.addr_cfg.offset,
    "sizeof(struct pt_packet)": C.sizeof(PtPacket),
    "offsetof(struct pt_packet, payload)": PtPacket.payload.offset,
    "sizeof(struct pt_asid)": C.sizeof(PtAsid),
    "sizeof(struct pt_insn)": C.sizeof(PtInsn),
    "offsetof(struct pt_insn, size)": PtInsn.size.offset,
    "sizeof(struct pt_block)": C.sizeof(PtBlock),
    "offsetof(struct pt_block, ninsn)": PtBlock.ninsn.offset,
    "offsetof(struct pt_block, size)": PtBlock.size.offset,
    "sizeof(struct pt_event)": C.sizeof(PtEvent),
    "offsetof(struct pt_event, tsc)": PtEvent.tsc.offset,
    "offsetof(struct pt_event, variant)": PtEvent.variant.offset,
}
# Bit-field positions: (C lvalue to set to 1, struct, byte offset, bit) -- probe-checked.
EXPECTED_BITS = [
    ("insn.speculative", "struct pt_insn", PtInsn.flags.offset, 0),
    ("insn.truncated", "struct pt_insn", PtInsn.flags.offset, 1),
    ("block.speculative", "struct pt_block", PtBlock.flags.offset, 0),
    ("block.truncated", "struct pt_block", PtBlock.flags.offset, 1),
    ("event.ip_suppressed", "struct pt_event", PtEvent.flags.offset, 0),
    ("event.status_update", "struct pt_event", PtEvent.flags.offset, 1),
    ("event.has_tsc", "struct pt_event", PtEvent.flags.offset, 2),
]
for _kind, _layout in _PKT_FIELDS.items():
    for _name, _off, _fmt in _layout:
        if isinstance(_fmt, tuple):
            _member = {"exstop": "exstop", "pip": "pip", "pwre": "pwre", "pwrx": "pwrx",
                       "ptw": "ptw"}[_kind]
            EXPECTED_BITS.append((f"packet.payload.{_member}.{_name}", "struct pt_packet",
                                  PtPacket.payload.offset + _off, _fmt[1]))
for _kind, _layout in _EV_FIELDS.items():
    for _name, _off, _fmt in _layout:
        if isinstance(_fmt, tuple):
            EXPECTED_BITS.append((f"event.variant.{_kind}.{_name}", "struct pt_event",
                                  PtEvent.variant.offset + _off, _fmt[1]))
EXPECTED_BITS += [
    ("packet.payload.mode.bits.exec.csl", "struct pt_packet", PtPacket.payload.offset + 4, 0),
    ("packet.payload.mode.bits.exec.csd", "struct pt_packet", PtPacket.payload.offset + 4, 1),
    ("packet.payload.mode.bits.tsx.intx", "struct pt_packet", PtPacket.payload.offset + 4, 0),
    ("packet.payload.mode.bits.tsx.abrt", "struct pt_packet", PtPacket.payload.offset + 4, 1),
]


# --- loading -------------------------------------------------------------------------------
_SIGNATURES = {
    "pt_library_version": (PtVersion, []),
    "pt_errstr": (C.c_char_p, [C.c_int]),
    "pt_cpu_errata": (C.c_int, [PTR, C.POINTER(PtCpu)]),
    "pt_alloc_encoder": (PTR, [C.POINTER(PtConfig)]),
    "pt_free_encoder": (None, [PTR]),
    "pt_enc_next": (C.c_int, [PTR, C.POINTER(PtPacket)]),
    "pt_enc_get_offset": (C.c_int, [PTR, C.POINTER(u64)]),
    "pt_pkt_alloc_decoder": (PTR, [C.POINTER(PtConfig)]),
    "pt_pkt_free_decoder": (None, [PTR]),
    "pt_pkt_sync_forward": (C.c_int, [PTR]),
    "pt_pkt_sync_backward": (C.c_int, [PTR]),
    "pt_pkt_sync_set": (C.c_int, [PTR, u64]),
    "pt_pkt_get_offset": (C.c_int, [PTR, C.POINTER(u64)]),
    "pt_pkt_get_sync_offset": (C.c_int, [PTR, C.POINTER(u64)]),
    "pt_pkt_next": (C.c_int, [PTR, C.POINTER(PtPacket), C.c_size_t]),
    "pt_image_alloc": (PTR, [C.c_char_p]),
    "pt_image_free": (None, [PTR]),
    "pt_image_add_file": (C.c_int, [PTR, C.c_char_p, u64, u64, C.POINTER(PtAsid), u64]),
    "pt_image_add_cached": (C.c_int, [PTR, PTR, C.c_int, C.POINTER(PtAsid)]),
    "pt_iscache_alloc": (PTR, [C.c_char_p]),
    "pt_iscache_free": (None, [PTR]),
    "pt_iscache_add_file": (C.c_int, [PTR, C.c_char_p, u64, u64, u64]),
}
for _lyr, _item in (("insn", PtInsn), ("blk", PtBlock)):
    _SIGNATURES.update({
        f"pt_{_lyr}_alloc_decoder": (PTR, [C.POINTER(PtConfig)]),
        f"pt_{_lyr}_free_decoder": (None, [PTR]),
        f"pt_{_lyr}_set_image": (C.c_int, [PTR, PTR]),
        f"pt_{_lyr}_sync_forward": (C.c_int, [PTR]),
        f"pt_{_lyr}_get_offset": (C.c_int, [PTR, C.POINTER(u64)]),
        f"pt_{_lyr}_next": (C.c_int, [PTR, C.POINTER(_item), C.c_size_t]),
        f"pt_{_lyr}_event": (C.c_int, [PTR, C.POINTER(PtEvent), C.c_size_t]),
        f"pt_{_lyr}_time": (C.c_int, [PTR, C.POINTER(u64), C.POINTER(u32), C.POINTER(u32)]),
        f"pt_{_lyr}_core_bus_ratio": (C.c_int, [PTR, C.POINTER(u32)]),
    })


class LibiptError(RuntimeError):
    """A libipt call failed where the oracle cannot continue (not a trace error)."""

    def __init__(self, what: str, code: int):
        self.code = abs(code)
        super().__init__(f"{what}: {errstr(code)} (-{self.code})")


@functools.lru_cache(maxsize=1)
def _lib() -> C.CDLL:
    lib = C.CDLL(LIBRARY)
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


def available() -> bool:
    """True if libipt.so.2 (2.0.x) loads here."""
    try:
        return _lib().pt_library_version().major == 2
    except OSError:
        return False


def require() -> None:
    """Raise RuntimeError saying how to install libipt if it does not load (the tests that
    compare against it fail loudly rather than skip: scripts/bootstrap.sh installs it)."""
    if not available():
        raise RuntimeError(f"{LIBRARY} (libipt 2.0.x) does not load here: "
                           "scripts/bootstrap.sh installs Debian's libipt2 and libipt-dev")


def version() -> str:
    v = _lib().pt_library_version()
    return f"{v.major}.{v.minor}.{v.patch}"


def errstr(code: int) -> str:
    return _lib().pt_errstr(abs(code)).decode()


def _check(rc: int, what: str) -> int:
    if rc < 0:
        raise LibiptError(what, rc)
    return rc


# --- configuration -------------------------------------------------------------------------
@dataclasses.dataclass
class TraceConfig:
    """What pt_config carries besides the buffer: CPU (for errata) and timing parameters."""
    cpu: tuple[int, int, int] | None = None     # (family, model, stepping); None = no errata
    mtc_freq: int = 0
    nom_freq: int = 0
    cpuid_0x15: tuple[int, int] = (0, 0)        # (eax, ebx)


def parse_cpu(text: str | tuple | None) -> tuple[int, int, int] | None:
    """'6/79/1', '6/0x4e' or a tuple -> (family, model, stepping)."""
    if text is None or isinstance(text, tuple):
        return text
    parts = [int(p, 0) for p in text.split("/")]
    if len(parts) not in (2, 3):
        raise ValueError(f"cpu must be FAMILY/MODEL[/STEPPING], got {text!r}")
    return (parts[0], parts[1], parts[2] if len(parts) == 3 else 0)


class _Buffer:
    """A trace copied into C memory and the pt_config that points at it."""

    def __init__(self, data: bytes | bytearray | memoryview, config: TraceConfig | None,
                 capacity: int | None = None):
        data = bytes(data)
        size = max(capacity or len(data), 1)
        self.array = (u8 * size).from_buffer_copy(data.ljust(size, b"\0"))
        self.config = make_config(config or TraceConfig(), C.addressof(self.array),
                                  capacity or len(data))


def make_config(tc: TraceConfig, begin: int, size: int) -> PtConfig:
    """pt_config_init() (static inline in intel-pt.h) + cpu, errata and timing fields."""
    cfg = PtConfig()
    cfg.size = C.sizeof(PtConfig)
    cfg.begin, cfg.end = begin, begin + size
    if tc.cpu is not None:
        cfg.cpu.vendor = 1                                  # pcv_intel
        cfg.cpu.family, cfg.cpu.model, cfg.cpu.stepping = tc.cpu
        rc = _lib().pt_cpu_errata(C.addressof(cfg) + PtConfig.errata.offset, C.byref(cfg.cpu))
        if rc < 0 and -rc != PTE_BAD_CPU:                   # unknown model: no errata, fine
            _check(rc, "pt_cpu_errata")
    # a bundle without MTC (the DBI recorder's: TSC only) gives None: libipt's 0, "unknown"
    cfg.mtc_freq, cfg.nom_freq = tc.mtc_freq or 0, tc.nom_freq or 0
    cfg.cpuid_0x15_eax, cfg.cpuid_0x15_ebx = (v or 0 for v in tc.cpuid_0x15)
    return cfg


def _config(cpu, mtc_freq, nom_freq, cpuid_0x15) -> TraceConfig:
    return TraceConfig(parse_cpu(cpu), mtc_freq, nom_freq, tuple(cpuid_0x15))


# --- packets -------------------------------------------------------------------------------
def packet_to_dict(pkt: PtPacket, offset: int) -> dict:
    kind = PACKET_NAMES[pkt.type] if 0 <= pkt.type < len(PACKET_NAMES) else str(pkt.type)
    raw = bytes(pkt.payload)
    out = {"kind": kind, "offset": offset, "size": pkt.size}
    if kind == "mode":
        leaf = struct.unpack_from("<i", raw, 0)[0]
        bits = raw[4]
        name = "exec" if leaf == MODE_LEAF["exec"] else "tsx" if leaf == MODE_LEAF["tsx"] else leaf
        out["leaf"] = name
        for i, field in enumerate(_MODE_BITS.get(name, ())):
            out[field] = (bits >> i) & 1
    else:
        out.update(_read_fields(raw, _PKT_FIELDS.get(kind, ())))
    return out


def dict_to_packet(d: dict) -> PtPacket:
    pkt = PtPacket()
    kind = d["kind"]
    pkt.type = PACKET_TYPE[kind]
    raw = bytearray(16)
    if kind == "mode":
        leaf = d.get("leaf", "exec")
        struct.pack_into("<i", raw, 0, MODE_LEAF[leaf])
        for i, field in enumerate(_MODE_BITS[leaf]):
            if d.get(field):
                raw[4] |= 1 << i
    else:
        _write_fields(raw, _PKT_FIELDS.get(kind, ()), d)
    C.memmove(C.addressof(pkt) + PtPacket.payload.offset, bytes(raw), 16)
    return pkt


class PacketDecoder:
    """pt_pkt_* over a private copy of `data`; methods return libipt's status codes."""

    def __init__(self, data, cpu=None, mtc_freq=0, nom_freq=0, cpuid_0x15=(0, 0)):
        self._buf = _Buffer(data, _config(cpu, mtc_freq, nom_freq, cpuid_0x15))
        self._lib = _lib()
        self._dec = self._lib.pt_pkt_alloc_decoder(C.byref(self._buf.config))
        if not self._dec:
            raise LibiptError("pt_pkt_alloc_decoder", -1)

    def close(self) -> None:
        if self._dec:
            self._lib.pt_pkt_free_decoder(self._dec)
            self._dec = None

    __del__ = close

    def sync_forward(self) -> int:
        return self._lib.pt_pkt_sync_forward(self._dec)

    def sync_backward(self) -> int:
        return self._lib.pt_pkt_sync_backward(self._dec)

    def sync_set(self, offset: int) -> int:
        return self._lib.pt_pkt_sync_set(self._dec, offset)

    def offset(self) -> int | None:
        off = u64()
        return off.value if self._lib.pt_pkt_get_offset(self._dec, C.byref(off)) >= 0 else None

    def sync_offset(self) -> int | None:
        off = u64()
        rc = self._lib.pt_pkt_get_sync_offset(self._dec, C.byref(off))
        return off.value if rc >= 0 else None

    def next(self) -> tuple[int, dict | None]:
        """(status, packet dict) -- status < 0 is -pte_* and the dict is None."""
        offset = self.offset()
        pkt = PtPacket()
        rc = self._lib.pt_pkt_next(self._dec, C.byref(pkt), C.sizeof(PtPacket))
        if rc < 0:
            return rc, None
        return rc, packet_to_dict(pkt, offset)


def libipt_packets(buf, cpu=None, *, mtc_freq=0, nom_freq=0, cpuid_0x15=(0, 0),
                   sync: bool = True, limit: int | None = None) -> list[dict]:
    """Every packet libipt's packet decoder reads from `buf`, in order.

    sync=True starts at the first PSB (as ptdump does); sync=False decodes from offset 0.
    A decoding error is recorded as {"kind": "error", "offset", "code"} and decoding
    continues at the next PSB; the list ends at the end of the buffer."""
    dec = PacketDecoder(buf, cpu, mtc_freq, nom_freq, cpuid_0x15)
    out: list[dict] = []
    seen: set[tuple] = set()
    try:
        rc = dec.sync_forward() if sync else dec.sync_set(0)
        while rc >= 0 and (limit is None or len(out) < limit):
            offset = dec.offset()
            rc, pkt = dec.next()
            if rc >= 0:
                out.append(pkt)
                continue
            if rc == -PTE_EOS:
                break
            out.append({"kind": "error", "offset": offset, "code": -rc})
            rc = dec.sync_forward()       # as ptdump: may find a PSB the bad packet overlapped
            if rc >= 0 and (dec.sync_offset(), offset) in seen:
                break                     # would decode the same failure again
            seen.add((dec.sync_offset(), offset))
    finally:
        dec.close()
    return out


def libipt_encode(packets: Sequence[dict], capacity: int | None = None) -> bytes:
    """The bytes pt_enc_next writes for `packets` (dicts shaped as libipt_packets returns).

    Raises LibiptError naming the packet if libipt refuses one."""
    need = capacity or (sum(_max_size(p) for p in packets) + 16)
    buf = _Buffer(b"", None, capacity=need)
    lib = _lib()
    enc = lib.pt_alloc_encoder(C.byref(buf.config))
    if not enc:
        raise LibiptError("pt_alloc_encoder", -1)
    try:
        for i, d in enumerate(packets):
            pkt = dict_to_packet(d)
            _check(lib.pt_enc_next(enc, C.byref(pkt)), f"pt_enc_next(#{i} {d})")
        end = u64()
        _check(lib.pt_enc_get_offset(enc, C.byref(end)), "pt_enc_get_offset")
        return bytes(buf.array[:end.value])
    finally:
        lib.pt_free_encoder(enc)


def _max_size(d: dict) -> int:
    return 16 if d.get("kind") == "psb" else 15


# --- images --------------------------------------------------------------------------------
@dataclasses.dataclass
class Section:
    """Code mapped at `vaddr`: `size` bytes of `source` (a file path or bytes) from `offset`."""
    source: str | os.PathLike | bytes
    vaddr: int
    offset: int = 0
    size: int | None = None


def elf_sections(path: str | os.PathLike, base: int = 0) -> list[Section]:
    """The executable PT_LOAD segments of an ELF, mapped at p_vaddr + base."""
    from elftools.elf.elffile import ELFFile
    out = []
    with open(path, "rb") as fh:
        for seg in ELFFile(fh).iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1:
                out.append(Section(os.fspath(path), seg["p_vaddr"] + base, seg["p_offset"],
                                   seg["p_filesz"]))
    return out


class _Image:
    """pt_image (optionally through a pt_image_section_cache) over `sections` (Section
    objects or tuples (source, vaddr[, offset[, size]]))."""

    def __init__(self, sections: Sequence[Section | tuple], cached: bool):
        lib = self._lib = _lib()
        self._tmp = tempfile.TemporaryDirectory(prefix="ptdebug-oracle-")
        self.image = lib.pt_image_alloc(b"oracle")
        self.iscache = lib.pt_iscache_alloc(b"oracle") if cached else None
        asid = PtAsid(C.sizeof(PtAsid), 2**64 - 1, 2**64 - 1)     # pt_asid_init()
        for n, sec in enumerate(sections):
            if not isinstance(sec, Section):
                sec = Section(*sec)
            path = sec.source
            if isinstance(path, (bytes, bytearray)):
                path = os.path.join(self._tmp.name, f"section{n}.bin")
                with open(path, "wb") as fh:
                    fh.write(sec.source)
            path_b = os.fsencode(path)
            size = sec.size if sec.size is not None else os.path.getsize(path) - sec.offset
            if cached:
                isid = _check(lib.pt_iscache_add_file(self.iscache, path_b, sec.offset, size,
                                                      sec.vaddr), f"pt_iscache_add_file({path})")
                _check(lib.pt_image_add_cached(self.image, self.iscache, isid, C.byref(asid)),
                       "pt_image_add_cached")
            else:
                _check(lib.pt_image_add_file(self.image, path_b, sec.offset, size,
                                             C.byref(asid), sec.vaddr),
                       f"pt_image_add_file({path})")

    def close(self) -> None:
        if self.image:
            self._lib.pt_image_free(self.image)
            self.image = None
        if self.iscache:
            self._lib.pt_iscache_free(self.iscache)
            self.iscache = None
        self._tmp.cleanup()


# --- instruction and block flow ------------------------------------------------------------
def event_to_dict(ev: PtEvent) -> dict:
    name = EVENT_NAMES[ev.type] if 0 <= ev.type < len(EVENT_NAMES) else str(ev.type)
    out = {"type": "event", "event": name, "ip_suppressed": ev.flags & 1,
           "status_update": (ev.flags >> 1) & 1}
    if (ev.flags >> 2) & 1:
        out["tsc"] = ev.tsc
        out["lost_mtc"], out["lost_cyc"] = ev.lost_mtc, ev.lost_cyc
    out.update(_read_fields(bytes(ev.variant), _EV_FIELDS.get(name, ())))
    if name == "exec_mode":
        out["mode"] = EXEC_MODES[out["mode"]] if 0 <= out["mode"] < 4 else out["mode"]
    return out


def _flow(layer: str, buf, images: Sequence[Section], cpu, mtc_freq, nom_freq, cpuid_0x15,
          cached: bool, time: bool, limit: int | None) -> list[dict]:
    lib = _lib()
    item_type = PtInsn if layer == "insn" else PtBlock
    fn = {name: getattr(lib, f"pt_{layer}_{name}") for name in
          ("alloc_decoder", "free_decoder", "set_image", "sync_forward", "get_offset",
           "next", "event", "time", "core_bus_ratio")}
    data = _Buffer(buf, _config(cpu, mtc_freq, nom_freq, cpuid_0x15))
    image = _Image(images, cached)
    dec = fn["alloc_decoder"](C.byref(data.config))
    if not dec:
        image.close()
        raise LibiptError(f"pt_{layer}_alloc_decoder", -1)
    out: list[dict] = []

    def offset() -> int:
        off = u64()
        fn["get_offset"](dec, C.byref(off))
        return off.value

    def stamp(record: dict) -> None:
        tsc, lost_mtc, lost_cyc, cbr = u64(), u32(), u32(), u32()
        if fn["time"](dec, C.byref(tsc), C.byref(lost_mtc), C.byref(lost_cyc)) >= 0:
            record.update(tsc=tsc.value, lost_mtc=lost_mtc.value, lost_cyc=lost_cyc.value)
        if fn["core_bus_ratio"](dec, C.byref(cbr)) >= 0:
            record["cbr"] = cbr.value

    try:
        _check(fn["set_image"](dec, image.image), f"pt_{layer}_set_image")
        status = fn["sync_forward"](dec)
        while status != -PTE_EOS and (limit is None or len(out) < limit):
            if status < 0:
                out.append({"type": "error", "offset": offset(), "code": -status})
                status = fn["sync_forward"](dec)
                continue
            while status >= 0 and status & PTS_EVENT_PENDING:
                ev = PtEvent()
                status = fn["event"](dec, C.byref(ev), C.sizeof(PtEvent))
                if status >= 0:
                    out.append(event_to_dict(ev))
            if status < 0:
                continue
            if status & PTS_EOS:
                out.append({"type": "eos", "offset": offset()})
                status = fn["sync_forward"](dec)
                continue
            item = item_type()
            status = fn["next"](dec, C.byref(item), C.sizeof(item_type))
            if item.iclass == 0 and not (layer == "blk" and item.ninsn):
                continue                      # no item came with this status
            rec = {"type": layer, "ip": item.ip, "iclass": INSN_CLASSES[item.iclass],
                   "mode": EXEC_MODES[item.mode], "size": item.size,
                   "speculative": item.flags & 1, "truncated": (item.flags >> 1) & 1}
            if layer == "blk":
                rec.update(end_ip=item.end_ip, ninsn=item.ninsn)
            else:
                rec["raw"] = bytes(item.raw[:item.size])
            if time:
                stamp(rec)
            out.append(rec)
    finally:
        fn["free_decoder"](dec)
        image.close()
    return out


def libipt_insns(buf, images: Sequence[Section], cpu=None, *, mtc_freq=0, nom_freq=0,
                 cpuid_0x15=(0, 0), cached: bool = False, time: bool = True,
                 limit: int | None = None) -> list[dict]:
    """libipt's instruction flow of `buf` over `images`, in stream order.

    Records: {"type": "insn", ip, iclass, mode, size, raw, speculative, truncated
    [, tsc, lost_mtc, lost_cyc, cbr]}, {"type": "event", "event": name, ...fields},
    {"type": "error", offset, code} (then resync at the next PSB) and {"type": "eos"}
    where libipt reports pts_eos. cached=True maps the sections through an iscache."""
    return _flow("insn", buf, images, cpu, mtc_freq, nom_freq, cpuid_0x15, cached, time, limit)


def libipt_blocks(buf, images: Sequence[Section], cpu=None, *, mtc_freq=0, nom_freq=0,
                  cpuid_0x15=(0, 0), cached: bool = False, time: bool = True,
                  limit: int | None = None) -> list[dict]:
    """libipt's block flow (pt_blk_*): records as libipt_insns, "type": "blk" with
    ip, end_ip, ninsn, iclass of the last instruction."""
    return _flow("blk", buf, images, cpu, mtc_freq, nom_freq, cpuid_0x15, cached, time, limit)


def ips(records: Iterable[dict]) -> list[int]:
    """The instruction addresses of libipt_insns records, in order."""
    return [r["ip"] for r in records if r["type"] == "insn"]

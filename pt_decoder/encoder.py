"""Intel PT packet encoder: every packet kind of packet.pxd, as the hardware writes it.

Layer: pt_decoder, beside the packet layer (it shares its packet kinds and field
meanings, and never imports the decoders above it nor `adapter`). The ptrace stepper
recorder writes its PT streams with it, FlowEncoder (flow_encoder.py) builds on it, and
the tests use it for round trips (`Encoder().encode(packet)` takes the packets
PacketDecoder returns).

Byte layouts follow the Intel SDM Vol. 3C, chapter "Intel Processor Trace", section
"Trace Packets and Data Types" (one table per packet). Where Debian's libipt 2.0.5
encodes the same packet, the bytes are identical to pt_enc_next's (the property tests in
tests/pt_decoder/test_encoder_vs_libipt.py check it). One known disagreement between the
references: the SDM's PWRE table and perf put PWRE's HW bit at byte 2 bit 7, libipt (2.0.5
and later) at bit 3. Like the packet decoder (_opcodes.pxd PL_PWRE_HW) and the ptdump
expectations, this encoder follows libipt; tests/pt_decoder/test_perf_vectors.py names
the perf vector that differs.

IP packets (TIP, TIP.PGE, TIP.PGD, FUP) compress against the encoder's own last-IP
(SDM "IP Compression"): with ipc=None the smallest valid compression is chosen, in order
update-16, update-32, sext-48, update-48, full. A PSB makes last-IP unknown, so the first
IP after it is sext-48 (canonical addresses) or full. An explicit ipc is honoured as given
and last-IP is updated the way a decoder reconstructs it.

Errors: every method raises ValueError naming the offending field for an argument the
packet cannot carry; nothing is written then.
"""
from __future__ import annotations

import struct

# Packet kinds, the numbers of packet.pxd's `PacketKind` enum (test_encoder checks
# that they equal the decoder's).
PK_INVALID, PK_PAD, PK_PSB, PK_PSBEND, PK_TNT8, PK_TNT64, PK_TIP, PK_TIP_PGE = range(8)
PK_TIP_PGD, PK_FUP, PK_MODE_EXEC, PK_MODE_TSX, PK_PIP, PK_TSC, PK_TMA, PK_MTC = range(8, 16)
PK_CYC, PK_CBR, PK_VMCS, PK_OVF, PK_MNT, PK_STOP, PK_PTW, PK_MWAIT = range(16, 24)
PK_PWRE, PK_PWRX, PK_EXSTOP, PK_BBP, PK_BIP, PK_BEP, PK_CFE, PK_EVD = range(24, 32)
PK_TRIG = 32

# IP compression (the IPBytes field, SDM table "Compressed IP Payload Format").
IPC_SUPPRESSED, IPC_UPDATE_16, IPC_UPDATE_32, IPC_SEXT_48, IPC_UPDATE_48, IPC_FULL = \
    0, 1, 2, 3, 4, 6
IPC_PAYLOAD_BYTES = {0: 0, 1: 2, 2: 4, 3: 6, 4: 6, 6: 8}

PSB_BYTES = b"\x02\x82" * 8
_M64 = (1 << 64) - 1


def _check(name: str, value, bits: int, *, allow_bool: bool = False) -> int:
    """value as an int in [0, 2**bits), else ValueError naming `name`."""
    if isinstance(value, bool) and not allow_bool:
        raise ValueError(f"{name} must be an integer, got {value!r}")
    try:
        v = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be an integer, got {value!r}") from None
    if v != value or not 0 <= v < (1 << bits):
        raise ValueError(f"{name} must fit in {bits} bits (0..{(1 << bits) - 1:#x}), "
                         f"got {value!r}")
    return v


def reconstruct_ip(ipc: int, payload: int, last_ip: int) -> int:
    """The IP a decoder rebuilds from an IP packet's payload and its last-IP (SDM)."""
    if ipc == IPC_UPDATE_16:
        return (last_ip & ~0xFFFF & _M64) | payload
    if ipc == IPC_UPDATE_32:
        return (last_ip & ~0xFFFFFFFF & _M64) | payload
    if ipc == IPC_SEXT_48:
        return payload | (0xFFFF << 48 if payload >> 47 & 1 else 0)
    if ipc == IPC_UPDATE_48:
        return (last_ip & ~0xFFFFFFFFFFFF & _M64) | payload
    return payload


def smallest_ipc(ip: int, last_ip: int | None) -> int:
    """The smallest IP compression that reproduces `ip` against `last_ip` (None: unknown)."""
    if last_ip is not None:
        if (ip ^ last_ip) >> 16 == 0:
            return IPC_UPDATE_16
        if (ip ^ last_ip) >> 32 == 0:
            return IPC_UPDATE_32
    top = ip >> 47
    if top == 0 or top == 0x1FFFF:
        return IPC_SEXT_48
    if last_ip is not None and (ip ^ last_ip) >> 48 == 0:
        return IPC_UPDATE_48
    return IPC_FULL


class Encoder:
    """Writes PT packets into a growing buffer; `getvalue()` returns the stream so far.

    One method per packet kind, plus `encode(packet)` for decoded packets and `raw()` for
    deliberately malformed bytes in tests."""

    def __init__(self) -> None:
        self._out = bytearray()
        self.last_ip: int | None = None
        """Last-IP compression state (None: unknown, as after a PSB)."""
        self.block_item_size: int | None = None
        """BIP payload size in bytes of the open PEBS block (BBP .. BEP), None outside."""

    # ---- buffer ------------------------------------------------------------------------
    @property
    def offset(self) -> int:
        """Bytes written so far = offset of the next packet."""
        return len(self._out)

    def getvalue(self) -> bytes:
        return bytes(self._out)

    def raw(self, data: bytes) -> int:
        """Append bytes as they are (for malformed streams in tests); returns the offset."""
        off = len(self._out)
        self._out += data
        return off

    def _put(self, data: bytes) -> int:
        off = len(self._out)
        self._out += data
        return off

    # ---- synchronisation and padding ---------------------------------------------------
    def pad(self) -> int:
        return self._put(b"\x00")

    def psb(self) -> int:
        """PSB: 16 bytes of 02 82; resets last-IP (the decoder forgets it here too)."""
        self.last_ip = None
        return self._put(PSB_BYTES)

    def psbend(self) -> int:
        return self._put(b"\x02\x23")

    def ovf(self) -> int:
        return self._put(b"\x02\xf3")

    def stop(self) -> int:
        """TraceStop."""
        return self._put(b"\x02\x83")

    # ---- branches ----------------------------------------------------------------------
    def tnt8(self, bits: int, count: int) -> int:
        """Short TNT: `count` (1..6) branch bits, the oldest in bit count-1; 1 = taken."""
        count = _check("count", count, 3)
        if not 1 <= count <= 6:
            raise ValueError(f"count of a TNT-8 must be 1..6, got {count}")
        bits = _check("bits", bits, count)
        return self._put(bytes((((bits << 1) | (1 << (count + 1))) & 0xFF,)))

    def tnt64(self, bits: int, count: int) -> int:
        """Long TNT: `count` (1..47) branch bits, the oldest in bit count-1; 1 = taken."""
        count = _check("count", count, 6)
        if not 1 <= count <= 47:
            raise ValueError(f"count of a TNT-64 must be 1..47, got {count}")
        bits = _check("bits", bits, count)
        return self._put(b"\x02\xa3" + ((1 << count) | bits).to_bytes(6, "little"))

    def _ip_packet(self, opcode: int, ip: int | None, ipc: int | None, what: str) -> int:
        if ip is None:
            if ipc not in (None, IPC_SUPPRESSED):
                raise ValueError(f"{what}: ipc {ipc} needs an ip")
            return self._put(bytes((opcode,)))
        ip = _check(f"{what} ip", ip, 64)
        if ipc is None:
            ipc = smallest_ipc(ip, self.last_ip)
        elif ipc not in IPC_PAYLOAD_BYTES:
            raise ValueError(f"{what}: ipc must be one of 0, 1, 2, 3, 4, 6, got {ipc!r}")
        size = IPC_PAYLOAD_BYTES[ipc]
        payload = ip & ((1 << (8 * size)) - 1)
        if ipc != IPC_SUPPRESSED:
            self.last_ip = reconstruct_ip(ipc, payload, self.last_ip or 0)
        return self._put(bytes((opcode | ipc << 5,)) + payload.to_bytes(size, "little"))

    def tip(self, ip: int | None, ipc: int | None = None) -> int:
        return self._ip_packet(0x0D, ip, ipc, "tip")

    def tip_pge(self, ip: int | None, ipc: int | None = None) -> int:
        return self._ip_packet(0x11, ip, ipc, "tip_pge")

    def tip_pgd(self, ip: int | None = None, ipc: int | None = None) -> int:
        return self._ip_packet(0x01, ip, ipc, "tip_pgd")

    def fup(self, ip: int | None, ipc: int | None = None) -> int:
        return self._ip_packet(0x1D, ip, ipc, "fup")

    # ---- modes and paging --------------------------------------------------------------
    def mode_exec(self, bits: int = 64, *, iflag: bool = False) -> int:
        """MODE.Exec for 16-, 32- or 64-bit code (CS.L/CS.D); iflag = RFLAGS.IF (bit 2)."""
        csl_csd = {64: 0b01, 32: 0b10, 16: 0b00}.get(bits)
        if csl_csd is None:
            raise ValueError(f"bits of MODE.Exec must be 16, 32 or 64, got {bits!r}")
        return self._put(bytes((0x99, csl_csd | (4 if iflag else 0))))

    def mode_exec_raw(self, csl: bool, csd: bool, iflag: bool = False) -> int:
        """MODE.Exec with the CS.L/CS.D bits as given (CS.L=CS.D=1 is reserved)."""
        return self._put(bytes((0x99, bool(csl) | bool(csd) << 1 | bool(iflag) << 2)))

    def mode_tsx(self, intx: bool, abort: bool = False) -> int:
        return self._put(bytes((0x99, 0x20 | bool(intx) | bool(abort) << 1)))

    def pip(self, cr3: int, nr: bool = False) -> int:
        """PIP: CR3 bits 51:5 (the low 5 bits must be zero), NR = non-root (VMX guest)."""
        cr3 = _check("cr3", cr3, 52)
        if cr3 & 0x1F:
            raise ValueError(f"cr3 bits 4:0 must be zero (PIP carries bits 51:5), got {cr3:#x}")
        return self._put(b"\x02\x43" + ((cr3 >> 5 << 1) | bool(nr)).to_bytes(6, "little"))

    def vmcs(self, base: int) -> int:
        """VMCS: the VMCS pointer, bits 51:12 (4 KiB aligned)."""
        base = _check("base", base, 52)
        if base & 0xFFF:
            raise ValueError(f"base of VMCS must be 4 KiB aligned, got {base:#x}")
        return self._put(b"\x02\xc8" + (base >> 12).to_bytes(5, "little"))

    # ---- timing ------------------------------------------------------------------------
    def tsc(self, value: int) -> int:
        """TSC: the low 56 bits of the time-stamp counter."""
        return self._put(b"\x19" + _check("tsc", value, 56).to_bytes(7, "little"))

    def tma(self, ctc: int, fc: int) -> int:
        """TMA: CTC bits 15:0 and the 9-bit FastCounter at the last TSC."""
        ctc = _check("ctc", ctc, 16)
        fc = _check("fc", fc, 9)
        return self._put(b"\x02\x73" + struct.pack("<HBH", ctc, 0, fc))

    def mtc(self, ctc: int) -> int:
        """MTC: 8 bits of the crystal clock counter (CTC bits mtc_freq+7:mtc_freq)."""
        return self._put(bytes((0x59, _check("ctc", ctc, 8))))

    def cyc(self, value: int) -> int:
        """CYC: core cycles since the last CYC, in as few bytes as the value needs."""
        value = _check("cyc", value, 64)
        first = 0x03 | (value & 0x1F) << 3
        rest = value >> 5
        if not rest:
            return self._put(bytes((first,)))
        out = bytearray((first | 0x04,))
        while rest:
            byte = (rest & 0x7F) << 1
            rest >>= 7
            out.append(byte | (1 if rest else 0))
        return self._put(bytes(out))

    def cbr(self, ratio: int) -> int:
        """CBR: the core:bus ratio (byte 3 is reserved, zero)."""
        return self._put(bytes((0x02, 0x03, _check("ratio", ratio, 8), 0)))

    # ---- maintenance, software and power -----------------------------------------------
    def mnt(self, payload: int) -> int:
        return self._put(b"\x02\xc3\x88" + _check("payload", payload, 64).to_bytes(8, "little"))

    def ptw(self, value: int, size: int = 8, ip: bool = False) -> int:
        """PTWRITE: a 4- or 8-byte value; ip=True announces an FUP with the PTWRITE's IP."""
        if size not in (4, 8):
            raise ValueError(f"size of a PTW payload must be 4 or 8 bytes, got {size!r}")
        value = _check("value", value, 8 * size)
        ext = 0x12 | (0 if size == 4 else 1) << 5 | (0x80 if ip else 0)
        return self._put(bytes((0x02, ext)) + value.to_bytes(size, "little"))

    def mwait(self, hints: int, ext: int) -> int:
        """MWAIT: the EAX hints and ECX extensions of the MWAIT (4 bytes each)."""
        hints, ext = _check("hints", hints, 32), _check("ext", ext, 32)
        return self._put(b"\x02\xc2" + struct.pack("<II", hints, ext))

    def pwre(self, state: int, sub_state: int, hw: bool = False) -> int:
        """PWRE: resolved thread C-state and sub-state (MWAIT encodings, 4 bits each);
        hw = entry initiated by hardware (bit 3 of byte 2, as libipt; see module doc)."""
        state, sub_state = _check("state", state, 4), _check("sub_state", sub_state, 4)
        return self._put(bytes((0x02, 0x22, 0x08 if hw else 0, state << 4 | sub_state)))

    def pwrx(self, last: int, deepest: int, wake: int = 0) -> int:
        """PWRX: last and deepest core C-state, and the one-hot wake reason (bit 0
        interrupt, bit 1 timer deadline, bit 2 store to monitored address, bit 3 HW)."""
        last, deepest = _check("last", last, 4), _check("deepest", deepest, 4)
        wake = _check("wake", wake, 4)
        return self._put(bytes((0x02, 0xA2, last << 4 | deepest, wake, 0, 0, 0)))

    def exstop(self, ip: bool = False) -> int:
        """EXSTOP; ip=True announces an FUP with the IP where execution stopped."""
        return self._put(b"\x02\xe2" if ip else b"\x02\x62")

    # ---- PEBS via PT, Event Trace, Trigger Tracing -------------------------------------
    def bbp(self, type: int, size: int = 8) -> int:
        """BBP: begins a PEBS block of `type`; its BIPs carry `size` (4 or 8) byte items."""
        type = _check("type", type, 5)
        if size not in (4, 8):
            raise ValueError(f"size of BBP items must be 4 or 8 bytes, got {size!r}")
        self.block_item_size = size
        return self._put(bytes((0x02, 0x63, (0x80 if size == 4 else 0) | type)))

    def bip(self, id: int, value: int, size: int | None = None) -> int:
        """BIP: item `id` (5 bits) of the open block; size defaults to the BBP's."""
        size = size or self.block_item_size
        if size not in (4, 8):
            raise ValueError("bip needs an open block (a BBP before it) or size=4/8")
        id = _check("id", id, 5)
        value = _check("value", value, 8 * size)
        return self._put(bytes((id << 3 | 0x04,)) + value.to_bytes(size, "little"))

    def bep(self, ip: bool = False) -> int:
        """BEP: ends the PEBS block; ip=True announces an FUP."""
        self.block_item_size = None
        return self._put(b"\x02\xb3" if ip else b"\x02\x33")

    def cfe(self, type: int, vector: int = 0, ip: bool = False) -> int:
        """CFE (Event Trace control-flow event): type (5 bits), vector, IP bit."""
        type, vector = _check("type", type, 5), _check("vector", vector, 8)
        return self._put(bytes((0x02, 0x13, (0x80 if ip else 0) | type, vector)))

    def evd(self, type: int, payload: int) -> int:
        """EVD (Event Trace event data): type (6 bits) and a 64-bit payload."""
        type = _check("type", type, 6)
        return self._put(bytes((0x02, 0x53, type)) +
                         _check("payload", payload, 64).to_bytes(8, "little"))

    def trig(self, trbv: int, icnt: int | None = None, ip: bool = False,
             mult: bool = False) -> int:
        """TRIG (Trigger Tracing): trigger bits; icnt (16 bits) when given sets ICNTV."""
        trbv = _check("trbv", trbv, 8)
        head = (0x80 if ip else 0) | (0x40 if icnt is not None else 0) | (0x20 if mult else 0)
        tail = b"" if icnt is None else _check("icnt", icnt, 16).to_bytes(2, "little")
        return self._put(bytes((0xD9, head, trbv)) + tail)

    # ---- decoded packets ---------------------------------------------------------------
    def encode(self, packet) -> int:
        """Write a packet as PacketDecoder returns it (attributes kind, payload, aux, ipc,
        count, flags, size as in packet.pxd's PtPacket; a dict with those keys works too).
        IP packets are written with their own ipc and raw payload, so the bytes come back
        exactly. Returns the offset written at."""
        get = packet.get if isinstance(packet, dict) else (
            lambda name, default=0: getattr(packet, name, default))
        kind = int(get("kind"))
        payload, aux, flags = int(get("payload", 0)), int(get("aux", 0)), int(get("flags", 0))
        fn = _ENCODE.get(kind)
        if fn is None:
            raise ValueError(f"kind {kind} is not a packet the encoder can write")
        return fn(self, payload, aux, flags, int(get("ipc", 0)), int(get("count", 0)),
                  int(get("size", 0)))


def _enc_ip(method):
    def write(enc, payload, aux, flags, ipc, count, size):
        if ipc == IPC_SUPPRESSED:
            return method(enc, None)
        return method(enc, payload, ipc)
    return write


def _enc_bip(enc, payload, aux, flags, ipc, count, size):
    return enc.bip(aux, payload, size=4 if size == 5 or (size == 0 and flags & 1) else 8)


def _enc_trig(enc, payload, aux, flags, ipc, count, size):
    icnt = aux if (flags & 4 or size == 5) else None
    return enc.trig(payload, icnt, ip=bool(flags & 1), mult=bool(flags & 2))


_ENCODE = {
    PK_PAD: lambda e, *a: e.pad(),
    PK_PSB: lambda e, *a: e.psb(),
    PK_PSBEND: lambda e, *a: e.psbend(),
    PK_OVF: lambda e, *a: e.ovf(),
    PK_STOP: lambda e, *a: e.stop(),
    PK_TNT8: lambda e, p, a, f, i, c, s: e.tnt8(p, c),
    PK_TNT64: lambda e, p, a, f, i, c, s: e.tnt64(p, c),
    PK_TIP: _enc_ip(Encoder.tip),
    PK_TIP_PGE: _enc_ip(Encoder.tip_pge),
    PK_TIP_PGD: _enc_ip(Encoder.tip_pgd),
    PK_FUP: _enc_ip(Encoder.fup),
    PK_MODE_EXEC: lambda e, p, *a: e.mode_exec_raw(p & 1, p & 2, p & 4),
    PK_MODE_TSX: lambda e, p, *a: e.mode_tsx(p & 1, p & 2),
    PK_PIP: lambda e, p, a, *r: e.pip(p, bool(a)),
    PK_TSC: lambda e, p, *a: e.tsc(p),
    PK_TMA: lambda e, p, a, *r: e.tma(p, a),
    PK_MTC: lambda e, p, *a: e.mtc(p),
    PK_CYC: lambda e, p, *a: e.cyc(p),
    PK_CBR: lambda e, p, *a: e.cbr(p),
    PK_VMCS: lambda e, p, *a: e.vmcs(p),
    PK_MNT: lambda e, p, *a: e.mnt(p),
    PK_PTW: lambda e, p, a, f, *r: e.ptw(p, a or 8, bool(f & 1)),
    PK_MWAIT: lambda e, p, a, *r: e.mwait(p, a),
    PK_PWRE: lambda e, p, a, f, *r: e.pwre(p >> 4 & 0xF, p & 0xF, bool(f & 1)),
    PK_PWRX: lambda e, p, a, f, *r: e.pwrx(p, a, f),
    PK_EXSTOP: lambda e, p, a, f, *r: e.exstop(bool(f & 1)),
    PK_BBP: lambda e, p, a, f, *r: e.bbp(p, 4 if f & 1 else 8),
    PK_BIP: _enc_bip,
    PK_BEP: lambda e, p, a, f, *r: e.bep(bool(f & 1)),
    PK_CFE: lambda e, p, a, f, *r: e.cfe(p, a, bool(f & 1)),
    PK_EVD: lambda e, p, a, *r: e.evd(a, p),
    PK_TRIG: _enc_trig,
}

"""libipt ptdump's line format: one packet a line, and `[offset: error]` lines.

Layer: pt_decoder.tools (presentation). It turns a decoded `Packet` and the
dump's tracking values into ptdump's columns; it decodes nothing and tracks
no state (dump.py does). The model classes never format themselves.

A ptdump line is: offset (16 hex digits), optional raw bytes, the opcode
name, the payload, and an optional tracking column (`ip`, `tsc`, `fcr`,
`cr3`, `vmcs`, `em` ...) with its value. Column widths follow ptdump 2.0.5's
fixed-size fields, so the text matches ptdump's byte for byte where the
fields fit (the golden test compares ignoring whitespace, as libipt's own
script does with `diff -b`).
"""
from __future__ import annotations

from dataclasses import dataclass

from pt_decoder.packet import Kind, Packet

# ptdump's field sizes (including the terminating NUL of its C buffers).
OFFSET_WIDTH = 17
RAW_WIDTH = 33
OPCODE_WIDTH = 10
PAYLOAD_WIDTH = 25
TRACK_ID_WIDTH = 5
TRACK_WIDTH = 17
RAW_MAX_BYTES = (RAW_WIDTH - 1) // 2

OPCODE_NAMES = {
    Kind.INVALID: "<invalid>", Kind.PAD: "pad", Kind.PSB: "psb", Kind.PSBEND: "psbend",
    Kind.TNT8: "tnt.8", Kind.TNT64: "tnt.64", Kind.TIP: "tip", Kind.TIP_PGE: "tip.pge",
    Kind.TIP_PGD: "tip.pgd", Kind.FUP: "fup", Kind.MODE_EXEC: "mode.exec",
    Kind.MODE_TSX: "mode.tsx", Kind.PIP: "pip", Kind.TSC: "tsc", Kind.TMA: "tma",
    Kind.MTC: "mtc", Kind.CYC: "cyc", Kind.CBR: "cbr", Kind.VMCS: "vmcs", Kind.OVF: "ovf",
    Kind.MNT: "mnt", Kind.STOP: "stop", Kind.PTW: "ptw", Kind.MWAIT: "mwait",
    Kind.PWRE: "pwre", Kind.PWRX: "pwrx", Kind.EXSTOP: "exstop", Kind.BBP: "bbp",
    Kind.BIP: "bip", Kind.BEP: "bep", Kind.CFE: "cfe", Kind.EVD: "evd", Kind.TRIG: "trig",
}

# libipt's names for CFE and EVD types (intel-pt.h of libipt >= 2.1).
CFE_TYPES = {1: "intr", 2: "iret", 3: "smi", 4: "rsm", 5: "sipi", 6: "init", 7: "vmentry",
             8: "vmexit", 9: "vmexit_intr", 10: "shutdown", 12: "uintr", 13: "uiret",
             14: "swintr", 15: "syscall"}
CFE_WITH_VECTOR = {1, 9, 12, 14}
EVD_TYPES = {0: "cr2", 1: "vmxq", 2: "vmxr"}


@dataclass
class Line:
    """The columns of one output line, filled by the dump and printed by render()."""
    offset: int = 0
    raw: str = ""
    opcode: str = ""
    payload: str = ""
    wide_payload: bool = False   # TNT strings use ptdump's 48-byte "extended" field
    track_id: str = ""
    track: str = ""
    skip: bool = False           # --no-pad / --no-timing / --no-cyc
    skip_time: bool = False      # this packet has no time update (CBR)
    skip_tcal: bool = False      # this packet has no calibration update (TMA, CYC)

    def set_track(self, ident: str, value: str) -> None:
        self.track_id = ident[:TRACK_ID_WIDTH - 1]
        self.track = value[:TRACK_WIDTH - 1]


def render(line: Line, *, show_offset: bool) -> str:
    """ptdump's print_buffer(): the columns with ptdump's padding rules."""
    payload = line.payload if line.wide_payload else line.payload[:PAYLOAD_WIDTH - 1]
    opcode = line.opcode[:OPCODE_WIDTH - 1]
    out = []
    sep = ""
    if show_offset:
        out.append(f"{line.offset:016x}".ljust(OFFSET_WIDTH))
        sep = " "
    if line.raw:
        out.append(sep + line.raw.ljust(RAW_WIDTH))
        sep = " "
    out.append(sep + (opcode.ljust(OPCODE_WIDTH) if payload else opcode))
    if line.track_id:
        out.append(" " + payload.ljust(PAYLOAD_WIDTH))
        out.append(" " + line.track_id.ljust(TRACK_ID_WIDTH) + line.track)
    elif payload:
        out.append(" " + payload)
    return "".join(out)


def diag(offset: int, text: str, error: str | None = None) -> str:
    """ptdump's `[offset: text: error]` line (offset in hex without leading zeros)."""
    if error:
        return f"[{offset:x}: {text}: {error}]"
    return f"[{offset:x}: {text}]"


def raw_bytes(data, offset: int, size: int) -> tuple[str, bool]:
    """The packet's bytes in hex, at most 16 of them; True if it was cut."""
    cut = size > RAW_MAX_BYTES
    chunk = bytes(data[offset:offset + min(size, RAW_MAX_BYTES)])
    return chunk.hex(), cut


def sext48(value: int) -> int:
    return value | 0xFFFF000000000000 if value & (1 << 47) else value & 0xFFFFFFFFFFFF


def ip_payload(pkt: Packet) -> str:
    """The IP payload as ptdump shows it: '?' for bytes the packet does not carry."""
    ipc, raw = pkt.ipc, pkt.payload
    if ipc == 0:
        return "0: ????????????????"
    if ipc == 1:
        return f"1: ????????????{raw:04x}"
    if ipc == 2:
        return f"2: ????????{raw:08x}"
    if ipc == 4:
        return f"4: ????{raw:012x}"
    if ipc == 3:
        return f"3: {sext48(raw):016x}"
    return f"{ipc:x}: {raw:016x}"


def tnt_payload(pkt: Packet) -> str:
    """TNT bits oldest first: '!' taken, '.' not taken."""
    n, bits = pkt.count, pkt.payload
    return "".join("!" if (bits >> (n - 1 - i)) & 1 else "." for i in range(n))


def exec_mode(pkt: Packet) -> str:
    """The execution mode a MODE.Exec sets (SDM: CS.L=1 64-bit; else CS.D)."""
    csl, csd = pkt.payload & 1, pkt.payload & 2
    if csl:
        return "unknown" if csd else "64-bit"
    return "32-bit" if csd else "16-bit"


def _pwrx_reason(flags: int) -> str:
    # ptdump names exactly one of interrupt / store / autonomous, else "bad".
    names = []
    if flags & 1:
        names.append("int")
    if flags & 4:
        names.append(" st")
    if flags & 8:
        names.append(" hw")
    return names[0] if len(names) == 1 else "bad"


def describe(pkt: Packet, line: Line) -> None:
    """Fill line.opcode and line.payload (and the fixed tracking of PIP/VMCS)."""
    kind = pkt.kind_id
    line.opcode = OPCODE_NAMES.get(Kind(kind), "<unknown>")
    if kind in (Kind.TIP, Kind.TIP_PGE, Kind.TIP_PGD, Kind.FUP):
        line.payload = ip_payload(pkt)
    elif kind in (Kind.TNT8, Kind.TNT64):
        line.payload = tnt_payload(pkt)
        line.wide_payload = True
    elif kind == Kind.MODE_EXEC:
        line.payload = ", ".join(n for n, bit in (("cs.d", 2), ("cs.l", 1)) if pkt.payload & bit)
    elif kind == Kind.MODE_TSX:
        line.payload = ", ".join(n for n, bit in (("intx", 1), ("abrt", 2)) if pkt.payload & bit)
    elif kind == Kind.PIP:
        line.payload = f"{pkt.payload:x}" + (", nr" if pkt.aux else "")
        line.set_track("cr3", f"{pkt.payload:016x}")
    elif kind == Kind.VMCS:
        line.payload = f"{pkt.payload:x}"
        line.set_track("vmcs", f"{pkt.payload:016x}")
    elif kind in (Kind.TSC, Kind.MTC, Kind.CYC, Kind.CBR, Kind.MNT):
        line.payload = f"{pkt.payload:x}"
    elif kind == Kind.TMA:
        line.payload = f"{pkt.payload:x}, {pkt.aux:x}"
    elif kind == Kind.EXSTOP:
        line.payload = "ip" if pkt.flags & 1 else ""
    elif kind == Kind.MWAIT:
        line.payload = f"{pkt.payload:08x}, {pkt.aux:08x}"
    elif kind == Kind.PWRE:
        state, sub = pkt.payload >> 4, pkt.payload & 0xF
        # ptdump prints C-states one up from the encoding (0 means C1).
        line.payload = f"c{(state + 1) & 0xF}.{(sub + 1) & 0xF}" + (", hw" if pkt.flags & 1 else "")
    elif kind == Kind.PWRX:
        line.payload = (f"{_pwrx_reason(pkt.flags)}: c{(pkt.payload + 1) & 0xF}, "
                        f"c{(pkt.aux + 1) & 0xF}")
    elif kind == Kind.PTW:
        plc = 0 if pkt.aux == 4 else 1
        line.payload = f"{plc:x}: {pkt.payload:x}" + (", ip" if pkt.flags & 1 else "")
    elif kind == Kind.CFE:
        ip = ", ip" if pkt.flags & 1 else ""
        if pkt.payload in CFE_WITH_VECTOR:
            line.payload = f"{pkt.payload}: {pkt.aux}{ip}"
        elif pkt.payload == 5:
            line.payload = f"{pkt.payload}: {pkt.aux:x}{ip}"
        else:
            line.payload = f"{pkt.payload}{ip}"
        line.set_track("type", CFE_TYPES.get(pkt.payload, "unknown"))
    elif kind == Kind.EVD:
        line.payload = f"{pkt.aux}: {pkt.payload:x}"
        line.set_track("type", EVD_TYPES.get(pkt.aux, "unknown"))
    elif kind == Kind.TRIG:
        line.payload = (f"{pkt.payload:02x}" + (", ip" if pkt.flags & 1 else "")
                        + (", mult" if pkt.flags & 2 else "")
                        + (f", icnt: {pkt.aux}" if pkt.flags & 4 else ""))
        line.wide_payload = True
    elif kind == Kind.BBP:
        line.payload = f"{pkt.payload:x}" + (", sz" if pkt.flags & 1 else "")
    elif kind == Kind.BIP:
        line.payload = f"{pkt.aux:x}: {pkt.payload:x}"
    elif kind == Kind.BEP:
        line.payload = "ip" if pkt.flags & 1 else ""

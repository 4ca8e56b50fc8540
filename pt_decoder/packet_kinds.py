"""The packet layer's names for Python: packet kinds, per-kind field names, record layout.

Layer: pt_decoder, part of the packet layer (pt_decoder/packet.pyx re-exports
everything here). Pure data about the packet model: no decoding, no
formatting (that is pt_decoder/tools). Field names follow the Intel SDM
Vol. 3C PT chapter's packet descriptions; the raw PtPacket field each comes
from is documented in packet.pxd.
"""
from __future__ import annotations

import enum


class Kind(enum.IntEnum):
    """Packet kinds; the numbers are packet.pxd's PacketKind (PK_*), checked
    against it when pt_decoder.packet is imported."""
    INVALID = 0
    PAD = 1
    PSB = 2
    PSBEND = 3
    TNT8 = 4
    TNT64 = 5
    TIP = 6
    TIP_PGE = 7
    TIP_PGD = 8
    FUP = 9
    MODE_EXEC = 10
    MODE_TSX = 11
    PIP = 12
    TSC = 13
    TMA = 14
    MTC = 15
    CYC = 16
    CBR = 17
    VMCS = 18
    OVF = 19
    MNT = 20
    STOP = 21
    PTW = 22
    MWAIT = 23
    PWRE = 24
    PWRX = 25
    EXSTOP = 26
    BBP = 27
    BIP = 28
    BEP = 29
    CFE = 30
    EVD = 31
    TRIG = 32


def fields_of(p) -> dict:
    """A packet's payload under the SDM's field names (p: packet.Packet)."""
    k = p.kind_id
    if k == Kind.TNT8 or k == Kind.TNT64:
        # bits: oldest branch first, True = taken.
        return {"count": p.count, "bits": p.payload,
                "taken": tuple(bool((p.payload >> (p.count - 1 - i)) & 1) for i in range(p.count))}
    if k in (Kind.TIP, Kind.TIP_PGE, Kind.TIP_PGD, Kind.FUP):
        return {"ipc": p.ipc, "ip_bytes": p.payload, "ip": p.ip, "ip_valid": bool(p.ip_valid)}
    if k == Kind.MODE_EXEC:
        return {"csl": bool(p.payload & 1), "csd": bool(p.payload & 2), "if": bool(p.payload & 4)}
    if k == Kind.MODE_TSX:
        return {"intx": bool(p.payload & 1), "abrt": bool(p.payload & 2)}
    if k == Kind.PIP:
        return {"cr3": p.payload, "nr": bool(p.aux)}
    if k == Kind.TSC:
        return {"tsc": p.payload}
    if k == Kind.TMA:
        return {"ctc": p.payload, "fc": p.aux}
    if k == Kind.MTC:
        return {"ctc": p.payload}
    if k == Kind.CYC:
        return {"value": p.payload}
    if k == Kind.CBR:
        return {"ratio": p.payload}
    if k == Kind.VMCS:
        return {"base": p.payload}
    if k == Kind.MNT:
        return {"payload": p.payload}
    if k == Kind.PTW:
        return {"payload": p.payload, "bytes": p.aux, "ip": bool(p.flags & 1)}
    if k == Kind.MWAIT:
        return {"hints": p.payload, "ext": p.aux}
    if k == Kind.PWRE:
        return {"state": p.payload >> 4, "sub_state": p.payload & 0xF, "hw": bool(p.flags & 1)}
    if k == Kind.PWRX:
        return {"last": p.payload, "deepest": p.aux, "interrupt": bool(p.flags & 1),
                "timer": bool(p.flags & 2), "store": bool(p.flags & 4),
                "autonomous": bool(p.flags & 8)}
    if k == Kind.EXSTOP or k == Kind.BEP:
        return {"ip": bool(p.flags & 1)}
    if k == Kind.BBP:
        return {"type": p.payload, "sz": bool(p.flags & 1)}
    if k == Kind.BIP:
        return {"id": p.aux, "value": p.payload, "bytes": 4 if p.flags & 1 else 8}
    if k == Kind.CFE:
        return {"type": p.payload, "vector": p.aux, "ip": bool(p.flags & 1)}
    if k == Kind.EVD:
        return {"type": p.aux, "payload": p.payload}
    if k == Kind.TRIG:
        return {"trbv": p.payload, "icnt": p.aux, "ip": bool(p.flags & 1),
                "mult": bool(p.flags & 2), "icntv": bool(p.flags & 4)}
    return {}


# Packed PtPacket records for records(): struct-module and numpy layouts.
RECORD_FORMAT = "=QQQQBBBBBB2x"
RECORD_FIELDS = ("offset", "payload", "aux", "ip", "kind", "size", "ipc", "count", "flags",
                 "ip_valid")
RECORD_DTYPE = [("offset", "<u8"), ("payload", "<u8"), ("aux", "<u8"), ("ip", "<u8"),
                ("kind", "u1"), ("size", "u1"), ("ipc", "u1"), ("count", "u1"),
                ("flags", "u1"), ("ip_valid", "u1"), ("_pad", "V2")]

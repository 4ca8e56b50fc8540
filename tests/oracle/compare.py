"""Puts ptdebug's decoded packets in the shape of the libipt oracle's packet dicts.

Layer: tests only. The differential tests compare `decode_ours_as_libipt(data)` with
`libipt.libipt_packets(data)` as plain lists of dicts, so a difference prints as a diff of
kind/offset/payload fields. Packets libipt 2.0.5 does not know (BBP, BIP, BEP, CFE, EVD,
TRIG) map to ptdebug's own field names.
"""
from __future__ import annotations

import importlib

from pt_decoder import encoder as E

# ptdebug kind -> libipt ptdump name
LIBIPT_NAME = {
    E.PK_PAD: "pad", E.PK_PSB: "psb", E.PK_PSBEND: "psbend", E.PK_TNT8: "tnt.8",
    E.PK_TNT64: "tnt.64", E.PK_TIP: "tip", E.PK_TIP_PGE: "tip.pge", E.PK_TIP_PGD: "tip.pgd",
    E.PK_FUP: "fup", E.PK_MODE_EXEC: "mode", E.PK_MODE_TSX: "mode", E.PK_PIP: "pip",
    E.PK_TSC: "tsc", E.PK_TMA: "tma", E.PK_MTC: "mtc", E.PK_CYC: "cyc", E.PK_CBR: "cbr",
    E.PK_VMCS: "vmcs", E.PK_OVF: "ovf", E.PK_MNT: "mnt", E.PK_STOP: "stop", E.PK_PTW: "ptw",
    E.PK_MWAIT: "mwait", E.PK_PWRE: "pwre", E.PK_PWRX: "pwrx", E.PK_EXSTOP: "exstop",
    E.PK_BBP: "bbp", E.PK_BIP: "bip", E.PK_BEP: "bep", E.PK_CFE: "cfe", E.PK_EVD: "evd",
    E.PK_TRIG: "trig", E.PK_INVALID: "invalid",
}


def packet_module():
    """pt_decoder.packet, or None while it is not built."""
    try:
        return importlib.import_module("pt_decoder.packet")
    except ImportError:
        return None


def ours_available() -> bool:
    return packet_module() is not None


def to_libipt(p) -> dict:
    """One ptdebug packet (attributes as packet.pxd's PtPacket) as a libipt packet dict."""
    kind = int(p.kind)
    name = LIBIPT_NAME[kind]
    d = {"kind": name, "offset": p.offset, "size": p.size}
    pl, aux, fl = p.payload, p.aux, p.flags
    if kind in (E.PK_TNT8, E.PK_TNT64):
        d.update(bit_size=p.count, payload=pl)
    elif kind in (E.PK_TIP, E.PK_TIP_PGE, E.PK_TIP_PGD, E.PK_FUP):
        d.update(ipc=p.ipc, ip=pl)
    elif kind == E.PK_MODE_EXEC:
        d.update(leaf="exec", csl=pl & 1, csd=pl >> 1 & 1)
    elif kind == E.PK_MODE_TSX:
        d.update(leaf="tsx", intx=pl & 1, abrt=pl >> 1 & 1)
    elif kind == E.PK_PIP:
        d.update(cr3=pl, nr=int(bool(aux)))
    elif kind == E.PK_TSC:
        d["tsc"] = pl
    elif kind == E.PK_TMA:
        d.update(ctc=pl, fc=aux)
    elif kind == E.PK_MTC:
        d["ctc"] = pl
    elif kind == E.PK_CYC:
        d["value"] = pl
    elif kind == E.PK_CBR:
        d["ratio"] = pl
    elif kind == E.PK_VMCS:
        d["base"] = pl
    elif kind == E.PK_MNT:
        d["payload"] = pl
    elif kind == E.PK_PTW:
        d.update(payload=pl, plc=0 if aux == 4 else 1, ip=fl & 1)
    elif kind == E.PK_MWAIT:
        d.update(hints=pl, ext=aux)
    elif kind == E.PK_PWRE:
        d.update(state=pl >> 4 & 0xF, sub_state=pl & 0xF, hw=fl & 1)
    elif kind == E.PK_PWRX:
        d.update(last=pl, deepest=aux, interrupt=fl & 1, store=fl >> 2 & 1,
                 autonomous=fl >> 3 & 1)
    elif kind == E.PK_EXSTOP:
        d["ip"] = fl & 1
    elif kind in (E.PK_BBP, E.PK_BIP, E.PK_BEP, E.PK_CFE, E.PK_EVD, E.PK_TRIG):
        d.update(payload=pl, aux=aux, flags=fl)
    return d


def decode_ours(data, *, sync: bool = True, limit: int | None = None,
                sdm_packets: bool = True) -> list:
    """Every packet ptdebug's PacketDecoder reads from `data`, in order.

    sync=True starts at the first PSB, sync=False at offset 0 (PacketDecoder.seek). A
    decoding error is recorded as {"kind": "error", "offset", "code"} and decoding resumes
    at the next PSB, as the oracle does; a packet truncated by the end of the buffer ends
    the list (libipt cannot tell it from the end of the stream)."""
    from pt_decoder.errors import PtError
    dec = packet_module().PacketDecoder(data, sdm_packets=sdm_packets)
    out: list = []
    if sync:
        if dec.sync_forward() is None:
            return out
    else:
        dec.seek(0)
    while limit is None or len(out) < limit:
        try:
            pkt = dec.next()
        except PtError as exc:
            if int(exc.code) == 7:      # a packet cut off by the buffer's end: libipt's
                break                   # pt_pkt_next says -pte_eos there too, its end
            out.append({"kind": "error", "offset": exc.offset, "code": int(exc.code)})
            if dec.sync_forward() is None:
                break
            continue
        if pkt is None:
            break
        out.append(pkt)
    return out


def decode_ours_as_libipt(data, *, sync: bool = True, limit: int | None = None,
                          sdm_packets: bool = True) -> list[dict]:
    return [p if isinstance(p, dict) else to_libipt(p)
            for p in decode_ours(data, sync=sync, limit=limit, sdm_packets=sdm_packets)]

"""Encoder round trips: every packet kind -> bytes -> ptdebug's PacketDecoder -> same fields.

Also: encode(packet) reproduces decoded bytes exactly, IP compression against the
encoder's own last-IP decodes to the same IPs, and bad arguments fail naming the field.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pt_decoder import encoder as E
from pt_decoder.encoder import Encoder
from pt_decoder.packet import Kind, PacketDecoder

# (method, args, kwargs, Kind, expected Packet.fields subset)
ROUND_TRIPS = [
    ("pad", (), {}, Kind.PAD, {}),
    ("psb", (), {}, Kind.PSB, {}),
    ("psbend", (), {}, Kind.PSBEND, {}),
    ("ovf", (), {}, Kind.OVF, {}),
    ("stop", (), {}, Kind.STOP, {}),
    ("tnt8", (0b101101, 6), {}, Kind.TNT8, {"count": 6, "bits": 0b101101}),
    ("tnt8", (1, 1), {}, Kind.TNT8, {"count": 1, "taken": (True,)}),
    ("tnt64", ((1 << 46) | 5, 47), {}, Kind.TNT64, {"count": 47, "bits": (1 << 46) | 5}),
    ("tnt64", (0, 7), {}, Kind.TNT64, {"count": 7, "bits": 0}),
    ("tip", (0x7FFF_DEAD_BEEF,), {}, Kind.TIP, {"ipc": 3, "ip": 0x7FFF_DEAD_BEEF}),
    ("tip", (0xFFFF_8000_1234_5678,), {}, Kind.TIP, {"ipc": 3, "ip": 0xFFFF_8000_1234_5678}),
    ("tip", (0x1234_5678_9ABC_DEF0,), {}, Kind.TIP, {"ipc": 6, "ip": 0x1234_5678_9ABC_DEF0}),
    ("tip_pge", (0x401000,), {}, Kind.TIP_PGE, {"ipc": 3, "ip": 0x401000}),
    ("tip_pgd", (), {}, Kind.TIP_PGD, {"ipc": 0, "ip_valid": False}),
    ("tip_pgd", (0x401000,), {"ipc": 6}, Kind.TIP_PGD, {"ipc": 6, "ip": 0x401000}),
    ("fup", (0x401000,), {"ipc": 4}, Kind.FUP, {"ipc": 4, "ip_bytes": 0x401000}),
    ("fup", (None,), {}, Kind.FUP, {"ipc": 0}),
    ("mode_exec", (64,), {}, Kind.MODE_EXEC, {"csl": True, "csd": False, "if": False}),
    ("mode_exec", (32,), {"iflag": True}, Kind.MODE_EXEC, {"csl": False, "csd": True, "if": True}),
    ("mode_exec", (16,), {}, Kind.MODE_EXEC, {"csl": False, "csd": False}),
    ("mode_tsx", (True, True), {}, Kind.MODE_TSX, {"intx": True, "abrt": True}),
    ("pip", (0x000F_FFFF_FFFF_FFE0, True), {}, Kind.PIP,
     {"cr3": 0x000F_FFFF_FFFF_FFE0, "nr": True}),
    ("tsc", ((1 << 56) - 1,), {}, Kind.TSC, {"tsc": (1 << 56) - 1}),
    ("tma", (0xC080, 0x1FF), {}, Kind.TMA, {"ctc": 0xC080, "fc": 0x1FF}),
    ("mtc", (0x12,), {}, Kind.MTC, {"ctc": 0x12}),
    ("cyc", (0,), {}, Kind.CYC, {"value": 0}),
    ("cyc", (0x1F,), {}, Kind.CYC, {"value": 0x1F}),
    ("cyc", (0x20,), {}, Kind.CYC, {"value": 0x20}),
    ("cyc", (0x3F_FFFF_FFFF_FFFF,), {}, Kind.CYC, {"value": 0x3F_FFFF_FFFF_FFFF}),
    ("cbr", (0x2A,), {}, Kind.CBR, {"ratio": 0x2A}),
    ("vmcs", (0x000F_FFFF_FFFF_F000,), {}, Kind.VMCS, {"base": 0x000F_FFFF_FFFF_F000}),
    ("mnt", (0x0102_0304_0506_0708,), {}, Kind.MNT, {"payload": 0x0102_0304_0506_0708}),
    ("ptw", (0xDEADBEEF, 4), {}, Kind.PTW, {"payload": 0xDEADBEEF, "bytes": 4, "ip": False}),
    ("ptw", (2**64 - 1, 8, True), {}, Kind.PTW, {"payload": 2**64 - 1, "bytes": 8, "ip": True}),
    ("mwait", (0xF0, 3), {}, Kind.MWAIT, {"hints": 0xF0, "ext": 3}),
    ("pwre", (3, 4, True), {}, Kind.PWRE, {"state": 3, "sub_state": 4, "hw": True}),
    ("pwrx", (1, 6, 0b1011), {}, Kind.PWRX, {"last": 1, "deepest": 6, "interrupt": True,
                                            "timer": True, "store": False, "autonomous": True}),
    ("exstop", (True,), {}, Kind.EXSTOP, {"ip": True}),
    ("bbp", (0x1F, 4), {}, Kind.BBP, {"type": 0x1F, "sz": True}),
    ("bep", (True,), {}, Kind.BEP, {"ip": True}),
    ("cfe", (0x11, 0xFF, True), {}, Kind.CFE, {"type": 0x11, "vector": 0xFF, "ip": True}),
    ("evd", (0x09, 2**64 - 1), {}, Kind.EVD, {"type": 0x09, "payload": 2**64 - 1}),
    ("trig", (0xA5,), {}, Kind.TRIG, {"trbv": 0xA5, "icntv": False}),
    ("trig", (0x01, 0xBEEF, True, True), {}, Kind.TRIG,
     {"trbv": 1, "icnt": 0xBEEF, "ip": True, "mult": True, "icntv": True}),
]


def _decode(data: bytes) -> list:
    dec = PacketDecoder(data)
    dec.seek(0)
    return list(dec)


def test_kind_numbers_match_the_decoder():
    for kind in Kind:
        assert getattr(E, f"PK_{kind.name}") == int(kind), kind


def test_every_kind_has_a_round_trip():
    covered = {row[3] for row in ROUND_TRIPS} | {Kind.BIP}   # BIP: its own test below
    assert covered == set(Kind) - {Kind.INVALID}


@pytest.mark.parametrize("method,args,kwargs,kind,fields", ROUND_TRIPS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(ROUND_TRIPS)])
def test_round_trip(method, args, kwargs, kind, fields):
    enc = Encoder()
    offset = getattr(enc, method)(*args, **kwargs)
    data = enc.getvalue()
    (pkt,) = _decode(data)
    assert (offset, pkt.kind, pkt.offset, pkt.size) == (0, kind, 0, len(data))
    got = pkt.fields
    assert {k: got[k] for k in fields} == fields
    again = Encoder()
    again.encode(pkt)
    assert again.getvalue() == data


@pytest.mark.parametrize("size", [4, 8])
def test_bip_inside_a_block(size):
    enc = Encoder()
    enc.bbp(3, size)
    enc.bip(0x1F, (1 << 8 * size) - 1)
    enc.bip(0, 7)
    enc.bep()
    pkts = _decode(enc.getvalue())
    assert [p.kind for p in pkts] == [Kind.BBP, Kind.BIP, Kind.BIP, Kind.BEP]
    assert pkts[1].fields == {"id": 0x1F, "value": (1 << 8 * size) - 1, "bytes": size}
    assert pkts[2].size == 1 + size
    again = Encoder()
    for p in pkts:
        again.encode(p)
    assert again.getvalue() == enc.getvalue()
    with pytest.raises(ValueError, match="open block"):
        again.bip(1, 2)


def test_ip_compression_follows_last_ip_and_psb_resets_it():
    ips = [0x401000, 0x401234, 0x7F00_0040_1234, 0x7F00_1111_2222, 0xFFFF_FFFF_FF60_0000,
           0x1234_5678_9ABC_DEF0, 0x1234_5678_9ABC_0000, 0x1234_0000_0000_0000]
    enc = Encoder()
    enc.psb()
    for ip in ips:
        enc.tip(ip)
    enc.psb()
    enc.fup(0x401238)
    enc.tip_pgd(0x401240)
    pkts = [p for p in _decode(enc.getvalue()) if p.kind != Kind.PSB]
    assert [p.ip for p in pkts] == ips + [0x401238, 0x401240]
    assert all(p.ip_valid for p in pkts)
    assert [p.ipc for p in pkts] == [3, 1, 3, 2, 3, 6, 1, 4, 3, 1]


def test_explicit_ipc_is_written_as_given():
    enc = Encoder()
    enc.tip(0x401000, ipc=6)
    enc.tip(0x9999_0040_2000, ipc=1)          # decoder keeps last-IP's upper 48 bits
    pkts = _decode(enc.getvalue())
    assert [p.ipc for p in pkts] == [6, 1]
    assert pkts[1].ip == 0x402000 and enc.last_ip == 0x402000


def test_cyc_uses_as_few_bytes_as_the_value_needs():
    sizes = {}
    for value in (0, 0x1F, 0x20, 0xFFF, 0x1000, 2**61 - 1, 2**64 - 1):
        enc = Encoder()
        enc.cyc(value)
        sizes[value] = len(enc.getvalue())
        if value < 2**61:          # longer CYCs: libipt (and the decoder) refuse them
            assert _decode(enc.getvalue())[0].fields == {"value": value}
    assert list(sizes.values()) == [1, 1, 2, 2, 3, 9, 10]


def test_offset_and_getvalue_follow_the_stream():
    enc = Encoder()
    assert enc.offset == 0
    assert enc.psb() == 0 and enc.offset == 16
    assert enc.raw(b"\xd9\x00") == 16 and enc.getvalue().endswith(b"\xd9\x00")


@pytest.mark.parametrize("call,field", [
    (lambda e: e.tnt8(0, 7), "count"),
    (lambda e: e.tnt8(0b1000, 3), "bits"),
    (lambda e: e.tnt64(1, 48), "count"),
    (lambda e: e.tip(-1), "tip ip"),
    (lambda e: e.fup(1 << 64), "fup ip"),
    (lambda e: e.tip(0x1000, ipc=5), "ipc"),
    (lambda e: e.tip_pgd(None, ipc=3), "ipc"),
    (lambda e: e.mode_exec(48), "bits"),
    (lambda e: e.pip(0x1001), "cr3"),
    (lambda e: e.pip(1 << 52), "cr3"),
    (lambda e: e.tsc(1 << 56), "tsc"),
    (lambda e: e.tma(0, 0x200), "fc"),
    (lambda e: e.tma(0x10000, 0), "ctc"),
    (lambda e: e.mtc(256), "ctc"),
    (lambda e: e.cyc(-1), "cyc"),
    (lambda e: e.cbr(0x100), "ratio"),
    (lambda e: e.vmcs(0x1234), "base"),
    (lambda e: e.mnt(1 << 64), "payload"),
    (lambda e: e.ptw(1, 2), "size"),
    (lambda e: e.ptw(1 << 32, 4), "value"),
    (lambda e: e.mwait(1 << 32, 0), "hints"),
    (lambda e: e.pwre(16, 0), "state"),
    (lambda e: e.pwrx(0, 0, 16), "wake"),
    (lambda e: e.bbp(32), "type"),
    (lambda e: e.bbp(1, 2), "size"),
    (lambda e: e.cfe(1, 256), "vector"),
    (lambda e: e.evd(64, 0), "type"),
    (lambda e: e.trig(0, 1 << 16), "icnt"),
    (lambda e: e.tsc("12"), "tsc"),
    (lambda e: e.cbr(True), "ratio"),
])
def test_bad_arguments_name_the_field_and_write_nothing(call, field):
    enc = Encoder()
    with pytest.raises(ValueError, match=field):
        call(enc)
    assert enc.getvalue() == b""


def test_encode_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="kind 0"):
        Encoder().encode({"kind": 0})


# ---- property: any valid sequence, including packets newer than libipt 2.0.5 ----------
_U = lambda bits: st.integers(0, (1 << bits) - 1)
_CALLS = st.one_of(
    st.tuples(st.just("tnt8"), st.integers(1, 6)).map(lambda t: (t[0], ((1 << t[1]) - 1, t[1]))),
    st.tuples(st.just("tnt64"), st.integers(1, 47)).map(lambda t: (t[0], (1, t[1]))),
    st.tuples(st.sampled_from(["tip", "fup", "tip_pge", "tip_pgd"]),
              st.one_of(_U(16), _U(48), _U(64))).map(lambda t: (t[0], (t[1],))),
    st.just(("psb", ())), st.just(("psbend", ())), st.just(("ovf", ())),
    _U(61).map(lambda v: ("cyc", (v,))), _U(8).map(lambda v: ("mtc", (v,))),
    st.tuples(_U(5), st.sampled_from([4, 8])).map(lambda t: ("bbp", t)),
    st.tuples(_U(5), _U(32)).map(lambda t: ("bip", (t[0], t[1], 4))),
    st.booleans().map(lambda b: ("bep", (b,))),
    st.tuples(_U(5), _U(8), st.booleans()).map(lambda t: ("cfe", t)),
    st.tuples(_U(6), _U(64)).map(lambda t: ("evd", t)),
    st.tuples(_U(8), st.one_of(st.none(), _U(16)), st.booleans(), st.booleans()).map(
        lambda t: ("trig", t)),
    st.tuples(_U(4), _U(4), _U(4)).map(lambda t: ("pwrx", t)),
    st.booleans().map(lambda b: ("mode_exec", (64,), {"iflag": b})),
)


_KIND_OF = {"tnt8": Kind.TNT8, "tnt64": Kind.TNT64, "tip": Kind.TIP, "fup": Kind.FUP,
            "tip_pge": Kind.TIP_PGE, "tip_pgd": Kind.TIP_PGD, "psb": Kind.PSB,
            "psbend": Kind.PSBEND, "ovf": Kind.OVF, "cyc": Kind.CYC, "mtc": Kind.MTC,
            "bbp": Kind.BBP, "bip": Kind.BIP, "bep": Kind.BEP, "cfe": Kind.CFE,
            "evd": Kind.EVD, "trig": Kind.TRIG, "pwrx": Kind.PWRX, "mode_exec": Kind.MODE_EXEC}


@settings(max_examples=80, deadline=None)
@given(st.lists(_CALLS, min_size=1, max_size=30))
def test_any_sequence_decodes_to_its_calls_and_reencodes_identically(calls):
    """Each call writes one packet: the decoder finds them at the offsets the encoder
    returned, of the kinds called, with the IPs the encoder compressed; re-encoding the
    decoded packets gives the same bytes."""
    enc = Encoder()
    written = []                                    # (offset, kind, ip or None)
    for call in calls:
        name, args = call[0], call[1]
        if name == "bip":                           # a BIP only exists inside its block
            written.append((enc.bbp(0, 4), Kind.BBP, None))
        offset = getattr(enc, name)(*args, **(call[2] if len(call) > 2 else {}))
        ip = args[0] if name in ("tip", "fup", "tip_pge", "tip_pgd") else None
        written.append((offset, _KIND_OF[name], ip))
    data = enc.getvalue()
    pkts = _decode(data)
    assert [(p.offset, p.kind) for p in pkts] == [(o, k) for o, k, _ in written]
    assert [p.ip for p in pkts if p.ipc] == [ip for _, _, ip in written if ip is not None]
    assert sum(p.size for p in pkts) == len(data)
    again = Encoder()
    for p in pkts:
        again.encode(p)
    assert again.getvalue() == data

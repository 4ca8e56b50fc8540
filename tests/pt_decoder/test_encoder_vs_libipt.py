"""Property tests: ptdebug's packet encoder against libipt 2.0.5's pt_enc_next / pt_pkt_next.

Random valid packet sequences of every kind libipt 2.0.5 knows (every IP compression, long
TNTs, PSB+ headers) must give IDENTICAL bytes from both encoders, libipt's packet decoder
must read back exactly the packets that went in, and ptdebug's own decoder must read the
same packets as libipt's.
"""
from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle import libipt
from oracle.compare import decode_ours_as_libipt

from pt_decoder.encoder import Encoder

libipt.require()          # fails loudly where libipt is missing; bootstrap installs it

U = lambda bits: st.integers(0, (1 << bits) - 1)
IPCS = {0: 0, 1: 16, 2: 32, 3: 48, 4: 48, 6: 64}


def _ip(kind, method):
    @st.composite
    def build(draw):
        ipc = draw(st.sampled_from(sorted(IPCS)))
        if ipc == 0:
            return (method, (None, 0)), {"kind": kind, "ipc": 0, "ip": 0}
        ip = draw(U(IPCS[ipc]))
        return (method, (ip, ipc)), {"kind": kind, "ipc": ipc, "ip": ip}
    return build()


@st.composite
def _tnt(draw, kind, method, max_bits):
    n = draw(st.integers(1, max_bits))
    bits = draw(U(n))
    return (method, (bits, n)), {"kind": kind, "bit_size": n, "payload": bits}


def _simple(method, args, d):
    return st.just(((method, args), d))


_PWRX_WAKE = st.sampled_from([0, 1, 4, 8, 5, 9, 12, 13])   # bit 1 unknown to libipt 2.0.5


def _mwait():
    return st.tuples(U(32), U(32)).map(
        lambda t: (("mwait", t), {"kind": "mwait", "hints": t[0], "ext": t[1]}))


def _pwrx():
    return st.tuples(U(4), U(4), _PWRX_WAKE).map(lambda t: (
        ("pwrx", t), {"kind": "pwrx", "last": t[0], "deepest": t[1], "interrupt": t[2] & 1,
                      "store": t[2] >> 2 & 1, "autonomous": t[2] >> 3 & 1}))


PACKET = st.one_of(
    _simple("pad", (), {"kind": "pad"}),
    _simple("ovf", (), {"kind": "ovf"}),
    _simple("stop", (), {"kind": "stop"}),
    _tnt("tnt.8", "tnt8", 6),
    _tnt("tnt.64", "tnt64", 47),
    _ip("tip", "tip"), _ip("tip.pge", "tip_pge"), _ip("tip.pgd", "tip_pgd"), _ip("fup", "fup"),
    st.sampled_from([16, 32, 64]).map(lambda b: (("mode_exec", (b,)), {
        "kind": "mode", "leaf": "exec", "csl": int(b == 64), "csd": int(b == 32)})),
    st.tuples(st.booleans(), st.booleans()).map(lambda t: (("mode_tsx", t), {
        "kind": "mode", "leaf": "tsx", "intx": int(t[0]), "abrt": int(t[1])})),
    st.tuples(U(47), st.booleans()).map(lambda t: (("pip", (t[0] << 5, t[1])), {
        "kind": "pip", "cr3": t[0] << 5, "nr": int(t[1])})),
    U(56).map(lambda v: (("tsc", (v,)), {"kind": "tsc", "tsc": v})),
    st.tuples(U(16), U(9)).map(lambda t: (("tma", t), {"kind": "tma", "ctc": t[0], "fc": t[1]})),
    U(8).map(lambda v: (("mtc", (v,)), {"kind": "mtc", "ctc": v})),
    # libipt 2.0.5's decoder refuses a CYC longer than 9 bytes (61 value bits).
    st.one_of(U(5), U(12), U(61)).map(lambda v: (("cyc", (v,)), {"kind": "cyc", "value": v})),
    U(8).map(lambda v: (("cbr", (v,)), {"kind": "cbr", "ratio": v})),
    U(40).map(lambda v: (("vmcs", (v << 12,)), {"kind": "vmcs", "base": v << 12})),
    U(64).map(lambda v: (("mnt", (v,)), {"kind": "mnt", "payload": v})),
    st.tuples(st.sampled_from([4, 8]), st.booleans(), U(64)).map(lambda t: (
        ("ptw", (t[2] & ((1 << 8 * t[0]) - 1), t[0], t[1])),
        {"kind": "ptw", "payload": t[2] & ((1 << 8 * t[0]) - 1), "plc": t[0] // 8,
         "ip": int(t[1])})),
    _mwait(),
    st.tuples(U(4), U(4), st.booleans()).map(lambda t: (("pwre", t), {
        "kind": "pwre", "state": t[0], "sub_state": t[1], "hw": int(t[2])})),
    _pwrx(),
    st.booleans().map(lambda b: (("exstop", (b,)), {"kind": "exstop", "ip": int(b)})),
)


@st.composite
def psb_plus(draw):
    """PSB, then the header packets a PSB+ carries, then PSBEND."""
    ops = [(("psb", ()), {"kind": "psb"})]
    ops += draw(st.lists(st.one_of(
        U(56).map(lambda v: (("tsc", (v,)), {"kind": "tsc", "tsc": v})),
        st.tuples(U(16), U(9)).map(lambda t: (("tma", t), {"kind": "tma", "ctc": t[0],
                                                           "fc": t[1]})),
        U(8).map(lambda v: (("cbr", (v,)), {"kind": "cbr", "ratio": v})),
        st.just((("mode_exec", (64,)), {"kind": "mode", "leaf": "exec", "csl": 1, "csd": 0})),
        _ip("fup", "fup")), max_size=5))
    ops.append((("psbend", ()), {"kind": "psbend"}))
    return ops


SEQUENCE = st.lists(st.one_of(PACKET.map(lambda op: [op]), psb_plus()), min_size=1,
                    max_size=25).map(lambda chunks: [op for chunk in chunks for op in chunk])


def _encode_ours(ops) -> bytes:
    enc = Encoder()
    for (method, args), _ in ops:
        getattr(enc, method)(*args)
    return enc.getvalue()


def _with_offsets(dicts, data: bytes) -> list[dict]:
    out, offset = [], 0
    for d, got in zip(dicts, libipt.libipt_packets(data, sync=False)):
        out.append({**d, "offset": offset, "size": got["size"]})
        offset += got["size"]
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SEQUENCE)
def test_identical_bytes_and_packets(ops):
    ours = _encode_ours(ops)
    dicts = [d for _, d in ops]
    theirs = libipt.libipt_encode(dicts)
    assert ours == theirs
    decoded = libipt.libipt_packets(ours, sync=False)
    assert [{k: v for k, v in p.items() if k not in ("offset", "size")} for p in decoded] == dicts
    assert sum(p["size"] for p in decoded) == len(ours)
    assert decode_ours_as_libipt(ours, sync=False) == decoded


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["tip", "fup", "tip_pge", "tip_pgd", "psb"]),
                          st.one_of(U(16), U(32), U(47), U(64),
                                    st.just(0xFFFF_8000_0000_0000 | 0x1234))),
                min_size=1, max_size=30))
def test_auto_ip_compression_is_smallest_and_libipt_reads_it(calls):
    """IP packets with ipc=None: libipt reads the same bytes, and no smaller IPBytes
    encoding would have reproduced the IP (last-IP rules of the SDM)."""
    enc = Encoder()
    sizes = {0: 0, 1: 2, 2: 4, 3: 6, 4: 6, 6: 8}
    for method, ip in calls:
        if method == "psb":
            enc.psb()
            continue
        last = enc.last_ip
        start = enc.offset
        getattr(enc, method)(ip)
        written = enc.getvalue()[start:]
        ipc = written[0] >> 5
        for smaller, nbytes in sizes.items():
            if smaller == 0 or nbytes >= sizes[ipc] or (last is None and smaller in (1, 2, 4)):
                continue
            payload = ip & ((1 << 8 * nbytes) - 1)
            from pt_decoder.encoder import reconstruct_ip
            assert reconstruct_ip(smaller, payload, last or 0) != ip, (method, hex(ip), smaller)
    data = enc.getvalue()
    assert libipt.libipt_encode(libipt.libipt_packets(data, sync=False)) == data

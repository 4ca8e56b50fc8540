"""Every real recording in ../shared/traces: ptdebug's packet decoder reads exactly the
packets (kind, offset, size, payload fields) that Debian's libipt 2.0.5 reads, finds the
same PSBs forwards and backwards, and rebuilds the same IPs from last-IP compression.
"""
from __future__ import annotations

import pytest
from oracle import libipt
from oracle.compare import decode_ours, decode_ours_as_libipt, packet_module

from pt_decoder.encoder import reconstruct_ip

libipt.require()          # fails loudly where libipt is missing; bootstrap installs it

REAL_TRACES = [
    "dynamorio-drpt2trace/test_simple.raw-2022-07-07-x86_64-hello/pt.bin",
    "dynamorio-drpt2trace/test_simple.raw-2022-07-06-i386-hello/pt.bin",
    "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello/pt.bin",
    "lldb-intelpt/intelpt-trace/3842849.trace",
    "synthetic-oracle/work.pt",
]


@pytest.fixture(params=REAL_TRACES, ids=[t.split("/")[1] for t in REAL_TRACES])
def trace(request, traces_dir) -> bytes:
    return (traces_dir / request.param).read_bytes()


def test_packets_equal_libipt(trace):
    theirs = libipt.libipt_packets(trace)
    ours = decode_ours_as_libipt(trace)
    assert len(theirs) > 10
    assert ours == theirs


def test_packets_equal_libipt_from_offset_zero_without_sync(trace):
    assert decode_ours_as_libipt(trace, sync=False) == libipt.libipt_packets(trace, sync=False)


def test_psb_offsets_forwards_and_backwards(trace):
    ref = libipt.PacketDecoder(trace)
    want_fwd = []
    while ref.sync_forward() >= 0:
        want_fwd.append(ref.sync_offset())
    ref.close()
    ref = libipt.PacketDecoder(trace)
    want_back = []
    while ref.sync_backward() >= 0:
        want_back.append(ref.sync_offset())
    ref.close()
    dec = packet_module().PacketDecoder(trace)
    fwd = []
    while (off := dec.sync_forward()) is not None:
        fwd.append(off)
    dec = packet_module().PacketDecoder(trace)
    back = []
    while (off := dec.sync_backward()) is not None:
        back.append(off)
    assert (fwd, back) == (want_fwd, want_back)
    assert fwd and back == fwd[::-1]


def test_last_ip_reconstruction_agrees_with_the_sdm_rules(trace):
    """IPs the decoder rebuilds = the SDM's last-IP rules applied to libipt's raw payloads
    (last-IP unknown after each PSB)."""
    last = None
    want = []
    for p in libipt.libipt_packets(trace):
        if p["kind"] == "psb":
            last = None
        elif p["kind"] in ("tip", "tip.pge", "tip.pgd", "fup") and p["ipc"]:
            if p["ipc"] in (1, 2, 4) and last is None:
                want.append((p["offset"], None))
                continue
            last = reconstruct_ip(p["ipc"], p["ip"], last or 0)
            want.append((p["offset"], last))
    got = [(p.offset, p.ip if p.ip_valid else None) for p in decode_ours(trace)
           if not isinstance(p, dict) and p.ipc and p.name in ("TIP", "TIP_PGE", "TIP_PGD", "FUP")]
    assert got == want


def test_damaged_traces_fail_and_resync_like_libipt(trace):
    """Bit flips and truncation (a bounded, seeded run): the same packets, the same errors
    at the same offsets, the same resynchronisation as libipt (packets libipt 2.0.5 does
    not know are turned off, so that 0xD9 stays a bad opcode as in libipt)."""
    import random

    rng = random.Random(len(trace))
    rounds = 12 if len(trace) > 8000 else 40
    packet_bytes = [i for i, b in enumerate(trace) if b]        # not the PAD filler
    clean = libipt.libipt_packets(trace)
    changed = 0
    for _ in range(rounds):
        damaged = bytearray(trace)
        for _ in range(rng.randrange(1, 8)):
            damaged[rng.choice(packet_bytes)] ^= 1 << rng.randrange(8)
        damaged = bytes(damaged[:rng.randrange(len(damaged) // 2, len(damaged) + 1)])
        theirs = libipt.libipt_packets(damaged)
        assert decode_ours_as_libipt(damaged, sdm_packets=False) == theirs
        changed += theirs != clean
    assert changed > rounds // 2

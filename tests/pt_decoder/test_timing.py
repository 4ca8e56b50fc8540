"""Timing layer: TSC per instruction equals libipt's for every timing setup.

Layer: tests of pt_decoder.timing through the instruction flow. A real path
(the 59,234 instructions of the static-glibc hello, recorded on hardware) is
encoded by FlowEncoder with timing packets under several configurations
(MTC frequency, CYC on/off, core:bus ratio, CPUID 0x15 crystal ratio, cycle
costs with stalls), then decoded by ptdebug and by libipt 2.0.5 (ctypes
oracle): every instruction's TSC (libipt's pt_insn_time after pt_insn_next)
must be equal, and the cycle column must add up the CYC packets.
"""
from __future__ import annotations

import gzip
import random
from itertools import accumulate

import pytest

from pt_decoder.flow_encoder import FlowEncoder
from pt_decoder.image import Image
from pt_decoder.insn import InsnDecoder

GLIBC = "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"


@pytest.fixture(scope="module")
def real_path(traces_dir):
    folder = traces_dir / GLIBC
    with gzip.open(folder / "pt.libipt-2.0.5.insn.txt.gz", "rt") as fh:
        ips = [int(line.split()[0], 16) for line in fh if line[0] in "0123456789abcdef"]
    image = Image()
    image.add_elf(str(folder / "hello"))
    return ips[:20_000], image, folder / "hello"


@pytest.mark.parametrize("mtc_freq,cyc,nom_freq,ratio,seed", [
    (3, True, 36, (2, 300), 1),
    (0, True, 24, (1, 100), 2),
    (6, False, 36, (2, 300), 3),
    (9, True, 0, (3, 250), 4),       # no nominal frequency: CYC calibrated from MTCs only
])
def test_tsc_per_instruction_equals_libipt(real_path, mtc_freq, cyc, nom_freq, ratio, seed):
    from oracle import libipt
    assert libipt.available(), "libipt.so.2 is missing: scripts/bootstrap.sh installs libipt-dev"
    ips, image, elf = real_path
    rng = random.Random(seed)
    costs = [rng.choice((1, 1, 2, 3, 5)) if rng.random() > 0.01 else rng.randrange(50, 900) for _ in ips]
    tscs = list(accumulate(costs, initial=1 << 36))[1:]
    fe = FlowEncoder(image.read, timing=True, cyc=cyc, psb_period=2048, mtc_freq=mtc_freq,
                     nom_freq=nom_freq or 36, cpuid_0x15=ratio)
    data = fe.encode(ips, tscs=tscs)
    flow = InsnDecoder(data, image, mtc_freq=mtc_freq, nom_freq=nom_freq, cpuid_0x15_eax=ratio[0],
                       cpuid_0x15_ebx=ratio[1]).decode()
    assert list(flow.ip) == ips
    ref = [r for r in libipt.libipt_insns(data, libipt.elf_sections(elf), mtc_freq=mtc_freq, nom_freq=nom_freq,
                                          cpuid_0x15=ratio) if r["type"] == "insn"]
    assert [r["ip"] for r in ref] == ips
    assert [r["tsc"] for r in ref] == list(flow.tsc)
    # the estimate ends close to the true clock (CYC-based estimates may run a
    # little ahead between MTCs and be pulled back by the next one, as in libipt)
    assert abs(flow.tsc[-1] - tscs[-1]) < 20_000


def test_cycle_column_adds_up_the_cyc_packets(real_path):
    from pt_decoder.packet import PacketDecoder
    ips, image, _ = real_path
    data = FlowEncoder(image.read, timing=True, cyc=True, psb_period=0).encode(ips)
    flow = InsnDecoder(data, image, mtc_freq=3, nom_freq=36, cpuid_0x15_eax=2, cpuid_0x15_ebx=300).decode()
    dec = PacketDecoder(data)
    dec.sync_forward()
    cyc = [(p.offset, p.payload) for p in dec if p.name == "CYC"]
    assert len(cyc) > 500
    assert all(a <= b for a, b in zip(flow.cycles, flow.cycles[1:]))
    # every CYC up to the last packet the flow used is counted, none twice
    assert flow.cycles[-1] <= sum(v for _, v in cyc)
    assert flow.cycles[-1] >= sum(v for _, v in cyc[:-8])

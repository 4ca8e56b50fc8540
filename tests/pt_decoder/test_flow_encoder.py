"""FlowEncoder: real programs' instruction paths -> PT -> libipt's instruction decoder gives
the same path back, instruction for instruction.

Paths: the static-glibc hello recorded with Intel PT by DynamoRIO (59,234 instructions
with syscalls; taken from libipt's reference decode of that recording) and the gdb
single-step recording of work() (synthetic-oracle/work.truth.json).
"""
from __future__ import annotations

import gzip
import json
import random

import pytest
from oracle import libipt

from pt_decoder.flow_encoder import COND, FAR, ICALL, OTHER, RET, FlowEncoder
from pt_decoder.image import Image

libipt.require()          # fails loudly where libipt is missing; bootstrap installs it
GLIBC = "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"
TIMING = dict(mtc_freq=3, nom_freq=36, cpuid_0x15=(2, 300))


@pytest.fixture(scope="module")
def glibc(traces_dir):
    folder = traces_dir / GLIBC
    with gzip.open(folder / "pt.libipt-2.0.5.insn.txt.gz", "rt") as fh:
        ips = [int(line.split()[0], 16) for line in fh if line[0] in "0123456789abcdef"]
    image = Image()
    image.add_elf(str(folder / "hello"))
    return ips, image, folder / "hello"


@pytest.fixture(scope="module")
def work(traces_dir):
    folder = traces_dir / "synthetic-oracle"
    truth = json.loads((folder / "work.truth.json").read_text())
    image = Image()
    image.add_elf(str(folder / "work"))
    return truth["pcs"], truth["ret"], image, folder / "work"


def _decode(data, elf, **kw):
    return libipt.libipt_insns(data, libipt.elf_sections(elf), "6/0x4e", **TIMING, **kw)


def _stamps(n, seed):
    rng, t, out = random.Random(seed), 1 << 40, []
    for _ in range(n):
        t += rng.choice((1, 1, 2, 3, 7, 30, 200))
        out.append(t)
    return out


@pytest.mark.parametrize("options", [
    {},
    {"timing": True, "cyc": True},
    {"return_compression": False, "long_tnt": True, "psb_period": 512},
], ids=["plain", "timing+cyc", "no-retcomp+long-tnt+psb512"])
def test_real_glibc_path_comes_back_exactly(glibc, options):
    ips, image, elf = glibc
    data = FlowEncoder(image.read, **options).encode(ips, tscs=_stamps(len(ips), 1))
    records = _decode(data, elf, time=False)
    assert [r for r in records if r["type"] == "error"] == []
    assert libipt.ips(records) == ips


def test_glibc_path_syscalls_are_far_transfers_disabling_tracing(glibc):
    ips, image, elf = glibc
    fe = FlowEncoder(image.read)
    data = fe.encode(ips)
    far = sum(1 for ip in set(ips) if fe.classify(ip)[0] == FAR)
    packets = libipt.libipt_packets(data)
    pgd = [p for p in packets if p["kind"] == "tip.pgd"]
    assert far >= 5                                   # write, brk, arch_prctl, ...
    assert all(p["ipc"] == 0 for p in pgd[:-1])       # kernel IPs suppressed
    assert sum(1 for p in packets if p["kind"] == "tip.pge") == len(pgd)


def test_work_path_with_timing_ptwrite_and_frequent_psb(work):
    ips, ret, image, elf = work
    tscs = _stamps(len(ips), 2)
    ptw = {5: 0x1234, 100: 2**64 - 1, len(ips) - 1: 7}
    data = FlowEncoder(image.read, timing=True, cyc=True, psb_period=40).encode(
        ips, tscs=tscs, ptwrites=ptw, end_ip=ret)
    records = _decode(data, elf)
    insns = [r for r in records if r["type"] == "insn"]
    assert [r["ip"] for r in insns] == ips
    writes = [(r["ip"], r["payload"]) for r in records if r.get("event") == "ptwrite"]
    assert writes == [(ips[k], v) for k, v in sorted(ptw.items())]
    assert sum(1 for p in libipt.libipt_packets(data) if p["kind"] == "psb") > 3
    # libipt's clock starts at the first stamp and never leaves the stamped span.
    times = [r["tsc"] for r in insns]
    assert times[0] == tscs[0]
    assert all(tscs[0] <= t <= tscs[-1] + 64 for t in times)


def test_cycle_counts_drive_cyc_packets(work):
    """With per-instruction cycle counts, the CYC payloads add up to the cycles between
    the first and the last instruction (no TSC after the start in this short path)."""
    ips, ret, image, elf = work
    tscs = _stamps(len(ips), 3)
    cycles = [2 * (t - tscs[0]) + 1000 for t in tscs]          # core at twice the TSC rate
    data = FlowEncoder(image.read, timing=True, cyc=True, psb_period=0).encode(
        ips, tscs=tscs, cycles=cycles)
    packets = libipt.libipt_packets(data)
    total = sum(p["value"] for p in packets if p["kind"] == "cyc")
    assert 0 < total <= cycles[-1] - cycles[0]
    assert total >= cycles[-2] - cycles[0] - 2 * max(b - a for a, b in zip(tscs, tscs[1:]))
    assert libipt.ips(_decode(data, elf, time=False)) == ips


def test_end_ip_closes_with_the_last_return(work):
    ips, ret, image, elf = work
    fe = FlowEncoder(image.read)
    assert fe.classify(ips[-1])[0] == RET
    data = fe.encode(ips, end_ip=ret)
    packets = libipt.libipt_packets(data)
    assert packets[-1]["kind"] == "tip.pgd" and packets[-1]["ip"] & 0xFFFF == ret & 0xFFFF
    assert libipt.ips(_decode(data, elf, time=False)) == ips


@pytest.mark.parametrize("style", ["pgd_pge", "fup_tip"])
def test_unexplained_jumps_are_async_events(work, style):
    """Splice the path: after a non-branch, an indirect call, a conditional branch and a
    return, continue somewhere the code does not lead (as a signal handler would)."""
    ips, ret, image, elf = work
    fe = FlowEncoder(image.read, discontinuity=style)
    classes = [fe.classify(ip)[0] for ip in ips]
    cuts = [next(k for k, c in enumerate(classes) if c == want and k > 3)
            for want in (OTHER, ICALL, COND, RET)]
    path, start = [], 0
    for n, cut in enumerate(sorted(cuts)):
        path += ips[start:cut + 1]
        start = [10, 40, 3, 60][n]                      # resume at an unrelated point
    path += ips[start:]
    data = fe.encode(path, end_ip=ret)
    records = _decode(data, elf, time=False)
    assert [r for r in records if r["type"] == "error"] == []
    assert libipt.ips(records) == path
    events = {r["event"] for r in records if r["type"] == "event"}
    assert ("async_branch" in events) if style == "fup_tip" else ("async_disabled" in events)


def test_indirect_branches_and_rep_iterations(work):
    """A rep-string instruction seen once per iteration is one instruction to PT."""
    ips, ret, image, elf = work
    fe = FlowEncoder(image.read)
    k = next(i for i, ip in enumerate(ips) if fe.classify(ip)[0] == OTHER)
    path = ips[:k + 1] + [ips[k]] * 3 + ips[k + 1:]
    data = fe.encode(path, end_ip=ret)
    assert libipt.ips(_decode(data, elf, time=False)) == ips
    assert any(fe.classify(ip)[0] in (ICALL, RET) for ip in ips)


def test_32_bit_code(traces_dir):
    """The i386 hello (recorded by DynamoRIO): MODE.Exec 32-bit and 32-bit decoding."""
    folder = traces_dir / "dynamorio-drpt2trace/test_simple.raw-2022-07-06-i386-hello"
    ips = [int(line.split()[0], 16) for line in
           (folder / "pt.libipt-2.0.5.insn.txt").read_text().splitlines()
           if line[:1] in tuple("0123456789abcdef")]
    image = Image()
    image.add_elf(str(folder / "hello"))
    fe = FlowEncoder(image.read, bits=32)
    records = libipt.libipt_insns(fe.encode(ips), libipt.elf_sections(folder / "hello"),
                                  "6/85/4", time=False)
    assert libipt.ips(records) == ips and len(ips) == 6
    assert {r["mode"] for r in records if r["type"] == "insn"} == {"32bit"}


def test_bad_input_is_named():
    image = Image()
    image.add_raw(b"\x90\x90\xc3", 0x1000)
    fe = FlowEncoder(image.read)
    with pytest.raises(ValueError, match="no code mapped at 0x2000"):
        fe.encode([0x1000, 0x2000])
    with pytest.raises(ValueError, match="tscs has 1 stamps for 2"):
        fe.encode([0x1000, 0x1001], tscs=[5])
    with pytest.raises(ValueError, match="cycles has 3 counts for 2"):
        fe.encode([0x1000, 0x1001], cycles=[5, 6, 7])
    with pytest.raises(ValueError, match="ptwrites index 9"):
        fe.encode([0x1000], ptwrites={9: 1})
    with pytest.raises(ValueError, match="ptwrites.0. must be one 64-bit value"):
        fe.encode([0x1000], ptwrites={0: [1, 2]})
    with pytest.raises(ValueError, match="discontinuity"):
        FlowEncoder(image.read, discontinuity="x")
    bad = Image()
    bad.add_raw(b"\x06", 0x1000)                       # push es: invalid in 64-bit mode
    with pytest.raises(ValueError, match="cannot decode the instruction at 0x1000"):
        FlowEncoder(bad.read).encode([0x1000])


def _stepper_stamps(n, seed):
    """Stamps like the ptrace stepper's: one clock reading per stop, the instructions
    between two stops sharing it, and gaps from a few MTC periods (a stop's cost) to
    more than the 255 periods an 8-bit MTC payload can tell apart (a sleep)."""
    rng, t, out = random.Random(seed), 1 << 40, []
    for _ in range(n):
        if rng.random() < 0.05:
            t += rng.choice((1, 700, 1300, 5000, 40_000, 2_000_000))
        out.append(t)
    return out


def test_time_of_coarse_stamps_never_runs_backwards(glibc):
    """Regression: the CYC before an MTC carried cycles past the MTC's edge, so the MTC
    pulled the decoded time back (and skewed the cycle calibration); a TSC at enable
    left the MTC unarmed, so the next MTC's CTC lay before the TMA's and wrapped. Time
    decoded from coarse stamps is monotonic, inside the stamped span, and equal in
    libipt and in our decoder."""
    from pt_decoder.insn import InsnDecoder
    ips, image, elf = glibc
    stamps = _stepper_stamps(len(ips), 7)
    data = FlowEncoder(image.read, timing=True, cyc=True, psb_period=4096,
                       **TIMING).encode(ips, tscs=stamps)
    kinds = [p["kind"] for p in libipt.libipt_packets(data)]
    assert kinds.count("mtc") > 100 and "cyc" in kinds
    ref = [r for r in _decode(data, elf) if r["type"] == "insn"]
    times = [r["tsc"] for r in ref]
    assert [r["ip"] for r in ref] == ips
    assert all(a <= b for a, b in zip(times, times[1:]))
    assert stamps[0] <= times[0] and times[-1] <= stamps[-1]
    flow = InsnDecoder(data, image, mtc_freq=3, nom_freq=36, cpuid_0x15_eax=2,
                       cpuid_0x15_ebx=300).decode()
    assert list(flow.tsc) == times


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_path_encoded_in_pieces_is_the_stream_encoded_at_once(work, glibc, seed):
    """start()/feed()/finish() (the stepper encodes its window while recording it:
    adapter/capture/live_encoding.py) write the bytes encode() writes for the whole path,
    wherever the pieces end: with timing, CYC, PTWRITE values and PSB+ every 40 bytes."""
    for ips, end_ip, image in ((work[0], work[1], work[2]), (glibc[0], None, glibc[1])):
        tscs = _stamps(len(ips), seed)
        ptw = {5: 0x1234, len(ips) // 2: 9, len(ips) - 1: 7}
        options = {"timing": True, "cyc": True, "psb_period": 40, **TIMING}
        whole = FlowEncoder(image.read, **options).encode(ips, tscs=tscs, ptwrites=ptw,
                                                          end_ip=end_ip)
        run = FlowEncoder(image.read, **options).start(tscs=tscs, ptwrites=ptw)
        run.begin(ips)
        rng, at = random.Random(seed), 0
        while at < len(ips) - 1:
            at = min(len(ips) - 1, at + rng.choice((1, 2, 7, 64, 500)))
            run.feed(ips, at)
        assert run.finish(ips, end_ip) == whole

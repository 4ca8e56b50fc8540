"""The instruction flow of REAL Intel PT recordings equals libipt's.

Layer: tests of pt_decoder's event/insn/timing layers through `ptdebug decode`.
The recordings and their libipt 2.0.5 reference decodes live in
../shared/traces (README there gives the CPU and timing options used):
DynamoRIO's x86-64 hello (8 instructions), i386 hello (6, 32-bit mode),
static-glibc hello (59,234) and LLDB's single-thread trace (21). Each decode
must give the same IPs in the same order as the reference, and, where libipt
reports a time, the same TSC per instruction (libipt's pt_insn_time after each
pt_insn_next, through the project's ctypes oracle).
"""
from __future__ import annotations

import contextlib
import gzip
import io
import re

import pytest

from pt_decoder.event import cpu_errata
from pt_decoder.image import Image
from pt_decoder.insn import InsnDecoder
from pt_decoder.tools import decode

DR = "dynamorio-drpt2trace"
TIMING = {"mtc_freq": 3, "nom_freq": 37, "cpuid_0x15_eax": 2, "cpuid_0x15_ebx": 308}
CASES = {
    "x86_64-hello": (DR + "/test_simple.raw-2022-07-07-x86_64-hello", "pt.bin", "hello", (6, 85, 4), TIMING, 8),
    "i386-hello": (DR + "/test_simple.raw-2022-07-06-i386-hello", "pt.bin", "hello", (6, 85, 4), TIMING, 6),
    "static-glibc-hello": (DR + "/test_simple.tracedir-2022-06-22-static-glibc-hello", "pt.bin", "hello",
                           (6, 85, 7), {}, 59234),
    "lldb": ("lldb-intelpt/intelpt-trace", "3842849.trace", "a.out", (6, 79, 1), {}, 21),
}


def _reference_ips(folder) -> list[int]:
    for path in folder.glob("*.libipt-2.0.5.insn.txt*"):
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt") as f:
            return [int(m.group(1), 16) for m in (re.match(r"(?:\? )?([0-9a-f]{16}) ", line) for line in f) if m]
    raise AssertionError("no reference decode in %s" % folder)


def _argv(folder, trace, elf, cpu, timing) -> list[str]:
    argv = [str(folder / trace), "--elf", str(folder / elf), "--cpu", "%d/%d/%d" % cpu, "--format", "ips"]
    names = {"mtc_freq": "--mtc-freq", "nom_freq": "--nom-freq", "cpuid_0x15_eax": "--cpuid-0x15.eax",
             "cpuid_0x15_ebx": "--cpuid-0x15.ebx"}
    for key, value in timing.items():
        argv += [names[key], str(value)]
    return argv


@pytest.mark.parametrize("case", sorted(CASES))
def test_same_ips_in_the_same_order_as_libipt(traces_dir, case):
    sub, trace, elf, cpu, timing, count = CASES[case]
    folder = traces_dir / sub
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert decode.main(_argv(folder, trace, elf, cpu, timing)) == 0
    lines = out.getvalue().splitlines()
    assert all(line.startswith("[") or re.fullmatch(r"[0-9a-f]+", line) for line in lines)
    ips = [int(line, 16) for line in lines if not line.startswith("[")]
    assert len(ips) == count
    assert ips == _reference_ips(folder)
    assert not any("error" in line for line in lines)


def _ours(folder, trace, elf, cpu, timing):
    image = Image()
    image.add_elf(str(folder / elf))
    data = (folder / trace).read_bytes()
    return InsnDecoder(data, image, errata=cpu_errata(*cpu), **timing).decode(), data


@pytest.mark.parametrize("case", ["x86_64-hello", "i386-hello", "lldb", "static-glibc-hello"])
def test_tsc_per_instruction_equals_libipt(traces_dir, case):
    from oracle import libipt
    assert libipt.available(), "libipt.so.2 is missing: scripts/bootstrap.sh installs libipt-dev"
    sub, trace, elf, cpu, timing, count = CASES[case]
    folder = traces_dir / sub
    flow, data = _ours(folder, trace, elf, cpu, timing)
    ref = libipt.libipt_insns(data, libipt.elf_sections(folder / elf), cpu=cpu,
                              mtc_freq=timing.get("mtc_freq", 0), nom_freq=timing.get("nom_freq", 0),
                              cpuid_0x15=(timing.get("cpuid_0x15_eax", 0), timing.get("cpuid_0x15_ebx", 0)))
    insns = [r for r in ref if r["type"] == "insn"]
    assert [r["ip"] for r in insns] == list(flow.ip)
    timed = [(i, r["tsc"]) for i, r in enumerate(insns) if "tsc" in r]
    # LLDB's recording has no TSC packets (libipt reports no time for it).
    assert len(timed) == (0 if case == "lldb" else count)
    assert [flow.tsc[i] for i, _ in timed] == [tsc for _, tsc in timed]
    # time never runs backwards within one stream
    assert all(a <= b for a, b in zip(flow.tsc, flow.tsc[1:]))

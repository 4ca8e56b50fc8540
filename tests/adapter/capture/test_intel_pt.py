"""The Intel PT backend's pieces that do not need the hardware: the event
config against the format strings the kernel's intel_pt driver publishes
(arch/x86/events/intel/pt.c, PMU_FORMAT_ATTR lines, checked against the
source), the attr layout, ring and AUX readers on bytes written here, the
sideband conversion, and the clear error where the PMU is absent."""
from __future__ import annotations

import ctypes
import pathlib
import struct
import subprocess
import sys

import pytest

from adapter.capture import intel_pt as ipt
from adapter.capture.bundle import BundleWriter
from adapter.hw import cpu as cpu_mod
from adapter.hw import perf

ROOT = pathlib.Path(__file__).resolve().parents[3]

# /sys/bus/event_source/devices/intel_pt/format/* on a Linux 6.x Intel host:
# facts of the kernel's driver, one file per term.
KERNEL_FORMATS = {
    "pt": "config:0", "cyc": "config:1", "pwr_evt": "config:4", "fup_on_ptw": "config:5",
    "mtc": "config:9", "tsc": "config:10", "noretcomp": "config:11", "ptw": "config:12",
    "branch": "config:13", "mtc_period": "config:14-17", "cyc_thresh": "config:19-22",
    "psb_period": "config:24-27", "event": "config:31", "notnt": "config:55",
}
# caps/* of a Skylake client (values as the driver prints them, hex)
SKYLAKE_CAPS = {"cr3_filtering": 1, "psb_cyc": 1, "ip_filtering": 1, "mtc": 1,
                "ptwrite": 0, "power_event_trace": 0, "num_address_ranges": 2,
                "mtc_periods": 0x249, "cycle_thresholds": 0x3fff, "psb_periods": 0x3f}


def test_single_bit_terms_land_on_their_bits():
    for term, bit in (("pt", 0), ("cyc", 1), ("pwr_evt", 4), ("fup_on_ptw", 5), ("mtc", 9),
                      ("tsc", 10), ("noretcomp", 11), ("ptw", 12), ("branch", 13)):
        assert ipt.config_from_formats(KERNEL_FORMATS, {term: 1})["config"] == 1 << bit


def test_multi_bit_fields():
    words = ipt.config_from_formats(KERNEL_FORMATS, {"mtc_period": 3, "cyc_thresh": 0xF,
                                                     "psb_period": 5})
    assert words["config"] == (3 << 14) | (0xF << 19) | (5 << 24)
    with pytest.raises(ipt.IntelPtError, match="does not fit in its 4 bit"):
        ipt.config_from_formats(KERNEL_FORMATS, {"mtc_period": 16})


def test_what_perf_sets_for_intel_pt_u():
    """perf's default intel_pt//u: pt, tsc, mtc with mtc_period 3, branch, psb_period 3,
    the config 0x300e601 that `perf record -e intel_pt//u -vv` prints on such hosts."""
    terms = ipt.PtOptions().terms(SKYLAKE_CAPS)
    assert ipt.config_from_formats(KERNEL_FORMATS, terms)["config"] == 0x300e601


def test_split_and_other_words():
    formats = {"a": "config1:0-3,8-11", "b": "config2:63"}
    words = ipt.config_from_formats(formats, {"a": 0xAB, "b": 1})
    assert words["config1"] == 0xB | (0xA << 8) and words["config2"] == 1 << 63


def test_unknown_term_and_missing_capability():
    with pytest.raises(ipt.IntelPtError, match="has no 'bogus' term"):
        ipt.config_from_formats(KERNEL_FORMATS, {"bogus": 1})
    with pytest.raises(ipt.IntelPtError, match="ptwrite"):
        ipt.PtOptions(ptw=True).terms(SKYLAKE_CAPS)


def test_attr_layout_matches_the_uapi_offsets():
    """The fields the PT, sideband and window attrs set, in adapter.hw.perf's struct, at
    their offsets in include/uapi/linux/perf_event.h; the flag and aux_action bits too."""
    attr = perf.PerfEventAttr
    assert ctypes.sizeof(attr) == 136                                  # PERF_ATTR_SIZE_VER8
    assert (attr.type.offset, attr.size.offset, attr.config.offset) == (0, 4, 8)
    assert (attr.sample_period.offset, attr.sample_type.offset, attr.flags.offset) == \
        (16, 24, 40)
    assert (attr.bp_type.offset, attr.config1.offset, attr.bp_addr.offset) == (52, 56, 56)
    assert (attr.config2.offset, attr.bp_len.offset) == (64, 64)
    assert (attr.aux_watermark.offset, attr.aux_action.offset, attr.config3.offset) == \
        (104, 116, 128)
    a = ipt.pt_attr(8, {"config": 0x401, "config1": 0x11, "config2": 0x22, "config3": 0x33},
                    enable_on_exec=True, start_paused=True)
    raw = bytes(a)
    assert struct.unpack_from("<IIQ", raw) == (8, 136, 0x401)
    assert struct.unpack_from("<QQ", raw, 56) + struct.unpack_from("<Q", raw, 128) == \
        (0x11, 0x22, 0x33)
    flags = struct.unpack_from("<Q", raw, 40)[0]
    # disabled 0, exclude_kernel 5, exclude_hv 6, enable_on_exec 12, exclude_guest 20
    assert flags == (1 << 0) | (1 << 5) | (1 << 6) | (1 << 12) | (1 << 20)
    assert struct.unpack_from("<I", raw, 116)[0] == perf.AUX_START_PAUSED == 1
    side = struct.unpack_from("<Q", bytes(ipt.sideband_attr(False)), 40)[0]
    # inherit 1, exclude_kernel 5, exclude_hv 6, mmap 8, comm 9, task 13, sample_id_all 18,
    # mmap2 23, comm_exec 24, context_switch 26
    assert side == sum(1 << b for b in (1, 5, 6, 8, 9, 13, 18, 23, 24, 26))
    bp = ipt.window_breakpoint_attr(0x401000, perf.AUX_RESUME)
    assert (bp.type, bp.size, bp.bp_type, bp.bp_addr, bp.bp_len, bp.aux_action) == \
        (5, 136, 4, 0x401000, 8, 4)                                   # aux_resume is bit 2


def test_ring_copy_wraps_and_drops_overwritten_bytes():
    ring = bytes(range(16))
    assert ipt.ring_copy(ring, 16, 4, 10) == bytes(range(4, 10))
    assert ipt.ring_copy(ring, 16, 12, 20) == bytes(range(12, 16)) + bytes(range(4))
    assert ipt.ring_copy(ring, 16, 0, 40) == bytes(range(8, 16)) + bytes(range(8))
    assert ipt.snapshot_bytes(ring, 16, 5) == bytes(range(5))
    assert ipt.snapshot_bytes(ring, 16, 37) == bytes(range(5, 16)) + bytes(range(5))


def test_ring_records_across_the_wrap(traces_dir):
    """Real sideband records laid into a ring so that one straddles its end."""
    folder = traces_dir / "dynamorio-drpt2trace/test_simple.raw-2022-07-07-x86_64-hello"
    stream = (folder / "primary.sideband.pevent").read_bytes()
    size = 256
    assert len(stream) > size // 2
    start = size - 100                      # the writer's position grew past the end
    ring = bytearray(size)
    for i, b in enumerate(stream[:size]):
        ring[(start + i) % size] = b
    n = min(len(stream), size)
    got = ipt.parse_ring_records(ipt.ring_copy(ring, size, start, start + n)[:n])
    want = [r for _, r, _ in ipt.perfdata.iter_records(stream[:n], ipt.SIDEBAND_SAMPLE_TYPE,
                                                        True)]
    assert got == want and [r["type"] for r in got][:3] == ["SWITCH", "ITRACE_START", "COMM"]


def test_sideband_to_bundle(tmp_path):
    exe = sys.executable
    records = [
        {"type": "COMM", "pid": 7, "tid": 7, "comm": "prog"},
        {"type": "MMAP2", "pid": 7, "tid": 7, "addr": 0x400000, "len": 4096, "pgoff": 0,
         "filename": exe, "executable": True, "build_id": None},
        {"type": "MMAP2", "pid": 7, "tid": 7, "addr": 0x500000, "len": 4096, "pgoff": 0,
         "filename": exe, "executable": False, "build_id": None},
        {"type": "AUX", "truncated": True},
        {"type": "LOST", "lost": 3},
    ]
    w = BundleWriter(tmp_path / "b", "intel_pt", {"family": 6, "model": 85, "stepping": 4},
                     copy_images=False)
    problems = ipt.sideband_to_bundle(w, records)
    assert problems == ["the AUX area overflowed (trace gap)",
                        "the kernel lost 3 sideband records"]
    assert [im["load_address"] for im in w.manifest["images"]] == [0x400000]
    assert w.manifest["threads"] == [{"tid": 7, "pid": 7, "comm": "prog"}]


def test_address_filter_syntax_is_checked_before_the_kernel_sees_it():
    with pytest.raises(ipt.IntelPtError, match="bad address filter"):
        ipt.set_filter(-1, "0x1000 whatever")


@pytest.mark.skipif(cpu_mod.pmu_type("intel_pt") is not None,
                    reason="this machine has the intel_pt PMU")
def test_clear_error_where_the_pmu_is_absent(tmp_path):
    with pytest.raises(ipt.IntelPtError, match="no intel_pt PMU here"):
        ipt.require_pmu()
    run = subprocess.run([sys.executable, "-m", "adapter.cli", "record", "--backend",
                          "intel_pt", "--duration", "50", "-o", str(tmp_path / "b"), "--",
                          "true"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 1
    assert "no intel_pt PMU here" in run.stderr and "--backend stepper" in run.stderr


@pytest.mark.needs_intel_pt
@pytest.mark.skipif(cpu_mod.pmu_type("intel_pt") is None,
                    reason="no intel_pt PMU on this machine (AMD or a VM without PT)")
def test_live_intel_pt_record_decodes(tmp_path):
    out = tmp_path / "pt.bundle"
    run = subprocess.run([sys.executable, "-m", "adapter.cli", "record", "--backend",
                          "intel_pt", "-o", str(out), "--", "true"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    dec = subprocess.run([sys.executable, "-m", "adapter.cli", "decode", str(out), "--format",
                          "ips"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert dec.returncode == 0 and len(dec.stdout.splitlines()) > 1000


def test_timing_parameters_from_sysfs(tmp_path):
    pmu = tmp_path / "intel_pt"
    pmu.mkdir()
    (pmu / "max_nonturbo_ratio").write_text("37\n")
    (pmu / "tsc_art_ratio").write_text("308:2\n")   # CPUID 0x15 EBX:EAX
    t = ipt.pt_timing(ipt.PtOptions(mtc_period=3), root=tmp_path)
    assert (t["nom_freq"], t["cpuid_0x15_eax"], t["cpuid_0x15_ebx"], t["mtc_freq"]) == \
        (37, 2, 308, 3)
    assert t["tsc_hz"] == 3_700_000_000

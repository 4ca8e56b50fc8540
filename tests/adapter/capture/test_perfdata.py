"""perf.data import: the reader on files `perf record` writes here (software
events: no PT on this machine), on the real perf sideband records of an Intel
PT recording, and on a perf.data built around that recording's real PT
(AUXTRACE) which must decode to the instructions libipt gives."""
from __future__ import annotations

import shutil
import struct
import subprocess
import sys

import pytest
from perf_writer import (
    attr_bytes,
    auxtrace,
    auxtrace_info_intel_pt,
    build_id_feature,
    header_string,
    record,
    write_perf_data,
)

from adapter.capture import perfdata
from adapter.capture.bundle import read_manifest, validate

ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]
HELLO = "dynamorio-drpt2trace/test_simple.raw-2022-07-07-x86_64-hello"
PEVENT_SAMPLE_TYPE = 0x10086   # README of the traces: TID | TIME | CPU | IDENTIFIER
INTEL_PT_TYPE = 8
# The recording's facts (traces README): Skylake-SP 6/85/4, MTC period 3,
# max non-turbo ratio 37, CPUID 0x15 = 2/308; time conversion of 2022-07.
PRIV = [INTEL_PT_TYPE, 31, 581029125, 18444502336406842448, 1, 10, 11, 0, 0, 0, 9, 14,
        308, 2, 1, 37, 0]
PT_CONFIG = (1 << 10) | (1 << 9) | (3 << 14) | (1 << 1) | (1 << 13)  # tsc mtc period=3 cyc branch
SAMPLE_ID_ALL = 1 << 18


@pytest.fixture(scope="module")
def perf_record(tmp_path_factory):
    if shutil.which("perf") is None:
        pytest.fail("perf is missing: scripts/bootstrap.sh installs linux-perf")
    tmp = tmp_path_factory.mktemp("perf")
    prog = tmp / "rec_work"
    subprocess.run(["gcc", "-O1", "-o", str(prog), str(ROOT / "tests/fixtures/programs/rec_work.c")],
                   check=True)
    out = tmp / "task-clock.data"
    run = subprocess.run(["perf", "record", "-e", "task-clock", "--buildid-all", "-o", str(out),
                          "--", str(prog), "50", "20"], capture_output=True, text=True)
    if run.returncode != 0:
        pytest.fail(f"perf record failed here: {run.stderr.strip()}")
    return out, prog


def test_reads_a_real_perf_record_file(perf_record):
    path, prog = perf_record
    perf = perfdata.PerfData(path)
    assert perf.attrs[0].type == 1 and perf.attrs[0].config == 1  # software, task-clock
    assert perf.attrs[0].sample_id_all
    cpu = perf.cpu()
    with open("/proc/cpuinfo") as f:
        text = f.read()
    assert f"model\t\t: {cpu['model']}\n" in text and cpu["family"] > 0
    assert perf.features["cmdline"][-3:] == [str(prog), "50", "20"]
    mmaps = [r for r in perf.records if r["type"] == "MMAP2"]
    exe = [r for r in mmaps if r["filename"] == str(prog)]
    assert exe and any(r["executable"] for r in exe)
    assert any(r["type"] == "COMM" and r["comm"] == "rec_work" for r in perf.records)
    libc = [b for b in perf.features["build_id"] if "libc" in b["filename"]]
    assert libc and len(libc[0]["build_id"]) == 40
    assert perfdata._file_build_id(libc[0]["filename"]) == libc[0]["build_id"]
    assert any(r["type"] == "SAMPLE" for r in perf.records)


def test_import_without_intel_pt_says_why(perf_record, tmp_path):
    path, _ = perf_record
    run = subprocess.run([sys.executable, "-m", "adapter.cli", "import", str(path), "-o",
                          str(tmp_path / "b")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 2  # the input is not what import takes: bad input (adapter/cli.py)
    assert "holds no Intel PT trace (its events: software/config=0x1)" in run.stderr
    assert "perf record -e intel_pt//u" in run.stderr


def test_not_a_perf_file(tmp_path):
    bad = tmp_path / "x.data"
    bad.write_bytes(b"hello world, not perf" * 8)
    with pytest.raises(perfdata.PerfDataError, match="not a perf.data file"):
        perfdata.PerfData(bad)


def test_truncated_perf_file(perf_record, tmp_path):
    path, _ = perf_record
    cut = tmp_path / "cut.data"
    cut.write_bytes(path.read_bytes()[:400])
    with pytest.raises(perfdata.PerfDataError, match="truncated"):
        perfdata.PerfData(cut)


def test_parses_real_intel_pt_sideband(traces_dir):
    buf = (traces_dir / HELLO / "primary.sideband.pevent").read_bytes()
    recs = [r for _, r, _ in perfdata.iter_records(buf, PEVENT_SAMPLE_TYPE, True)]
    kinds = [r["type"] for r in recs]
    assert kinds[:3] == ["SWITCH", "ITRACE_START", "COMM"]
    comm = recs[2]
    assert comm["comm"] == "hello" and comm["exec"] and comm["pid"] == comm["sample_pid"]
    mmap = next(r for r in recs if r["type"] == "MMAP2" and r["filename"] == "/hello")
    assert (mmap["addr"], mmap["len"], mmap["pgoff"], mmap["executable"]) == \
        (0x401000, 0x1000, 0x1000, True)
    aux = next(r for r in recs if r["type"] == "AUX")
    pt_size = (traces_dir / HELLO / "pt.bin").stat().st_size
    assert aux["aux_size"] == pt_size and not aux["truncated"]
    times = [r["time"] for r in recs]
    assert times == sorted(times)


def _libipt_ips(path) -> list[int]:
    return [int(line.split()[0], 16) for line in path.read_text().splitlines()
            if line and not line.startswith("[")]


def _hello_perf_data(traces_dir, path, *, lost=False):
    folder = traces_dir / HELLO
    sideband = (folder / "primary.sideband.pevent").read_bytes()
    pt = (folder / "pt.bin").read_bytes()
    tid = struct.unpack_from("<I", sideband, 8)[0]
    data = auxtrace_info_intel_pt(PRIV) + sideband + auxtrace(pt, tid=tid)
    if lost:
        data += record(2, struct.pack("<QQ", 1, 5) + bytes(32))
    attr = attr_bytes(INTEL_PT_TYPE, PT_CONFIG, PEVENT_SAMPLE_TYPE, SAMPLE_ID_ALL | (1 << 5))
    bid = perfdata._file_build_id(str(folder / "hello"))
    feats = {9: header_string("GenuineIntel,6,85,4"), 8: header_string("Intel(R) Xeon(R)")}
    if bid:
        feats[2] = build_id_feature([(-1, bytes.fromhex(bid), "/hello")])
    write_perf_data(path, [(attr, [869, 881])], data, feats)
    return folder


def test_import_real_pt_decodes_like_libipt(traces_dir, tmp_path):
    perf_file = tmp_path / "hello.data"
    folder = _hello_perf_data(traces_dir, perf_file)
    out = tmp_path / "hello.bundle"
    run = subprocess.run([sys.executable, "-m", "adapter.cli", "import", str(perf_file), "-o",
                          str(out), "--sysroot", str(folder)], cwd=ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    m = read_manifest(out)
    assert validate(out) == []
    assert m["cpu"] == {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 4,
                        "model_name": "Intel(R) Xeon(R)"}
    t = m["timing"]
    assert (t["mtc_freq"], t["nom_freq"], t["cpuid_0x15_eax"], t["cpuid_0x15_ebx"]) == \
        (3, 37, 2, 308)
    assert [th["comm"] for th in m["threads"]] == ["hello"]
    hello = [im for im in m["images"] if im["path"] == "/hello"]
    assert hello and hello[0]["load_address"] == 0x401000 and hello[0]["offset"] == 0x1000
    assert any("[vdso]" in w for w in m["warnings"])
    assert (out / m["sideband"][0]["file"]).read_bytes() == \
        (folder / "primary.sideband.pevent").read_bytes()
    dec = subprocess.run([sys.executable, "-m", "adapter.cli", "decode", str(out), "--format",
                          "ips"], cwd=ROOT, capture_output=True, text=True)
    assert dec.returncode == 0, dec.stderr
    ips = [int(line, 16) for line in dec.stdout.splitlines()
           if line.strip() and not line.startswith("[")]
    expected = _libipt_ips(folder / "pt.libipt-2.0.5.insn.txt")
    assert len(expected) == 8 and ips == expected


def test_import_marks_lost_data_partial(traces_dir, tmp_path):
    perf_file = tmp_path / "lost.data"
    folder = _hello_perf_data(traces_dir, perf_file, lost=True)
    manifest = perfdata.to_bundle(perfdata.PerfData(perf_file), str(tmp_path / "b"),
                                  sysroot=str(folder))
    assert manifest["status"] == "partial"
    assert "perf lost data 1 times" in manifest["partial_reason"]

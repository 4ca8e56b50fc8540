"""`ptdebug decode`: output formats, bundles, parallel decode and bad input.

Layer: tests of pt_decoder.tools.decode (the command line over InsnDecoder).
Uses the real DynamoRIO x86-64 recording and the static-glibc one (see
../shared/traces/README.md for their CPU and timing options).
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil

from pt_decoder.tools import decode

DR = "dynamorio-drpt2trace/test_simple.raw-2022-07-07-x86_64-hello"
GLIBC = "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"
TIMING = ["--mtc-freq", "3", "--nom-freq", "37", "--cpuid-0x15.eax", "2", "--cpuid-0x15.ebx", "308"]


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = decode.main([str(a) for a in argv])
    return rc, out.getvalue(), err.getvalue()


def test_ips_format_is_hex_ips_and_bracketed_events(traces_dir):
    folder = traces_dir / DR
    rc, out, _ = _run([folder / "pt.bin", "--elf", folder / "hello", "--cpu", "6/85/4", "--format", "ips",
                       *TIMING])
    assert rc == 0
    lines = out.splitlines()
    assert all(re.fullmatch(r"[0-9a-f]+", l) or l.startswith("[") for l in lines)
    assert [l for l in lines if not l.startswith("[")] == \
        ["401000", "401005", "40100a", "401014", "401019", "40101b", "401020", "401025"]


def test_jsonl_has_one_object_per_instruction_with_time(traces_dir):
    folder = traces_dir / DR
    rc, out, _ = _run([folder / "pt.bin", "--elf", folder / "hello", "--cpu", "6/85/4", "--format", "jsonl",
                       *TIMING])
    assert rc == 0
    records = [json.loads(l) for l in out.splitlines()]
    insns = [r for r in records if "kind" not in r]
    assert len(insns) == 8 and insns[0]["ip"] == 0x401000
    assert all(a["tsc"] <= b["tsc"] for a, b in zip(insns, insns[1:])) and insns[0]["tsc"] > 0
    assert {r["type"] for r in records if r.get("kind") == "event"} >= {"enabled", "disabled"}


def test_time_option_prints_each_instructions_tsc(traces_dir):
    folder = traces_dir / DR
    rc, out, _ = _run([folder / "pt.bin", "--elf", folder / "hello", "--cpu", "6/85/4", "--time", *TIMING])
    insn = [l.split() for l in out.splitlines() if not l.startswith("[")]
    assert rc == 0 and len(insn) == 8 and all(len(f) == 2 and len(f[0]) == 16 for f in insn)


def test_parallel_option_prints_the_same(traces_dir):
    folder = traces_dir / GLIBC
    argv = [folder / "pt.bin", "--elf", folder / "hello", "--cpu", "6/85/7", "--format", "ips"]
    assert _run(argv)[1] == _run(argv + ["--parallel", "2"])[1]


def test_bundle_directory_decodes_like_trace_and_images(traces_dir, tmp_path):
    from elftools.elf.elffile import ELFFile
    folder = traces_dir / DR
    bundle = tmp_path / "bundle"
    (bundle / "streams").mkdir(parents=True)
    (bundle / "images").mkdir()
    shutil.copy(folder / "pt.bin", bundle / "streams" / "1.pt")
    shutil.copy(folder / "hello", bundle / "images" / "hello")
    images = []
    with open(folder / "hello", "rb") as fh:
        for seg in ELFFile(fh).iter_segments():
            if seg["p_type"] == "PT_LOAD" and seg["p_flags"] & 1:
                images.append({"path": "/tmp/hello", "file": "images/hello", "kind": "elf", "build_id": None,
                               "load_address": seg["p_vaddr"], "offset": seg["p_offset"],
                               "size": seg["p_filesz"], "pid": 1})
    manifest = {"format": "ptdebug-bundle", "version": 1, "status": "complete", "backend": "intel_pt",
                "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 4},
                "timing": {"mtc_freq": 3, "nom_freq": 37, "cpuid_0x15_eax": 2, "cpuid_0x15_ebx": 308},
                "streams": [{"tid": 1, "pid": 1, "cpu": None, "file": "streams/1.pt", "size": 0}],
                "images": images}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    rc, out, _ = _run([bundle, "--format", "jsonl"])
    direct = _run([folder / "pt.bin", "--elf", folder / "hello", "--cpu", "6/85/4", "--format", "jsonl",
                   *TIMING])[1]
    assert rc == 0
    # jsonl is pure JSON lines: the stream header is a record too
    assert json.loads(out.splitlines()[0]) == {"kind": "stream", "tid": 1}
    assert out.splitlines()[1:] == direct.splitlines()
    rc, out, _ = _run([bundle, "--format", "ips"])
    assert rc == 0 and out.splitlines()[0] == "[stream tid 1]"


def test_bad_input_is_a_clear_error(tmp_path, traces_dir):
    rc, _, err = _run([tmp_path / "missing.pt"])
    assert rc == 2 and "missing.pt" in err
    rc, _, err = _run([traces_dir / DR / "pt.bin", "--elf", tmp_path / "nope"])
    assert rc == 2 and "nope" in err
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "manifest.json").write_text('{"format": "other"}')
    rc, _, err = _run([tmp_path / "b"])
    assert rc == 2 and "not a ptdebug bundle" in err
    rc, _, err = _run([traces_dir / DR / "pt.bin", "--cpu", "six"])
    assert rc == 2 and "--cpu" in err


def test_unknown_cpu_is_reported_like_ptxed_and_decoding_goes_on(traces_dir):
    folder = traces_dir / DR
    rc, out, _ = _run([folder / "pt.bin", "--elf", folder / "hello", "--cpu", "6/1", "--format", "ips", *TIMING])
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "[0, 0: config error: unknown cpu]"
    assert len([l for l in lines if not l.startswith("[")]) == 8


def test_the_cli_dispatches_to_decode(traces_dir):
    from adapter import cli
    folder = traces_dir / DR
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = cli.main(["decode", str(folder / "pt.bin"), "--elf", str(folder / "hello"), "--format", "ips"])
    assert rc == 0 and "401025" in out.getvalue().split()

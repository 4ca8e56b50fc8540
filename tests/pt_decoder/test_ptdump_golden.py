"""Golden test: `ptdebug dump` reproduces libipt 2.0.5 ptdump's expected outputs.

Every (test, cpu) run of ../shared/traces/libipt-2.0.5-ptt/index.json with
its ptdump options, compared line for line with the `-ptdump*.exp` file
ignoring the amount of whitespace, as libipt's script/test.bash does
(`diff -b`). The dump runs in-process; a few subprocess tests check the
command line itself (errors, exit codes).
"""
from __future__ import annotations

import io
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from pt_decoder.tools import dump

# Parametrisation needs the index at collection time, before fixtures exist:
# the same place tests/conftest.py's `traces_dir` points at.
_ROOT = pathlib.Path(__file__).resolve().parents[2]
PTT = (pathlib.Path(os.environ.get("PTDEBUG_SHARED", _ROOT.parent / "shared"))
       / "traces" / "libipt-2.0.5-ptt")


def _runs():
    index = PTT / "index.json"
    if not index.is_file():
        return []
    runs = []
    for name, test in json.loads(index.read_text()).items():
        for run in test["runs"]:
            for exp in run["exp"]:
                if "-ptdump" in exp:
                    runs.append(pytest.param(name, test["ptdump_opts"], run["cpu"], run["dir"],
                                             exp, id=exp[:-4]))
    return runs


RUNS = _runs()
NO_CORPUS = pytest.param(*[None] * 5, id="no-corpus", marks=pytest.mark.skip(
    reason=f"the libipt ptt corpus is not at {PTT} (set PTDEBUG_SHARED)"))


def _normalise(text: str) -> list[str]:
    # diff -b: runs of whitespace compare equal, trailing whitespace ignored.
    return [re.sub(r"\s+", " ", line).rstrip() for line in text.splitlines()]


def test_every_ptdump_expectation_is_collected(traces_dir):
    assert len(RUNS) == 371


@pytest.mark.parametrize("name,opts,cpu,folder,exp", RUNS or [NO_CORPUS])
def test_dump_matches_ptdump(traces_dir, name, opts, cpu, folder, exp):
    run_dir = traces_dir / "libipt-2.0.5-ptt" / folder
    argv = (["--cpu", cpu] if cpu else []) + opts.split() + [str(run_dir / f"{name}.pt")]
    out = io.StringIO()
    assert dump.main(argv, out) == 0
    assert _normalise(out.getvalue()) == _normalise((run_dir / exp).read_text())


def test_spacing_is_ptdumps_own(traces_dir):
    # Not only whitespace-equal: the columns have ptdump's widths.
    out = io.StringIO()
    dump.main(["--lastip", str(PTT / "ptdump-last-ip" / "ptdump-last-ip.pt")], out)
    assert out.getvalue().splitlines()[2] == (
        "0000000000000012  fup        6: 0a00ccccddddeeee       ip   0a00ccccddddeeee")


# ---- the command line, as a user runs it ---------------------------------------

def _ptdebug(*args):
    return subprocess.run([sys.executable, "-m", "adapter.cli", "dump", *args],
                          check=False, capture_output=True, text=True, timeout=60)


def test_cli_dumps_a_real_trace(traces_dir):
    res = _ptdebug("--raw", str(traces_dir / "lldb-intelpt/intelpt-trace/3842849.trace"))
    assert res.returncode == 0, res.stderr
    first = res.stdout.splitlines()[0]
    assert first.split() == ["0000000000000f38", "02820282028202820282028202820282", "psb"]


def test_cli_missing_file_says_so_and_exits_2(tmp_path):
    """A trace that cannot be read is bad input: exit 2, as for every command (adapter/cli.py)."""
    res = _ptdebug(str(tmp_path / "nope.pt"))
    assert res.returncode == 2
    assert "nope.pt" in res.stderr and "No such file" in res.stderr and not res.stdout


def test_cli_empty_file_is_an_error(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    res = _ptdebug(str(tmp_path / "empty.pt"))
    assert res.returncode == 2 and "empty" in res.stderr


@pytest.mark.parametrize("args,message", [
    (["--bogus", "x.pt"], "unknown option: --bogus"),
    (["--mtc-freq"], "--mtc-freq: missing argument"),
    (["--nom-freq", "zz", "x.pt"], "--nom-freq: bad argument: zz"),
    (["--mtc-freq", "300", "x.pt"], "--mtc-freq: value out of range"),
    (["--cpu", "6", "x.pt"], "--cpu: cpu must be given as f/m[/s]"),
    (["--time", "--tcal", "x.pt"], "specify either --time or --tcal"),
    (["--raw"], "no trace file given"),
    (["a.pt", "--raw"], "the trace file must come last"),
])
def test_cli_bad_command_line_exits_2_with_a_clear_message(args, message):
    res = _ptdebug(*args)
    assert res.returncode == 2
    assert message in res.stderr and not res.stdout


def test_cli_help_lists_the_ptdump_options():
    res = _ptdebug("--help")
    assert res.returncode == 0
    for opt in ("--no-offset", "--raw", "--lastip", "--exec-mode", "--time", "--tcal",
                "--no-wall-clock", "--cpuid-0x15.ebx", "--no-sync", "--packets"):
        assert opt in res.stdout


def test_file_range_suffix_dumps_a_slice(traces_dir, tmp_path):
    trace = traces_dir / "lldb-intelpt/intelpt-trace/3842849.trace"
    out = io.StringIO()
    assert dump.main(["--no-sync", f"{trace}:0xf38-0xf4c"], out) == 0
    assert _normalise(out.getvalue()) == ["0000000000000000 psb", "0000000000000010 cbr 1f"]


def test_cli_reads_standard_input(traces_dir):
    data = (traces_dir / "synthetic-oracle/work.pt").read_bytes()
    res = subprocess.run([sys.executable, "-m", "adapter.cli", "dump", "--no-offset", "-"],
                         input=data, capture_output=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().splitlines()[:2] == ["psb", "tsc        100000000000"]


# ---- options the libipt goldens do not exercise ----------------------------------

def _dump(*argv) -> list[str]:
    out = io.StringIO()
    assert dump.main(list(argv), out) == 0
    return out.getvalue().splitlines()


def _opcodes(lines):
    return {line.split()[1] for line in lines if not line.startswith("[")}


def test_no_pad_no_timing_no_cyc_hide_their_packets(traces_dir):
    trace = str(traces_dir / "dynamorio-drpt2trace"
                / "test_simple.tracedir-2022-06-22-static-glibc-hello/pt.bin")
    full = _dump(trace)
    assert {"pad", "cyc", "mtc", "tsc", "tma", "cbr", "tnt.8"} <= _opcodes(full)
    assert "pad" not in _opcodes(_dump("--no-pad", trace))
    assert _opcodes(_dump("--no-timing", trace)).isdisjoint({"cyc", "mtc", "tsc", "tma", "cbr"})
    no_cyc = _dump("--no-cyc", trace)
    assert "cyc" not in _opcodes(no_cyc) and "mtc" in _opcodes(no_cyc)
    assert len(no_cyc) == len(full) - sum(1 for line in full if line.split()[1] == "cyc")


def test_quiet_prints_only_errors(traces_dir):
    trace = traces_dir / "libipt-2.0.5-ptt/ptdump-bad_opc-resync/ptdump-bad_opc-resync.pt"
    assert _dump("--quiet", str(trace)) == ["[17: error decoding packet: unknown opcode]"]


def test_sdm_packet_set_decodes_event_trace_and_trigger_packets(tmp_path):
    psb = bytes([0x02, 0x82] * 8)
    path = tmp_path / "newer.pt"
    path.write_bytes(psb + bytes([0x02, 0x13, 0x81, 0x0E])                     # CFE intr 14, ip
                     + bytes([0x02, 0x53, 0x00]) + (0x7FFF1000).to_bytes(8, "little")  # EVD cr2
                     + bytes([0xD9, 0xA0, 0x05]))                               # TRIG ip mult
    lines = [" ".join(line.split()) for line in _dump("--packets", "sdm", "--no-offset", str(path))]
    assert lines == ["psb", "cfe 1: 14, ip type intr", "evd 0: 7fff1000 type cr2",
                     "trig 05, ip, mult"]
    # ptdump 2.0.5's packet set: CFE is an unknown opcode, and the dump resyncs.
    assert _dump("--no-offset", str(path))[1] == "[10: error decoding packet: unknown opcode]"

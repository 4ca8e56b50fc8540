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


def _normalise(text: str) -> list[str]:
    # diff -b: runs of whitespace compare equal, trailing whitespace ignored.
    return [re.sub(r"\s+", " ", line).rstrip() for line in text.splitlines()]


def test_every_ptdump_expectation_is_collected(traces_dir):
    assert len(RUNS) == 371


@pytest.mark.parametrize("name,opts,cpu,folder,exp", RUNS)
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


def test_cli_missing_file_says_so_and_exits_1(tmp_path):
    res = _ptdebug(str(tmp_path / "nope.pt"))
    assert res.returncode == 1
    assert "nope.pt" in res.stderr and "No such file" in res.stderr and not res.stdout


def test_cli_empty_file_is_an_error(tmp_path):
    (tmp_path / "empty.pt").write_bytes(b"")
    res = _ptdebug(str(tmp_path / "empty.pt"))
    assert res.returncode == 1 and "empty" in res.stderr


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

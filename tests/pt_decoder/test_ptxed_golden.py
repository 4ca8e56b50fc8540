"""`ptdebug decode --format ptxed` against every libipt 2.0.5 ptxed expectation.

Layer: tests of pt_decoder (event + insn + timing layers through the tool).
Each test of ../shared/traces/libipt-2.0.5-ptt (pttc output: .pt stream, .bin
image loaded at `org`, per-CPU runs for errata) is decoded with the ptxed
options of index.json and compared line by line (trailing spaces aside, as
libipt's test script compares: runs of blanks are equal). Options without a ptdebug counterpart (the
block decoder's own output, address filters) are listed, not silently passed.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import shlex

import pytest

# Parametrisation needs the index at collection time, before fixtures exist:
# the same place tests/conftest.py's `traces_dir` points at.
_ROOT = pathlib.Path(__file__).resolve().parents[2]
PTT = (pathlib.Path(os.environ.get("PTDEBUG_SHARED", _ROOT.parent / "shared")) / "traces"
       / "libipt-2.0.5-ptt")
# ptxed options that select output ptdebug does not produce (block decoder's [block] lines,
# its statistics).
UNSUPPORTED = ("--block-decoder", "--block:")


def _runs():
    if not (PTT / "index.json").is_file():
        return []
    index = json.loads((PTT / "index.json").read_text())
    runs = []
    for name, test in sorted(index.items()):
        for run in test["runs"]:
            exps = [e for e in run["exp"] if "-ptxed" in e]
            if not exps:
                continue
            runs.append(pytest.param(name, test, run, exps[0], id="%s-%s" % (name, run["cpu"] or "any")))
    return runs


def _supported(test: dict) -> bool:
    return not any(o.startswith(UNSUPPORTED) for o in shlex.split(test["ptxed_opts"]))


ALL_RUNS = _runs()
NO_CORPUS = pytest.param(*[None] * 4, id="no-corpus", marks=pytest.mark.skip(
    reason=f"the libipt ptt corpus is not at {PTT} (set PTDEBUG_SHARED)"))
# Runs whose options select the block decoder's own output have no ptdebug counterpart; they
# are left out of the parametrisation (not skipped) and counted below so none slips away.
RUNS = [r for r in ALL_RUNS if _supported(r.values[1])]
BLOCK_DECODER_RUNS = [r for r in ALL_RUNS if not _supported(r.values[1])]


def test_index_has_the_expected_number_of_ptxed_runs(traces_dir):
    assert len(ALL_RUNS) == 322


def test_only_block_decoder_output_is_left_out(traces_dir):
    """Exactly the runs that ask for libipt's block-decoder output are not compared."""
    left_out = sorted(r.values[1]["ptxed_opts"] for r in BLOCK_DECODER_RUNS)
    assert left_out and all("--block" in opts for opts in left_out)
    assert len(RUNS) + len(BLOCK_DECODER_RUNS) == len(ALL_RUNS)


def _argv(name: str, test: dict, run: dict) -> list[str]:
    argv = [name + ".pt"]
    opts = shlex.split(test["ptxed_opts"])
    # libipt's test script always loads the test's .bin at `org`; options may add more.
    if os.path.getsize(PTT / run["dir"] / (name + ".bin")):
        argv += ["--raw", "%s.bin:%s" % (name, test["org"])]
    if run["cpu"] and "--cpu" not in opts:
        argv += ["--cpu", run["cpu"]]
    return argv + opts


@pytest.mark.parametrize("name,test,run,exp", RUNS or [NO_CORPUS])
def test_ptxed_expectation(traces_dir, name, test, run, exp, monkeypatch):
    from pt_decoder.tools import decode
    directory = PTT / run["dir"]
    monkeypatch.chdir(directory)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert decode.main(_argv(name, test, run)) == 0
    want = [" ".join(line.split()) for line in (directory / exp).read_text().splitlines()]
    got = [" ".join(line.split()) for line in out.getvalue().splitlines()]
    assert got == want


def test_default_option_runs_are_all_supported(traces_dir):
    default = [p for p in RUNS if not p.values[1]["ptxed_opts"]]
    assert len(default) >= 180 and all(_supported(p.values[1]) for p in default)

"""`ptdebug bench`: the runner finds every benchmarks/bench_*.py and refuses unknown names.

The benchmarks themselves are not run here (they take seconds to minutes and report
ratios, not pass/fail); `ptdebug bench --quick` runs them.
"""
from __future__ import annotations

import pathlib

import pytest

from benchmarks import run_all


def test_discovers_every_bench_module():
    folder = pathlib.Path(run_all.__file__).parent
    names = run_all.discover()
    assert "packets" in names and "decode_output" in names
    assert names == sorted(p.stem[len("bench_"):] for p in folder.glob("bench_*.py"))
    from benchmarks import bench_packets
    assert callable(bench_packets.run)


def test_unknown_benchmark_is_an_error_naming_it(capsys):
    with pytest.raises(SystemExit) as exc:
        run_all.main(["no_such_bench"])
    assert exc.value.code == 2
    assert "no_such_bench" in capsys.readouterr().err

"""The compiled ptdump writer (pt_decoder/tools/ptdump_text.pyx) prints byte for byte what
dump.py's Python loop (ptdump_format.describe/render, Dumper.track) prints.

Layer: tests of pt_decoder.tools.ptdump_text. The golden test compares with libipt's
expectations ignoring whitespace amounts, as libipt does; this one compares exact bytes,
column padding included, on every trace of libipt 2.0.5's test suite, a real recorded
trace and random packet soup, under each option that changes the columns without
tracking time (--time/--tcal always take the Python path).
"""
from __future__ import annotations

import io
import random

import pytest

from pt_decoder.tools import dump
from pt_decoder.tools.text_out import TextSink

OPTION_SETS = [[], ["--raw"], ["--lastip"], ["--exec-mode"], ["--no-offset", "--raw"],
               ["--no-pad", "--no-timing"], ["--no-cyc", "--lastip", "--raw", "--exec-mode"],
               ["--quiet", "--lastip", "--raw"], ["--packets", "sdm", "--lastip", "--raw"],
               ["--no-sync"], ["--cpu", "6/85", "--packets", "sdm"]]


def _both(data, argv: list[str]) -> tuple[str, str]:
    """(compiled, Python) output of one dump."""
    texts = []
    for compiled in (True, False):
        opts = dump.parse_args(argv + ["trace.pt"])
        out = io.StringIO()
        sink = TextSink(out, 4096)                  # small: hand-overs mid-dump
        if opts.cpu is not None:
            opts.errata = dump.cpu_errata(opts.cpu[0], opts.cpu[1]) or frozenset()
        dumper = dump.Dumper(data, opts, sink)
        if not compiled:
            dumper.fast = None
        else:
            assert dumper.fast is not None
        dumper.run()
        sink.flush()
        texts.append(out.getvalue())
    return texts[0], texts[1]


def test_every_libipt_test_trace_under_every_option_set(traces_dir):
    traces = sorted((traces_dir / "libipt-2.0.5-ptt").rglob("*.pt"))
    assert len(traces) > 300
    lines = 0
    for trace in traces:
        data = trace.read_bytes()
        for argv in OPTION_SETS:
            compiled, python = _both(data, argv)
            assert compiled == python, (trace.name, argv)
            lines += compiled.count("\n")
    assert lines > 10_000


def test_a_real_recorded_trace(traces_dir):
    data = (traces_dir / "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"
            / "pt.bin").read_bytes()
    for argv in OPTION_SETS:
        compiled, python = _both(data, argv)
        assert compiled == python, argv
        assert compiled.count("\n") > 1000 or "--quiet" in argv


@pytest.mark.parametrize("seed", range(20))
def test_random_bytes_and_damage(seed, traces_dir):
    """Errors, resyncs and cut-off packets: the error lines and where the dump resumes."""
    rng = random.Random(seed)
    base = bytearray((traces_dir / "dynamorio-drpt2trace/test_simple.raw-2022-07-07-x86_64-hello"
                      / "pt.bin").read_bytes())
    for _ in range(rng.randrange(1, 40)):
        base[rng.randrange(len(base))] = rng.randrange(256)
    data = bytes(base[:rng.randrange(len(base) // 2, len(base))]) + bytes(rng.getrandbits(8) for _ in range(300))
    for argv in OPTION_SETS:
        compiled, python = _both(data, argv)
        assert compiled == python, argv

"""The exports on a REAL Intel PT recording (not the stepper's): DynamoRIO's static-glibc
"hello" traced on a Skylake-SP (6/85/7), read from ../shared/traces through `traces_dir` and
wrapped in a bundle here (in tmp, nothing copied into the repository). Its CYC packets are the
CPU's own cycle counts."""
from __future__ import annotations

import json
from collections import Counter

import pytest
from go_toolchain import pprof_top
from recorded_bundles import (
    code_sections,
    function_at,
    go_tool,
    nm_functions,
    ptdebug,
    spread_cycles,
)
from test_perfetto import _check_nesting

from adapter.capture.bundle import BundleWriter
from adapter.recording.recording import Recording

pytestmark = pytest.mark.timeout(300)
HELLO = "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"
INSTRUCTIONS = 59234
"""DynamoRIO's own expectation for this trace (test_simple.template), also libipt's count."""


@pytest.fixture(scope="module")
def real_bundle(traces_dir, tmp_path_factory):
    source = traces_dir / HELLO
    bundle = tmp_path_factory.mktemp("real_pt") / "bundle"
    writer = BundleWriter(bundle, "intel_pt",
                          {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 7},
                          timing={"tsc_hz": None, "cyc": True}, command=["hello"],
                          copy_images=False)
    writer.add_stream_bytes(1, (source / "pt.bin").read_bytes(), pid=1)
    # The executable PT_LOAD of the static binary: file offset 0x1000 at 0x401000, 0x86fb1 bytes.
    writer.add_image(str(source / "hello"), 0x401000, 0x1000, 0x86FB1, kind="elf")
    writer.add_thread(1, 1, "hello")
    writer.finish()
    return bundle, source / "hello"


def test_go_tool_pprof_reads_the_real_trace_with_its_cpu_cycles(real_bundle, tmp_path):
    bundle, binary = real_bundle
    history = Recording.open(bundle).threads[0].history
    assert len(history) == INSTRUCTIONS and not history.gaps
    rows = nm_functions(binary)
    # glibc has aliases (several names at one address): compare by function start address.
    start_of = {name: start for start, _, name in rows}
    weights = spread_cycles(history)
    cycles = Counter()
    for pos in range(len(history)):
        cycles[start_of.get(function_at(rows, history.ip(pos)))] += weights[pos]
    out = tmp_path / "hello.pb.gz"
    ptdebug("export", "pprof", str(bundle), "-o", str(out))
    go_tool()
    top = pprof_top(out, "-unit=ns")
    flat_by_start = Counter()
    for name, (flat, _) in top.items():
        # code in no function symbol is shown under its module: here the static binary's .plt
        # (IFUNC stubs, no symbols), which a sizeless _init used to cover
        flat_by_start[None if name == "[hello]" else start_of[name]] += flat
    assert flat_by_start == +cycles
    plt = next((lo, hi) for lo, hi, name in code_sections(binary) if name == ".plt")
    outside = {history.ip(pos) for pos in range(len(history))
               if function_at(rows, history.ip(pos)) is None}
    assert outside and all(plt[0] <= ip < plt[1] for ip in outside), sorted(map(hex, outside))
    assert sum(flat for flat, _ in top.values()) == \
        history.cycles(len(history) - 1) - history.cycles(0) > 100_000
    assert top["__libc_start_main"][1] > top["__libc_start_main"][0]  # it has callees


def test_real_trace_timeline_nests(real_bundle, tmp_path):
    bundle, _ = real_bundle
    out = tmp_path / "hello.json"
    ptdebug("export", "perfetto", str(bundle), "-o", str(out))
    slices = _check_nesting(json.loads(out.read_text())["traceEvents"])
    names = Counter(s["name"] for s in slices[1])
    assert names["__libc_write"] >= 1 and len(slices[1]) > 100

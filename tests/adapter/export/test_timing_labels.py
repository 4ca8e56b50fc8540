"""Timing says what it is (issue 14, build item 8), on real recordings of both kinds.

Seen before: `ptdebug latency`, the pprof profile (sample type `cycles`, the default), the
Perfetto timeline, the hot-line lenses and the Processor Trace scope showed the ptrace
stepper's times and "cycles" (wall-clock ns of a thread the stepper slows to microseconds an
instruction) as if they were the CPU's, with no word saying so.

* A stepper recording (`ptdebug record --backend stepper` of tests/fixtures/programs/hotpath.c,
  recorded here): every view names its time stepper time, not CPU time, and offers the
  instruction counts first (pprof: `instructions` the first and default sample type,
  `stepper_ns` the second, a comment saying why; latency: an instructions column and `clock`,
  `units`, `note` in --json; Perfetto: `stepper_ns` arguments, the process track named with it;
  lenses: instructions and the share of instructions; the trace scope: no TSC/CYC/IPC).
* A real Intel PT recording (DynamoRIO's hello traced on a Skylake-SP, ../shared/traces; skipped
  naming PTDEBUG_SHARED where absent): cycles and TSC stay the CPU's, unlabelled.
"""
from __future__ import annotations

import gzip
import json
import re

import pytest
from go_toolchain import pprof_top
from recorded_bundles import c_bundle, c_program, ptdebug  # noqa: F401 (fixtures)
from test_real_intel_pt import real_bundle  # noqa: F401 (fixture)

from adapter.export import protowire
from adapter.features import trace_scope
from adapter.features.captures import Capture
from adapter.features.record_window import RecordWindow
from adapter.lsp.hotlines import HotLines, hover_markdown, lens_title
from adapter.recording.recording import Recording

pytestmark = pytest.mark.timeout(300)


def _profile(path) -> tuple[list[str], list[tuple[str, str]], str, list[str]]:
    """(string table, sample types, default sample type, comments) of a gzipped profile."""
    fields = list(protowire.fields(gzip.decompress(path.read_bytes())))
    strings = [v.decode() for f, _, v in fields if f == 6]
    types = []
    for f, _, v in fields:
        if f == 1:
            parts = {k: value for k, _, value in protowire.fields(v)}
            types.append((strings[parts.get(1, 0)], strings[parts.get(2, 0)]))
    default = next((strings[v] for f, _, v in fields if f == 14), "")
    comments = [strings[v] for f, _, v in fields if f == 13]
    return strings, types, default, comments


# --- the stepper ----------------------------------------------------------------------------
def test_stepper_profile_leads_with_instructions_and_names_its_time(c_bundle, tmp_path):
    out = tmp_path / "c.pb.gz"
    written = ptdebug("export", "pprof", str(c_bundle), "-o", str(out))
    assert "stepper time" in written.stdout and "note: recorded by the ptrace stepper" in \
        written.stdout, written.stdout
    strings, types, default, comments = _profile(out)
    assert types == [("instructions", "count"), ("stepper_ns", "nanoseconds")]
    assert default == "instructions" and "cycles" not in strings
    assert len(comments) == 1 and "not CPU time" in comments[0], comments
    decoded = Recording.open(c_bundle)
    # go tool pprof's default view is the instruction count, and it adds up to the bundle's
    top = pprof_top(out, "-unit=ns")
    assert sum(flat for flat, _ in top.values()) == decoded.total_instructions
    stepper = pprof_top(out, "-unit=ns", "-sample_index=stepper_ns")
    assert sum(flat for flat, _ in stepper.values()) == decoded.total_cycles
    as_json = json.loads(ptdebug("export", "pprof", str(c_bundle), "-o", str(out), "--force",
                                 "--json").stdout)
    assert as_json["clock"] == "stepper" and "not CPU time" in as_json["note"]


def test_stepper_latency_shows_instructions_and_labels_its_time(c_bundle):
    text = ptdebug("latency", str(c_bundle), "--from", "handle", "--to", "checksum").stdout
    header = next(line for line in text.splitlines() if "instructions" in line)
    assert header.split() == ["instructions", "stepper", "time", "stepper", "cycles"], header
    assert re.search(r"^note: recorded by the ptrace stepper: .*not CPU time", text, re.M), text
    summary = json.loads(ptdebug("latency", str(c_bundle), "--from", "handle", "--to",
                                 "checksum", "--json").stdout)
    assert summary["clock"] == "stepper" and "not CPU time" in summary["note"]
    assert "not CPU time" in summary["units"]["ns"] and "not CPU" in summary["units"]["cycles"]
    assert list(summary)[list(summary).index("instructions"):][:3] == \
        ["instructions", "ns", "cycles"]
    # the instruction counts, independently: from each handle entry to the next checksum entry
    decoded = Recording.open(c_bundle)
    handle = decoded.symbols.find_symbol("handle")[0]
    checksum = decoded.symbols.find_symbol("checksum")[0]
    counts = []
    for thread in decoded.threads:
        start = None
        for position, ip in enumerate(thread.history.ips()):
            if ip == checksum and start is not None:
                counts.append(position - start)
                start = None
            if ip == handle:
                start = position
    assert summary["count"] == len(counts) > 0
    assert summary["instructions"]["min"] == min(counts)
    assert summary["instructions"]["max"] == max(counts)


def test_stepper_timeline_names_its_time(c_bundle, tmp_path):
    out = tmp_path / "timeline.json"
    ptdebug("export", "perfetto", str(c_bundle), "-o", str(out))
    document = json.loads(out.read_text())
    process = next(e for e in document["traceEvents"] if e.get("name") == "process_name")
    assert "[stepper time: ptrace-slowed, not CPU time]" in process["args"]["name"]
    ends = [e for e in document["traceEvents"] if e["ph"] == "E"]
    assert ends and all(list(e["args"]) == ["instructions", "stepper_ns"] for e in ends)
    assert "not CPU time" in document["otherData"]["timing"]
    proto = tmp_path / "timeline.pftrace"
    ptdebug("export", "perfetto", str(c_bundle), "-o", str(proto))
    data = proto.read_bytes()
    assert b"stepper_ns" in data and b"cycles" not in data and b"not CPU time" in data


def test_stepper_lenses_lead_with_instructions(c_bundle):
    hot = HotLines.from_decoded(Recording.open(c_bundle))
    assert hot.stepper
    entries = [e for lines in hot.by_file.values() for e in lines.values()]
    busiest = max(entries, key=lambda e: e.instructions)
    title = lens_title(hot, busiest)
    assert re.fullmatch(r"\S+× · \S+ instructions · [\d.]+% of window · .+ stepper time "
                        r"\(ptrace-slowed\)", title), title
    assert "cycles" not in title
    assert hot.share(busiest) == busiest.instructions / hot.total_instructions
    assert abs(sum(hot.share(e) for e in entries) - 1) < 1e-9
    assert "not CPU time" in hover_markdown(hot, busiest)


class _Recording:
    def __init__(self):
        self.produce = {}

    def reference(self, produce) -> int:
        self.produce[len(self.produce) + 1] = produce
        return len(self.produce)


def _scope(bundle) -> dict[str, dict]:
    trace = Recording.open(bundle)
    capture = Capture(1, trace.threads[0].tid, 1, RecordWindow(), str(bundle), trace)
    return {v["name"]: v for v in trace_scope.scope_variables(
        _Recording(), capture, len(capture.history) - 1)}


def test_stepper_trace_scope_shows_instructions_and_stepper_time(c_bundle):
    items = _scope(c_bundle)
    names = list(items)
    assert names.index("instructions since window opened") < names.index(
        "stepper time since window opened")
    assert not {"TSC", "CYC", "cycles in window", "ns since window opened"} & set(items)
    for name in ("stepper time since window opened", "stepper time in window", "stepper clock"):
        assert items[name]["type"] == "stepper time, not CPU time", items[name]
    per_instruction = float(re.search(r"; ([\d.]+) us an instruction",
                                      items["stepper time in window"]["value"]).group(1))
    assert per_instruction > 0.05  # microseconds, not the nanosecond or so of a real CPU
    assert items["IPC"]["value"].startswith("n/a")


# --- Intel PT -------------------------------------------------------------------------------
def test_intel_pt_profile_keeps_cpu_cycles_unlabelled(real_bundle, tmp_path):
    bundle, _ = real_bundle
    out = tmp_path / "hello.pb.gz"
    written = ptdebug("export", "pprof", str(bundle), "-o", str(out))
    assert "stepper" not in written.stdout and "cycles" in written.stdout
    strings, types, default, comments = _profile(out)
    assert types == [("cycles", "count"), ("instructions", "count")]
    assert default == "cycles" and comments == []
    assert not any("stepper" in s for s in strings)


def test_intel_pt_latency_timeline_lenses_and_scope_are_the_cpus(real_bundle, tmp_path):
    bundle, _ = real_bundle
    text = ptdebug("latency", str(bundle), "--from", "main", "--to", "__libc_write").stdout
    header = next(line for line in text.splitlines() if "instructions" in line)
    assert header.split() == ["instructions", "time", "cycles"] and "stepper" not in text
    summary = json.loads(ptdebug("latency", str(bundle), "--from", "main", "--to",
                                 "__libc_write", "--json").stdout)
    assert summary["clock"] == "tsc" and "note" not in summary
    assert summary["units"]["cycles"] == "CPU cycles (CYC packets)"
    assert summary["cycles"]["max"] > 0
    out = tmp_path / "hello.json"
    ptdebug("export", "perfetto", str(bundle), "-o", str(out))
    document = json.loads(out.read_text())
    ends = [e for e in document["traceEvents"] if e["ph"] == "E"]
    assert ends and all(set(e["args"]) == {"instructions", "cycles"} for e in ends)
    assert "stepper" not in json.dumps(document)
    decoded = Recording.open(bundle)
    hot = HotLines.from_decoded(decoded)
    assert not hot.stepper
    items = _scope(bundle)
    assert {"TSC", "CYC", "cycles in window", "IPC"} <= set(items)
    assert float(items["IPC"]["value"]) > 0 and "stepper" not in json.dumps(items)

"""The first look after a Go capture reads nothing from the binary (issue 14, build item 7).

Seen before: the Processor Trace scope took 7.7-7.9 s to open after a 30,000-instruction Go
capture, because the goroutine index re-read the runtime layout from DWARF (2.4 s), and the
capture's line table (the Go pclntab) and function symbols were read at that request too: each
capture's bundle holds its own copy of the executable, so caches keyed by path missed.

Here: a real stepper recording of tests/fixtures/programs/go_handoff (the goid probe writing
PTWRITEs), its images copied into the bundle as a debug session keeps them. What the adapter
does when a Go program starts (backends.delve_process._read_layout, on the live process) is
done first; then the capture's stop is looked at as the session does (goroutine index,
Processor Trace scope) with the readers of DWARF, pclntab and ELF symbols counting their
calls: none may run.
The index the recording builds from its decode's kept PTWRITEs equals one built from the
stream decoded by hand. benchmarks/bench_first_look.py times the same through `ptdebug dap` in
front of Delve.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from adapter.capture import record, stepper
from adapter.capture.bundle import Bundle
from adapter.features import goroutine_view, trace_scope
from adapter.features.captures import Capture
from adapter.features.record_window import RecordWindow
from adapter.golang import runtime_layout
from adapter.golang.goroutine_index import GoroutineIndex
from adapter.golang.stepper_probe import probe_for
from adapter.hw.mappings import load_bias
from adapter.recording import goroutines as recording_goroutines
from adapter.recording.recording import Recording, decoder_options
from pt_decoder import image as image_module
from pt_decoder.lines import LineTable

pytestmark = [pytest.mark.live, pytest.mark.timeout(240)]

PROGRAMS = Path(__file__).resolve().parents[2] / "fixtures" / "programs"


class _Recording:
    def __init__(self):
        self.produce = {}

    def reference(self, produce) -> int:
        self.produce[len(self.produce) + 1] = produce
        return len(self.produce)


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        pytest.fail("the Go toolchain is missing (a documented requirement)")
    return go


@pytest.fixture(scope="module")
def go_capture(tmp_path_factory):
    """(bundle path, the program's binary): a recording of main.handoff whose images are
    copied into the bundle, made after the launch-time reading of the live program."""
    from adapter.backends.delve_process import _read_layout
    tmp = tmp_path_factory.mktemp("first_look")
    package = tmp / "go_handoff"
    shutil.copytree(PROGRAMS / "go_handoff", package)
    binary = tmp / "handoff"
    subprocess.run([_go(), "build", "-o", str(binary), "."], cwd=package, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    proc = subprocess.Popen([str(binary), "3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            env=dict(os.environ, GODEBUG="asyncpreemptoff=1"))
    assert proc.stdout.readline() == b"ready\n"
    _read_layout(proc.pid)  # what the Delve backend does once it knows the program's pid
    probe = probe_for(proc.pid)

    def release():  # once the recorder's trigger is armed
        time.sleep(1.0)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
    threading.Thread(target=release, daemon=True).start()
    bundle = str(tmp / "handoff.bundle")
    try:
        result = record.record_stepper(bundle, pid=proc.pid, start="main.handoff",
                                       end=stepper.EndCondition(until_return=True),
                                       ptw_probe=probe, trigger_timeout=60,
                                       wait_for_exit=False)
    finally:
        probe.close()
    assert proc.wait(60) == 0
    assert result.manifest["status"] == "complete", result.manifest.get("partial_reason")
    return bundle, str(binary)


@pytest.fixture
def counted(monkeypatch):
    """Calls of the readers of a binary's DWARF, line table and symbols."""
    calls = {"runtime layout": 0, "line table": 0, "symbols": 0}

    def counting(name, original):
        def wrapper(*args, **kwargs):
            calls[name] += 1
            return original(*args, **kwargs)
        return wrapper
    monkeypatch.setattr(runtime_layout.RuntimeLayout, "from_elf", classmethod(counting(
        "runtime layout", runtime_layout.RuntimeLayout.from_elf.__func__)))
    monkeypatch.setattr(LineTable, "_for_open_elf", classmethod(counting(
        "line table", LineTable._for_open_elf.__func__)))
    monkeypatch.setattr(image_module, "elf_function_symbols", counting(
        "symbols", image_module.elf_function_symbols))
    return calls


def test_the_stop_after_a_go_capture_reads_nothing_from_the_binary(go_capture, counted):
    bundle, binary = go_capture
    trace = Recording.open(bundle)
    capture = Capture(1, trace.threads[0].tid, 1, RecordWindow(function="main.handoff",
                                                               untilReturn=True), bundle, trace)
    executable = recording_goroutines.go_binary(Bundle.open(bundle))
    assert os.path.realpath(executable) != os.path.realpath(binary)  # the bundle's copy
    start = time.perf_counter()
    goroutines = goroutine_view.capture_goroutines(capture)
    variables = {v["name"]: v for v in trace_scope.scope_variables(
        _Recording(), capture, len(capture.history) - 1)}
    elapsed = time.perf_counter() - start
    assert counted == {"runtime layout": 0, "line table": 0, "symbols": 0}
    assert goroutines is not None and "goroutines" in variables
    assert "main.go:" in variables["IP"]["value"]  # the line, from the kept table
    assert elapsed < 1.0, elapsed  # 2.5-7.9 s when the binary was read here


def test_the_recordings_index_equals_one_built_from_the_stream_decoded_by_hand(go_capture):
    from pt_decoder.insn import InsnDecoder
    bundle, binary = go_capture
    trace = Recording.open(bundle)
    capture = Capture(1, trace.threads[0].tid, 1, RecordWindow(), bundle, trace)
    kept = goroutine_view.capture_goroutines(capture)
    opened = Bundle.open(bundle)
    flow = InsnDecoder(opened.stream_bytes(opened.streams[0]), trace.code,
                       **decoder_options(opened.manifest)).decode()
    samples = flow.ptwrites()
    again = GoroutineIndex.build(flow.ip, samples, runtime_layout.layout_of(binary).g_stores)
    assert kept is not None and kept.observations == len(samples) > 20
    assert trace.threads[0].ptwrites == samples
    positions = range(len(capture.history))
    assert [kept.at(p) for p in positions] == [again.goid_at(p) for p in positions]
    assert trace.goroutines()[0].index is kept.index  # one index, kept by the recording


def test_caches_follow_the_binary_not_its_path(go_capture, tmp_path, counted):
    _, binary = go_capture
    copy = tmp_path / "renamed"
    shutil.copy(binary, copy)
    assert runtime_layout.layout_of(str(copy)) is runtime_layout.layout_of(binary)
    assert LineTable.for_elf(str(copy)) is LineTable.for_elf(binary)
    assert counted["runtime layout"] == 0 and counted["line table"] == 0
    # another binary (a byte of its build id changed) is read afresh
    data = bytearray(copy.read_bytes())
    note = data.find(b"GNU\x00") + 4
    data[note] ^= 0xFF
    other = tmp_path / "other"
    other.write_bytes(bytes(data))
    assert runtime_layout.layout_of(str(other)) is not runtime_layout.layout_of(binary)
    assert counted["runtime layout"] == 1


def test_load_bias_of_a_running_executable(go_capture):
    _, binary = go_capture
    proc = subprocess.Popen([binary, "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"ready\n"
        assert load_bias(proc.pid, binary) == 0  # Go links executables at their address
        with pytest.raises(OSError, match="not mapped"):
            load_bias(proc.pid, "/bin/true")
    finally:
        proc.kill()
        proc.wait()

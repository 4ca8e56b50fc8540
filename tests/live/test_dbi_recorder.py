"""The DBI recorder (issue 32) on real programs: its recording of a multi-threaded C program
equals the single-step truth of the same call, libipt decodes it the same, the program
computes what it computes without ptdebug (its checksum; zmm and k registers, numpy's OpenBLAS
over 30 windows), the seam says where DBI cannot go and why, and nothing of Frida stays in
the process."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from stepper_support import (
    PROGRAMS,
    ROOT,
    decode_ips,
    errors_in,
    libipt_decode_ips,
    reference_from_trigger,
)

from adapter.capture import dbi, dbi_repair, record_dbi, recorders
from adapter.capture.stepper import EndCondition
from adapter.capture.target import Target

pytestmark = pytest.mark.live


def _gcc(name: str, out_dir, *flags: str):
    out = out_dir / name.removesuffix(".c")
    subprocess.run(["gcc", "-O1", "-g", "-pthread", *flags, "-o", str(out),
                    str(PROGRAMS / name)], check=True)
    return out


@pytest.fixture(scope="module")
def exact_program(tmp_path_factory):
    return _gcc("dbi_exact.c", tmp_path_factory.mktemp("dbi_exact"))


def _start_exact(program, rounds=1000, pause_us=20000):
    proc = subprocess.Popen([str(program), str(rounds), str(pause_us)], stdout=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline().split()
    assert line[:1] == ["ready"], line
    return proc, int(line[1])


def _stop(proc):
    proc.kill()
    proc.wait(10)


def _frida_mappings(pid: int) -> list[str]:
    with open(f"/proc/{pid}/maps") as maps:
        return [line for line in maps if "frida" in line or "ptdebug-dbi" in line]


def test_dbi_recording_equals_the_single_step_truth_of_the_same_call(exact_program, tmp_path):
    """region() runs one path on every call: the DBI window on the worker thread (attached by
    pid, the main thread busy beside it) and an independent single-step of a later call must
    give the same instructions, decoded by ptdebug and by libipt."""
    proc, worker = _start_exact(exact_program)
    try:
        out = tmp_path / "dbi.bundle"
        result = record_dbi.record_dbi(str(out), pid=proc.pid, tid=worker, start="region",
                                       end=EndCondition(until_return=True))
        assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
        assert result.manifest["stats"]["end_reason"] == "the --from function returned"
        assert _frida_mappings(proc.pid) == []
        target = Target.attach(tid=worker)
        try:
            tid = target.run_to(target.resolve("region"), timeout=10)
            target.keep_only(tid)
            truth = reference_from_trigger(tid)
        finally:
            target.release()
        ips, events = decode_ips(out)
        assert errors_in(events) == []
        assert len(truth) > 2000                 # qsort's callbacks, fib, strlen, syscalls
        assert ips == truth
        libipt_ips, libipt_errors = libipt_decode_ips(out)
        assert libipt_errors == []
        assert libipt_ips == truth
        assert result.manifest["stats"]["instructions"] == len(truth)
    finally:
        _stop(proc)


def test_a_recorded_program_computes_what_it_computes_alone(exact_program, tmp_path):
    """Three windows on the worker, then the program runs to its end: same checksum, same
    exit status as a run without ptdebug, and Frida gone from it."""
    alone = subprocess.run([str(exact_program), "300", "10000"], capture_output=True, text=True,
                           check=True).stdout.splitlines()[-1]
    proc, worker = _start_exact(exact_program, 300, 10000)
    try:
        for k in range(3):
            result = record_dbi.record_dbi(str(tmp_path / f"w{k}.bundle"), pid=proc.pid,
                                           tid=worker, start="region",
                                           end=EndCondition(until_return=True))
            assert result.manifest["status"] == "complete"
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0
        assert out.splitlines()[-1] == alone
    finally:
        if proc.poll() is None:
            _stop(proc)


def test_a_count_window_is_cut_exactly_and_decodes(exact_program, tmp_path):
    proc, worker = _start_exact(exact_program, 1000, 1000)
    try:
        out = tmp_path / "count.bundle"
        result = record_dbi.record_dbi(str(out), pid=proc.pid, tid=worker,
                                       end=EndCondition(count=123_457))
        assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
        ips, events = decode_ips(out)
        assert errors_in(events) == []
        assert len(ips) == 123_457
    finally:
        _stop(proc)


def test_the_cli_records_with_dbi_and_says_why(exact_program, tmp_path):
    proc, worker = _start_exact(exact_program)
    try:
        out = tmp_path / "cli.bundle"
        run = subprocess.run([sys.executable, "-m", "adapter.cli", "record", "--recorder", "dbi",
                              "--tid", str(worker), "--from", "region", "--until-return", "-o",
                              str(out), "--json"], cwd=ROOT, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 0, run.stderr
        summary = json.loads(run.stdout)
        assert summary["recorder"] == {"name": "dbi", "why": "--recorder dbi"}
        assert summary["status"] == "complete"
        assert "DBI is new" in run.stderr
    finally:
        _stop(proc)


# -- where DBI cannot go ---------------------------------------------------------------------

def test_auto_takes_the_stepper_and_says_dbi_is_only_used_when_asked_for():
    choice = recorders.choose("auto", intel_pt_usable=False)
    assert choice.name == "stepper"
    assert "--recorder dbi" in choice.why
    assert recorders.choose("auto", intel_pt_usable=True).name == "intel_pt"


def test_dbi_refuses_a_go_program_and_says_why(tmp_path):
    from stepper_support import build_go
    program = build_go("rec_checksum.go", tmp_path)
    assert "Go program" in recorders.dbi_refusal(program=str(program))
    assert recorders.dbi_refusal(program="/bin/true") is None


def test_dbi_refuses_a_process_another_tracer_holds(exact_program):
    from other_tracer import another_tracer
    proc, worker = _start_exact(exact_program)
    try:
        with another_tracer([worker]):
            assert "traced by process" in recorders.dbi_refusal(pid=proc.pid)
        assert recorders.dbi_refusal(pid=proc.pid) is None
    finally:
        _stop(proc)


def test_a_forced_recorder_is_taken_as_asked():
    assert recorders.choose("stepper", intel_pt_usable=False).why == "--recorder stepper"
    with pytest.raises(ValueError, match="recorder must be one of"):
        recorders.choose("pin")


# -- never a wrong result ----------------------------------------------------------------------

def _windows(pid: int, tid: int, count: int, seconds: float, **session_options) -> int:
    """`count` windows of `seconds` each on thread `tid`, in one session; blocks recorded."""
    session = dbi.DbiSession(pid, **session_options)
    blocks = 0
    try:
        for _ in range(count):
            window = session.window(tid)
            time.sleep(seconds)
            blocks += window.count()
            assert window.stop_following()
    finally:
        session.close()
    return blocks


needs_avx512 = pytest.mark.skipif(not dbi_repair.cpu_has_avx512(),
                                  reason="this CPU has no AVX-512 (the zmm and k registers the "
                                         "test holds do not exist)")


@pytest.fixture(scope="module")
def zmm_program(tmp_path_factory):
    if not dbi_repair.cpu_has_avx512():
        pytest.skip("this CPU has no AVX-512")
    return _gcc("dbi_zmm.c", tmp_path_factory.mktemp("dbi_zmm"), "-mavx512f", "-mavx512bw")


def _run_and_record(argv, windows: int, **session_options) -> tuple[str, int]:
    """Start a fixture that prints "ready TID", record `windows` windows of its thread TID,
    then SIGTERM it: (what it printed at the end, blocks recorded)."""
    proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert line[:1] == ["ready"], line
        blocks = _windows(proc.pid, int(line[1]), windows, 0.05, **session_options)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        return out.strip(), blocks
    finally:
        if proc.poll() is None:
            _stop(proc)


def _fields(out: str) -> dict[str, int]:
    words = out.split()
    return {words[i]: int(words[i + 1]) for i in range(0, len(words) - 1, 2)}


@needs_avx512
def test_zmm_and_k_registers_survive_30_recorded_windows(zmm_program):
    """All 32 zmm registers (512 bits) and k1-k7 held across branchy code, glibc's EVEX copies
    and an AVX-512 kernel: no round of 30 windows sees one changed. (Before the repair,
    Stalker cleared bits 511:256 of zmm0-15; before DbiSession waited for the main thread to
    rest, Frida's injection changed xmm0-7 and zmm16 in about half the attaches.)"""
    out, blocks = _run_and_record([zmm_program], 30)
    assert blocks > 30 * 1000
    fields = _fields(out)
    assert fields["rounds"] > 30
    assert fields["bad"] == 0, out


@needs_avx512
def test_without_the_repair_stalker_clears_zmm_upper_halves(zmm_program):
    """What the repair prevents, shown with Frida as shipped (the same program, windows)."""
    out, _ = _run_and_record([zmm_program], 30, avx512_repair=False)
    assert _fields(out)["upper_cleared"] > 0, out


def test_numpy_matmul_is_bit_identical_over_30_recorded_windows():
    """numpy's dot and matmul on the CPU's default OpenBLAS kernel, recorded in 30 windows,
    give the bits they give unrecorded."""
    out, blocks = _run_and_record([sys.executable, PROGRAMS / "dbi_numpy_matmul.py"], 30)
    assert blocks > 30 * 1000
    fields = _fields(out)
    assert fields["calls"] > 30
    assert fields["mismatches"] == 0, out


def test_dbi_does_not_attach_while_the_main_thread_computes(tmp_path):
    """Frida's injection would run on a main thread busy in its own code and change its vector
    registers: DbiSession refuses, saying why, and the process is untouched."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.3)
        with pytest.raises(dbi.DbiUnavailable, match="main thread of process"):
            dbi.DbiSession(proc.pid)
        assert _frida_mappings(proc.pid) == []
        assert proc.poll() is None
    finally:
        _stop(proc)

"""The DBI recorder (issue 32) on real programs: its recording of a multi-threaded C program
equals the single-step truth of the same call, libipt decodes it the same, the program
computes what it computes without ptdebug (zmm/k registers, numpy's OpenBLAS), the seam picks
the stepper where DBI cannot go and says why, and nothing of Frida stays in the process."""
from __future__ import annotations

import os
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
        run = subprocess.run([sys.executable, "-m", "adapter.cli", "record", "--tid",
                              str(worker), "--from", "region", "--until-return", "-o", str(out),
                              "--json"], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert run.returncode == 0, run.stderr
        import json
        summary = json.loads(run.stdout)
        assert summary["recorder"]["name"] == "dbi"
        assert "Frida" in summary["recorder"]["why"]
        assert summary["status"] == "complete"
    finally:
        _stop(proc)


# -- where DBI cannot go ---------------------------------------------------------------------

def test_a_go_program_gets_the_stepper_and_the_reason(tmp_path):
    from stepper_support import build_go
    program = build_go("rec_checksum.go", tmp_path)
    choice = recorders.choose("auto", program=str(program), intel_pt_usable=False)
    assert choice.name == "stepper"
    assert "Go program" in choice.why


def test_a_process_another_tracer_holds_gets_the_stepper(exact_program):
    from other_tracer import another_tracer
    proc, worker = _start_exact(exact_program)
    try:
        with another_tracer([worker]):
            choice = recorders.choose("auto", pid=proc.pid, intel_pt_usable=False)
        assert choice.name == "stepper"
        assert "traced by process" in choice.why
        assert recorders.choose("auto", pid=proc.pid, intel_pt_usable=False).name == "dbi"
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


def _zmm_run(program, windows: int, **session_options) -> tuple[str, int]:
    proc = subprocess.Popen([str(program)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        blocks = _windows(proc.pid, proc.pid, windows, 0.05, **session_options)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        return out.strip(), blocks
    finally:
        if proc.poll() is None:
            _stop(proc)


@needs_avx512
def test_zmm_and_k_registers_survive_30_recorded_windows(zmm_program):
    out, blocks = _zmm_run(zmm_program, 30)
    assert blocks > 30 * 1000
    fields = out.split()
    assert fields[2:4] == ["bad", "0"], out


@needs_avx512
def test_without_the_repair_stalker_clears_zmm_upper_halves(zmm_program):
    """What the repair prevents, shown with Frida as shipped (the same program, windows)."""
    out, _ = _zmm_run(zmm_program, 30, avx512_repair=False)
    assert int(out.split()[3]) > 0, out


def test_numpy_matmul_is_bit_identical_over_30_recorded_windows(tmp_path):
    proc = subprocess.Popen([sys.executable, str(PROGRAMS / "dbi_numpy_matmul.py")],
                            stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    try:
        assert proc.stdout.readline().strip() == "ready"
        blocks = _windows(proc.pid, proc.pid, 30, 0.05)
        assert blocks > 30 * 1000
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        calls, mismatches = int(out.split()[1]), int(out.split()[3])
        assert calls > 30
        assert mismatches == 0, out
    finally:
        if proc.poll() is None:
            _stop(proc)

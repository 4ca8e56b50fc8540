"""A thread created while the stepper records with planted INT3 bytes: the
recorder lifts every byte before the new thread runs, lets it go untraced,
and finishes with debug registers; the new thread runs the code that had
breakpoints in it and the program ends normally."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from stepper_support import PROGRAMS, decode_ips, errors_in

from adapter.capture import record, stepper

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def rec_threads(tmp_path_factory):
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: scripts/bootstrap.sh installs build-essential")
    out = tmp_path_factory.mktemp("rec_thr") / "rec_threads"
    subprocess.run(["gcc", "-O1", "-g", "-pthread", "-o", str(out),
                    str(PROGRAMS / "rec_threads.c")], check=True)
    return out


def test_new_thread_during_int3_recording(rec_threads, tmp_path):
    out = tmp_path / "thr.bundle"
    result = record.record_stepper(str(out), command=[str(rec_threads)], start="start_worker",
                                   end=stepper.EndCondition(until_return=True), no_aslr=True,
                                   breakpoints="int3")
    m = result.manifest
    assert m["status"] == "complete", m["partial_reason"]
    assert m["stats"]["breakpoints"] == "int3" and m["stats"]["breakpoints_at_end"] == "dr"
    assert len(result.recording.threads_created) == 1
    assert result.target_exit == 0   # the new thread did not die on a planted INT3
    ips, events = decode_ips(out)
    assert errors_in(events) == [] and ips == list(result.recording.ips)


def test_new_thread_during_debug_register_recording(rec_threads, tmp_path):
    """pthread_create blocks every signal around clone: a debug-register hit there is a
    perf SIGTRAP the kernel holds until the mask is restored, reported past its instruction.
    The recorder steps while SIGTRAP is blocked (stepper._read_trap_mask); before, this
    window ended "off the path the recorder predicted" in 2 of 2 runs (2026-12-03), and a Go
    program whose recorded thread started an M died of that SIGTRAP. The flow is the one a
    single-stepping reference records, instruction for instruction."""
    from stepper_support import reference_launched
    out = tmp_path / "thr.bundle"
    result = record.record_stepper(str(out), command=[str(rec_threads)], start="start_worker",
                                   end=stepper.EndCondition(until_return=True), no_aslr=True,
                                   breakpoints="dr")
    m = result.manifest
    assert m["status"] == "complete", m["partial_reason"]
    assert result.target_exit == 0
    assert list(result.recording.ips) == reference_launched([rec_threads], "start_worker")


def test_int3_refused_for_a_multithreaded_target(tmp_path):
    """A launched Go program has several threads once its runtime runs: planted
    bytes would kill the others, so int3 is refused with the reason."""
    from stepper_support import build_go
    go = build_go("rec_work.go", tmp_path)
    with pytest.raises(record.RecordFailed, match="needs a single-threaded target"):
        record.record_stepper(str(tmp_path / "g"), command=[str(go)], start="main.work",
                              end=stepper.EndCondition(count=10), breakpoints="int3",
                              env=dict(os.environ, GODEBUG="asyncpreemptoff=1"))

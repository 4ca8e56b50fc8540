"""An interrupt (Ctrl-C, SIGTERM, the adapter ending a window) that lands while the recorded
thread's single-step stop is queued but not collected: the program runs on as without ptdebug.

What was seen (CI, stop 22, and ci11): `record --pid --breakpoints int3` stopped by SIGTERM, and
the program then died of SIGTRAP (-5). The recorder's cleanup collected the step's SIGTRAP
(si_code TRAP_TRACE, or TRAP_BRKPT for a step over a system call) and kept it as a signal of the
program's own, which the release then delivered. The race is a few microseconds wide in a real
run; here the interrupt is raised at that moment on purpose (in the recorder's wait, after the
step has completed), on a real process under real ptrace, so that each run meets it.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import time

import pytest
from stepper_support import build_c

from adapter.capture import record, stepper
from adapter.hw import perf

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_c("rec_checksum.c", tmp_path_factory.mktemp("interrupt_race"))


def _interrupt_after_steps(monkeypatch, steps: int, reason: str, before_run=None) -> dict:
    """From the `steps`-th single step on, the recorder's next wait raises KeyboardInterrupt
    once the step has had time to complete: the stop is queued, not collected, as when a
    signal's handler runs inside waitpid just after the kernel reported the step.
    `before_run(tid)` is called as the recorder starts on thread `tid`."""
    seen = {"steps": 0, "raised": False}
    real_run = stepper.ThreadRecorder.run
    real_step, real_wait = stepper.ThreadRecorder._step, stepper.ThreadRecorder._wait

    def run(self):
        if before_run is not None:
            before_run(self.tid)
        return real_run(self)

    def step(self, sig=0):
        seen["steps"] += 1
        real_step(self, sig)

    def wait(self, *args, **kwargs):
        if seen["steps"] >= steps and not seen["raised"]:
            seen["raised"] = True
            time.sleep(0.02)  # the step ends within microseconds: now its SIGTRAP is queued
            raise KeyboardInterrupt(reason)
        return real_wait(self, *args, **kwargs)

    monkeypatch.setattr(stepper.ThreadRecorder, "run", run)
    monkeypatch.setattr(stepper.ThreadRecorder, "_step", step)
    monkeypatch.setattr(stepper.ThreadRecorder, "_wait", wait)
    return seen


@contextlib.contextmanager
def _all_slots_taken():
    """Yields a function that takes the four debug-register slots of a thread (execute
    breakpoints at addresses the program never runs, as another tool would hold them): with
    none left, the dr recorder single-steps every instruction, which is where the race lives."""
    fds = []

    def take(tid):
        for n in range(4):
            fds.append(perf.perf_event_open(perf.exec_trap_attr(0x1000 + 16 * n), tid))
    try:
        yield take
    finally:
        for fd in fds:
            os.close(fd)


@pytest.mark.parametrize("kind", ["int3", "dr"])
def test_an_interrupt_with_a_step_queued_leaves_the_program_unharmed(program, tmp_path,
                                                                     monkeypatch, kind):
    """int3: system calls are stepped (40 rounds with a 1 ms sleep each); dr: every
    instruction is stepped, the slots being taken by another tool."""
    argv = [str(program), "40", "1000"]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    out_path = tmp_path / "out.txt"
    with _all_slots_taken() as take_slots, open(out_path, "w") as out, \
            pytest.raises(record.RecordFailed) as failed:
        seen = _interrupt_after_steps(monkeypatch, 20, "stopped by SIGTERM",
                                      before_run=take_slots if kind == "dr" else None)
        record.record_stepper(str(tmp_path / "b"), command=argv, start="step",
                              end=stepper.EndCondition(count=10_000_000),
                              breakpoints=kind, output_fd=out.fileno())
    assert seen["raised"], "the recorder never single-stepped: the race was not reached"
    assert "stopped by SIGTERM" in str(failed.value)
    program_run = failed.value.program
    assert program_run is not None, "the launched program was not handed back to the caller"
    status = program_run.wait(60)
    assert out_path.read_text() == plain.stdout, f"the program ended with status {status}"
    assert status == plain.returncode

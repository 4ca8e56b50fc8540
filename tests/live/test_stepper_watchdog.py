"""The stepper's watchdog (a SIGALRM tick that cuts a long wait short) never cuts the
recorder's own work in two: a recorder busy for over half a second between two stops (reading
a Python frame's code on a loaded machine) records on. Before, the tick's exception came out of
that work and failed the recording with "the recorder failed: Tick" (CI, 2026-12-04, the 3.10
Python attribution test). And the watchdog gives back the alarm it borrowed: it cancelled
pytest-timeout's, and a test that hung after a recording then ran into CI's 90 minutes."""
from __future__ import annotations

import signal
import subprocess
import time

import pytest
from stepper_support import build_c

from adapter.capture import record, stepper

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_c("rec_checksum.c", tmp_path_factory.mktemp("watchdog"))


def test_a_recorder_busy_between_stops_records_on(program, tmp_path):
    argv = [str(program), "2000", "0"]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    calls = []

    def busy_probe(regs):
        calls.append(regs.rip)
        if len(calls) == 5:
            time.sleep(0.8)  # three ticks with no stop in between
        return None
    out_path = tmp_path / "out.txt"
    with open(out_path, "w") as out:
        result = record.record_stepper(
            str(tmp_path / "b"), command=argv, start="step",
            end=stepper.EndCondition(count=20_000), breakpoints="dr", ptw_probe=busy_probe,
            output_fd=out.fileno())
    assert len(calls) > 5
    assert result.manifest["status"] == "complete", result.manifest
    assert result.manifest["stats"]["instructions"] == 20_000
    assert out_path.read_text() == plain.stdout


def test_the_watchdog_gives_back_the_alarm_it_borrowed(program, tmp_path):
    fired = []

    def ours(*_):
        fired.append(1)
    old_handler = signal.signal(signal.SIGALRM, ours)
    old_alarm = signal.setitimer(signal.ITIMER_REAL, 100)
    try:
        with open(tmp_path / "out.txt", "w") as out:
            result = record.record_stepper(
                str(tmp_path / "b"), command=[str(program), "2000", "0"], start="step",
                end=stepper.EndCondition(count=2_000), breakpoints="dr",
                output_fd=out.fileno())
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        handler = signal.getsignal(signal.SIGALRM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, *old_alarm)
        signal.signal(signal.SIGALRM, old_handler)
    assert result.manifest["status"] == "complete", result.manifest
    assert 90 < left <= 100 and not fired
    assert handler is ours

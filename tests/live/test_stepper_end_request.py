"""A window closed from outside the recording loop (stepper.EndRequest): what the DAP record
breakpoints use when debugpy stops the recorded thread in a window (a SIGUSR1 to the recorder
process sets the request). The recording ends complete, with the request's reason, as well
while the thread runs as while it sleeps in a system call (the watchdog's tick looks at the
request), and the program runs on exactly as without ptdebug."""
from __future__ import annotations

import subprocess
import threading

import pytest
from stepper_support import build_c

from adapter.capture import record, stepper

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_c("rec_checksum.c", tmp_path_factory.mktemp("end_request"))


@pytest.mark.parametrize("rounds, pause_us", [("20000", "0"), ("60", "20000")],
                         ids=["running", "sleeping"])
def test_an_end_request_closes_the_window_complete(program, tmp_path, rounds, pause_us):
    """20,000 rounds: some 2 million instructions, minutes at the stepper's pace (natively
    10 ms); 60 rounds of 20 ms sleeps: the request comes while the thread sleeps."""
    argv = [str(program), rounds, pause_us]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    request = stepper.EndRequest()
    timer = threading.Timer(0.5, request.end, ["the debugger stopped the thread"])
    out_path = tmp_path / "out.txt"
    # asked 0.5 s into the recording (not from the launch: under load, reaching `step` may
    # take longer than that, and a request made before the window opens closes it at once)
    with open(out_path, "w") as out:
        try:
            result = record.record_stepper(
                str(tmp_path / "b"), command=argv, start="step",
                end=stepper.EndCondition(count=50_000_000, request=request),
                breakpoints="dr", output_fd=out.fileno(),
                stage=lambda name: timer.start() if name == "recorder set up" else None)
        finally:
            timer.cancel()
    stats = result.manifest["stats"]
    assert result.manifest["status"] == "complete", result.manifest
    assert stats["end_reason"] == "the debugger stopped the thread", stats
    assert 0 < stats["instructions"] < 50_000_000
    assert out_path.read_text() == plain.stdout


def test_a_window_closed_before_its_first_instruction_is_not_recorded(program, tmp_path):
    """The request comes before the window's first instruction (in the DAP fuzzer: a
    `ptdebug/captureNow` and a `pause` together, 72 times in a 30-minute run, each told "the
    window recorded no instructions"): the recording fails with the request's reason, which the
    DAP layer reports as not recorded this time, and the program runs on as without ptdebug."""
    argv = [str(program), "60", "0"]
    plain = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    request = stepper.EndRequest()
    out_path = tmp_path / "out.txt"
    with open(out_path, "w") as out, pytest.raises(record.RecordFailed) as failed:
        record.record_stepper(
            str(tmp_path / "b"), command=argv, start="step",
            end=stepper.EndCondition(count=50_000, request=request), breakpoints="dr",
            output_fd=out.fileno(),
            stage=lambda name: request.end("the debugger stopped the thread in the window")
            if name == "recorder set up" else None)
    assert str(failed.value) == ("the debugger stopped the thread in the window, before the "
                                 "thread ran the window's first instruction")
    # let go, the program runs on to its end (read before it, its output was cut short: ci47)
    assert failed.value.program is not None and failed.value.program.wait(60) == 0
    assert out_path.read_text() == plain.stdout

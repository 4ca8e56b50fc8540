"""The stepper's path encoded while it is recorded (adapter/capture/live_encoding.py) is the
same stream, byte for byte, as the finished Recording encoded in one go
(record.encode_recording), on a real program: tests/fixtures/programs/untraced_call.c, whose
window has untraced calls (the callee runs unrecorded) and, in the second case, a signal sent
mid-window (it arrives while the callee runs; the program's handler runs). Most of the window
is encoded before it closes."""
from __future__ import annotations

import os
import signal
import threading

import pytest
from stepper_support import build_c

from adapter.capture import stepper
from adapter.capture.live_encoding import LiveEncoding
from adapter.capture.record import TIMING, encode_recording
from adapter.capture.target import Target
from adapter.hw import ptrace as pt

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_c("untraced_call.c", tmp_path_factory.mktemp("live_encoding"))


def _record_live(program, argv_tail, during=None):
    target = Target.launch([str(program), *argv_tail], no_aslr=True)
    timer = None
    try:
        tid = target.run_to(target.resolve("work"))
        target.keep_only(tid)
        tracer = target.resolve("tracer")
        regs = pt.getregs(tid)
        with pt.Memory(tid) as mem:
            return_address = mem.read_u64(regs.rsp)
        recorder = stepper.ThreadRecorder(
            tid, target.pid, stepper.EndCondition(until_return=True), entry_rsp=regs.rsp,
            return_address=return_address, breakpoints="dr",
            untraced_calls=lambda address, regs: address == tracer)
        live = LiveEncoding(recorder.rec, recorder.code.read_code, TIMING)
        recorder.while_running = live.step
        if during is not None:
            timer = threading.Timer(0.3, during, (target.pid,))
            timer.start()
        rec = recorder.run()
    finally:
        if timer is not None:
            timer.join()
        target.release()
    assert target.launched.wait(30) == 0, "the program computed as without ptdebug"
    return rec, recorder, live


@pytest.mark.parametrize("argv_tail, signalled", [(["0", "0"], False), (["800", "1"], True)],
                         ids=["plain", "signal"])
def test_the_stream_encoded_during_the_window_equals_the_one_encoded_after(
        program, argv_tail, signalled):
    during = (lambda pid: os.kill(pid, signal.SIGUSR1)) if signalled else None
    rec, recorder, live = _record_live(program, argv_tail, during)
    assert rec.partial_reason is None, rec.partial_reason
    assert rec.untraced, "the window has untraced calls"
    encoded_early = live.encoded
    assert live.failure is None, live.failure
    assert encoded_early >= len(rec.ips) // 2, (encoded_early, len(rec.ips))
    assert live.finish() == encode_recording(rec, recorder.code.read_code)

"""The stepper runs a callee unrecorded when told to (ThreadRecorder's `untraced_calls`; in a
Python window, the debugger's compiled tracer: adapter/python/debugger_code.py), on a real
program (tests/fixtures/programs/untraced_call.c, two indirect calls of `tracer` from `work`):
the recording is the single-step reference with the callee's instructions cut out, it encodes
as PT that decodes to exactly that path with the calls opening no frame, and the program runs
as without ptdebug; encoded while it is recorded (adapter/capture/live_encoding.py), the
stream is the same bytes. A window asked to close while the callee runs closes at the call; a signal
that arrives in the callee reaches the program's handler."""
from __future__ import annotations

import os
import signal
import threading

import pytest
from stepper_support import build_c, reference_launched

from adapter.capture import stepper
from adapter.capture.live_encoding import LiveEncoding
from adapter.capture.record import TIMING, encode_recording
from adapter.capture.target import Target
from adapter.hw import ptrace as pt
from pt_decoder import insn_flags
from pt_decoder.image import Image
from pt_decoder.insn import InsnDecoder

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_c("untraced_call.c", tmp_path_factory.mktemp("untraced"))


def _record(program, argv_tail, *, during=None, end=None, prepare=None):
    """Record `work` to its return (or `end`) with `tracer` run unrecorded; `during(pid)` is
    called on a timer 0.3 s into the recording, `prepare(recorder)` before it runs. Returns
    (recording, recorder, image, tracer's address, the program's exit status)."""
    target = Target.launch([str(program), *argv_tail], no_aslr=True)
    timer = None
    try:
        tid = target.run_to(target.resolve("work"))
        target.keep_only(tid)
        tracer = target.resolve("tracer")
        regs = pt.getregs(tid)
        with pt.Memory(tid) as mem:
            return_address = mem.read_u64(regs.rsp)
        asked = []

        def untraced(address, regs):
            asked.append(address)
            return address == tracer

        recorder = stepper.ThreadRecorder(
            tid, target.pid, end or stepper.EndCondition(until_return=True),
            entry_rsp=regs.rsp, return_address=return_address, breakpoints="dr",
            untraced_calls=untraced)
        if prepare is not None:
            prepare(recorder)
        if during is not None:
            timer = threading.Timer(0.3, during, (target.pid,))
            timer.start()
        rec = recorder.run()
        image = Image.from_process(target.pid)
        assert asked, "the recorder asked about the indirect calls"
    finally:
        if timer is not None:
            timer.join()
        target.release()
    return rec, recorder, image, tracer, target.launched.wait(30)


def _without_callees(path, calls_at):
    """`path` with what ran between each call in `calls_at` (indices) and its return address
    (the first later instruction at the call's fall-through) cut out."""
    out, i = [], 0
    while i < len(path):
        out.append(path[i])
        if i in calls_at:
            i = path.index(calls_at[i], i + 1)
            continue
        i += 1
    return out


def test_the_callee_is_cut_out_of_an_exact_recording(program):
    reference = reference_launched([program, "0", "0"], "work")
    rec, recorder, image, tracer, status = _record(program, ["0", "0"])
    assert status == 0, "the program computed as without ptdebug"
    assert rec.partial_reason is None, rec.partial_reason
    assert list(rec.untraced.values()) == [tracer, tracer]
    # the return address of each call: the instruction recorded after it
    calls = [k for k in range(len(reference) - 1) if reference[k + 1] == tracer]
    assert len(calls) == 2
    returns = {k: rec.ips[u + 1] for k, u in zip(calls, sorted(rec.untraced), strict=True)}
    assert list(rec.ips) == _without_callees(reference, returns)
    assert tracer not in rec.ips
    # the PT the stepper writes decodes to that path, the calls opening no frame
    flow = InsnDecoder(encode_recording(rec, recorder.code.read_code), image).decode()
    assert flow.errors() == [] and list(flow.ip) == list(rec.ips)
    history = flow.to_history()
    for k in rec.untraced:
        assert not history.flags(k) & insn_flags.CALL
        assert history.flags(k + 1) & insn_flags.RESUMED
    assert history.depth(len(history) - 1) == history.depth(0)


def test_a_window_asked_to_close_in_the_callee_closes_at_the_call(program):
    request = stepper.EndRequest()
    rec, recorder, image, tracer, status = _record(
        program, ["1500", "0"], during=lambda pid: request.end("asked to close"),
        end=stepper.EndCondition(until_return=True, request=request))
    assert status == 0, "the program ran on as without ptdebug"
    assert rec.reason == "asked to close" and rec.partial_reason is None
    last = len(rec.ips) - 1
    assert rec.untraced == {**rec.untraced, last: tracer} and len(rec.untraced) == 2
    assert rec.end_ip == tracer
    flow = InsnDecoder(encode_recording(rec, recorder.code.read_code), image).decode()
    assert flow.errors() == [] and list(flow.ip) == list(rec.ips)


def test_a_signal_in_the_callee_reaches_the_programs_handler(program):
    rec, _, _, tracer, status = _record(program, ["800", "1"],
                                        during=lambda pid: os.kill(pid, signal.SIGUSR1))
    assert status == 0, "the handler saw the signal once and the result is right"
    assert rec.partial_reason is None, rec.partial_reason
    assert len(rec.untraced) == 2 and tracer not in rec.ips


@pytest.mark.parametrize("argv_tail, signalled", [(["0", "0"], False), (["800", "1"], True)],
                         ids=["plain", "signal"])
def test_the_stream_encoded_during_the_window_equals_the_one_encoded_after(
        program, argv_tail, signalled):
    """What the recorder encodes while the thread runs between stops (live_encoding.py), then
    finishes after the window, is the stream encode_recording writes in one go; most of the
    window is encoded before it closes. With untraced calls, and a signal sent mid-window (it
    arrives while the callee runs; the program's handler runs)."""
    live = []

    def prepare(recorder):
        live.append(LiveEncoding(recorder.rec, recorder.code.read_code, TIMING))
        recorder.while_running = live[0].step

    during = (lambda pid: os.kill(pid, signal.SIGUSR1)) if signalled else None
    rec, recorder, _, _, status = _record(program, argv_tail, during=during, prepare=prepare)
    assert status == 0, "the program computed as without ptdebug"
    assert rec.partial_reason is None and rec.untraced, rec
    assert live[0].failure is None, live[0].failure
    assert live[0].encoded >= len(rec.ips) // 2, (live[0].encoded, len(rec.ips))
    assert live[0].finish() == encode_recording(rec, recorder.code.read_code)

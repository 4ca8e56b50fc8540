"""Signals while recording: a SIGALRM handler entered mid-path is recorded as
an asynchronous transfer (PT: FUP + TIP.PGD/PGE around it), the return via
rt_sigreturn continues the path, and the bundle decodes to exactly the
recorded path. PTWRITE values from the ptw_probe hook land in the trace."""
from __future__ import annotations

import pytest
from stepper_support import build_c, decode_ips, errors_in, libipt_decode_ips

from adapter.capture import record, stepper
from pt_decoder.image import Image

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def rec_signal(tmp_path_factory):
    return build_c("rec_signal.c", tmp_path_factory.mktemp("rec_sig"))


def test_signal_handlers_are_recorded_and_decode(rec_signal, tmp_path):
    out = tmp_path / "sig.bundle"
    result = record.record_stepper(str(out), command=[str(rec_signal), "3000000"], start="spin",
                                   end=stepper.EndCondition(duration_ms=1500), no_aslr=True,
                                   breakpoints="dr")
    rec = result.recording
    assert result.manifest["status"] == "complete", result.manifest["partial_reason"]
    assert rec.async_events, "no SIGALRM arrived while recording"
    image = Image()
    image.add_elf(str(rec_signal), base=0x555555554000)
    handler = image.find_symbol("on_alarm")[0]
    ips = list(rec.ips)
    for index, interrupted in rec.async_events:
        if index < len(ips):                  # (the recording may end right at the entry)
            assert ips[index] == handler      # the path jumps into the handler there
    decoded, events = decode_ips(out)
    assert errors_in(events) == []
    assert decoded == ips
    assert libipt_decode_ips(out) == (ips, [])


def test_ptw_probe_values_reach_the_trace(rec_signal, tmp_path):
    from oracle import libipt

    from adapter.capture.bundle import Bundle
    out = tmp_path / "ptw.bundle"
    seen = []

    def probe(regs):
        seen.append(regs.rsp & 0xFFFF)
        return regs.rsp & 0xFFFF

    result = record.record_stepper(str(out), command=[str(rec_signal), "100"], start="spin",
                                   end=stepper.EndCondition(until_return=True), no_aslr=True,
                                   ptw_probe=probe)
    assert result.manifest["status"] == "complete"
    assert seen and result.recording.ptw
    b = Bundle.open(out)
    packets = libipt.libipt_packets(b.stream_bytes(b.streams[0]))
    ptw = [p for p in packets if p["kind"] == "ptw"]
    assert [p["payload"] for p in ptw] == [v for _, v in result.recording.ptw]

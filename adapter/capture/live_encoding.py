"""The stepper's recording turned into Intel PT while it is being recorded: what the window
recorded so far is encoded each time the recorder lets the thread run to its next stop, so
that only the last stretch is left to encode when the window closes.

Layer: adapter.capture (policy of the stepper backend, beside record.py). Reads the stepper's
Recording (stepper.py) as it grows and writes packets with pt_decoder's FlowEncoder
(`start()`'s piecewise run); knows nothing of bundles or of who waits for the stream.

Why: encoding is pure Python, some 2.5 us an instruction; done after the window it stood
between the window's end and the capture's first answer (issue 33: 0.8-0.9 s of the 1.3 s
for an onnxruntime request of 315,000 instructions). While the thread runs between two stops
the recorder only waits (each stop is a trap that leaves the VM, ~100-200 us here), so the
encoding of the few instructions of the last stop fits in that wait.

What may be encoded early: the stepper appends to `ips` and `stamps` and only ever changes
the newest entries (an instruction that did not complete is popped; a PTWRITE value found at
a stop moves to the instruction before it), and an instruction's packets need the address
after it. So everything older than the newest LAG instructions is final, with its stamp (the
last stop at or before it) and its PTWRITE value. The stream is the same bytes as
`record.encode_recording` gives for the finished Recording (tests/live/
test_stepper_untraced.py, tests/pt_decoder/test_flow_encoder.py).
"""
from __future__ import annotations

from array import array

from pt_decoder.flow_encoder import EncodingRun, FlowEncoder

LAG = 4
"""Newest instructions never encoded early (the stepper may still pop or re-stamp them)."""
CHUNK = 512
"""Most instructions encoded while the thread runs once: the thread's next stop waits for
no more than that (~1 ms) when the encoding has fallen behind."""


def timed_flow_encoder(read_code, timing: dict) -> FlowEncoder:
    """The FlowEncoder of the stepper's streams: PSB+ every 4 KiB, the stepper's clock."""
    return FlowEncoder(read_code, psb_period=4096, timing=True, cyc=True,
                       mtc_freq=timing["mtc_freq"], nom_freq=timing["nom_freq"],
                       cpuid_0x15=(timing["cpuid_0x15_eax"], timing["cpuid_0x15_ebx"]))


class LiveEncoding:
    """The PT stream of one stepper Recording (`rec`), encoded as it grows: `step()` while the
    thread runs (ThreadRecorder's `while_running`), `finish()` once the window has closed."""

    def __init__(self, rec, read_code, timing: dict):
        self.rec = rec
        self.fe = timed_flow_encoder(read_code, timing)
        self.tscs = array("Q")
        """The stamp of each instruction encoded or about to be."""
        self.ptwrites: dict[int, int] = {}
        self._ptw_seen = 0
        """Entries of rec.ptw copied into `ptwrites`."""
        self._stamp = 0
        """Index in rec.stamps of the stamp of the next instruction whose tsc is filled."""
        self.run: EncodingRun | None = None
        self.failure: str | None = None
        """Why encoding early stopped (code that cannot be read): finish() then encodes the
        whole Recording again, and reports the error as record.encode_recording does."""

    @property
    def encoded(self) -> int:
        """Instructions encoded so far."""
        return self.run.position if self.run is not None else 0

    def _fill(self, upto: int) -> None:
        """Stamps and PTWRITE values of the instructions before `upto`."""
        rec = self.rec
        stamps = rec.stamps
        tscs = self.tscs
        at = self._stamp
        last = len(stamps) - 1
        for index in range(len(tscs), upto):
            while at < last and stamps[at + 1][0] <= index:
                at += 1
            tscs.append(stamps[at][1])
        self._stamp = at
        ptw = rec.ptw
        seen = self._ptw_seen
        while seen < len(ptw) and ptw[seen][0] < upto:
            index, value = ptw[seen]
            if index >= 0:
                self.ptwrites[index] = value
            seen += 1
        self._ptw_seen = seen

    def step(self) -> None:
        """Encode what is final of the recording so far, at most CHUNK instructions. Never
        raises: a failure is kept (`failure`) and finish() starts over."""
        rec = self.rec
        if self.failure is not None or not rec.stamps:
            return
        upto = min(len(rec.ips) - LAG, self.encoded + CHUNK)
        if upto <= self.encoded:
            return
        try:
            self._fill(upto)
            if self.run is None:
                self.run = self.fe.start(tscs=self.tscs, ptwrites=self.ptwrites,
                                         untraced=rec.untraced)
                self.run.begin(rec.ips)
            self.run.feed(rec.ips, upto)
        except Exception as exc:  # noqa: BLE001 - kept; finish() encodes all again and raises
            self.failure = f"{type(exc).__name__}: {exc}"
            self.run = None

    def finish(self) -> bytes | None:
        """The whole stream, once the Recording is final; None when nothing was encoded early
        (the caller encodes it in one go: record.encode_recording)."""
        rec = self.rec
        if self.run is None or self.failure is not None or not len(rec.ips):
            return None
        if len(rec.ips) <= self.encoded:
            return None  # the stepper took back more than LAG instructions: start over
        self._fill(len(rec.ips))
        return self.run.finish(rec.ips, rec.end_ip)

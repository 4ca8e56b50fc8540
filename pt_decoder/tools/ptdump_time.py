"""Time tracking for `ptdebug dump --time/--tcal`: TSC estimate and calibration.

Layer: pt_decoder.tools (the dump command only). It follows the Intel SDM
Vol. 3C, chapter "Intel Processor Trace", sections "Time Stamp Counter (TSC)
Packet", "Mini Time Counter (MTC) Packet", "TSC/MTC Alignment (TMA) Packet",
"Cycle Count (CYC) Packet" and "Core:Bus Ratio (CBR) Packet", with the
semantics of libipt 2.0.5's pt_time / pt_time_cal so that ptdump's `tsc` and
`fcr` columns and its "error updating time" lines come out the same. It
knows packet payload values only (plain ints), never packets or formatting.
The decoder's own timing layer (timing.pyx) is separate and faster; this one
is plain Python because the dump is an inspection tool.

The timing model (SDM): TSC packets give the full time stamp; TMA, sent with
a TSC in PSB+, gives the Common Timestamp Copy (CTC, the crystal clock) and
the FastCounter at that TSC; MTC packets carry CTC bits [mtc_freq+7:mtc_freq]
every 2^mtc_freq CTC ticks; CYC packets count core cycles since the last
CYC-eligible packet. CTC ticks convert to TSC ticks as
ctc * CPUID.15H:EBX / CPUID.15H:EAX; core cycles convert to TSC ticks with a
calibrated ratio FCR (fixed point, FCR_SHIFT fraction bits) that is measured
from cycles between MTCs (or TSCs) or taken from CBR and the nominal ratio.

All arithmetic is done modulo 2^64 / 2^32 as the hardware counters wrap.
"""
from __future__ import annotations

from dataclasses import dataclass

from pt_decoder.errors import ErrorCode

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1
FCR_SHIFT = 8                   # fraction bits of the fast-counter ratio
MTC_PAYLOAD_BITS = 8            # MTC carries 8 CTC bits
TMA_CTC_BITS = 16               # TMA carries CTC[15:0]
TMA_CTC_MASK = (1 << TMA_CTC_BITS) - 1
TSC_BITS = 56                   # TSC packet payload


class TimeError(Exception):
    """A timing update failed; `code` is the ErrorCode (ptdump prints its text)."""

    def __init__(self, code: ErrorCode):
        super().__init__(code.name)
        self.code = code


@dataclass
class TimeConfig:
    mtc_freq: int = 0           # IA32_RTIT_CTL.MTCFreq
    nom_freq: int = 0           # MSR_PLATFORM_INFO[15:8], the nominal core:bus ratio
    cpuid_0x15_eax: int = 0     # TSC:CTC ratio denominator
    cpuid_0x15_ebx: int = 0     # TSC:CTC ratio numerator
    skl168: bool = False        # erratum SKL168: CYC lost right before PSB


def _ctc_delta(ctc: int, last_ctc: int, cfg: TimeConfig) -> int:
    """CTC ticks from last_ctc to ctc, correcting one wrap of the MTC-visible bits."""
    if ctc < last_ctc:
        ctc = (ctc + (1 << (cfg.mtc_freq + MTC_PAYLOAD_BITS))) & MASK32
        if ctc < last_ctc:
            raise TimeError(ErrorCode.BAD_PACKET)
    return (ctc - last_ctc) & MASK32


def _ctc_to_tsc(ctc: int, cfg: TimeConfig) -> int:
    """CTC ticks -> TSC ticks (SDM: TSC = CTC * CPUID.15H:EBX / CPUID.15H:EAX)."""
    if not cfg.cpuid_0x15_eax or not cfg.cpuid_0x15_ebx:
        raise TimeError(ErrorCode.BAD_CONFIG)
    return ((ctc * cfg.cpuid_0x15_ebx) & MASK64) // cfg.cpuid_0x15_eax


class TimeTracker:
    """The estimated TSC after each timing packet (libipt's pt_time)."""

    def __init__(self) -> None:
        self.tsc = 0            # the current estimate
        self.base = 0           # TSC at the last TSC/MTC
        self.fc = 0             # fast-counter ticks since base
        self.ctc = 0            # CTC at the last MTC/TMA (shifted into place)
        self.ctc_cyc = 0        # CTC of the last CYC-relevant period start
        self.lost_mtc = 0
        self.lost_cyc = 0
        self.cbr = 0
        self.have_tsc = False
        self.have_cbr = False
        self.have_tma = False
        self.have_mtc = False

    def query_tsc(self) -> int:
        """The current estimate; raises TimeError(NO_TIME) before the first TSC
        (the estimate is still available as `.tsc`)."""
        if not self.have_tsc:
            raise TimeError(ErrorCode.NO_TIME)
        return self.tsc

    def update_tsc(self, tsc: int, cfg: TimeConfig) -> None:
        self.have_tsc = True
        self.have_tma = False
        self.have_mtc = False
        self.tsc = self.base = tsc
        self.ctc = 0
        self.fc = 0
        self.lost_mtc = 0       # a full time stamp ends earlier losses
        self.lost_cyc = 0

    def update_cbr(self, ratio: int, cfg: TimeConfig) -> None:
        if not ratio:
            raise TimeError(ErrorCode.BAD_PACKET)
        self.have_cbr = True
        self.cbr = ratio

    def update_tma(self, ctc: int, fc: int, cfg: TimeConfig) -> None:
        if not self.have_tsc or self.have_tma:
            raise TimeError(ErrorCode.BAD_CONTEXT)
        if self.have_mtc:
            raise TimeError(ErrorCode.INTERNAL)
        mtc_hi = cfg.mtc_freq + MTC_PAYLOAD_BITS
        ctc_mask = ((1 << mtc_hi) - 1) & MASK32
        self.have_tma = True
        # The TSC was taken FastCounter ticks after the CTC edge.
        self.base = (self.base - fc) & MASK64
        self.fc = (self.fc + fc) & MASK64
        # If TMA holds every CTC bit MTC shows, it serves as the first MTC.
        if mtc_hi <= TMA_CTC_BITS:
            self.have_mtc = True
        self.ctc = self.ctc_cyc = ctc & ctc_mask

    def update_mtc(self, ctc_payload: int, cfg: TimeConfig) -> None:
        have_tsc, have_tma, have_mtc = self.have_tsc, self.have_tma, self.have_mtc
        # MTCs between TSC and its TMA would look like CTC overflows: skip them.
        if have_tsc and not have_tma:
            return
        base = self.base
        last_ctc = self.ctc
        ctc = (ctc_payload << cfg.mtc_freq) & MASK32
        if self.fc or self.lost_cyc or not have_mtc:
            self.ctc_cyc = ctc
        self.have_mtc = True
        self.fc = 0
        self.ctc = ctc
        self.lost_cyc = 0
        if not have_mtc:
            # Without a TMA we cannot place the first MTC: ignore it.
            if not have_tma:
                return
            if last_ctc & ~TMA_CTC_MASK & MASK32:
                raise TimeError(ErrorCode.INTERNAL)
            # Take the CTC bits above TMA's from this MTC, one period back if
            # its low bits already wrapped past the TMA's.
            ctc_lo = ctc & TMA_CTC_MASK
            ctc_hi = ctc & ~TMA_CTC_MASK & MASK32
            if ctc_lo < last_ctc:
                ctc_hi = (ctc_hi - (1 << TMA_CTC_BITS)) & MASK32
                ctc_hi &= (0xFF << cfg.mtc_freq) & MASK32
            last_ctc |= ctc_hi
        try:
            delta = _ctc_delta(ctc, last_ctc, cfg)
        except TimeError:
            self.lost_mtc += 1
            raise
        self.tsc = self.base = (base + _ctc_to_tsc(delta, cfg)) & MASK64

    def _adjust_cyc(self, cyc: int, cfg: TimeConfig, fcr: int) -> int:
        """Drop the part of a CYC that belongs to earlier MTC periods."""
        last_ctc, ctc = self.ctc_cyc, self.ctc
        if ctc == last_ctc:
            return cyc
        fc = _ctc_to_tsc(_ctc_delta(ctc, last_ctc, cfg), cfg)
        old_cyc = ((fc << FCR_SHIFT) & MASK64) // fcr
        return max(cyc, old_cyc) - old_cyc

    def update_cyc(self, cyc: int, cfg: TimeConfig, fcr: int) -> None:
        if not fcr:
            self.lost_cyc += 1
            return
        fc = self.fc
        if not fc:
            cyc = self._adjust_cyc(cyc, cfg, fcr)
        fc = (fc + (((cyc * fcr) & MASK64) >> FCR_SHIFT)) & MASK64
        self.fc = fc
        self.tsc = (self.base + fc) & MASK64


class TimeCalibration:
    """The core-cycles -> TSC ratio (libipt's pt_time_cal)."""

    def __init__(self) -> None:
        self.fcr = 0
        self.min_fcr = MASK64
        self.max_fcr = 0
        self.tsc = 0            # last TSC, for TSC-to-TSC calibration
        self.cyc_tsc = 0        # cycles since that TSC
        self.cyc_mtc = 0        # cycles since the last MTC
        self.ctc = 0
        self.lost_mtc = 0
        self.have_mtc = False
        self.check_skl168 = False

    def have_fcr(self) -> bool:
        return self.min_fcr <= self.max_fcr

    def query_fcr(self) -> int:
        if not self.have_fcr():
            raise TimeError(ErrorCode.NO_TIME)
        return self.fcr

    def _set_fcr(self, fcr: int) -> None:
        self.fcr = fcr
        self.min_fcr = min(self.min_fcr, fcr)
        self.max_fcr = max(self.max_fcr, fcr)

    def update_psb(self, cfg: TimeConfig) -> None:
        if cfg.skl168:
            self.check_skl168 = True

    def update_tsc(self, tsc: int, cfg: TimeConfig) -> None:
        # A TSC outside PSB+ may follow lost time: keep it only as the start
        # of the next TSC-to-TSC measurement.
        self.tsc = tsc
        self.cyc_tsc = 0

    def header_tsc(self, tsc: int, cfg: TimeConfig) -> None:
        last_tsc, cyc = self.tsc, self.cyc_tsc
        self.tsc = tsc
        self.cyc_tsc = 0
        if not last_tsc or not cyc or self.have_mtc:
            return                      # MTC calibrates better when present
        if tsc < last_tsc:
            tsc += 1 << TSC_BITS
            if tsc < last_tsc:
                raise TimeError(ErrorCode.BAD_PACKET)
        delta = tsc - last_tsc
        if delta >> (64 - FCR_SHIFT):
            raise TimeError(ErrorCode.INTERNAL)
        self._set_fcr((delta << FCR_SHIFT) // cyc)

    def update_cbr(self, ratio: int, cfg: TimeConfig) -> None:
        # A CBR outside PSB+ is a frequency change: start over.
        self.__init__()
        self.header_cbr(ratio, cfg)

    def header_cbr(self, ratio: int, cfg: TimeConfig) -> None:
        if not cfg.nom_freq:
            return
        if not ratio:
            raise TimeError(ErrorCode.BAD_PACKET)
        # Core cycles per TSC tick = CBR / nominal ratio.
        self._set_fcr((cfg.nom_freq << FCR_SHIFT) // ratio)

    def update_tma(self, ctc: int, fc: int, cfg: TimeConfig) -> None:
        return

    def update_mtc(self, ctc_payload: int, cfg: TimeConfig) -> None:
        last_ctc, have_mtc, cyc = self.ctc, self.have_mtc, self.cyc_mtc
        check_skl168 = self.check_skl168
        self.check_skl168 = False       # only the first MTC after PSB
        ctc = (ctc_payload << cfg.mtc_freq) & MASK32
        if not have_mtc:
            self.cyc_mtc = 0
            self.ctc = ctc
            self.have_mtc = True
            return
        if not cyc:
            return                      # spread the cycles over a longer period
        self.cyc_mtc = 0
        self.ctc = ctc
        self.lost_mtc += 1
        fc = _ctc_to_tsc(_ctc_delta(ctc, last_ctc, cfg), cfg)
        if fc >> (64 - FCR_SHIFT):
            raise TimeError(ErrorCode.INTERNAL)
        fcr = (fc << FCR_SHIFT) // cyc
        if check_skl168:
            # SKL168: a CYC right before PSB may be lost. Skip this period if
            # MTCs were lost or the cycles look a wrap (4096) short.
            delta = _ctc_delta(ctc, last_ctc, cfg)
            if (1 << cfg.mtc_freq) < delta:
                return
            if cfg.mtc_freq < 10 and self.have_fcr():
                expected = ((self.fcr * (cyc + 0xF00)) & MASK64) >> FCR_SHIFT
                if expected < fc:
                    return
        self._set_fcr(fcr)
        self.lost_mtc = 0

    def update_cyc(self, cyc: int, cfg: TimeConfig) -> None:
        self.cyc_mtc = (self.cyc_mtc + cyc) & MASK64
        self.cyc_tsc = (self.cyc_tsc + cyc) & MASK64

# Timing layer contract: the state libipt's pt_time / pt_time_cal keep, as C
# structs, so that event.pyx updates them per packet without Python.
#
# Fields follow the Intel SDM Vol. 3C section 33.3.7 "Time Stamp Counter" and
# the timing packets of section 33.4.2 (TSC, TMA, MTC, CYC, CBR):
#   tsc   the estimated TSC at the last timing packet (base + fc)
#   base  TSC at the last TSC/MTC (the reference point)
#   fc    fast-counter cycles since base, in TSC ticks (TMA FastCounter + CYC)
#   ctc   last Common Timestamp Copy value (from TMA or MTC, shifted by mtc_freq)
# `cyc` counts CYC payload cycles since the trace start (the history's cycles).

from libc.stdint cimport uint8_t, uint32_t, uint64_t

ctypedef struct TimeConfig:
    uint32_t mtc_freq          # IA32_RTIT_CTL.MTCFreq (MTC period = 2^mtc_freq CTC)
    uint32_t nom_freq          # nominal core:bus ratio (CPUID 0x16 / MSR_PLATFORM_INFO)
    uint32_t cpuid_0x15_eax    # TSC/ART ratio denominator
    uint32_t cpuid_0x15_ebx    # TSC/ART ratio numerator
    uint8_t skl168             # erratum SKL168: bad CYC->TSC calibration after PSB

ctypedef struct PtTime:
    uint64_t tsc
    uint64_t base
    uint64_t fc
    uint32_t ctc
    uint32_t ctc_cyc
    uint32_t lost_mtc
    uint32_t lost_cyc
    uint64_t cyc               # cumulative CYC payloads (cycles), never reset
    uint8_t cbr
    uint8_t have_tsc
    uint8_t have_cbr
    uint8_t have_tma
    uint8_t have_mtc

ctypedef struct PtTimeCal:
    uint64_t fcr               # fast-counter:cycle ratio, fixed point << FCR_SHR
    uint64_t min_fcr
    uint64_t max_fcr
    uint64_t tsc
    uint64_t cyc_tsc
    uint64_t cyc_mtc
    uint32_t ctc
    uint32_t lost_mtc
    uint8_t have_mtc
    uint8_t check_skl168

cdef void time_init(PtTime* t) noexcept nogil
cdef void tcal_init(PtTimeCal* c) noexcept nogil
cdef void tcal_update_psb(PtTimeCal* c, const TimeConfig* cfg) noexcept nogil
# Each apply_* updates calibration and time for one packet, as a decoder does
# in (header=1) or after (header=0) a PSB+; returns 0 or -PTE_*.
cdef int apply_tsc(PtTime* t, PtTimeCal* c, uint64_t tsc, int header, const TimeConfig* cfg) noexcept nogil
cdef int apply_cbr(PtTime* t, PtTimeCal* c, uint32_t ratio, int header, const TimeConfig* cfg) noexcept nogil
cdef int apply_tma(PtTime* t, PtTimeCal* c, uint32_t ctc, uint32_t fc, const TimeConfig* cfg) noexcept nogil
cdef int apply_mtc(PtTime* t, PtTimeCal* c, uint32_t ctc, const TimeConfig* cfg) noexcept nogil
cdef int apply_cyc(PtTime* t, PtTimeCal* c, uint64_t cyc, const TimeConfig* cfg) noexcept nogil

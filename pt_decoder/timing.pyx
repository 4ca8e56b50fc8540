"""Timing layer: TSC, TMA, MTC, CYC and CBR packets -> a TSC estimate.

Layer: pt_decoder, below the event layer (event.pyx calls these per timing
packet) and above nothing; it knows no packets, only their payloads, and
nothing of instructions or images.

The arithmetic is the SDM's (Vol. 3C 33.3.7 and 33.4.2.11-33.4.2.16): TSC packets
set the time; TMA relates the Common Timestamp Copy (CTC, the ART counter the MTC
packets sample) to the TSC; each MTC adds the CTC delta converted to TSC ticks
with CPUID leaf 0x15 (TSC = CTC * EBX / EAX); CYC packets add core cycles
converted to TSC ticks with a fast-counter:cycle ratio (FCR) calibrated from the
core:bus ratio (CBR x nominal frequency) or from cycles counted between MTCs or
TSCs. The calibration rules and their order are the same as libipt's pt_time.c,
so that every instruction gets the same TSC as libipt gives it (tested on the
DynamoRIO recordings). The `cyc` field accumulates the raw CYC payloads: the
history's cycle column.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memset

from pt_decoder._errors cimport PTE_BAD_CONFIG, PTE_BAD_CONTEXT, PTE_BAD_PACKET, PTE_INTERNAL, PTE_NO_TIME

# FCR is fixed point with 8 fraction bits (libipt's pt_tcal_fcr_shr).
DEF FCR_SHR = 8
DEF MTC_BITS = 8
DEF TMA_CTC_BITS = 16
DEF TMA_CTC_MASK = 0xffff
DEF TSC_BITS = 56


cdef void time_init(PtTime* t) noexcept nogil:
    memset(t, 0, sizeof(PtTime))


cdef void tcal_init(PtTimeCal* c) noexcept nogil:
    memset(c, 0, sizeof(PtTimeCal))
    c.min_fcr = <uint64_t>-1


cdef inline int _ctc_delta(uint32_t* delta, uint32_t ctc, uint32_t last_ctc, const TimeConfig* cfg) noexcept nogil:
    # The CTC wraps at 2^(mtc_freq + 8); one wrap is tolerated.
    if ctc < last_ctc:
        ctc += (<uint32_t>1) << (cfg.mtc_freq + MTC_BITS)
        if ctc < last_ctc:
            return -PTE_BAD_PACKET
    delta[0] = ctc - last_ctc
    return 0


cdef inline int _ctc_fc(uint64_t* fc, uint64_t ctc, const TimeConfig* cfg) noexcept nogil:
    # SDM 33.3.7: TSC ticks = CTC ticks * CPUID.15H:EBX / CPUID.15H:EAX.
    if cfg.cpuid_0x15_eax == 0 or cfg.cpuid_0x15_ebx == 0:
        return -PTE_BAD_CONFIG
    fc[0] = (ctc * cfg.cpuid_0x15_ebx) // cfg.cpuid_0x15_eax
    return 0


cdef inline int _have_fcr(const PtTimeCal* c) noexcept nogil:
    return c.min_fcr <= c.max_fcr


cdef inline void _set_fcr(PtTimeCal* c, uint64_t fcr) noexcept nogil:
    c.fcr = fcr
    if fcr < c.min_fcr:
        c.min_fcr = fcr
    if fcr > c.max_fcr:
        c.max_fcr = fcr


cdef void tcal_update_psb(PtTimeCal* c, const TimeConfig* cfg) noexcept nogil:
    if cfg.skl168:
        c.check_skl168 = 1


cdef inline void _time_tsc(PtTime* t, uint64_t tsc) noexcept nogil:
    t.have_tsc = 1
    t.have_tma = 0
    t.have_mtc = 0
    t.tsc = tsc
    t.base = tsc
    t.ctc = 0
    t.fc = 0
    t.lost_mtc = 0
    t.lost_cyc = 0


cdef int _tcal_header_tsc(PtTimeCal* c, uint64_t tsc) noexcept nogil:
    # Calibrate from the cycles counted between two PSB+ TSCs (only without MTC).
    cdef uint64_t last_tsc = c.tsc, cyc = c.cyc_tsc, delta
    c.tsc = tsc
    c.cyc_tsc = 0
    if last_tsc == 0 or cyc == 0 or c.have_mtc:
        return 0
    if tsc < last_tsc:
        tsc += (<uint64_t>1) << TSC_BITS
        if tsc < last_tsc:
            return -PTE_BAD_PACKET
    delta = tsc - last_tsc
    if delta & ~((<uint64_t>-1) >> FCR_SHR):
        return -PTE_INTERNAL
    _set_fcr(c, (delta << FCR_SHR) // cyc)
    return 0


cdef int apply_tsc(PtTime* t, PtTimeCal* c, uint64_t tsc, int header, const TimeConfig* cfg) noexcept nogil:
    cdef int err
    if header:
        err = _tcal_header_tsc(c, tsc)
        if err < 0 and err != -PTE_BAD_CONFIG:
            return err
    else:
        c.tsc = tsc
        c.cyc_tsc = 0
    _time_tsc(t, tsc)
    return 0


cdef int _tcal_header_cbr(PtTimeCal* c, uint32_t ratio, const TimeConfig* cfg) noexcept nogil:
    # FCR from the core:bus ratio: TSC ticks per core cycle = nominal / CBR.
    cdef uint64_t p1 = cfg.nom_freq
    if p1 == 0:
        return 0
    if ratio == 0:
        return -PTE_BAD_PACKET
    _set_fcr(c, (p1 << FCR_SHR) // ratio)
    return 0


cdef int apply_cbr(PtTime* t, PtTimeCal* c, uint32_t ratio, int header, const TimeConfig* cfg) noexcept nogil:
    cdef int err
    if not header:
        tcal_init(c)
    err = _tcal_header_cbr(c, ratio, cfg)
    if err < 0 and err != -PTE_BAD_CONFIG:
        return err
    if (ratio & 0xff) == 0:
        return -PTE_BAD_PACKET
    t.have_cbr = 1
    t.cbr = <uint8_t>ratio
    return 0


cdef int apply_tma(PtTime* t, PtTimeCal* c, uint32_t ctc, uint32_t fc, const TimeConfig* cfg) noexcept nogil:
    cdef uint32_t mtc_hi, ctc_mask
    if not t.have_tsc:
        return -PTE_BAD_CONTEXT
    if t.have_tma:
        return -PTE_BAD_CONTEXT
    if t.have_mtc:
        return -PTE_INTERNAL
    mtc_hi = cfg.mtc_freq + MTC_BITS
    ctc_mask = ((<uint32_t>1) << mtc_hi) - 1
    t.have_tma = 1
    t.base -= fc
    t.fc += fc
    # The TMA's 16 CTC bits cover the MTC's 8 bits at this frequency: MTC known.
    if mtc_hi <= TMA_CTC_BITS:
        t.have_mtc = 1
    t.ctc = ctc & ctc_mask
    t.ctc_cyc = t.ctc
    return 0


cdef int _tcal_update_mtc(PtTimeCal* c, uint32_t mtc, const TimeConfig* cfg) noexcept nogil:
    cdef uint32_t last_ctc = c.ctc, ctc, delta
    cdef uint64_t cyc = c.cyc_mtc, fc, fcr, dfc
    cdef int have_mtc = c.have_mtc, check = c.check_skl168, err
    c.check_skl168 = 0
    ctc = mtc << cfg.mtc_freq
    if not have_mtc:
        c.cyc_mtc = 0
        c.ctc = ctc
        c.have_mtc = 1
        return 0
    if cyc == 0:
        return 0
    c.have_mtc = 1
    c.cyc_mtc = 0
    c.ctc = ctc
    c.lost_mtc += 1
    err = _ctc_delta(&delta, ctc, last_ctc, cfg)
    if err < 0:
        return err
    err = _ctc_fc(&fc, delta, cfg)
    if err < 0:
        return err
    if fc & ~((<uint64_t>-1) >> FCR_SHR):
        return -PTE_INTERNAL
    fcr = (fc << FCR_SHR) // cyc
    if check:
        # SKL168: the first MTC period after a PSB may count too few cycles.
        if ((<uint32_t>1) << cfg.mtc_freq) < delta:
            return 0
        if cfg.mtc_freq < 10 and _have_fcr(c):
            dfc = (c.fcr * (cyc + 0xf00)) >> FCR_SHR
            if dfc < fc:
                return 0
    _set_fcr(c, fcr)
    c.lost_mtc = 0
    return 0


cdef int _time_update_mtc(PtTime* t, uint32_t mtc, const TimeConfig* cfg) noexcept nogil:
    cdef uint32_t last_ctc, ctc, delta, ctc_lo, ctc_hi
    cdef uint64_t tsc, base
    cdef int have_tsc = t.have_tsc, have_tma = t.have_tma, have_mtc = t.have_mtc, err
    # MTCs between a TSC and its TMA cannot be placed: ignore them.
    if have_tsc and not have_tma:
        return 0
    base = t.base
    last_ctc = t.ctc
    ctc = mtc << cfg.mtc_freq
    if t.fc or t.lost_cyc or not have_mtc:
        t.ctc_cyc = ctc
    t.have_mtc = 1
    t.fc = 0
    t.ctc = ctc
    t.lost_cyc = 0
    if not have_mtc:
        # First MTC after a TMA whose CTC did not cover the MTC bits: take the
        # high bits from this MTC, adjusting for a wrap of the TMA's low bits.
        if not have_tma:
            return 0
        if last_ctc & ~(<uint32_t>TMA_CTC_MASK):
            return -PTE_INTERNAL
        ctc_lo = ctc & TMA_CTC_MASK
        ctc_hi = ctc & ~(<uint32_t>TMA_CTC_MASK)
        if ctc_lo < last_ctc:
            ctc_hi -= (<uint32_t>1) << TMA_CTC_BITS
            ctc_hi &= (<uint32_t>0xff) << cfg.mtc_freq
        last_ctc |= ctc_hi
    err = _ctc_delta(&delta, ctc, last_ctc, cfg)
    if err < 0:
        t.lost_mtc += 1
        return err
    err = _ctc_fc(&tsc, delta, cfg)
    if err < 0:
        return err
    base += tsc
    t.tsc = base
    t.base = base
    return 0


cdef int apply_mtc(PtTime* t, PtTimeCal* c, uint32_t ctc, const TimeConfig* cfg) noexcept nogil:
    cdef int err
    err = _tcal_update_mtc(c, ctc, cfg)
    if err < 0 and err != -PTE_BAD_CONFIG:
        return err
    err = _time_update_mtc(t, ctc, cfg)
    if err < 0 and err != -PTE_BAD_CONFIG:
        return err
    return 0


cdef int _adjust_cyc(uint64_t* cyc, const PtTime* t, const TimeConfig* cfg, uint64_t fcr) noexcept nogil:
    # The first CYC after an MTC also counts cycles of the previous MTC period
    # that the MTC already accounted for: subtract them.
    cdef uint32_t last_ctc = t.ctc_cyc, ctc = t.ctc, delta
    cdef uint64_t fc, total, old
    cdef int err
    if ctc == last_ctc:
        return 0
    err = _ctc_delta(&delta, ctc, last_ctc, cfg)
    if err < 0:
        return err
    err = _ctc_fc(&fc, delta, cfg)
    if err < 0:
        return err
    old = (fc << FCR_SHR) // fcr
    total = cyc[0]
    if total < old:
        total = old
    cyc[0] = total - old
    return 0


cdef int apply_cyc(PtTime* t, PtTimeCal* c, uint64_t cyc, const TimeConfig* cfg) noexcept nogil:
    cdef uint64_t fcr, fc
    cdef int err
    c.cyc_mtc += cyc
    c.cyc_tsc += cyc
    t.cyc += cyc
    fcr = c.fcr if _have_fcr(c) else 0
    if fcr == 0:
        t.lost_cyc += 1
        return 0
    fc = t.fc
    if fc == 0:
        err = _adjust_cyc(&cyc, t, cfg, fcr)
        if err < 0:
            if err != -PTE_BAD_CONFIG:
                return err
            return 0
    fc += (cyc * fcr) >> FCR_SHR
    t.fc = fc
    t.tsc = t.base + fc
    return 0

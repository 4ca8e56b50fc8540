# Included by event.pyx inside `cdef class EventDecoder` (Cython include: the
# class is one C type; this file only keeps event.pyx readable).
#
# Overflow recovery (SDM Vol. 3C 33.4.2.16 "Overflow (OVF) Packet": after an
# OVF, packets were lost; tracing resumes at the next FUP, or is off if none
# comes before other flow packets) and the CPU errata that change it or the
# PSB+ rules, each as named in Intel's specification updates and handled as
# libipt 2.0.5 handles them:
#   BDM70  a PSB+ FUP while tracing is off, when a TIP.PGE follows (ignored)
#   SKD010 the FUP after an OVF may be missing (find where tracing resumed)
#   APL12  an OVF+FUP while tracing is actually off (resume disabled)
#   APL11  an OVF followed by TIP.PGD without FUP (resume disabled)

cdef int _find_ovf_fup(EventDecoder self) noexcept nogil:
    """After an OVF: > 0 if a FUP follows before any other flow packet (tracing
    resumed at its IP), 0 if not (tracing resumed disabled), or -PTE_*."""
    cdef PtPacket p
    cdef int err, k
    err = _scan_set(self, self.pos)
    if err < 0:
        return err
    while True:
        err = self.scan.next_c(&p)
        if err < 0:
            return err
        k = p.kind
        if k == PK_FUP:
            return <int>(p.offset + p.size - self.pos)
        if k == PK_PAD or k == PK_MNT or k == PK_CBR or k == PK_TSC or k == PK_TMA or k == PK_MTC \
                or k == PK_CYC or k == PK_BBP or k == PK_BIP or k == PK_BEP or k == PK_CFE \
                or k == PK_EVD or k == PK_TRIG:
            continue
        if k == PK_PSBEND or k == PK_TIP or k == PK_TIP_PGD or k == PK_TNT8 or k == PK_TNT64:
            return -PTE_BAD_CONTEXT
        return 0

cdef int _decode_ovf(EventDecoder self) noexcept nogil:
    """OVF: packets were lost (SDM 33.4.2.16). Everything but the time is reset;
    tracing resumes at the FUP that follows, or disabled if none does."""
    cdef PtEvent* ev
    cdef int status, offset
    cdef PtTime saved
    status = _pending_psb_events(self)
    if status:
        return 0 if status > 0 else status
    saved = self.time
    self._reset()
    self.time = saved
    self._consume()
    offset = _find_ovf_fup(self)
    if offset <= 0:
        if self.errata.skd010:
            status = _skd010(self)
            if status <= 0:
                return status
        if self.errata.apl11 and offset == -PTE_BAD_CONTEXT:
            status = _apl11(self)
            if status <= 0:
                return status
        if offset < 0 and offset != -PTE_EOS:
            return offset
        return _ovf_disabled(self)
    if self.errata.apl12:
        status = _apl12(self, offset)
        if status <= 0:
            return status
    ev = self._enqueue(EVB_FUP)
    if ev == NULL:
        return -PTE_INTERNAL
    ev.type = EV_OVERFLOW
    self.enabled = 1
    self._event_time(ev)
    return 0

cdef int _ovf_disabled(EventDecoder self) noexcept nogil:
    cdef PtEvent* ev = self._standalone()
    ev.type = EV_OVERFLOW
    ev.ip_suppressed = 1
    self.enabled = 0
    self.cur_event = ev
    self._event_time(ev)
    return 0

cdef void _jump(EventDecoder self, uint64_t offset) noexcept nogil:
    # Continue decoding at `offset` (an erratum workaround skipped packets).
    self.pos = offset
    self.pkt.set_offset_c(offset)
    self.nxt_err = -PTE_NOSYNC

cdef int _scan_timing(EventDecoder self, PtTime* t, PtTimeCal* c, const PtPacket* p) noexcept nogil:
    cdef int k = p.kind
    if k == PK_TSC:
        return apply_tsc(t, c, p.payload, 0, &self.tcfg)
    if k == PK_CBR:
        return apply_cbr(t, c, <uint32_t>p.payload, 0, &self.tcfg)
    if k == PK_TMA:
        return apply_tma(t, c, <uint32_t>p.payload, <uint32_t>p.aux, &self.tcfg)
    if k == PK_MTC:
        return apply_mtc(t, c, <uint32_t>p.payload, &self.tcfg)
    if k == PK_CYC:
        return apply_cyc(t, c, p.payload, &self.tcfg)
    return 0

cdef int _header_fup_scan(EventDecoder self, PtPacket* p) noexcept nogil:
    # Inside a PSB+ on the scanner: 1 and the FUP in *p, 0 at PSBEND.
    cdef int err
    while True:
        err = self.scan.next_c(p)
        if err < 0:
            return err
        if p.kind == PK_PSBEND:
            return 0
        if p.kind == PK_FUP:
            return 1

cdef int _skd010_recover(EventDecoder self, const PtPacket* fup, const PtTimeCal* c, const PtTime* t,
                         uint64_t offset) noexcept nogil:
    cdef PtEvent* ev
    cdef PtPacket saved = self.nxt
    cdef int err
    self.nxt = fup[0]
    err = self._update_ip()
    self.nxt = saved
    if err < 0:
        return err
    ev = self._standalone()
    ev.type = EV_OVERFLOW
    if self._query_ip(&ev.ip) < 0:
        return -PTE_BAD_CONTEXT
    _jump(self, offset)
    self.enabled = 1
    self.time = t[0]
    self.tcal = c[0]
    self.cur_event = ev
    self._event_time(ev)
    return 0

cdef int _skd010(EventDecoder self) noexcept nogil:
    """SKD010: after an OVF the FUP may be missing; find where tracing resumed."""
    cdef PtTime t = self.time, tsx_t
    cdef PtTimeCal c = self.tcal, tsx_c
    cdef uint64_t tsx_off = 0, off
    cdef PtPacket p
    cdef int err, k
    if _scan_set(self, self.pos) < 0:
        return 1
    while True:
        off = self.scan._pos
        err = self.scan.next_c(&p)
        if err < 0:
            return 1 if err == -PTE_EOS else err
        k = p.kind
        if k == PK_TIP_PGE or k == PK_TNT8 or k == PK_TNT64 or k == PK_OVF or k == PK_STOP \
                or k == PK_INVALID or k == PK_MWAIT:
            return 1
        if k == PK_TIP_PGD:
            self.time = t
            self.tcal = c
            _jump(self, off + p.size)
            return _ovf_disabled(self)
        if k == PK_MODE_TSX:
            if tsx_off:
                return 1
            tsx_off = off
            tsx_t = t
            tsx_c = c
        elif k == PK_FUP:
            if tsx_off:
                return _skd010_recover(self, &p, &tsx_c, &tsx_t, tsx_off)
            return _skd010_recover(self, &p, &c, &t, off)
        elif k == PK_TIP:
            return _skd010_recover(self, &p, &c, &t, off + p.size)
        elif k == PK_PSB:
            err = _header_fup_scan(self, &p)
            if err < 0:
                return 1 if err == -PTE_EOS else err
            if err == 0:
                return 1
            return _skd010_recover(self, &p, &c, &t, off)
        elif k == PK_PSBEND:
            return -PTE_BAD_CONTEXT
        elif k == PK_EXSTOP or k == PK_PTW:
            if p.flags & 1:
                return 1
        else:
            err = _scan_timing(self, &t, &c, &p)
            if err < 0:
                return err

cdef int _apl12(EventDecoder self, int offset) noexcept nogil:
    """APL12: an OVF+FUP while tracing is disabled (a TIP.PGE or STOP comes
    first after the FUP) really resumes disabled."""
    cdef PtPacket p
    cdef int err, k, disabled = -1
    cdef uint64_t begin = self.pos, end = self.pos + offset
    if _scan_set(self, end) < 0:
        disabled = 1
    while disabled < 0:
        err = self.scan.next_c(&p)
        if err < 0:
            disabled = 1 if err == -PTE_EOS else err
            break
        k = p.kind
        if k == PK_STOP or k == PK_TIP_PGE:
            disabled = 0
        elif k == PK_TNT8 or k == PK_TNT64 or k == PK_TIP or k == PK_TIP_PGD or k == PK_OVF \
                or k == PK_INVALID:
            disabled = 1
        elif k == PK_PSB:
            err = _header_fup_scan(self, &p)
            disabled = 1 if err == -PTE_EOS else err
        elif k == PK_PSBEND:
            disabled = -PTE_BAD_CONTEXT
    if disabled != 0:
        return disabled
    # Resume disabled: apply the timing packets up to and including the FUP.
    _scan_set(self, begin)
    while True:
        err = self.scan.next_c(&p)
        if err < 0:
            if err != -PTE_EOS:
                return err
            break
        if p.offset + p.size >= end:
            if p.offset + p.size > end:
                return -PTE_INTERNAL
            break
        k = p.kind
        if k == PK_MODE_EXEC or k == PK_MODE_TSX or k == PK_PIP or k == PK_VMCS:
            return -PTE_INTERNAL
        err = _scan_timing(self, &self.time, &self.tcal, &p)
        if err < 0:
            return err
    _jump(self, end)
    return _ovf_disabled(self)

cdef int _apl11(EventDecoder self) noexcept nogil:
    """APL11: an OVF followed by a TIP.PGD without FUP: tracing resumed disabled."""
    cdef PtTime t = self.time
    cdef PtTimeCal c = self.tcal
    cdef PtPacket p
    cdef int err, k
    if _scan_set(self, self.pos) < 0:
        return -PTE_EOS
    while True:
        err = self.scan.next_c(&p)
        if err < 0:
            return err
        k = p.kind
        if k == PK_TIP_PGD:
            self.time = t
            self.tcal = c
            _jump(self, p.offset + p.size)
            return _ovf_disabled(self)
        if k == PK_INVALID:
            return -PTE_BAD_OPC
        if k == PK_PSBEND or k == PK_TIP or k == PK_TNT8 or k == PK_TNT64:
            return -PTE_BAD_CONTEXT
        if k == PK_PAD or k == PK_MNT:
            continue
        if k == PK_TSC or k == PK_CBR or k == PK_TMA or k == PK_MTC or k == PK_CYC:
            err = _scan_timing(self, &t, &c, &p)
            if err < 0:
                return err
            continue
        return 1

cdef int _scan_bdm70(EventDecoder self, uint64_t offset) noexcept nogil:
    cdef PtPacket p
    cdef int err, k
    if _scan_set(self, offset) < 0:
        return 0
    while True:
        err = self.scan.next_c(&p)
        if err < 0:
            return 0 if err == -PTE_EOS else err
        k = p.kind
        if k == PK_TIP_PGE:
            return 1
        if not (k == PK_PAD or k == PK_TSC or k == PK_CBR or k == PK_PSBEND or k == PK_PIP
                or k == PK_MODE_EXEC or k == PK_MODE_TSX or k == PK_VMCS or k == PK_TMA or k == PK_MTC
                or k == PK_CYC or k == PK_MNT):
            return 0


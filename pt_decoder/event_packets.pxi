# Included by event.pyx: how the event layer decodes each packet kind
# (module-level functions over the final EventDecoder class, kept in their
# own file). Which packet completes which event follows the SDM Vol. 3C
# chapter 33 and libipt 2.0.5's query decoder (pt_query_decoder.c): TIP and
# TIP.PGD complete the FUP-started asynchronous branch and the MODE.Exec/PIP/
# VMCS bound to it; TIP.PGE enables; FUP completes what binds to it (OVF,
# MODE.TSX, PTW, EXSTOP, MWAIT) or starts an asynchronous branch; a PSB+
# re-states state as status updates reported at PSBEND.

# --- decoding one packet -----------------------------------------------------------------------------

cdef int _decode(EventDecoder self) noexcept nogil:
    """Decode the fetched packet `nxt`; consume it unless it still binds events."""
    cdef int k = self.nxt.kind, err
    if k == PK_TNT8 or k == PK_TNT64:
        if self.tnt_index != 0:
            return -PTE_BAD_CONTEXT
        if self.nxt.count == 0:
            return -PTE_BAD_PACKET
        self.tnt = self.nxt.payload
        self.tnt_index = (<uint64_t>1) << (self.nxt.count - 1)
        return self._consume()
    if k == PK_TIP:
        return _decode_tip(self)
    if k == PK_FUP:
        return _decode_fup(self)
    if k == PK_TIP_PGE:
        return _decode_tip_pge(self)
    if k == PK_TIP_PGD:
        return _decode_tip_pgd(self)
    if k == PK_PAD:
        return self._consume()
    if k == PK_PSB:
        return _decode_psb(self)
    if k == PK_PSBEND:
        err = _pending_psb_events(self)
        if err:
            return 0 if err > 0 else err
        return self._consume()
    if k == PK_TSC:
        err = apply_tsc(&self.time, &self.tcal, self.nxt.payload, 0, &self.tcfg)
        return err if err < 0 else self._consume()
    if k == PK_TMA or k == PK_MTC or k == PK_CYC:
        return _decode_timing(self, k)
    if k == PK_CBR:
        return _decode_cbr(self)
    if k == PK_MODE_EXEC or k == PK_MODE_TSX:
        return _decode_mode(self, k)
    if k == PK_PIP:
        return _decode_pip(self)
    if k == PK_VMCS:
        return _decode_vmcs(self)
    if k == PK_OVF:
        return _decode_ovf(self)
    if k == PK_STOP or k == PK_MNT or k == PK_PWRE or k == PK_PWRX:
        return _decode_standalone(self, k)
    if k == PK_EXSTOP or k == PK_MWAIT or k == PK_PTW:
        return _decode_fup_bound(self, k)
    # Packets libipt 2.0.5 does not know (BBP, BIP, BEP, CFE, EVD, TRIG):
    # skipped like unknown packets, they carry nothing for the flow.
    return self._consume()

cdef int _decode_timing(EventDecoder self, int k) noexcept nogil:
    cdef int err
    if k == PK_TMA:
        err = apply_tma(&self.time, &self.tcal, <uint32_t>self.nxt.payload, <uint32_t>self.nxt.aux, &self.tcfg)
    elif k == PK_MTC:
        err = apply_mtc(&self.time, &self.tcal, <uint32_t>self.nxt.payload, &self.tcfg)
    else:
        # SKD007: a CYC followed by OVF may be a stray byte of the OVF.
        if (self.errata.skd007 and self.nxt.size == 2 and (self.nxt.payload & ~0x1f) == 0x20
                and self.nxt.offset + 2 < self.size and self.pkt._buf[self.nxt.offset + 2] == 0xf3):
            self.pos = self.nxt.offset + 1
            self.pkt.set_offset_c(self.pos)
            self.nxt_err = -PTE_NOSYNC
            return 0
        err = apply_cyc(&self.time, &self.tcal, self.nxt.payload, &self.tcfg)
    if err < 0:
        return err
    return self._consume()

cdef int _decode_psb(EventDecoder self) noexcept nogil:
    cdef uint64_t psb = self.nxt.offset
    cdef int err
    self.last_psb = psb
    self.cyc_before_psb = self.time.cyc
    if self.warm_stop and psb == self.warm_stop:
        self.warm_time = self.time
        self.warm_tcal = self.tcal
        self.warm_ready = 1
    tcal_update_psb(&self.tcal, &self.tcfg)
    self._consume()
    err = _read_psb_header(self)
    if err < 0:
        # Leave the decoder at the PSB so that it can be decoded again.
        self.pos = psb
        self.qbegin[EVB_PSBEND] = 0
        self.qend[EVB_PSBEND] = 0
        self.pkt.sync_set_c(psb)
        self._fetch()
        return err
    return 0

cdef int _read_psb_header(EventDecoder self) noexcept nogil:
    cdef int err, k
    cdef PtEvent* ev
    self.have_ip = 0
    self.ip_suppressed = 0
    self.last_ip = 0
    while True:
        err = self._refetch()
        if err:
            return err
        k = self.nxt.kind
        if k == PK_PSBEND or k == PK_OVF:
            return 0
        if k == PK_PAD or k == PK_TMA or k == PK_MTC or k == PK_CYC:
            err = _decode(self) if k != PK_PAD else self._consume()
        elif k == PK_FUP:
            err = _header_fup(self)
        elif k == PK_TSC:
            err = apply_tsc(&self.time, &self.tcal, self.nxt.payload, 1, &self.tcfg)
            if err == 0:
                self._consume()
        elif k == PK_CBR:
            err = apply_cbr(&self.time, &self.tcal, <uint32_t>self.nxt.payload, 1, &self.tcfg)
            if err == 0:
                ev = self._enqueue(EVB_PSBEND)
                if ev == NULL:
                    return -PTE_NOMEM
                ev.type = EV_CBR
                ev.payload = self.nxt.payload
                self._consume()
        elif k == PK_MODE_EXEC or k == PK_MODE_TSX or k == PK_PIP or k == PK_VMCS or k == PK_MNT:
            ev = self._enqueue(EVB_PSBEND)
            if ev == NULL:
                return -PTE_NOMEM
            if k == PK_MODE_EXEC:
                ev.type = EV_EXEC_MODE
                ev.a = _exec_mode(self.nxt.payload)
            elif k == PK_MODE_TSX:
                ev.type = EV_TSX
                ev.a = self.nxt.payload & 1
                ev.b = (self.nxt.payload >> 1) & 1
            elif k == PK_PIP:
                ev.type = EV_ASYNC_PAGING
                ev.payload = self.nxt.payload
                ev.a = <uint8_t>self.nxt.aux
            elif k == PK_VMCS:
                ev.type = EV_ASYNC_VMCS
                ev.payload = self.nxt.payload
            else:
                ev.type = EV_MNT
                ev.payload = self.nxt.payload
            err = self._consume()
        elif k == PK_INVALID or k == PK_BBP or k == PK_BIP or k == PK_BEP or k == PK_CFE or k == PK_EVD \
                or k == PK_TRIG:
            err = self._consume()
        else:
            return -PTE_BAD_CONTEXT
        if err:
            return err

cdef int _header_fup(EventDecoder self) noexcept nogil:
    cdef int err
    if self.errata.bdm70 and not self.enabled:
        # BDM70: a PSB+ may carry a FUP although tracing is disabled, when
        # a TIP.PGE follows; that FUP is ignored.
        err = _scan_bdm70(self, self.nxt.offset + self.nxt.size)
        if err < 0:
            return err
        if err:
            return self._consume()
    err = self._update_ip()
    if err < 0:
        return err
    if self.nxt.ipc != 0:
        self.enabled = 1
    return self._consume()

cdef int _scan_set(EventDecoder self, uint64_t offset) noexcept nogil:
    # Position the look-ahead reader at a packet boundary the main reader
    # has established (no PSB needed there).
    if offset >= self.size:
        return -PTE_EOS
    return self.scan.set_offset_c(offset)

cdef int _pending_psb_events(EventDecoder self) noexcept nogil:
    """Report the next status update of a PSB+ at its PSBEND; 1 if one was."""
    cdef PtEvent* ev = self._dequeue(EVB_PSBEND)
    cdef int err = 0
    if ev == NULL:
        return 0
    ev.status_update = 1
    self._event_time(ev)
    t = ev.type
    if t == EV_ASYNC_PAGING or t == EV_EXEC_MODE or t == EV_TSX or t == EV_ASYNC_VMCS:
        err = self._event_ip(&ev.ip, ev)
    elif t == EV_MNT:
        ev.status_update = 0
    elif t != EV_CBR:
        return -PTE_INTERNAL
    if err < 0:
        return err
    self.cur_event = ev
    return 1

cdef int _decode_tip(EventDecoder self) noexcept nogil:
    cdef int err
    cdef PtEvent* ev
    err = self._update_ip()
    if err < 0:
        return err
    ev = self._dequeue(EVB_TIP)
    if ev != NULL:
        t = ev.type
        if t == EV_ASYNC_BRANCH:
            self.consume_packet = 1
        elif not (t == EV_ASYNC_PAGING or t == EV_ASYNC_VMCS or t == EV_EXEC_MODE):
            return -PTE_BAD_CONTEXT
        err = self._event_ip(&ev.ip, ev)
        if err < 0:
            return err
        ev.offset = self.nxt.offset
        self.cur_event = ev
        # The TIP completes every event bound to it; it is consumed with the last.
        if self._pending(EVB_TIP):
            return 0
        if not self.consume_packet:
            return 0
        self.consume_packet = 0
    return self._consume()

cdef int _decode_tip_pge(EventDecoder self) noexcept nogil:
    cdef int err
    cdef PtEvent* ev
    err = self._update_ip()
    if err < 0:
        return err
    if not self.consume_packet:
        ev = self._standalone()
        ev.type = EV_ENABLED
        if self._query_ip(&ev.ip) < 0:
            return -PTE_BAD_PACKET
        self._event_time(ev)
        ev.offset = self.nxt.offset
        self.tnt_index = 0
        self.consume_packet = 1
        self.enabled = 1
    else:
        ev = self._dequeue(EVB_TIP)
        if ev != NULL:
            if ev.type != EV_EXEC_MODE:
                return -PTE_BAD_CONTEXT
            err = self._event_ip(&ev.ip, ev)
            if err < 0:
                return err
            ev.offset = self.nxt.offset
    if ev == NULL:
        return -PTE_INTERNAL
    self.cur_event = ev
    if self._pending(EVB_TIP):
        return 0
    if not self.consume_packet:
        return -PTE_INTERNAL
    self.consume_packet = 0
    return self._consume()

cdef int _decode_tip_pgd(EventDecoder self) noexcept nogil:
    cdef int err
    cdef PtEvent* ev
    err = self._update_ip()
    if err < 0:
        return err
    ev = self._dequeue(EVB_TIP)
    if ev != NULL:
        t = ev.type
        if t == EV_ASYNC_BRANCH:
            # A FUP then TIP.PGD: tracing stopped asynchronously at `at`.
            ev.type = EV_ASYNC_DISABLED
            err = self._event_ip(&ev.ip, ev)
            if err < 0:
                return err
        elif t == EV_ASYNC_PAGING or t == EV_ASYNC_VMCS or t == EV_EXEC_MODE:
            ev.ip_suppressed = 1
        else:
            return -PTE_BAD_CONTEXT
    else:
        ev = self._standalone()
        ev.type = EV_DISABLED
        err = self._event_ip(&ev.ip, ev)
        if err < 0:
            return err
        self._event_time(ev)
    ev.offset = self.nxt.offset
    self.cur_event = ev
    if self._pending(EVB_TIP):
        return 0
    self.enabled = 0
    return self._consume()

cdef int _decode_fup(EventDecoder self) noexcept nogil:
    cdef int err
    cdef PtEvent* ev
    cdef uint64_t ip
    err = self._update_ip()
    if err < 0:
        return err
    ev = self._dequeue(EVB_FUP)
    if ev != NULL:
        t = ev.type
        if t == EV_OVERFLOW:
            self.consume_packet = 1
            err = self._query_ip(&ev.ip)
        elif t == EV_TSX:
            if not ev.b:
                self.consume_packet = 1
            err = self._event_ip(&ev.ip, ev)
        elif t == EV_EXSTOP or t == EV_MWAIT or t == EV_PTWRITE:
            self.consume_packet = 1
            err = self._event_ip(&ev.ip, ev)
        else:
            return -PTE_INTERNAL
        if err < 0:
            return err
        ev.offset = self.nxt.offset
        self.cur_event = ev
        if self._pending(EVB_FUP):
            return 0
        if not self.consume_packet:
            return 0
        self.consume_packet = 0
    else:
        err = self._query_ip(&ip)
        if err < 0:
            return err
        ev = self._enqueue(EVB_TIP)
        if ev == NULL:
            return -PTE_NOMEM
        ev.type = EV_ASYNC_BRANCH
        ev.at = ip
        self._event_time(ev)
    return self._consume()

cdef int _decode_pip(EventDecoder self) noexcept nogil:
    cdef PtEvent* ev
    if self._find(EVB_TIP, EV_ASYNC_BRANCH) == NULL:
        ev = self._standalone()
        ev.type = EV_PAGING
        self.cur_event = ev
    else:
        ev = self._enqueue(EVB_TIP)
        if ev == NULL:
            return -PTE_NOMEM
        ev.type = EV_ASYNC_PAGING
    ev.payload = self.nxt.payload
    ev.a = <uint8_t>self.nxt.aux
    self._event_time(ev)
    return self._consume()

cdef int _decode_vmcs(EventDecoder self) noexcept nogil:
    cdef PtEvent* ev
    cdef PtEvent* paging = self._find(EVB_TIP, EV_ASYNC_PAGING)
    if paging != NULL:
        # The VMCS event goes before the paging event it came with.
        ev = self._enqueue(EVB_TIP)
        if ev == NULL:
            return -PTE_NOMEM
        ev[0] = paging[0]
        memset(paging, 0, sizeof(PtEvent))
        paging.type = EV_ASYNC_VMCS
        paging.payload = self.nxt.payload
        return self._consume()
    if self._find(EVB_TIP, EV_ASYNC_BRANCH) != NULL:
        ev = self._enqueue(EVB_TIP)
        if ev == NULL:
            return -PTE_NOMEM
        ev.type = EV_ASYNC_VMCS
        ev.payload = self.nxt.payload
        return self._consume()
    ev = self._standalone()
    ev.type = EV_VMCS
    ev.payload = self.nxt.payload
    self.cur_event = ev
    self._event_time(ev)
    return self._consume()

cdef int _decode_cbr(EventDecoder self) noexcept nogil:
    cdef PtEvent* ev
    cdef int err = apply_cbr(&self.time, &self.tcal, <uint32_t>self.nxt.payload, 0, &self.tcfg)
    if err < 0:
        return err
    ev = self._standalone()
    ev.type = EV_CBR
    ev.payload = self.nxt.payload
    self.cur_event = ev
    self._event_time(ev)
    return self._consume()

cdef int _decode_mode(EventDecoder self, int k) noexcept nogil:
    cdef PtEvent* ev
    if k == PK_MODE_EXEC:
        ev = self._enqueue(EVB_TIP)
        if ev == NULL:
            return -PTE_NOMEM
        ev.type = EV_EXEC_MODE
        ev.a = _exec_mode(self.nxt.payload)
    else:
        if not self.enabled:
            ev = self._standalone()
            ev.ip_suppressed = 1
            self.cur_event = ev
        else:
            ev = self._enqueue(EVB_FUP)
            if ev == NULL:
                return -PTE_NOMEM
        ev.type = EV_TSX
        ev.a = self.nxt.payload & 1
        ev.b = (self.nxt.payload >> 1) & 1
    self._event_time(ev)
    return self._consume()

cdef int _decode_standalone(EventDecoder self, int k) noexcept nogil:
    cdef PtEvent* ev = self._standalone()
    if k == PK_STOP:
        ev.type = EV_STOP
        self._event_time(ev)
    elif k == PK_MNT:
        ev.type = EV_MNT
        ev.payload = self.nxt.payload
        self._event_time(ev)
    elif k == PK_PWRE:
        ev.type = EV_PWRE
        ev.payload = (self.nxt.payload >> 4) & 0xf
        ev.aux = self.nxt.payload & 0xf
        ev.a = self.nxt.flags & 1
        ev.offset = self.pos
    else:
        ev.type = EV_PWRX
        ev.payload = self.nxt.payload
        ev.aux = self.nxt.aux
        ev.a = self.nxt.flags & 1
        ev.b = (self.nxt.flags >> 2) & 1
        ev.c = (self.nxt.flags >> 3) & 1
        ev.offset = self.pos
    self.cur_event = ev
    return self._consume()

cdef int _decode_fup_bound(EventDecoder self, int k) noexcept nogil:
    # EXSTOP, MWAIT and PTW bind to the FUP after them when they say so
    # (their IP bit); MWAIT always does.
    cdef PtEvent* ev
    cdef int with_ip = (k == PK_MWAIT) or (self.nxt.flags & 1)
    if with_ip:
        ev = self._enqueue(EVB_FUP)
        if ev == NULL:
            return -PTE_INTERNAL
    else:
        ev = self._standalone()
        ev.ip_suppressed = 1
        self.cur_event = ev
    ev.offset = self.pos
    if k == PK_EXSTOP:
        ev.type = EV_EXSTOP
    elif k == PK_MWAIT:
        ev.type = EV_MWAIT
        ev.payload = self.nxt.payload
        ev.aux = self.nxt.aux
    else:
        ev.type = EV_PTWRITE
        ev.payload = self.nxt.payload
        ev.aux = self.nxt.aux
    return self._consume()


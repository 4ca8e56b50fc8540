# Included by insn.pyx inside `cdef class InsnDecoder` (Cython include: the
# class is one C type; this file only keeps insn.pyx readable).
#
# libipt's instruction-decoder rules (pt_insn_decoder.c of libipt 2.0.5),
# which the goldens reproduce: how one instruction proceeds (TNT bit, TIP,
# return-compression stack), which events bind to an instruction (disable at
# a far branch, PIP at MOV CR3/VM entry, VMCS at VMPTRLD, PTWRITE) or to the
# IP after it (async branch, exec mode, TSX, paging, exstop, mwait), how each
# event changes the state (pt_insn_event), tick events, the BDM64/SKD022/
# SKL014 errata and the stop rule of parallel pieces.

# --- libipt's instruction-decoder rules ----------------------------------------------------------------

cdef inline int _status(InsnDecoder self, int flags) noexcept nogil:
    if not self.enabled:
        flags |= ST_IP_SUPPRESSED
    if (self.status & ST_EOS) and not self.process_event:
        flags |= ST_EOS
    return flags

cdef int _tick(InsnDecoder self, uint64_t ip) noexcept nogil:
    # A tick event when the time changed at a branch (ptxed --event:tick).
    if not self.enabled or self.process_event:
        return 0
    if self.evd.last_time.tsc == self.event.tsc:
        return 0
    memset(&self.event, 0, sizeof(PtEvent))
    self.event.type = EV_TICK
    self.event.ip = ip
    self.event.has_tsc = self.evd.last_time.have_tsc
    self.event.tsc = self.evd.last_time.tsc
    self.event.cyc = self.evd.last_time.cyc
    self.process_event = 1
    return 1

cdef int _cond_branch(InsnDecoder self, int* taken) noexcept nogil:
    cdef int st = self.evd.cond_branch_c(taken)
    if st >= 0 and self.tick:
        _tick(self, self.ip)
    return st

cdef int _indirect_branch(InsnDecoder self, uint64_t* ip) noexcept nogil:
    cdef uint64_t evip = self.ip
    cdef int st = self.evd.indirect_branch_c(ip)
    if st >= 0 and self.tick:
        _tick(self, evip)
    return st

cdef int _event_pending(InsnDecoder self) noexcept nogil:
    cdef int st
    if self.process_event:
        return 1
    if not (self.status & ST_EVENT_PENDING):
        return 0
    st = self.evd.event_c(&self.event)
    if st < 0:
        return st
    self.process_event = 1
    self.status = st
    return 1

cdef int _proceed(InsnDecoder self, const Insn* insn) noexcept nogil:
    cdef int st, taken = 0
    self.ip += insn.size
    c = insn.iclass
    if c == ILD_OTHER or c == ILD_PTWRITE:
        return 0
    if c == ILD_COND_JUMP:
        st = _cond_branch(self, &taken)
        if st < 0:
            return st
        self.status = st
        self.cur_flags |= F_CONDITIONAL
        if not taken:
            return 0
    elif c == ILD_CALL:
        self.cur_flags |= F_CALL
        # A call to the next instruction (get-IP idiom) is not a call for return compression.
        if insn.disp != 0 or not insn.is_direct:
            self._rs_push(self.ip)
    elif c == ILD_RETURN:
        self.cur_flags |= F_RETURN
        st = _cond_branch(self, &taken)
        if st >= 0:
            self.status = st
            if not taken:
                return -PTE_BAD_RETCOMP
            self.cur_flags |= F_TAKEN
            return self._rs_pop(&self.ip)
    elif c == ILD_ERROR:
        return -PTE_BAD_INSN
    else:
        if _is_far(c):
            self.cur_flags |= F_FAR
    self.cur_flags |= F_TAKEN
    if insn.is_direct:
        self.ip += <uint64_t><int64_t>insn.disp
    else:
        self.cur_flags |= F_INDIRECT
        st = _indirect_branch(self, &self.ip)
        if st < 0:
            return st
        self.status = st
        if st & ST_IP_SUPPRESSED:
            return -PTE_NOIP
    return 0

cdef int _at_disabled_event(InsnDecoder self, const Insn* insn) noexcept nogil:
    cdef uint64_t ip
    cdef PtEvent* ev = &self.event
    c = insn.iclass
    if ev.ip_suppressed:
        if _is_far(c) or _changes_cpl(insn.ext) or insn.ext == ILDX_MOV_CR3:
            return 1
        # SKL014: a direct call/jump out of the filtered range disables
        # tracing without an IP.
        if self.have_filter and self.evd.errata.skl014 and (c == ILD_CALL or c == ILD_JUMP) \
                and insn.is_direct:
            ip = insn.ip + insn.size + <uint64_t><int64_t>insn.disp
            if not _filter_check(self, ip):
                return 1
        return 0
    if c == ILD_OTHER or c == ILD_PTWRITE:
        return 0
    if (c == ILD_CALL or c == ILD_JUMP) and insn.is_direct:
        ip = insn.ip + insn.size + <uint64_t><int64_t>insn.disp
        if ip != ev.ip:
            return 0
        return 1
    if c == ILD_ERROR:
        return -PTE_BAD_INSN
    return 1

cdef int _filter_check(InsnDecoder self, uint64_t ip) noexcept nogil:
    # 1 if `ip` would be traced under the address filters (SDM 33.2.4.3):
    # not in a TraceStop range, and in a FilterEn range if there is one.
    cdef int n, any_filter = 0
    for n in range(4):
        if self.filter_cfg[n] == 2 and self.filter_a[n] <= ip <= self.filter_b[n]:
            return 0
    for n in range(4):
        if self.filter_cfg[n] == 1:
            any_filter = 1
            if self.filter_a[n] <= ip <= self.filter_b[n]:
                return 1
    return 0 if any_filter else 1

cdef int _postpone(InsnDecoder self, const Insn* insn) noexcept nogil:
    if not self.process_insn:
        self.process_insn = 1
        self.pinsn = insn[0]
    return _status(self, ST_EVENT_PENDING)

cdef int _clear_postponed(InsnDecoder self) noexcept nogil:
    self.process_insn = 0
    self.bound_paging = 0
    self.bound_vmcs = 0
    self.bound_ptwrite = 0
    return 0

cdef int _check_insn_event(InsnDecoder self, const Insn* insn) noexcept nogil:
    """Events that bind to the instruction itself (before it completes)."""
    cdef int st = _event_pending(self)
    cdef PtEvent* ev = &self.event
    cdef uint64_t nip
    if st <= 0:
        return st
    t = ev.type
    if t == EV_DISABLED:
        st = _at_disabled_event(self, insn)
        if st <= 0:
            return st
        st = _next_ip(&nip, insn)
        if st < 0:
            self.ip = 0
            if st != -PTE_BAD_QUERY:
                return st
            if insn.iclass == ILD_CALL or insn.iclass == ILD_FAR_CALL:
                self.ip = insn.ip + insn.size
        else:
            self.ip = nip
    elif t == EV_PAGING:
        if self.bound_paging or not _binds_to_pip(insn):
            return 0
        self.bound_paging = 1
        return _postpone(self, insn)
    elif t == EV_VMCS:
        if self.bound_vmcs or not _binds_to_vmcs(insn):
            return 0
        self.bound_vmcs = 1
        return _postpone(self, insn)
    elif t == EV_PTWRITE:
        if self.bound_ptwrite:
            return 0
        if ev.ip_suppressed:
            if insn.iclass != ILD_PTWRITE:
                return 0
            ev.ip = self.ip
            ev.ip_suppressed = 0
        elif self.ip != ev.ip:
            return 0
        self.bound_ptwrite = 1
        return _postpone(self, insn)
    else:
        return 0
    return _status(self, ST_EVENT_PENDING)

cdef int _bdm64(InsnDecoder self, const Insn* insn) noexcept nogil:
    # BDM64: an aborted transaction's FUP may point behind the branch that
    # left it; if the code from here does not reach the FUP IP, use it.
    cdef Insn i
    cdef uint64_t ip = self.ip, end = self.event.ip
    cdef int steps = BDM64_MAX_STEPS, err
    if not self.event.b or not _is_branch(insn.iclass):
        return 0
    while ip != end:
        if steps == 0:
            break
        steps -= 1
        err = self._decode_insn(ip, self.mode, &i)
        if err < 0:
            break
        if _next_ip(&ip, &i) < 0:
            break
    if ip == end:
        return 0
    self.ip = end
    return 1

cdef int _check_ip_event(InsnDecoder self, const Insn* insn) noexcept nogil:
    """Events that bind to the IP after an instruction (or after sync)."""
    cdef int st = _event_pending(self)
    cdef PtEvent* ev = &self.event
    if st <= 0:
        if st < 0:
            return st
        return _status(self, 0)
    t = ev.type
    if t == EV_DISABLED:
        return _status(self, 0)
    if t == EV_ASYNC_DISABLED:
        if ev.at != self.ip:
            return _status(self, 0)
        if self.evd.errata.skd022:
            if _skd022(self):
                return _status(self, 0)
    elif t == EV_TSX:
        if not ev.ip_suppressed:
            if insn != NULL and self.evd.errata.bdm64:
                _bdm64(self, insn)
            if self.ip != ev.ip:
                return _status(self, 0)
    elif t == EV_ASYNC_BRANCH:
        if ev.at != self.ip:
            return _status(self, 0)
    elif t == EV_EXEC_MODE or t == EV_ASYNC_PAGING or t == EV_ASYNC_VMCS:
        if not ev.ip_suppressed and ev.ip != self.ip:
            return _status(self, 0)
    elif t == EV_PAGING or t == EV_VMCS or t == EV_PTWRITE:
        if self.enabled:
            return _status(self, 0)
    elif t == EV_EXSTOP or t == EV_MWAIT:
        if not ev.ip_suppressed and self.enabled and self.ip != ev.ip:
            return _status(self, 0)
    return _status(self, ST_EVENT_PENDING)

cdef int _skd022(InsnDecoder self) noexcept nogil:
    # SKD022: VM entry (VMLAUNCH/VMRESUME) with tracing disabled reports an
    # asynchronous disable at the entry instead of a plain disable.
    cdef Insn i
    if self._decode_insn(self.ip, self.mode, &i) < 0:
        return 0
    if i.ext != ILDX_VMLAUNCH and i.ext != ILDX_VMRESUME:
        return 0
    self.event.type = EV_DISABLED
    return 1

cdef int _sync_forward(InsnDecoder self) noexcept nogil:
    cdef int st
    self._reset()
    if self.pending_start:
        self.pending_start = 0
        st = self.evd.sync_set_c(self.start_offset, &self.ip)
    else:
        st = self.evd.sync_forward_c(&self.ip)
    if st < 0:
        return st
    if self.stop_offset and self.evd.sync >= self.stop_offset:
        self.stopped = 1
        self.cyc_at_stop = self.evd.cyc_before_psb
        return -PTE_EOS
    self.status = st
    if not (st & ST_IP_SUPPRESSED):
        self.enabled = 1
    return _check_ip_event(self, NULL)

cdef int _at_stop(InsnDecoder self, const PtEvent* ev) noexcept nogil:
    # Where a fresh decoder synchronised at the stop PSB begins: at the first
    # status update bound to the PSB+'s IP, or at once if it has no IP.
    if not self.evd.have_ip or self.evd.ip_suppressed:
        return 1
    return (ev.type == EV_EXEC_MODE or ev.type == EV_ASYNC_PAGING or ev.type == EV_TSX
            or ev.type == EV_ASYNC_VMCS) and not ev.ip_suppressed

cdef int _insn_event(InsnDecoder self) noexcept nogil:
    """Process the pending event (libipt's pt_insn_event) and record it."""
    cdef PtEvent* ev = &self.event
    cdef Item* it
    cdef int st
    if not self.process_event:
        return -PTE_BAD_QUERY
    t = ev.type
    if self.stop_offset and ev.status_update and ev.offset >= self.stop_offset and _at_stop(self, ev):
        # The next piece's decoder syncs at this PSB and takes over from here.
        self.stopped = 1
        self.cyc_at_stop = self.evd.cyc_before_psb
        return -PTE_EOS
    if t == EV_ENABLED:
        if self.ip == ev.ip:
            ev.a = 1
        if ev.status_update:
            return -PTE_BAD_CONTEXT
        if self.enabled:
            return -PTE_BAD_CONTEXT
        self.ip = ev.ip
        self.enabled = 1
        self.next_flags |= F_RESUMED
    elif t == EV_ASYNC_DISABLED or t == EV_DISABLED:
        if t == EV_ASYNC_DISABLED and not ev.ip_suppressed and self.ip != ev.at:
            return -PTE_BAD_QUERY
        if ev.status_update or not self.enabled:
            return -PTE_BAD_CONTEXT
        self.enabled = 0
    elif t == EV_ASYNC_BRANCH:
        if self.ip != ev.at:
            return -PTE_BAD_QUERY
        if ev.status_update or not self.enabled:
            return -PTE_BAD_CONTEXT
        self.ip = ev.ip
        self.next_flags |= F_FAR
    elif t == EV_ASYNC_PAGING or t == EV_ASYNC_VMCS:
        if not ev.ip_suppressed and self.ip != ev.ip:
            return -PTE_BAD_QUERY
    elif t == EV_OVERFLOW:
        if ev.status_update:
            return -PTE_BAD_CONTEXT
        if ev.ip_suppressed:
            self.enabled = 0
            self.ip = 0
        else:
            self.ip = ev.ip
            self.enabled = 1
        self.speculative = 0
        self.next_flags |= F_RESUMED
    elif t == EV_EXEC_MODE:
        if (ev.status_update and self.enabled and self.mode != MODE_UNKNOWN and self.mode != ev.a):
            return -PTE_BAD_STATUS_UPDATE
        self.mode = ev.a
    elif t == EV_TSX:
        self.speculative = ev.a
    elif t == EV_STOP:
        if ev.status_update or self.enabled:
            return -PTE_BAD_CONTEXT
    elif t == EV_EXSTOP or t == EV_MWAIT:
        if not ev.ip_suppressed and self.enabled and self.ip != ev.ip:
            return -PTE_BAD_QUERY
    it = self._item(ITEM_EVENT)
    if it != NULL:
        it.ev = ev[0]
    self.process_event = 0
    if self.process_insn:
        st = _check_insn_event(self, &self.pinsn)
        if st != 0:
            if st < 0:
                return st
            if st & ST_EVENT_PENDING:
                return st
        if self.enabled:
            st = _proceed(self, &self.pinsn)
            if st < 0:
                return st
        _clear_postponed(self)
    return _check_ip_event(self, NULL)

cdef int _insn_next(InsnDecoder self) noexcept nogil:
    """One step of the flow (libipt's pt_insn_next), or a whole cached block
    when no event can bind inside it. Emits what it decoded."""
    cdef Block* blk
    cdef Insn insn
    cdef int st, err
    cdef uint32_t i, last
    cdef uint64_t ip
    cdef uint8_t* lens
    if not self.enabled:
        if self.status & ST_EOS:
            return -PTE_EOS
        return -PTE_NO_ENABLE
    self.err_ip = self.ip
    blk = self._block(self.ip, self.mode)
    if blk == NULL:
        return -PTE_NOMEM
    if blk.ninsn == 0:
        return blk.err
    if blk.ninsn > 1:
        if not self.process_event and not (self.status & ST_EVENT_PENDING):
            # Fast path: nothing can bind before the block's last instruction.
            ip = self.ip
            lens = self.lens + blk.lens
            last = blk.ninsn - 1
            for i in range(last):
                if self._emit(ip, 0) < 0:
                    return -PTE_NOMEM
                ip += lens[i]
            self.ip = ip
            self.err_ip = ip
            insn = blk.last
        else:
            # An event is pending: one instruction at a time.
            err = self._decode_insn(self.ip, self.mode, &insn)
            if err < 0:
                return err
    else:
        insn = blk.last
    insn.speculative = self.speculative
    self.cur_flags = 0
    st = _check_insn_event(self, &insn)
    if st != 0:
        if st < 0:
            self._emit(insn.ip, self.cur_flags)
            return st
        if st & ST_EVENT_PENDING:
            self._emit(insn.ip, self.cur_flags)
            return st
    st = _proceed(self, &insn)
    if st < 0:
        self._emit(insn.ip, self.cur_flags)
        return st
    st = _check_ip_event(self, &insn)
    self._emit(insn.ip, self.cur_flags)
    return st


"""Event layer: packets -> branch answers (TNT bits, TIP targets) and events.

Layer: pt_decoder, between the packet layer (packet.pyx, which it owns as a
cdef attribute) and the instruction flow (insn.pyx, which asks it questions).
It knows the packet grammar of the Intel SDM Vol. 3C chapter 33 (PSB+ state,
FUP/TIP pairing, TIP.PGE/PGD, MODE, OVF, PIP/VMCS, PTW, power events, STOP)
and the timing state; it knows nothing of instructions or images.

The binding rules (which packet completes which event, when an event becomes
visible, how OVF recovers) are the same as libipt's query decoder, so that the
flow on top reproduces libipt's ptxed output event for event:
- status packets (timing, PAD) are decoded ahead; the decoder stops ahead at
  the next TNT, TIP or event packet (`_read_ahead`);
- a FUP without a pending event starts an asynchronous branch that the next
  TIP (or TIP.PGD) completes; MODE.Exec and PIP bind to that TIP too;
- MODE.TSX, PTW, EXSTOP, MWAIT and OVF bind to the FUP that follows them;
- what a PSB+ re-states is reported at PSBEND as status updates.
Same verbs as the other layers: sync_forward(), sync_set(offset), offset, next().
"""
cimport cython
from libc.stdint cimport uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memset

from pt_decoder._errors cimport (PTE_BAD_CONTEXT, PTE_BAD_OPC, PTE_BAD_PACKET, PTE_BAD_QUERY, PTE_EOS,
                                 PTE_EVENT_IGNORED, PTE_INTERNAL, PTE_IP_SUPPRESSED, PTE_NOIP, PTE_NOMEM,
                                 PTE_NOSYNC, PTE_OVERFLOW)
from pt_decoder.packet cimport (PK_BBP, PK_BEP, PK_BIP, PK_CBR, PK_CFE, PK_CYC, PK_EVD, PK_EXSTOP, PK_FUP,
                                PK_INVALID, PK_MNT, PK_MODE_EXEC, PK_MODE_TSX, PK_MTC, PK_MWAIT, PK_OVF,
                                PK_PAD, PK_PIP, PK_PSB, PK_PSBEND, PK_PTW, PK_PWRE, PK_PWRX, PK_STOP,
                                PK_TIP, PK_TIP_PGD, PK_TIP_PGE, PK_TMA, PK_TNT8, PK_TNT64, PK_TRIG,
                                PK_TSC, PK_VMCS, PacketDecoder, PtPacket)
from pt_decoder.timing cimport (PtTime, apply_cbr, apply_cyc, apply_mtc, apply_tma, apply_tsc, tcal_init, tcal_update_psb,
                                time_init)

from pt_decoder.errors import ErrorCode, PtError

DEF PSB_SIZE = 16
cdef uint64_t MASK16 = 0xffff
cdef uint64_t MASK32 = 0xffffffff
cdef uint64_t MASK48 = 0xffffffffffff
cdef const char* PSB_PATTERN = b"\x02\x82\x02\x82\x02\x82\x02\x82\x02\x82\x02\x82\x02\x82\x02\x82"

# Packet classes of the query state machine (libipt's pdff_* flags).
cdef inline int _is_event_kind(int k) noexcept nogil:
    return (k == PK_TIP_PGE or k == PK_TIP_PGD or k == PK_PIP or k == PK_OVF or k == PK_MODE_EXEC
            or k == PK_MODE_TSX or k == PK_CBR or k == PK_STOP or k == PK_VMCS or k == PK_MNT
            or k == PK_EXSTOP or k == PK_MWAIT or k == PK_PWRE or k == PK_PWRX or k == PK_PTW)


cdef inline int _is_tnt(int k) noexcept nogil:
    return k == PK_TNT8 or k == PK_TNT64


cdef inline uint64_t _sext48(uint64_t v) noexcept nogil:
    if v & (<uint64_t>1 << 47):
        return v | ~MASK48
    return v & MASK48


cdef inline uint8_t _exec_mode(uint64_t bits) noexcept nogil:
    # MODE.Exec: CS.L=1 -> 64-bit; else CS.D selects 32/16 (SDM 33.4.2.8).
    cdef int csl = bits & 1, csd = (bits >> 1) & 1
    if csl:
        return MODE_UNKNOWN if csd else MODE_64
    return MODE_32 if csd else MODE_16


@cython.final
cdef class EventDecoder:
    """Decode the events and branch answers of one PT stream.

    `EventDecoder(data, mtc_freq=0, nom_freq=0, cpuid_0x15_eax=0,
    cpuid_0x15_ebx=0, errata=None)`; `errata` is a dict of Errata flags (see
    cpu_errata()). Raises PtError(NOSYNC) from sync_* if no PSB follows;
    next() returns ('event', dict) / ('tnt', taken) / ('tip', ip) or None at the end.
    """

    def __cinit__(self, data, int mtc_freq=0, int nom_freq=0, int cpuid_0x15_eax=0, int cpuid_0x15_ebx=0,
                  errata=None, sdm_packets=True):
        self.data = data
        skz84 = bool(errata and errata.get("skz84"))
        self.pkt = PacketDecoder(data, sdm_packets=sdm_packets, errata_skz84=skz84)
        self.scan = PacketDecoder(data, sdm_packets=sdm_packets, errata_skz84=skz84)
        self.size = self.pkt._size
        self.tcfg.mtc_freq = mtc_freq
        self.tcfg.nom_freq = nom_freq
        self.tcfg.cpuid_0x15_eax = cpuid_0x15_eax
        self.tcfg.cpuid_0x15_ebx = cpuid_0x15_ebx
        memset(&self.errata, 0, sizeof(Errata))
        if errata:
            for name, on in errata.items():
                if name not in ("bdm70", "bdm64", "skd007", "skd022", "skd010", "skl014", "apl12", "apl11",
                                "skl168", "skz84"):
                    raise ValueError("unknown erratum %r" % name)
            self.errata.bdm70 = bool(errata.get("bdm70"))
            self.errata.bdm64 = bool(errata.get("bdm64"))
            self.errata.skd007 = bool(errata.get("skd007"))
            self.errata.skd022 = bool(errata.get("skd022"))
            self.errata.skd010 = bool(errata.get("skd010"))
            self.errata.skl014 = bool(errata.get("skl014"))
            self.errata.apl12 = bool(errata.get("apl12"))
            self.errata.apl11 = bool(errata.get("apl11"))
            self.errata.skl168 = bool(errata.get("skl168"))
            self.errata.skz84 = bool(errata.get("skz84"))
        self.tcfg.skl168 = self.errata.skl168
        self.synced = 0
        self.nxt_err = -PTE_NOSYNC
        self._reset()

    # --- state -------------------------------------------------------------------------------------------

    cdef void _reset(self) noexcept nogil:
        # The cycle count runs on over resyncs: it is the stream's, not the sync's.
        cdef uint64_t cyc = self.time.cyc
        self.enabled = 0
        self.consume_packet = 0
        self.cur_event = NULL
        self.have_ip = 0
        self.ip_suppressed = 0
        self.last_ip = 0
        self.tnt = 0
        self.tnt_index = 0
        time_init(&self.time)
        time_init(&self.last_time)
        self.time.cyc = cyc
        self.last_time.cyc = cyc
        tcal_init(&self.tcal)
        memset(self.qbegin, 0, sizeof(self.qbegin))
        memset(self.qend, 0, sizeof(self.qend))

    cdef int _query_ip(self, uint64_t* ip) noexcept nogil:
        if not self.have_ip:
            if ip != NULL:
                ip[0] = 0
            return -PTE_NOIP
        if self.ip_suppressed:
            if ip != NULL:
                ip[0] = 0
            return -PTE_IP_SUPPRESSED
        if ip != NULL:
            ip[0] = self.last_ip
        return 0

    cdef int _update_ip(self) noexcept nogil:
        # Last-IP compression, SDM 33.4.2.2 Table 33-11.
        cdef uint64_t p = self.nxt.payload
        cdef int ipc = self.nxt.ipc
        if ipc == 0:
            self.ip_suppressed = 1
            return 0
        if ipc == 1:
            self.last_ip = (self.last_ip & ~MASK16) | (p & MASK16)
        elif ipc == 2:
            self.last_ip = (self.last_ip & ~MASK32) | (p & MASK32)
        elif ipc == 3:
            self.last_ip = _sext48(p)
        elif ipc == 4:
            self.last_ip = (self.last_ip & ~MASK48) | (p & MASK48)
        elif ipc == 6:
            self.last_ip = p
        else:
            return -PTE_BAD_PACKET
        self.have_ip = 1
        self.ip_suppressed = 0
        return 0

    # --- event queue (per binding: PSBEND, TIP, FUP) ----------------------------------------------------------

    cdef PtEvent* _standalone(self) noexcept nogil:
        memset(&self.standalone, 0, sizeof(PtEvent))
        return &self.standalone

    cdef PtEvent* _enqueue(self, int evb) noexcept nogil:
        cdef uint8_t idx = self.qend[evb]
        cdef uint8_t end = (idx + 1) % EVQ_SIZE
        if self.qbegin[evb] == (end + 1) % EVQ_SIZE:
            return NULL
        self.qend[evb] = end
        memset(&self.queue[evb][idx], 0, sizeof(PtEvent))
        return &self.queue[evb][idx]

    cdef PtEvent* _dequeue(self, int evb) noexcept nogil:
        cdef uint8_t b = self.qbegin[evb]
        if b == self.qend[evb]:
            return NULL
        self.qbegin[evb] = (b + 1) % EVQ_SIZE
        return &self.queue[evb][b]

    cdef inline int _pending(self, int evb) noexcept nogil:
        return self.qbegin[evb] != self.qend[evb]

    cdef PtEvent* _find(self, int evb, int evtype) noexcept nogil:
        cdef uint8_t b = self.qbegin[evb]
        while b != self.qend[evb]:
            if self.queue[evb][b].type == evtype:
                return &self.queue[evb][b]
            b = (b + 1) % EVQ_SIZE
        return NULL

    cdef void _event_time(self, PtEvent* ev) noexcept nogil:
        ev.tsc = self.time.tsc
        ev.cyc = self.time.cyc
        ev.lost_mtc = self.time.lost_mtc
        ev.lost_cyc = self.time.lost_cyc
        ev.has_tsc = self.time.have_tsc
        ev.offset = self.pos

    cdef int _event_ip(self, uint64_t* ip, PtEvent* ev) noexcept nogil:
        cdef int err = self._query_ip(ip)
        if err < 0:
            if err == -PTE_NOIP or err == -PTE_IP_SUPPRESSED:
                ev.ip_suppressed = 1
            else:
                return err
        return 0

    # --- fetching ----------------------------------------------------------------------------------------

    cdef int _fetch(self) noexcept nogil:
        """Fetch (not decode) the packet at `pos` into `nxt`."""
        cdef int err
        if self.pos >= self.size:
            self.nxt_err = -PTE_EOS
            return -PTE_EOS
        err = self.pkt.next_c(&self.nxt)
        if err < 0:
            self.nxt_err = err
            return err
        self.nxt_err = 0
        return 0

    cdef int _consume(self) noexcept nogil:
        """The packet in `nxt` is decoded: move past it and fetch the next one."""
        self.pos = self.nxt.offset + self.nxt.size
        self.nxt_err = -PTE_NOSYNC
        return 0

    cdef int _has_next(self) noexcept nogil:
        return self.nxt_err == 0

    cdef int _refetch(self) noexcept nogil:
        # After a decode step, `nxt` holds the next packet only if the step did
        # not consume it; otherwise fetch the following one.
        if self.nxt_err == 0 and self.nxt.offset == self.pos:
            return 0
        return self._fetch()

    # --- status --------------------------------------------------------------------------------------------

    cdef int _will_event(self) noexcept nogil:
        cdef int k
        if self.nxt_err != 0:
            return 0
        k = self.nxt.kind
        if _is_event_kind(k):
            return 1
        if k == PK_PSBEND:
            return self._pending(EVB_PSBEND)
        if k == PK_TIP:
            return self._pending(EVB_TIP)
        if k == PK_FUP:
            return self._pending(EVB_FUP)
        return 0

    cdef int status_flags(self) noexcept nogil:
        # Events are announced only once the TNT bits in hand are used up, so
        # that the flow first reaches the code the event belongs to.
        cdef int flags = 0
        if self.tnt_index == 0:
            if self._will_event():
                flags |= ST_EVENT_PENDING
            if self.nxt_err == -PTE_EOS:
                flags |= ST_EOS
        return flags

    cdef int _read_ahead(self) noexcept nogil:
        cdef int err, k
        while True:
            err = self._refetch()
            if err:
                if err == -PTE_EOS:
                    self.pos = self.size
                return err
            k = self.nxt.kind
            if k == PK_TIP or _is_tnt(k):
                return 0
            if k == PK_CYC and not self.errata.skd007:
                # the most frequent status packet, straight to the timing layer
                err = apply_cyc(&self.time, &self.tcal, self.nxt.payload, &self.tcfg)
                if err < 0:
                    return err
                self._consume()
                continue
            if self._will_event():
                return 0
            err = _decode(self)
            if err:
                return err

    # --- synchronisation ---------------------------------------------------------------------------------

    cdef int start_c(self, uint64_t offset, uint64_t* ip) noexcept nogil:
        cdef int err, status, have
        self._reset()
        if self.warm_ready and offset == self.warm_stop:
            # continue the timing state a decoder coming from before had here
            self.time = self.warm_time
            self.time.cyc = 0           # a piece counts its own cycles from its start
            self.last_time.cyc = 0
            self.tcal = self.warm_tcal
            self.warm_ready = 0
            self.warm_stop = 0
        self.sync = offset
        self.pos = offset
        self.synced = 1
        err = self.pkt.sync_set_c(offset)
        if err < 0:
            self.nxt_err = err
            return err
        err = self._fetch()
        if err:
            return err
        if self.nxt.kind != PK_PSB:
            return -PTE_NOSYNC
        err = _decode_psb(self)
        if err < 0:
            return err
        # Take the IP before reading ahead: an adjacent PSB+ could change it.
        have = self._query_ip(ip) == 0
        err = self._read_ahead()
        if err < 0 and err != -PTE_EOS:
            return err
        status = self.status_flags()
        if not have and self._query_ip(ip) < 0:
            status |= ST_IP_SUPPRESSED
        return status

    cdef int warm_up_c(self, uint64_t from_psb, uint64_t to_psb) noexcept nogil:
        """Decode the packets from the PSB at `from_psb` up to the PSB at `to_psb`
        only for their timing, so that a start at `to_psb` continues with the
        calibration (CYC:TSC ratio, MTC state) a serial decoder has there."""
        cdef uint64_t ip
        cdef int st, taken
        cdef PtEvent ev
        self.warm_stop = to_psb
        self.warm_ready = 0
        st = self.start_c(from_psb, &ip)
        while not self.warm_ready:
            if st < 0:
                if st == -PTE_EOS:
                    break
                st = self.sync_forward_c(&ip)
                continue
            if st & ST_EVENT_PENDING:
                st = self.event_c(&ev)
            elif self.tnt_index == 0 and self.nxt_err == 0 and self.nxt.kind == PK_TIP:
                st = self.indirect_branch_c(&ip)
            elif self.nxt_err == -PTE_EOS and self.tnt_index == 0:
                break
            else:
                st = self.cond_branch_c(&taken)
        return 0 if self.warm_ready else -PTE_EOS

    cdef int sync_forward_c(self, uint64_t* ip) noexcept nogil:
        cdef uint64_t start, off
        cdef const uint8_t* buf = self.pkt._buf
        start = self.pos if self.synced else 0
        if self.synced and start == self.sync:
            start += PSB_SIZE
        # Back up so that a PSB the position is inside of is found again.
        start = start - (PSB_SIZE - 1) if start >= PSB_SIZE - 1 else 0
        if self.synced and start <= self.sync:
            start = self.sync + 1
        off = start
        while off + PSB_SIZE <= self.size:
            if buf[off] == 0x02 and memcmp(buf + off, PSB_PATTERN, PSB_SIZE) == 0:
                return self.start_c(off, ip)
            off += 1
        self.pos = self.size
        self.nxt_err = -PTE_EOS
        return -PTE_EOS

    cdef int sync_set_c(self, uint64_t offset, uint64_t* ip) noexcept nogil:
        if offset + PSB_SIZE > self.size or memcmp(self.pkt._buf + offset, PSB_PATTERN, PSB_SIZE) != 0:
            return -PTE_NOSYNC
        return self.start_c(offset, ip)

    # --- queries -----------------------------------------------------------------------------------------

    cdef int _fetch_error(self) noexcept nogil:
        if self.nxt_err < 0:
            return self.nxt_err
        return -PTE_INTERNAL

    cdef int cond_branch_c(self, int* taken) noexcept nogil:
        cdef int err, k
        if self.tnt_index == 0 and self.nxt_err == 0 and self.nxt.offset == self.pos and _is_tnt(self.nxt.kind) \
                and self.nxt.count != 0:
            # the read-ahead stopped at a TNT packet: take it (what the loop below does)
            self.tnt = self.nxt.payload
            self.tnt_index = (<uint64_t>1) << (self.nxt.count - 1)
            self._consume()
            self.last_time = self.time
            err = self._read_ahead()
            if err < 0 and err != -PTE_EOS:
                return err
        if self.tnt_index == 0:
            while True:
                err = self._refetch()
                if err:
                    return err
                if self._will_event():
                    return -PTE_BAD_QUERY
                k = self.nxt.kind
                if k == PK_TIP:
                    return -PTE_BAD_QUERY
                self.cur_event = NULL
                err = _decode(self)
                if err:
                    return err
                if self.cur_event != NULL:
                    return -PTE_EVENT_IGNORED
                if _is_tnt(k):
                    break
                err = self._read_ahead()
                if err:
                    return err
            self.last_time = self.time
            err = self._read_ahead()
            if err < 0 and err != -PTE_EOS:
                return err
        taken[0] = (self.tnt & self.tnt_index) != 0
        self.tnt_index >>= 1
        return self.status_flags()

    cdef int indirect_branch_c(self, uint64_t* ip) noexcept nogil:
        cdef int err, k, flags = 0
        while True:
            err = self._refetch()
            if err:
                return err
            if self._will_event():
                return -PTE_BAD_QUERY
            k = self.nxt.kind
            if _is_tnt(k) and self.tnt_index != 0:
                return -PTE_BAD_QUERY
            self.cur_event = NULL
            err = _decode(self)
            if err:
                return err
            if self.cur_event != NULL:
                return -PTE_EVENT_IGNORED
            if k == PK_TIP:
                if self._query_ip(ip) < 0:
                    flags |= ST_IP_SUPPRESSED
                break
            err = self._read_ahead()
            if err:
                return err
        self.last_time = self.time
        err = self._read_ahead()
        if err < 0 and err != -PTE_EOS:
            return err
        return flags | self.status_flags()

    cdef int event_c(self, PtEvent* ev) noexcept nogil:
        cdef int err, k
        if self.tnt_index != 0:
            return -PTE_BAD_QUERY
        while True:
            err = self._refetch()
            if err:
                return err
            k = self.nxt.kind
            if (k == PK_TIP or _is_tnt(k)) and not self._will_event():
                return -PTE_BAD_QUERY
            self.cur_event = NULL
            err = _decode(self)
            if err:
                return err
            if self.cur_event != NULL:
                ev[0] = self.cur_event[0]
                break
            err = self._read_ahead()
            if err:
                return err
        self.last_time = self.time
        err = self._read_ahead()
        if err < 0 and err != -PTE_EOS:
            return err
        return self.status_flags()

    # --- Python API ------------------------------------------------------------------------------------------

    @property
    def offset(self):
        """Offset of the next packet to decode."""
        return self.pos

    @property
    def sync_offset(self):
        return self.sync

    def sync_forward(self):
        """Synchronise at the next PSB; returns (status, ip or None). Raises PtError(EOS) at the end."""
        cdef uint64_t ip = 0
        cdef int st = self.sync_forward_c(&ip)
        if st < 0:
            raise PtError(-st)
        return st, (None if st & ST_IP_SUPPRESSED else ip)

    def sync_set(self, uint64_t offset):
        """Synchronise at the PSB at `offset`; raises PtError(NOSYNC) if there is none."""
        cdef uint64_t ip = 0
        cdef int st = self.sync_set_c(offset, &ip)
        if st < 0:
            raise PtError(-st)
        return st, (None if st & ST_IP_SUPPRESSED else ip)

    def cond_branch(self):
        cdef int taken = 0
        cdef int st = self.cond_branch_c(&taken)
        if st < 0:
            raise PtError(-st)
        return st, bool(taken)

    def indirect_branch(self):
        cdef uint64_t ip = 0
        cdef int st = self.indirect_branch_c(&ip)
        if st < 0:
            raise PtError(-st)
        return st, (None if st & ST_IP_SUPPRESSED else ip)

    def event(self):
        cdef PtEvent ev
        cdef int st = self.event_c(&ev)
        if st < 0:
            raise PtError(-st)
        return st, event_dict(&ev)

    def query_time(self):
        """(tsc, cycles, has_tsc) at the last answered query."""
        return self.last_time.tsc, self.last_time.cyc, bool(self.last_time.have_tsc)

    def next(self):
        """The next answer in trace order without following code: ('tnt', taken),
        ('tip', ip), ('event', dict); None at the end of the stream."""
        cdef int st = self.status_flags()
        if st & ST_EVENT_PENDING:
            return ("event", self.event()[1])
        if self.tnt_index != 0:
            return ("tnt", self.cond_branch()[1])
        if self.nxt_err == -PTE_EOS:
            return None
        if self.nxt_err == 0 and self.nxt.kind == PK_TIP:
            return ("tip", self.indirect_branch()[1])
        return ("tnt", self.cond_branch()[1])


EVENT_NAMES = ("enabled", "disabled", "async_disabled", "async_branch", "paging", "async_paging", "overflow",
               "exec_mode", "tsx", "stop", "vmcs", "async_vmcs", "exstop", "mwait", "pwre", "pwrx", "ptwrite",
               "tick", "cbr", "mnt")


cdef dict event_dict(const PtEvent* ev):
    """A PtEvent as a Python dict (for tools and tests, not for hot loops)."""
    return {"type": EVENT_NAMES[ev.type], "ip": None if ev.ip_suppressed else ev.ip, "at": ev.at,
            "payload": ev.payload, "aux": ev.aux, "a": ev.a, "b": ev.b, "c": ev.c,
            "tsc": ev.tsc if ev.has_tsc else None, "status_update": bool(ev.status_update), "offset": ev.offset}


_ERRATA_BY_MODEL = {}
for _models, _names in (
        ((0x3d, 0x47, 0x4f, 0x56), ("bdm70", "bdm64")),
        ((0x4e, 0x5e, 0x8e, 0x9e, 0xa5, 0xa6), ("bdm70", "skd007", "skd022", "skd010", "skl014", "skl168")),
        ((0x55, 0x6a, 0x6c, 0x8f), ("bdm70", "skl014", "skd022", "skz84")),
        ((0x66, 0x7d, 0x7e, 0x8c, 0x8d, 0xa7, 0xa8), ("bdm70", "skl014", "skd022")),
        ((0x97, 0x9a, 0xbf), ("bdm70", "skl014", "skd022", "apl11")),
        ((0x5c, 0x5f), ("apl12", "apl11")),
        ((0x7a, 0x86, 0x96, 0x9c), ("apl11",))):
    for _m in _models:
        _ERRATA_BY_MODEL[_m] = dict.fromkeys(_names, True)


def cpu_errata(int family, int model, int stepping=0):
    """The PT errata of an Intel CPU (family 6 models as libipt 2.0.5 knows them),
    as a dict for EventDecoder/InsnDecoder(errata=...). Raises PtError(BAD_CPU)
    for a CPU without a known errata list."""
    if family == 6 and model in _ERRATA_BY_MODEL:
        return dict(_ERRATA_BY_MODEL[model])
    raise PtError(ErrorCode.BAD_CPU)


# OVF recovery and the errata that change it (module-level functions over the final
# EventDecoder class, kept in their own file).
include "event_packets.pxi"
include "event_recovery.pxi"

# Event layer contract (declarations only; implementation in event.pyx).
#
# The event decoder turns packets into the three answers the instruction flow
# asks for, in trace order (the "query" interface of libipt's query decoder):
#   cond_branch_c(&taken)   the next TNT bit (conditional branch or compressed return)
#   indirect_branch_c(&ip)  the next TIP target (indirect branch, far transfer)
#   event_c(&ev)            the next event (enable/disable, async branch, mode, ...)
# Each returns a status (ST_* bits) >= 0 or -PTE_*. ST_EVENT_PENDING says the
# next answer is an event (only once the TNT bits in hand are used up);
# ST_EOS says the trace ends; ST_IP_SUPPRESSED says a TIP carried no IP.
#
# PtEvent fields per type (only these are meaningful):
#   EV_ENABLED        ip, a = resumed (set by the instruction layer)
#   EV_DISABLED       ip (unless ip_suppressed)
#   EV_ASYNC_DISABLED at (where tracing stopped), ip
#   EV_ASYNC_BRANCH   at = from, ip = to
#   EV_PAGING         payload = CR3, a = non-root        EV_ASYNC_PAGING + ip
#   EV_OVERFLOW       ip (unless ip_suppressed)
#   EV_EXEC_MODE      a = MODE_* (16/32/64-bit), ip
#   EV_TSX            a = speculative (in transaction), b = aborted, ip
#   EV_STOP           -
#   EV_VMCS           payload = VMCS base                EV_ASYNC_VMCS + ip
#   EV_EXSTOP         ip
#   EV_MWAIT          payload = hints, aux = extensions, ip
#   EV_PWRE           payload = C-state, aux = sub-state, a = hardware-initiated
#   EV_PWRX           payload = last C-state, aux = deepest, a = interrupt, b = store, c = autonomous
#   EV_PTWRITE        payload, aux = size in bytes, ip
#   EV_TICK           ip (a time change seen at a branch; instruction layer)
#   EV_CBR            payload = core:bus ratio
#   EV_MNT            payload
# Every event: tsc/has_tsc/lost_* = time at its packet; offset = trace offset of
# the packet that completed it; status_update = re-stated in a PSB+ (no change).

cimport cython
from libc.stdint cimport uint8_t, uint32_t, uint64_t

from pt_decoder.packet cimport PacketDecoder, PtPacket
from pt_decoder.timing cimport PtTime, PtTimeCal, TimeConfig

cdef enum:
    ST_IP_SUPPRESSED = 1
    ST_EOS = 2
    ST_EVENT_PENDING = 4

cdef enum ExecMode:
    MODE_UNKNOWN = 0
    MODE_16 = 1
    MODE_32 = 2
    MODE_64 = 3

cdef enum EventType:
    EV_ENABLED = 0
    EV_DISABLED = 1
    EV_ASYNC_DISABLED = 2
    EV_ASYNC_BRANCH = 3
    EV_PAGING = 4
    EV_ASYNC_PAGING = 5
    EV_OVERFLOW = 6
    EV_EXEC_MODE = 7
    EV_TSX = 8
    EV_STOP = 9
    EV_VMCS = 10
    EV_ASYNC_VMCS = 11
    EV_EXSTOP = 12
    EV_MWAIT = 13
    EV_PWRE = 14
    EV_PWRX = 15
    EV_PTWRITE = 16
    EV_TICK = 17
    EV_CBR = 18
    EV_MNT = 19

ctypedef struct PtEvent:
    uint64_t ip
    uint64_t at
    uint64_t payload
    uint64_t aux
    uint64_t tsc
    uint64_t cyc
    uint64_t offset
    uint32_t lost_mtc
    uint32_t lost_cyc
    uint8_t type
    uint8_t ip_suppressed
    uint8_t status_update
    uint8_t has_tsc
    uint8_t a
    uint8_t b
    uint8_t c

# CPU errata that change decoding (libipt's struct pt_errata; Intel
# specification updates name them).
ctypedef struct Errata:
    uint8_t bdm70
    uint8_t bdm64
    uint8_t skd007
    uint8_t skd022
    uint8_t skd010
    uint8_t skl014
    uint8_t apl12
    uint8_t apl11
    uint8_t skl168
    uint8_t skz84

cdef enum:
    EVQ_SIZE = 8
    EVB_PSBEND = 0
    EVB_TIP = 1
    EVB_FUP = 2
    EVB_COUNT = 3

@cython.final
cdef class EventDecoder:
    cdef PacketDecoder pkt          # the layer below, owned
    cdef PacketDecoder scan         # a second reader for look-ahead scans
    cdef object data
    cdef uint64_t size
    cdef PtPacket nxt               # the packet at `pos`, fetched not decoded
    cdef int nxt_err                # 0 when `nxt` is valid, else -PTE_* of the fetch
    cdef uint64_t pos               # offset of the next packet to decode
    cdef uint64_t sync              # offset of the PSB last synchronised on
    cdef int synced
    cdef uint64_t last_psb          # offset of the PSB decoded last (sync or in-stream)
    cdef uint64_t cyc_before_psb    # cumulative cycles just before that PSB
    cdef uint64_t warm_stop         # warm-up: remember the timing state before the PSB here
    cdef int warm_ready             # 1: the next start_c continues from warm_time/warm_tcal
    cdef PtTime warm_time
    cdef PtTimeCal warm_tcal
    cdef int enabled
    cdef int consume_packet
    cdef PtEvent* cur_event         # the event the last decode produced, or NULL
    cdef uint64_t last_ip
    cdef int have_ip
    cdef int ip_suppressed
    cdef uint64_t tnt
    cdef uint64_t tnt_index
    cdef PtTime time                # time at the packet decoded last
    cdef PtTime last_time           # time at the last answered query
    cdef PtTimeCal tcal
    cdef TimeConfig tcfg
    cdef Errata errata
    cdef PtEvent standalone
    cdef PtEvent queue[EVB_COUNT][EVQ_SIZE]
    cdef uint8_t qbegin[EVB_COUNT]
    cdef uint8_t qend[EVB_COUNT]

    cdef int start_c(self, uint64_t offset, uint64_t* ip) noexcept nogil
    cdef int sync_forward_c(self, uint64_t* ip) noexcept nogil
    cdef int sync_set_c(self, uint64_t offset, uint64_t* ip) noexcept nogil
    cdef int cond_branch_c(self, int* taken) noexcept nogil
    cdef int indirect_branch_c(self, uint64_t* ip) noexcept nogil
    cdef int event_c(self, PtEvent* ev) noexcept nogil
    cdef int status_flags(self) noexcept nogil
    # internal steps (declared here because Cython requires it)
    cdef void _reset(self) noexcept nogil
    cdef int _query_ip(self, uint64_t* ip) noexcept nogil
    cdef int _update_ip(self) noexcept nogil
    cdef PtEvent* _standalone(self) noexcept nogil
    cdef PtEvent* _enqueue(self, int evb) noexcept nogil
    cdef PtEvent* _dequeue(self, int evb) noexcept nogil
    cdef PtEvent* _find(self, int evb, int evtype) noexcept nogil
    cdef void _event_time(self, PtEvent* ev) noexcept nogil
    cdef int _event_ip(self, uint64_t* ip, PtEvent* ev) noexcept nogil
    cdef int _fetch(self) noexcept nogil
    cdef int _consume(self) noexcept nogil
    cdef int _has_next(self) noexcept nogil
    cdef int _refetch(self) noexcept nogil
    cdef int _will_event(self) noexcept nogil
    cdef int _read_ahead(self) noexcept nogil
    cdef int _fetch_error(self) noexcept nogil
    cdef inline int _pending(self, int evb) noexcept nogil
    cdef int warm_up_c(self, uint64_t from_psb, uint64_t to_psb) noexcept nogil

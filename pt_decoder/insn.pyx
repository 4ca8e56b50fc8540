"""Instruction flow: the executed instructions of a PT stream over an image.

Layer: pt_decoder, above the event layer (an EventDecoder it owns) and the
image (pt_decoder.image.Image, read once into C arrays); below the history
and the tools. It knows x86 control flow (insn_ild.h) and libipt's rules for
binding events to instructions; it knows nothing of files, symbols or lines.

The walk: from the IP the trace gives, follow code; a conditional branch takes
the next TNT bit, a near return with an empty-TNT-free answer pops the
return-compression stack (SDM 33.4.2.1 "Indirect transfer compression for
returns"), an indirect branch or far transfer takes the next TIP. Each basic
block is decoded once into the block cache (start IP, instruction lengths,
the terminating branch); with no event pending the loop emits a whole block
at a time in C, without the GIL. Near events the decoder steps instruction by
instruction with the same rules and output as libipt's pt_insn_decoder, so
that `ptdebug decode --format ptxed` reproduces ptxed.

Damage is data: a decode error becomes an error item (offset, IP, code) and
the decoder resynchronises at the next PSB; the next instruction is flagged
RESUMED.
"""
cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, memset

from pt_decoder._errors cimport (PTE_BAD_INSN, PTE_BAD_QUERY, PTE_BAD_RETCOMP, PTE_BAD_STATUS_UPDATE,
                                 PTE_BAD_CONTEXT, PTE_EOS, PTE_INTERNAL, PTE_NO_ENABLE, PTE_NO_TIME, PTE_NOIP,
                                 PTE_NOMAP, PTE_NOMEM, PTE_RETSTACK_EMPTY)
from pt_decoder.event cimport (EV_ASYNC_BRANCH, EV_ASYNC_DISABLED, EV_ASYNC_PAGING, EV_ASYNC_VMCS, EV_CBR,
                               EV_DISABLED, EV_ENABLED, EV_EXEC_MODE, EV_EXSTOP, EV_MNT, EV_MWAIT, EV_OVERFLOW,
                               EV_PAGING, EV_PTWRITE, EV_PWRE, EV_PWRX, EV_STOP, EV_TICK, EV_TSX, EV_VMCS,
                               MODE_UNKNOWN, ST_EOS, ST_EVENT_PENDING, ST_IP_SUPPRESSED, EventDecoder, PtEvent)

from pt_decoder import insn_flags as _F
from pt_decoder.errors import PtError

cdef extern from "insn_ild.h" nogil:
    int ild_decode(const uint8_t* buf, int avail, int mode, ild_insn* out)
    enum:
        ILD_ERROR, ILD_OTHER, ILD_CALL, ILD_RETURN, ILD_JUMP, ILD_COND_JUMP, ILD_FAR_CALL, ILD_FAR_RETURN,
        ILD_FAR_JUMP, ILD_PTWRITE
    enum:
        ILDX_NONE, ILDX_INT, ILDX_INT3, ILDX_INT1, ILDX_INTO, ILDX_IRET, ILDX_SYSCALL, ILDX_SYSENTER,
        ILDX_SYSEXIT, ILDX_SYSRET, ILDX_MOV_CR3, ILDX_VMLAUNCH, ILDX_VMRESUME, ILDX_VMCALL, ILDX_VMPTRLD,
        ILDX_UIRET, ILDX_CALL_IND, ILDX_JMP_IND

cdef enum:
    F_CALL = 0x01
    F_RETURN = 0x02
    F_CONDITIONAL = 0x04
    F_TAKEN = 0x08
    F_INDIRECT = 0x10
    F_SPECULATIVE = 0x20
    F_FAR = 0x40
    F_RESUMED = 0x80
    RETSTACK_SIZE = 64
    MAX_BLOCK = 1024
    BDM64_MAX_STEPS = 0x100

assert (_F.CALL, _F.RETURN, _F.CONDITIONAL, _F.TAKEN, _F.INDIRECT, _F.SPECULATIVE, _F.FAR, _F.RESUMED) == \
    (0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80)


ILD_CLASSES = ("error", "other", "call", "return", "jump", "cond_jump", "far_call", "far_return", "far_jump",
               "ptwrite")


def ild_probe(const uint8_t[:] code, int mode=3):
    """(length, class name, is_direct, displacement) of the instruction at the start
    of `code` in `mode` (1/2/3 = 16/32/64-bit), or (0, "error", 0, 0); for tests."""
    cdef ild_insn d
    if code.shape[0] == 0 or ild_decode(&code[0], code.shape[0], mode, &d) < 0:
        return 0, "error", 0, 0
    return d.len, ILD_CLASSES[d.iclass], d.is_direct, d.disp


cdef inline int _is_branch(uint8_t c) noexcept nogil:
    return c != ILD_OTHER and c != ILD_PTWRITE and c != ILD_ERROR


cdef inline int _is_far(uint8_t c) noexcept nogil:
    return c == ILD_FAR_CALL or c == ILD_FAR_RETURN or c == ILD_FAR_JUMP


cdef inline int _changes_cpl(uint8_t x) noexcept nogil:
    return (x == ILDX_INT or x == ILDX_INT3 or x == ILDX_INT1 or x == ILDX_INTO or x == ILDX_IRET
            or x == ILDX_SYSCALL or x == ILDX_SYSENTER or x == ILDX_SYSEXIT or x == ILDX_SYSRET)


cdef inline int _binds_to_pip(const Insn* i) noexcept nogil:
    return i.ext == ILDX_MOV_CR3 or i.ext == ILDX_VMLAUNCH or i.ext == ILDX_VMRESUME or _is_far(i.iclass)


cdef inline int _binds_to_vmcs(const Insn* i) noexcept nogil:
    return i.ext == ILDX_VMPTRLD or i.ext == ILDX_VMLAUNCH or i.ext == ILDX_VMRESUME or _is_far(i.iclass)


cdef inline int _next_ip(uint64_t* ip, const Insn* i) noexcept nogil:
    """The IP after `i` if it follows from the instruction alone; -PTE_BAD_QUERY if not."""
    cdef uint64_t n = i.ip + i.size
    if i.iclass == ILD_OTHER or i.iclass == ILD_PTWRITE:
        ip[0] = n
        return 0
    if (i.iclass == ILD_CALL or i.iclass == ILD_JUMP) and i.is_direct:
        ip[0] = n + <uint64_t><int64_t>i.disp
        return 0
    if i.iclass == ILD_ERROR:
        return -PTE_BAD_INSN
    return -PTE_BAD_QUERY


@cython.final
cdef class InsnDecoder:
    """Decode the instruction flow of one PT stream over an image.

    InsnDecoder(data, image, *, mtc_freq=0, nom_freq=0, cpuid_0x15_eax=0,
    cpuid_0x15_ebx=0, errata=None, tick=False). `image` is a
    pt_decoder.image.Image (or anything with `.sections` of objects with
    vaddr/data). decode() runs to the end of the stream and returns a
    FlowResult; never raises for trace damage (it becomes error items).
    """
    cdef EventDecoder evd
    cdef object _keep                 # Python buffers behind the section pointers
    cdef list _views
    cdef SectionRef* secs
    cdef int nsecs
    cdef int last_sec
    # block cache
    cdef Block* blocks
    cdef uint32_t nblocks, cap_blocks
    cdef uint8_t* lens
    cdef uint32_t nlens, cap_lens
    cdef int32_t* table
    cdef uint32_t table_mask
    # flow state (libipt's struct pt_insn_decoder)
    cdef uint64_t ip
    cdef uint8_t mode
    cdef int status
    cdef int enabled, process_event, speculative, process_insn
    cdef int bound_paging, bound_vmcs, bound_ptwrite
    cdef PtEvent event
    cdef Insn pinsn
    cdef uint64_t retstack[RETSTACK_SIZE + 1]
    cdef uint8_t rs_top, rs_bottom
    cdef int tick
    cdef uint64_t start_offset        # parallel pieces: sync here first (a PSB)
    cdef int pending_start
    cdef uint64_t stop_offset         # parallel pieces: stop where the PSB there takes over
    cdef public int stopped
    cdef public uint64_t cyc_at_stop
    cdef int use_fast                 # 0: always step (tests compare the two)
    cdef uint8_t cur_flags
    cdef uint32_t filter_cfg[4]       # IA32_RTIT_CTL.ADDRn_CFG: 0 off, 1 filter, 2 stop
    cdef uint64_t filter_a[4]
    cdef uint64_t filter_b[4]
    cdef int have_filter
    # output columns
    cdef uint64_t* o_ip
    cdef uint64_t* o_tsc
    cdef uint64_t* o_cyc
    cdef uint8_t* o_flags
    cdef size_t n, cap
    cdef Item* items
    cdef size_t nitems, cap_items
    cdef uint8_t next_flags
    cdef int store                    # 0: count instructions, write no column (count_chunks)
    # driver state (ptxed's decode loop)
    cdef int need_sync, done, oom, ustatus
    cdef uint64_t last_sync, err_ip
    cdef public uint64_t blocks_built
    cdef list _pending                # next(): decoded, not yet returned (reversed)

    def __cinit__(self, data, image, *, int mtc_freq=0, int nom_freq=0, int cpuid_0x15_eax=0,
                  int cpuid_0x15_ebx=0, errata=None, tick=False, sdm_packets=True, addr_filters=None,
                  fast=True, start=None, stop=None, warm_from=None):
        cdef const uint8_t[:] mv
        cdef int i
        self.evd = EventDecoder(data, mtc_freq=mtc_freq, nom_freq=nom_freq, cpuid_0x15_eax=cpuid_0x15_eax,
                                cpuid_0x15_ebx=cpuid_0x15_ebx, errata=errata, sdm_packets=sdm_packets)
        sections = sorted(getattr(image, "sections", image) or [], key=lambda s: s.vaddr)
        self._views = []
        self.nsecs = len(sections)
        self.secs = <SectionRef*>malloc(max(1, self.nsecs) * sizeof(SectionRef))
        for i, s in enumerate(sections):
            view = memoryview(s.data).cast("B")
            self._views.append(view)
            mv = view
            self.secs[i].vaddr = s.vaddr
            self.secs[i].size = len(view)
            self.secs[i].data = &mv[0] if len(view) else NULL
        self.last_sec = 0
        self.cap_blocks = 1024
        self.blocks = <Block*>malloc(self.cap_blocks * sizeof(Block))
        self.cap_lens = 16384
        self.lens = <uint8_t*>malloc(self.cap_lens)
        self.table_mask = 4095
        self.table = <int32_t*>malloc((self.table_mask + 1) * sizeof(int32_t))
        memset(self.table, 0xff, (self.table_mask + 1) * sizeof(int32_t))
        self.cap = 4096
        self.o_ip = <uint64_t*>malloc(self.cap * 8)
        self.o_tsc = <uint64_t*>malloc(self.cap * 8)
        self.o_cyc = <uint64_t*>malloc(self.cap * 8)
        self.o_flags = <uint8_t*>malloc(self.cap)
        self.cap_items = 256
        self.items = <Item*>malloc(self.cap_items * sizeof(Item))
        if not (self.secs and self.blocks and self.lens and self.table and self.o_ip and self.o_tsc and self.o_cyc
                and self.o_flags and self.items):
            raise MemoryError()
        self.tick = 1 if tick else 0
        self.use_fast = 1 if fast else 0
        self.store = 1
        if start is not None:
            self.start_offset = start
            self.pending_start = 1
            if warm_from is not None and warm_from < start:
                self.evd.warm_up_c(warm_from, start)
        self.stop_offset = stop or 0
        memset(self.filter_cfg, 0, sizeof(self.filter_cfg))
        for i, (cfg, a, b) in enumerate(addr_filters or ()):
            if i >= 4:
                raise ValueError("at most 4 address filters (ADDR0..ADDR3)")
            self.filter_cfg[i], self.filter_a[i], self.filter_b[i] = cfg, a, b
            if cfg:
                self.have_filter = 1
        self.need_sync = 1
        self.last_sync = 0
        self._reset()

    def __dealloc__(self):
        free(self.secs)
        free(self.blocks)
        free(self.lens)
        free(self.table)
        free(self.o_ip)
        free(self.o_tsc)
        free(self.o_cyc)
        free(self.o_flags)
        free(self.items)

    cdef void _reset(self) noexcept nogil:
        self.mode = MODE_UNKNOWN
        self.ip = 0
        self.status = 0
        self.enabled = 0
        self.process_event = 0
        self.speculative = 0
        self.process_insn = 0
        self.bound_paging = 0
        self.bound_vmcs = 0
        self.bound_ptwrite = 0
        self.rs_top = 0
        self.rs_bottom = 0

    # --- image ---------------------------------------------------------------------------------------------

    cdef int _section(self, uint64_t ip) noexcept nogil:
        cdef int lo = 0, hi = self.nsecs - 1, mid
        cdef SectionRef* s = &self.secs[self.last_sec]
        if self.nsecs and s.vaddr <= ip and ip - s.vaddr < s.size:
            return self.last_sec
        while lo <= hi:
            mid = (lo + hi) >> 1
            s = &self.secs[mid]
            if ip < s.vaddr:
                hi = mid - 1
            elif ip - s.vaddr >= s.size:
                lo = mid + 1
            else:
                self.last_sec = mid
                return mid
        return -1

    cdef int _read(self, uint64_t ip, uint8_t* buf, int want) noexcept nogil:
        """Copy up to `want` bytes at `ip` across adjacent sections; -PTE_NOMAP if unmapped."""
        cdef int got = 0, k, idx
        cdef uint64_t avail
        while got < want:
            idx = self._section(ip + got)
            if idx < 0:
                break
            avail = self.secs[idx].size - (ip + got - self.secs[idx].vaddr)
            k = want - got if avail > <uint64_t>(want - got) else <int>avail
            memcpy(buf + got, self.secs[idx].data + (ip + got - self.secs[idx].vaddr), k)
            got += k
        return got if got else -PTE_NOMAP

    cdef int _decode_insn(self, uint64_t ip, uint8_t mode, Insn* out) noexcept nogil:
        cdef uint8_t raw[16]
        cdef ild_insn d
        cdef int got = self._read(ip, raw, 15)
        out.ip = ip
        out.mode = mode
        out.iclass = ILD_ERROR
        out.size = 0
        if got < 0:
            return got
        if ild_decode(raw, got, mode, &d) < 0:
            return -PTE_BAD_INSN
        out.size = d.len
        out.iclass = d.iclass
        out.ext = d.ext
        out.is_direct = d.is_direct
        out.disp = d.disp
        return 0

    # --- block cache ---------------------------------------------------------------------------------------

    cdef Block* _block(self, uint64_t ip, uint8_t mode) noexcept nogil:
        cdef uint32_t h = <uint32_t>(((ip ^ (<uint64_t>mode << 61)) * <uint64_t>0x9E3779B97F4A7C15) >> 40)
        cdef int32_t b = self.table[h & self.table_mask]
        while b >= 0:
            if self.blocks[b].start == ip and self.blocks[b].mode == mode:
                return &self.blocks[b]
            b = self.blocks[b].next
        return self._build(ip, mode, h)

    cdef Block* _build(self, uint64_t ip, uint8_t mode, uint32_t h) noexcept nogil:
        cdef Block* blk
        cdef Insn insn
        cdef int err
        cdef uint32_t i
        if self.nblocks == self.cap_blocks:
            if self._grow_blocks() < 0:
                return NULL
        blk = &self.blocks[self.nblocks]
        memset(blk, 0, sizeof(Block))
        blk.start = ip
        blk.mode = mode
        blk.lens = self.nlens
        blk.succ[0] = -1
        blk.succ[1] = -1
        while blk.ninsn < MAX_BLOCK:
            err = self._decode_insn(ip, mode, &insn)
            if err < 0:
                if blk.ninsn == 0:
                    blk.err = err
                break
            if self.nlens == self.cap_lens:
                self.cap_lens *= 2
                self.lens = <uint8_t*>realloc(self.lens, self.cap_lens)
                if self.lens == NULL:
                    return NULL
            self.lens[self.nlens] = insn.size
            self.nlens += 1
            blk.ninsn += 1
            blk.last = insn
            if insn.iclass != ILD_OTHER:
                break
            ip += insn.size
        blk.next = self.table[h & self.table_mask]
        self.table[h & self.table_mask] = self.nblocks
        self.nblocks += 1
        self.blocks_built += 1
        if self.nblocks > (self.table_mask + 1):
            self._rehash()
        return &self.blocks[self.nblocks - 1]

    cdef int _grow_blocks(self) noexcept nogil:
        cdef Block* nb = <Block*>realloc(self.blocks, 2 * self.cap_blocks * sizeof(Block))
        if nb == NULL:
            return -PTE_NOMEM
        self.blocks = nb
        self.cap_blocks *= 2
        return 0

    cdef void _rehash(self) noexcept nogil:
        cdef uint32_t size = (self.table_mask + 1) * 4, h
        cdef int32_t* t = <int32_t*>malloc(size * sizeof(int32_t))
        cdef uint32_t i
        if t == NULL:
            return
        free(self.table)
        self.table = t
        self.table_mask = size - 1
        memset(t, 0xff, size * sizeof(int32_t))
        for i in range(self.nblocks):
            h = <uint32_t>(((self.blocks[i].start ^ (<uint64_t>self.blocks[i].mode << 61))
                            * <uint64_t>0x9E3779B97F4A7C15) >> 40)
            self.blocks[i].next = t[h & self.table_mask]
            t[h & self.table_mask] = i

    # --- output --------------------------------------------------------------------------------------------

    cdef int _grow_out(self) noexcept nogil:
        cdef size_t cap = self.cap * 2
        cdef void* a = realloc(self.o_ip, cap * 8)
        if a == NULL:
            return -PTE_NOMEM
        self.o_ip = <uint64_t*>a
        a = realloc(self.o_tsc, cap * 8)
        if a == NULL:
            return -PTE_NOMEM
        self.o_tsc = <uint64_t*>a
        a = realloc(self.o_cyc, cap * 8)
        if a == NULL:
            return -PTE_NOMEM
        self.o_cyc = <uint64_t*>a
        a = realloc(self.o_flags, cap)
        if a == NULL:
            return -PTE_NOMEM
        self.o_flags = <uint8_t*>a
        self.cap = cap
        return 0

    cdef inline int _emit(self, uint64_t ip, uint8_t flags) noexcept nogil:
        cdef size_t n = self.n
        if not self.store:
            self.next_flags = 0
            self.n = n + 1
            return 0
        if n == self.cap:
            if self._grow_out() < 0:
                self.oom = 1
                return -PTE_NOMEM
        self.o_ip[n] = ip
        self.o_tsc[n] = self.evd.last_time.tsc
        self.o_cyc[n] = self.evd.last_time.cyc
        flags |= self.next_flags
        if self.speculative:
            flags |= F_SPECULATIVE
        self.o_flags[n] = flags
        self.next_flags = 0
        self.n = n + 1
        return 0

    cdef inline uint64_t _emit_run(self, uint64_t ip, const uint8_t* lens, uint32_t count) noexcept nogil:
        """Emit `count` straight-line instructions from `ip` (capacity checked by
        the caller); returns the IP after them."""
        cdef size_t n = self.n
        cdef uint64_t* oip = self.o_ip + n
        cdef uint64_t* otsc = self.o_tsc + n
        cdef uint64_t* ocyc = self.o_cyc + n
        cdef uint8_t* ofl = self.o_flags + n
        cdef uint64_t tsc = self.evd.last_time.tsc, cyc = self.evd.last_time.cyc
        cdef uint8_t fl = F_SPECULATIVE if self.speculative else 0
        cdef uint32_t i
        for i in range(count):
            oip[i] = ip
            otsc[i] = tsc
            ocyc[i] = cyc
            ofl[i] = fl
            ip += lens[i]
        ofl[0] |= self.next_flags
        self.next_flags = 0
        self.n = n + count
        return ip

    cdef Item* _item(self, int kind) noexcept nogil:
        cdef Item* it
        cdef void* a
        if self.nitems == self.cap_items:
            a = realloc(self.items, 2 * self.cap_items * sizeof(Item))
            if a == NULL:
                self.oom = 1
                return NULL
            self.items = <Item*>a
            self.cap_items *= 2
        it = &self.items[self.nitems]
        memset(it, 0, sizeof(Item))
        it.kind = kind
        it.pos = self.n
        it.offset = self.evd.pos
        self.nitems += 1
        return it

    cdef void _error(self, int kind, int code) noexcept nogil:
        cdef Item* it = self._item(kind)
        if it != NULL:
            it.code = -code if code < 0 else code
            it.ip = self.err_ip
        self.next_flags |= F_RESUMED

    # --- return compression stack (SDM 33.4.2.1) -----------------------------------------------------------

    cdef inline void _rs_push(self, uint64_t ip) noexcept nogil:
        cdef uint8_t top = self.rs_top
        self.retstack[top] = ip
        top = 0 if top == RETSTACK_SIZE else top + 1
        if self.rs_bottom == top:
            self.rs_bottom = 0 if self.rs_bottom == RETSTACK_SIZE else self.rs_bottom + 1
        self.rs_top = top

    cdef inline int _rs_pop(self, uint64_t* ip) noexcept nogil:
        cdef uint8_t top = self.rs_top
        if top == self.rs_bottom:
            return -PTE_RETSTACK_EMPTY
        top = RETSTACK_SIZE if top == 0 else top - 1
        self.rs_top = top
        ip[0] = self.retstack[top]
        return 0

    cdef inline int32_t _succ(self, int32_t b, int k, uint64_t ip) noexcept nogil:
        # The block at `ip` reached from block `b` by edge `k`, cached on the edge. An
        # edge's target is the block's own (the fall-through, the direct or taken target),
        # and the successor was built in b's mode, the decoder's while it walks b: a cached
        # edge is right without a look at its block (which would wait for its cache line).
        cdef int32_t s = self.blocks[b].succ[k]
        cdef Block* nb
        if s >= 0:
            return s
        nb = self._block(ip, self.mode)
        if nb == NULL:
            return -1
        s = <int32_t>(nb - self.blocks)
        self.blocks[b].succ[k] = s
        return s

    cdef int _fast(self, size_t max_insns) noexcept nogil:
        """Walk cached blocks while no event can bind (the hot loop).

        Same results as stepping with _insn_next (libipt's rules), block by
        block: conditional branches and compressed returns take their TNT bit,
        direct jumps and calls follow their displacement, successors are
        cached on the block's edges. Returns 1, before touching the current
        block, where the full rules must take over (indirect and far branches,
        returns without a TNT bit in hand, undecodable code); else the status
        after the last instruction, or -PTE_* (the failing instruction emitted).
        """
        cdef Block* blkp = self._block(self.ip, self.mode)
        cdef int32_t b, nb
        cdef Block* blk
        cdef Insn insn
        cdef uint64_t ip, target
        cdef uint32_t i, last
        cdef uint8_t c, flags
        cdef int taken, st, edge
        cdef size_t k
        cdef uint8_t spec = F_SPECULATIVE if self.speculative else 0
        if blkp == NULL:
            return -PTE_NOMEM
        b = <int32_t>(blkp - self.blocks)
        while self.n < max_insns:
            blk = &self.blocks[b]
            if blk.ninsn == 0:
                return 1
            c = blk.last.iclass
            if not (c == ILD_OTHER or c == ILD_COND_JUMP or (c == ILD_RETURN and self.evd.tnt_index != 0)
                    or ((c == ILD_JUMP or c == ILD_CALL) and blk.last.is_direct)):
                return 1
            if self.store and self.n + blk.ninsn > self.cap:
                if self._grow_out() < 0:
                    self.oom = 1
                    return -PTE_NOMEM
                blk = &self.blocks[b]
            # the instructions before the branch: one time, straight stores
            ip = self.ip
            last = blk.ninsn - 1
            if last:
                if self.store:
                    ip = self._emit_run(ip, self.lens + blk.lens, last)
                else:  # counted: the block knows where its branch is
                    ip = blk.last.ip
                    self.n += last
                    self.next_flags = 0
            self.err_ip = ip
            target = ip + blk.last.size
            flags = 0
            st = 0
            edge = 0
            if c == ILD_COND_JUMP or c == ILD_RETURN:
                if self.evd.tnt_index > 1:
                    # the bit is in hand and not the last one: no packet to read
                    taken = (self.evd.tnt & self.evd.tnt_index) != 0
                    self.evd.tnt_index >>= 1
                else:
                    st = self.evd.cond_branch_c(&taken)
                    if st < 0:
                        self.ip = target
                        self._emit(ip, F_CONDITIONAL)
                        return st
                self.status = st
                if c == ILD_COND_JUMP:
                    # without a branch on the bit: the traced program's own mispredicted
                    # branches would be this loop's too
                    taken = taken != 0
                    flags = F_CONDITIONAL | (F_TAKEN * taken)
                    target += <uint64_t>(<int64_t>blk.last.disp & -(<int64_t>taken))
                    edge = taken
                else:
                    flags = F_RETURN | F_TAKEN
                    edge = 2
                    self.ip = target
                    if not taken:
                        self._emit(ip, F_RETURN)
                        return -PTE_BAD_RETCOMP
                    if self._rs_pop(&target) < 0:
                        self._emit(ip, F_RETURN)
                        return -PTE_RETSTACK_EMPTY
            elif c != ILD_OTHER:
                flags = F_TAKEN
                if c == ILD_CALL:
                    flags |= F_CALL
                    if blk.last.disp != 0:
                        self._rs_push(target)
                target += <uint64_t><int64_t>blk.last.disp
                edge = 1
            self.ip = target
            if st & (ST_EVENT_PENDING | ST_EOS):
                # an event follows this branch: libipt's check after the instruction
                insn = blk.last
                insn.ip = ip
                self.cur_flags = flags
                st = _check_ip_event(self, &insn)
                self._emit(ip, flags)
                return st
            # the branch itself (capacity for the whole block was ensured above)
            k = self.n
            if self.store:
                self.o_ip[k] = ip
                self.o_tsc[k] = self.evd.last_time.tsc
                self.o_cyc[k] = self.evd.last_time.cyc
                self.o_flags[k] = flags | self.next_flags | spec
            self.next_flags = 0
            self.n = k + 1
            if edge == 2:
                blkp = self._block(target, self.mode)
                if blkp == NULL:
                    return -PTE_NOMEM
                nb = <int32_t>(blkp - self.blocks)
            else:
                nb = self._succ(b, edge, target)
                if nb < 0:
                    return -PTE_NOMEM
            b = nb
        return _status(self, 0)

    cdef int _run(self, size_t max_insns) noexcept nogil:
        """ptxed's decode loop: sync, drain events, step; errors become items.
        `ustatus` is the loop's status (what the last step returned), distinct
        from `status`, the last answer of the event layer."""
        cdef int st
        while not self.done and self.n < max_insns and not self.oom:
            if self.need_sync:
                self.err_ip = 0
                st = _sync_forward(self)
                if st < 0:
                    if st == -PTE_EOS:
                        self.done = 1
                        break
                    self._error(ITEM_SYNC_ERROR, st)
                    if self.evd.pos <= self.last_sync:
                        self.done = 1
                        break
                    self.last_sync = self.evd.pos
                    continue
                self.need_sync = 0
                self.ustatus = st
                self.next_flags |= F_RESUMED
            st = self.ustatus
            while st >= 0 and (st & ST_EVENT_PENDING):
                st = _insn_event(self)
            if st >= 0:
                if st & ST_EOS:
                    if not (st & ST_IP_SUPPRESSED):
                        self._item(ITEM_EOS)
                    self.done = 1
                    break
                if self.use_fast and self.enabled and not self.process_event and not self.tick \
                        and not (self.status & (ST_EVENT_PENDING | ST_EOS)):
                    st = self._fast(max_insns)
                    if st != 1:
                        if st >= 0:
                            self.ustatus = st
                            continue
                        if st == -PTE_EOS:
                            self.done = 1
                            break
                        self._error(ITEM_ERROR, st)
                        self.need_sync = 1
                        continue
                st = _insn_next(self)
                if st >= 0:
                    self.ustatus = st
                    continue
            if st == -PTE_EOS:
                self.done = 1
                break
            self._error(ITEM_ERROR, st)
            self.need_sync = 1
        return 0

    # --- Python API ------------------------------------------------------------------------------------------
    # The layer's verbs (as the packet and event layers'): sync_forward(), sync_set(offset),
    # offset, next(); decode()/chunks()/count() are the bulk forms the tools use.

    def sync_forward(self):
        """Synchronise at the next PSB; returns its offset. Raises PtError(EOS) if
        there is none. The output buffers restart (next() and result() see only
        what follows)."""
        return self._sync_now(0, 0)

    def sync_set(self, uint64_t offset):
        """Synchronise at the PSB at `offset`; raises PtError(NOSYNC) if there is none."""
        return self._sync_now(1, offset)

    cdef object _sync_now(self, int at, uint64_t offset):
        cdef int st
        self.n = 0
        self.nitems = 0
        self._pending = None
        self.err_ip = 0
        if at:
            self.start_offset = offset
            self.pending_start = 1
        st = _sync_forward(self)
        if st < 0:
            self.pending_start = 0
            raise PtError(-st)
        self.need_sync = 0
        self.done = 0
        self.ustatus = st
        self.next_flags |= F_RESUMED
        return self.evd.sync

    def next(self):
        """The next thing in the flow: ("insn", ip, tsc, cycles, flags), or an item
        ("event"|"error"|"sync_error"|"eos", pos, offset, ip, code, event dict);
        None at the end of the stream. Synchronises at the first PSB if needed."""
        cdef size_t k
        while not self._pending:
            if self.done:
                return None
            self.n = 0
            self.nitems = 0
            with nogil:
                self._run(1)
            if self.oom:
                raise MemoryError("out of memory while decoding")
            flow = self.result()
            merged = []
            k = 0
            items = flow.items
            for i in range(len(flow.ip)):
                while k < len(items) and items[k][1] <= i:
                    merged.append(items[k])
                    k += 1
                merged.append(("insn", flow.ip[i], flow.tsc[i], flow.cycles[i], flow.flags[i]))
            merged.extend(items[k:])
            merged.reverse()
            self._pending = merged
        return self._pending.pop()

    def decode(self, size_t max_insns=<size_t>-1, progress=None, size_t progress_every=1 << 20):
        """Decode to the end of the stream (or `max_insns` instructions); returns a FlowResult.
        `progress()`, when given, is called after every `progress_every` instructions (it may
        read `offset`, and raise to stop the decode: a client's cancel)."""
        cdef size_t goal
        if progress is None:
            with nogil:
                self._run(max_insns)
        else:
            while not self.done and not self.oom and self.n < max_insns:
                goal = min(max_insns, self.n + progress_every)
                with nogil:
                    self._run(goal)
                progress()
        if self.oom:
            raise MemoryError("out of memory while decoding")
        return self.result()

    def chunks(self, size_t chunk=1 << 16, bint views=False):
        """Decode in pieces of about `chunk` instructions, yielding a FlowResult
        for each (item positions relative to the piece); the output buffers are
        reused, so memory stays flat however long the stream. With `views` the
        columns are not copied: they are buffers over the decoder's own output,
        valid only until the next piece is asked for (the tools' writer prints
        each piece at once)."""
        while not self.done:
            self.n = 0
            self.nitems = 0
            with nogil:
                self._run(chunk)
            if self.oom:
                raise MemoryError("out of memory while decoding")
            yield self._column_views() if views else self.result()

    cdef object _column_views(self):
        from pt_decoder.flow_result import FlowResult
        if self.n == 0:
            return self.result()
        return FlowResult(<uint64_t[:self.n]>self.o_ip, <uint64_t[:self.n]>self.o_tsc,
                          <uint64_t[:self.n]>self.o_cyc, <uint8_t[:self.n]>self.o_flags, self._items())

    def count(self, size_t chunk=1 << 16):
        """Decode to the end keeping nothing; returns (instructions, items).
        What a benchmark times against libipt's decoders, which store nothing per
        instruction either (the block decoder returns blocks)."""
        cdef uint64_t total = 0, items = 0
        self.store = 0
        try:
            with nogil:
                while not self.done and not self.oom:
                    self.n = 0
                    self.nitems = 0
                    self._run(chunk)
                    total += self.n
                    items += self.nitems
        finally:
            self.store = 1
        if self.oom:
            raise MemoryError("out of memory while decoding")
        return total, items

    def count_chunks(self, size_t chunk=1 << 16):
        """Decode to the end in pieces of about `chunk` instructions, writing no column:
        yields (instructions, items) for each piece, the items as result()'s (positions
        relative to the piece). The flow is the same as decode()'s: only the stores of
        every instruction's IP, TSC, cycles and flags are skipped (the index pass,
        pt_decoder/chunked.py, counts chunks so)."""
        self.store = 0
        try:
            while not self.done:
                self.n = 0
                self.nitems = 0
                with nogil:
                    self._run(chunk)
                if self.oom:
                    raise MemoryError("out of memory while decoding")
                yield self.n, self._items()
        finally:
            self.store = 1

    def result(self):
        from pt_decoder.flow_result import FlowResult
        return FlowResult(self._column("Q", 0), self._column("Q", 1), self._column("Q", 2),
                          self._column("B", 3), self._items())

    cdef object _column(self, str code, int which):
        from array import array
        col = array(code)
        if self.n == 0:
            return col
        if which == 0:
            col.frombytes((<char*>self.o_ip)[:self.n * 8])
        elif which == 1:
            col.frombytes((<char*>self.o_tsc)[:self.n * 8])
        elif which == 2:
            col.frombytes((<char*>self.o_cyc)[:self.n * 8])
        else:
            col.frombytes((<char*>self.o_flags)[:self.n])
        return col

    cdef list _items(self):
        from pt_decoder.event import EVENT_NAMES
        out = []
        cdef size_t k
        cdef Item* it
        for k in range(self.nitems):
            it = &self.items[k]
            ev = None
            if it.kind == ITEM_EVENT:
                e = &it.ev
                ev = {"type": EVENT_NAMES[e.type], "ip": None if e.ip_suppressed else e.ip, "at": e.at,
                      "payload": e.payload, "aux": e.aux, "a": e.a, "b": e.b, "c": e.c,
                      "tsc": e.tsc if e.has_tsc else None, "status_update": bool(e.status_update)}
            out.append((("event", "error", "sync_error", "eos")[it.kind], it.pos, it.offset, it.ip, it.code, ev))
        return out

    @property
    def offset(self):
        return self.evd.pos

    @property
    def cached_blocks(self):
        return self.nblocks


def add_to_column(uint64_t[:] column, uint64_t delta):
    """column[k] += delta for every k, in C: parallel stitching puts a piece's
    cumulative cycle count after the pieces before it (pt_decoder/parallel.py)."""
    cdef Py_ssize_t k
    with nogil:
        for k in range(column.shape[0]):
            column[k] += delta


# libipt's rules for stepping and binding events (module-level functions over the
# final InsnDecoder class, kept in their own file).
include "insn_rules.pxi"

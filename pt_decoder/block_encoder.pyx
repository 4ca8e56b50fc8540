# cython: language_level=3
"""BlockEncoder: a stream of executed basic blocks -> the Intel PT stream the hardware would write.

Layer: pt_decoder, beside flow_encoder.py. FlowEncoder takes one address per retired
instruction and is written in Python; this one takes one *block id* per executed basic
block (what the DBI recorder's ring holds, adapter/capture/dbi.py) and runs in C, so that
encoding keeps up with a recorder that retires 10^8 instructions a second. The packets and
where they go are FlowEncoder's (its module doc has the SDM references), at block
granularity:

  a block ends in ...    the edge to the next block start writes
  cond. jump             one TNT bit (taken iff the next start != the fall-through)
  direct jmp / call      nothing (a call pushes its return address, except a call to the
                         next instruction)
  ret                    a compressed return (TNT 1) when the return stack's top is the next
                         start, else TIP(next start)
  indirect jmp / call    TIP(next start); the call pushes its return address
  far transfer           TIP.PGD(suppressed), then [TSC], MODE.Exec, TIP.PGE(next start)
  anything else          the next start must be the fall-through; when it is not (a signal
                         handler ran, the recorder lost blocks) FUP(expected) + TIP.PGD, then
                         TIP.PGE(next start): a discontinuity the decoders show as a gap.

Inside a block only plain instructions, direct calls that the recorder did not end the block
at, and far transfers (`syscall`) can occur; `define()` takes them as the block's *inner
events*. PSB+ every `psb_period` bytes (PSB, [TSC], MODE.Exec, FUP, PSBEND; the return stack
is cleared, as FlowEncoder does). Timing is coarse: the caller's clock (`set_time`, in TSC
ticks) goes into every PSB+ and before every TIP.PGE; no MTC or CYC.

The encoder also counts instructions and call depth, so that a recorder can end a window at
an instruction count or at the return of the function the window began in (`feed`'s limits).

Errors: ValueError naming the block id for a block that was never defined, and for
arguments out of range. Nothing is written then.
"""
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy

# Instruction classes: flow_encoder.py's numbering (OTHER, COND, JMP, CALL, IJMP, ICALL, RET, FAR).
DEF C_OTHER = 0
DEF C_COND = 1
DEF C_JMP = 2
DEF C_CALL = 3
DEF C_IJMP = 4
DEF C_ICALL = 5
DEF C_RET = 6
DEF C_FAR = 7

# Inner events of a block (define()'s `inner`).
INNER_CALL = 0      # a direct call inside the block: push its return address
INNER_FAR = 1       # a far transfer inside the block: tracing stops and resumes at `value`
DEF E_CALL = 0
DEF E_FAR = 1

DEF RETURN_STACK_DEPTH = 64     # libipt's pt_retstack_size
DEF IPC_UPDATE_16 = 1
DEF IPC_UPDATE_32 = 2
DEF IPC_SEXT_48 = 3
DEF IPC_UPDATE_48 = 4
DEF IPC_FULL = 6

# feed()'s stop reasons
STOP_NONE = 0       # every id was consumed
STOP_COUNT = 1      # the instruction limit was reached (inside or at the end of a block)
STOP_RETURN = 2     # the window's function returned (the ret is the last instruction)
STOP_UNDEFINED = 3  # an id the table does not define yet: define it and feed again


cdef class BlockEncoder:
    """BlockEncoder(psb_period=4096). Define blocks with define(), then feed() ids in order
    (any number of calls), then finish(); take() returns the bytes written so far."""

    cdef uint64_t *b_start
    cdef uint64_t *b_fall
    cdef uint64_t *b_target
    cdef uint32_t *b_ninsn
    cdef uint8_t *b_cls
    cdef uint8_t *b_defined
    cdef uint32_t *b_inner_at      # first inner event of the block in the e_* arrays
    cdef uint32_t *b_inner_n
    cdef Py_ssize_t b_cap

    cdef uint8_t *e_kind
    cdef uint32_t *e_index         # the instruction's index in its block
    cdef uint64_t *e_value
    cdef Py_ssize_t e_len, e_cap

    cdef unsigned char *out
    cdef Py_ssize_t out_len, out_cap, out_base   # out_base: bytes taken before `out`
    cdef Py_ssize_t psb_period, next_psb
    cdef uint64_t last_ip
    cdef bint last_ip_known
    cdef uint64_t stack[RETURN_STACK_DEPTH]
    cdef int stack_len
    cdef uint32_t tnt_bits
    cdef int tnt_n
    cdef uint64_t now
    cdef bint timing
    cdef int64_t prev_id             # the block whose end edge is still to be written
    cdef readonly uint64_t instructions
    """Instructions retired by the blocks fed so far (a block cut by a limit: its part)."""
    cdef readonly int64_t depth
    """Calls minus returns since the first block (the window's function is depth 0)."""
    cdef readonly uint64_t blocks
    cdef readonly uint64_t discontinuities
    """Edges the code does not explain (FUP + TIP.PGD written): a signal handler that ran
    unrecorded, or blocks the recorder lost."""
    cdef readonly bint started
    cdef readonly bint finished

    def __cinit__(self, Py_ssize_t psb_period=4096, bint timing=True):
        if psb_period < 0:
            raise ValueError(f"psb_period must be >= 0 bytes, got {psb_period}")
        self.psb_period = psb_period
        self.timing = timing
        self.prev_id = -1
        self.out_cap = 1 << 16
        self.out = <unsigned char *>malloc(self.out_cap)
        if self.out == NULL:
            raise MemoryError()

    def __dealloc__(self):
        free(self.b_start); free(self.b_fall); free(self.b_target); free(self.b_ninsn)
        free(self.b_cls); free(self.b_defined); free(self.b_inner_at); free(self.b_inner_n)
        free(self.e_kind); free(self.e_index); free(self.e_value)
        free(self.out)

    # ---- the block table ------------------------------------------------------------------
    cdef int _grow_blocks(self, Py_ssize_t need) except -1:
        cdef Py_ssize_t cap = self.b_cap or 1024
        while cap <= need:
            cap *= 2
        self.b_start = <uint64_t *>_grow(self.b_start, cap * 8)
        self.b_fall = <uint64_t *>_grow(self.b_fall, cap * 8)
        self.b_target = <uint64_t *>_grow(self.b_target, cap * 8)
        self.b_ninsn = <uint32_t *>_grow(self.b_ninsn, cap * 4)
        self.b_cls = <uint8_t *>_grow(self.b_cls, cap)
        self.b_inner_at = <uint32_t *>_grow(self.b_inner_at, cap * 4)
        self.b_inner_n = <uint32_t *>_grow(self.b_inner_n, cap * 4)
        self.b_defined = <uint8_t *>_grow(self.b_defined, cap)
        cdef Py_ssize_t i
        for i in range(self.b_cap, cap):
            self.b_defined[i] = 0
        self.b_cap = cap
        return 0

    def define(self, Py_ssize_t block_id, uint64_t start, uint32_t ninsn, int cls,
               uint64_t fall, uint64_t target, inner=()):
        """Block `block_id` starts at `start`, retires `ninsn` instructions and ends in an
        instruction of class `cls` (flow_encoder's numbering) with fall-through `fall` and
        direct target `target` (0 if none). `inner`: (kind, index, value) for each inner event
        in order: (INNER_CALL, i, return address) or (INNER_FAR, i, the next instruction)."""
        if block_id < 0 or block_id >= (1 << 32):
            raise ValueError(f"block id must be 0..2^32-1, got {block_id}")
        if not 0 <= cls <= C_FAR:
            raise ValueError(f"block {block_id}: class must be 0..7, got {cls}")
        if ninsn == 0:
            raise ValueError(f"block {block_id} at {start:#x} has no instructions")
        if block_id >= self.b_cap:
            self._grow_blocks(block_id)
        cdef list events = list(inner)
        for kind, index, value in events:
            if kind not in (INNER_CALL, INNER_FAR) or not 0 <= index < ninsn - 1:
                raise ValueError(f"block {block_id}: bad inner event {(kind, index, value)!r}")
        if self.e_len + len(events) > self.e_cap:
            self.e_cap = max(self.e_cap * 2, self.e_len + len(events), 256)
            self.e_kind = <uint8_t *>_grow(self.e_kind, self.e_cap)
            self.e_index = <uint32_t *>_grow(self.e_index, self.e_cap * 4)
            self.e_value = <uint64_t *>_grow(self.e_value, self.e_cap * 8)
        self.b_inner_at[block_id] = <uint32_t>self.e_len
        self.b_inner_n[block_id] = <uint32_t>len(events)
        for kind, index, value in events:
            self.e_kind[self.e_len] = kind
            self.e_index[self.e_len] = index
            self.e_value[self.e_len] = value
            self.e_len += 1
        self.b_start[block_id] = start
        self.b_ninsn[block_id] = ninsn
        self.b_cls[block_id] = cls
        self.b_fall[block_id] = fall
        self.b_target[block_id] = target
        self.b_defined[block_id] = 1

    def is_defined(self, Py_ssize_t block_id) -> bool:
        return 0 <= block_id < self.b_cap and self.b_defined[block_id] != 0

    # ---- output buffer --------------------------------------------------------------------
    cdef inline int _need(self, Py_ssize_t n) except -1:
        if self.out_len + n > self.out_cap:
            while self.out_len + n > self.out_cap:
                self.out_cap *= 2
            self.out = <unsigned char *>_grow(self.out, self.out_cap)
        return 0

    cdef inline void _put1(self, unsigned char b) noexcept:
        self.out[self.out_len] = b
        self.out_len += 1

    cdef inline Py_ssize_t _offset(self) noexcept:
        return self.out_base + self.out_len

    def take(self) -> bytes:
        """The bytes written since the last take(), as a bytes object."""
        data = PyBytes_FromStringAndSize(<char *>self.out, self.out_len)
        self.out_base += self.out_len
        self.out_len = 0
        return data

    @property
    def offset(self):
        """Bytes written so far (taken or not)."""
        return self._offset()

    def set_time(self, uint64_t tsc):
        """The clock (TSC ticks) the next TSC packets carry."""
        self.now = tsc & ((1 << 56) - 1)

    # ---- packets --------------------------------------------------------------------------
    cdef int _flush_tnt(self) except -1:
        cdef int n = self.tnt_n, take
        cdef uint32_t bits = self.tnt_bits, chunk
        if n == 0:
            return 0
        self._need(8)
        while n:
            take = n if n < 6 else 6
            n -= take
            chunk = bits >> n
            bits &= (1u << n) - 1
            self._put1(((chunk << 1) | (1u << (take + 1))) & 0xFF)
        self.tnt_bits = 0
        self.tnt_n = 0
        return 0

    cdef inline int _bit(self, int taken) except -1:
        self.tnt_bits = (self.tnt_bits << 1) | taken
        self.tnt_n += 1
        if self.tnt_n == 6:
            self._flush_tnt()
        return 0

    cdef int _ip_packet(self, unsigned char opcode, uint64_t ip) except -1:
        """TIP/TIP.PGE/TIP.PGD/FUP with the smallest IP compression (encoder.smallest_ipc)."""
        cdef int ipc, size, i
        cdef uint64_t top
        ipc = 0
        if self.last_ip_known:
            if (ip ^ self.last_ip) >> 16 == 0:
                ipc = IPC_UPDATE_16
            elif (ip ^ self.last_ip) >> 32 == 0:
                ipc = IPC_UPDATE_32
        if ipc == 0:
            top = ip >> 47
            if top == 0 or top == 0x1FFFF:
                ipc = IPC_SEXT_48
            elif self.last_ip_known and (ip ^ self.last_ip) >> 48 == 0:
                ipc = IPC_UPDATE_48
            else:
                ipc = IPC_FULL
        size = 2 if ipc == IPC_UPDATE_16 else 4 if ipc == IPC_UPDATE_32 else \
            8 if ipc == IPC_FULL else 6
        self._need(1 + size)
        self._put1(opcode | (ipc << 5))
        for i in range(size):
            self._put1((ip >> (8 * i)) & 0xFF)
        # what a decoder rebuilds (encoder.reconstruct_ip): sext-48 sign-extends the payload
        if ipc == IPC_SEXT_48:
            self.last_ip = ip
        elif ipc == IPC_UPDATE_48:
            self.last_ip = (self.last_ip & ~(<uint64_t>0xFFFFFFFFFFFF)) | (ip & 0xFFFFFFFFFFFF)
        elif ipc == IPC_UPDATE_32:
            self.last_ip = (self.last_ip & ~(<uint64_t>0xFFFFFFFF)) | (ip & 0xFFFFFFFF)
        elif ipc == IPC_UPDATE_16:
            self.last_ip = (self.last_ip & ~(<uint64_t>0xFFFF)) | (ip & 0xFFFF)
        else:
            self.last_ip = ip
        self.last_ip_known = True
        return 0

    cdef int _tsc(self) except -1:
        cdef int i
        self._need(8)
        self._put1(0x19)
        for i in range(7):
            self._put1((self.now >> (8 * i)) & 0xFF)
        return 0

    cdef int _mode_exec(self) except -1:
        self._need(2)
        self._put1(0x99)
        self._put1(0x01)       # CS.L = 1: 64-bit code
        return 0

    cdef int _psb_plus(self, uint64_t fup_ip, bint with_fup) except -1:
        cdef int i
        self._flush_tnt()
        self._need(18)
        for i in range(8):
            self._put1(0x02)
            self._put1(0x82)
        self.last_ip_known = False           # a PSB resets last-IP
        if self.timing:
            self._tsc()
        if with_fup:
            self._mode_exec()
            self._ip_packet(0x1D, fup_ip)
        self._need(2)
        self._put1(0x02)
        self._put1(0x23)
        self.stack_len = 0
        self.next_psb = self._offset() + self.psb_period if self.psb_period else (1 << 62)
        return 0

    cdef inline int _maybe_psb(self, uint64_t nxt) except -1:
        if self._offset() >= self.next_psb:
            self._psb_plus(nxt, True)
        return 0

    cdef int _enable(self, uint64_t ip) except -1:
        if self.timing:
            self._tsc()
        self._mode_exec()
        self._ip_packet(0x11, ip)
        return 0

    cdef int _disable(self, uint64_t known, bint has_known) except -1:
        """Tracing stops after the current instruction: FUP(known) + TIP.PGD(suppressed),
        or a bare TIP.PGD binding to the current branch (has_known False)."""
        self._flush_tnt()
        if has_known:
            self._ip_packet(0x1D, known)
        self._need(1)
        self._put1(0x01)                     # TIP.PGD, IP suppressed
        self.stack_len = 0
        return 0

    cdef inline void _push(self, uint64_t ret) noexcept:
        cdef int i
        if self.stack_len == RETURN_STACK_DEPTH:
            for i in range(RETURN_STACK_DEPTH - 1):
                self.stack[i] = self.stack[i + 1]
            self.stack_len -= 1
        self.stack[self.stack_len] = ret
        self.stack_len += 1

    # ---- edges ----------------------------------------------------------------------------
    cdef int _edge(self, int64_t b, uint64_t nxt) except -1:
        """The end of block b, whose successor starts at nxt."""
        cdef int cls = self.b_cls[b]
        cdef uint64_t fall = self.b_fall[b], target = self.b_target[b]
        if cls == C_OTHER:
            if nxt == fall:
                return 0
        elif cls == C_COND:
            if nxt == fall or nxt == target:
                self._bit(0 if nxt == fall else 1)
                if self._offset() >= self.next_psb:
                    self._psb_plus(nxt, True)
                return 0
        elif cls == C_JMP:
            if nxt == target:
                return 0
        elif cls == C_CALL:
            if nxt == target:
                if target != fall:
                    self._push(fall)
                    self.depth += 1
                return 0
        elif cls == C_RET:
            self.depth -= 1
            if self.stack_len and self.stack[self.stack_len - 1] == nxt:
                self.stack_len -= 1
                self._bit(1)
            else:
                self._flush_tnt()
                self._ip_packet(0x0D, nxt)
            self._maybe_psb(nxt)
            return 0
        elif cls == C_IJMP or cls == C_ICALL:
            self._flush_tnt()
            self._ip_packet(0x0D, nxt)
            if cls == C_ICALL:
                self._push(fall)
                self.depth += 1
            self._maybe_psb(nxt)
            return 0
        elif cls == C_FAR:
            self._disable(0, False)
            self._enable(nxt)
            return 0
        self._unexplained(b, nxt, True)
        return 0

    cdef int _unexplained(self, int64_t b, uint64_t nxt, bint resume) except -1:
        """Block b's last instruction went to nxt, which its code does not explain (or, with
        resume False, the window ends after it): FlowEncoder._unexplained's packets."""
        cdef int cls = self.b_cls[b]
        cdef uint64_t fall = self.b_fall[b], target = self.b_target[b], known = 0
        cdef bint has_known = True
        if cls == C_OTHER:
            known = fall
        elif cls == C_JMP:
            known = target
        elif cls == C_CALL:
            known = target
            if target != fall:
                self._push(fall)
        elif cls == C_COND:
            self._bit(0)
            known = fall
        elif cls == C_RET and self.stack_len:
            self._bit(1)
            self.stack_len -= 1
            known = self.stack[self.stack_len]
        else:
            has_known = False
        if resume:
            self.discontinuities += 1
        self._disable(known, has_known)
        if resume:
            self._enable(nxt)
        return 0

    cdef int _inner(self, int64_t b, uint32_t upto) except -1:
        """Inner events of block b at instruction indexes < upto."""
        cdef uint32_t k, at = self.b_inner_at[b], n = self.b_inner_n[b]
        for k in range(at, at + n):
            if self.e_index[k] >= upto:
                break
            if self.e_kind[k] == E_CALL:
                self._push(self.e_value[k])
                self.depth += 1
            else:
                self._disable(0, False)
                self._enable(self.e_value[k])
        return 0

    # ---- the stream -----------------------------------------------------------------------
    def feed(self, const uint32_t[::1] ids, uint64_t max_instructions=0, bint until_return=False):
        """Encode the blocks `ids` (in execution order, after those fed before).
        max_instructions (0: none): stop when the window has retired that many (the last
        block may be cut). until_return: stop after the return that leaves the function the
        first block ran in (depth below 0). Returns (consumed, reason, cut): how many ids were
        used, why it stopped (STOP_*), and for STOP_COUNT the instructions of the last block
        that ran (its full count when the limit fell at its end). The block ended by a stop is
        left open: finish() writes its end."""
        cdef Py_ssize_t i, n = ids.shape[0]
        cdef int64_t b
        cdef uint64_t nxt, ninsn, left
        if self.finished:
            raise ValueError("the stream is finished")
        for i in range(n):
            b = ids[i]
            if b >= self.b_cap or not self.b_defined[b]:
                return i, STOP_UNDEFINED, 0
            nxt = self.b_start[b]
            if self.prev_id >= 0:
                if until_return and self.depth == 0 and self.b_cls[self.prev_id] == C_RET:
                    # the previous block's ret leaves the function: it is the last
                    # instruction, and finish(end_ip=nxt) writes its packets
                    return i, STOP_RETURN, 0
                self._edge(self.prev_id, nxt)
            else:
                self._psb_plus(0, False)
                self._enable(nxt)
                self.started = True
            ninsn = self.b_ninsn[b]
            if max_instructions and self.instructions + ninsn >= max_instructions:
                left = max_instructions - self.instructions
                self._inner(b, <uint32_t>left)
                self.instructions += left
                self.blocks += 1
                self.prev_id = b
                return i + 1, STOP_COUNT, left
            if self.b_inner_n[b]:
                self._inner(b, 0xFFFFFFFF)
            self.instructions += ninsn
            self.blocks += 1
            self.prev_id = b
        return n, STOP_NONE, 0

    def finish(self, end_ip=None, cut_ip=None):
        """End the stream after the last block fed. end_ip: where the last block's last
        instruction went (the next block's start, when it is known); cut_ip: the window was
        cut inside the last block, after the instruction before cut_ip (FUP(cut_ip) +
        TIP.PGD). Returns the remaining bytes (as take())."""
        cdef int64_t b = self.prev_id
        cdef int cls
        cdef uint64_t nxt
        if self.finished:
            return b""
        self.finished = True
        if b < 0:
            return self.take()
        if cut_ip is not None:
            self._disable(<uint64_t>cut_ip, True)
            return self.take()
        cls = self.b_cls[b]
        if end_ip is None:
            self._unexplained(b, 0, False)
            return self.take()
        nxt = <uint64_t>end_ip
        if cls == C_IJMP or cls == C_ICALL or (cls == C_RET and not (
                self.stack_len and self.stack[self.stack_len - 1] == nxt)):
            self._flush_tnt()
            self._ip_packet(0x01, nxt)        # TIP.PGD(target): the branch, tracing off
        elif cls == C_FAR:
            self._disable(0, False)
        elif cls == C_COND and (nxt == self.b_fall[b] or nxt == self.b_target[b]):
            self._bit(0 if nxt == self.b_fall[b] else 1)
            self._disable(nxt, True)
        elif cls == C_RET:
            self.stack_len -= 1
            self._bit(1)
            self._disable(nxt, True)
        else:
            self._unexplained(b, 0, False)
        return self.take()


cdef void *_grow(void *ptr, Py_ssize_t size) except NULL:
    cdef void *p = realloc(ptr, size)
    if p == NULL:
        raise MemoryError()
    return p

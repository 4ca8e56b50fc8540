# cython: language_level=3
"""Compiled ptdump lines: `ptdebug dump`'s packet loop and columns in C, when no
time is tracked.

Layer: pt_decoder.tools (presentation, compiled). It drives a PacketDecoder
through its C API (next_c) and formats each packet straight into a TextSink's
buffer (text_out.pxd), as ptdump_format.describe/render and dump.Dumper do in
Python: the same columns, padding, truncation, --no-pad/--no-timing/--no-cyc
skips, --raw bytes (and the "truncating raw packet" line), --lastip and
--exec-mode tracking. Time tracking (--time/--tcal) stays in Python
(ptdump_time.py); dump.py chooses. On a decoding error it stops and returns
the error to dump.py, which prints it and resynchronises as ptdump does, so
that rule has one home.
"""
from libc.stdint cimport uint8_t, uint64_t
from libc.string cimport memcpy, memset, strlen

from pt_decoder._errors cimport PTE_EOS
from pt_decoder.packet cimport (PK_BBP, PK_BEP, PK_BIP, PK_CBR, PK_CFE, PK_CYC, PK_EVD, PK_EXSTOP, PK_FUP,
                                PK_INVALID, PK_MNT, PK_MODE_EXEC, PK_MODE_TSX, PK_MTC, PK_MWAIT, PK_OVF,
                                PK_PAD, PK_PIP, PK_PSB, PK_PSBEND, PK_PTW, PK_PWRE, PK_PWRX, PK_STOP,
                                PK_TIP, PK_TIP_PGD, PK_TIP_PGE, PK_TMA, PK_TNT8, PK_TNT64, PK_TRIG, PK_TSC,
                                PK_VMCS, PK__COUNT, PacketDecoder, PtPacket)
from pt_decoder.tools.text_out cimport TextSink

from pt_decoder.errors import ErrorCode, errstr

cdef enum:
    # ptdump's field sizes (ptdump_format.py), including the C buffers' NUL.
    OFFSET_WIDTH = 17
    RAW_WIDTH = 33
    OPCODE_WIDTH = 10
    PAYLOAD_WIDTH = 25
    TRACK_ID_WIDTH = 5
    TRACK_WIDTH = 17
    RAW_MAX_BYTES = 16
    LINE_MAX = 512          # longest line: offset, raw bytes, opcode, a 64-bit TNT, track
    FIELD = 96              # one column's text

# Options (bits of `opts`).
SHOW_OFFSET = 1
SHOW_RAW = 2
SHOW_LAST_IP = 4
SHOW_EXEC_MODE = 8
QUIET = 16
NO_PAD = 32
NO_TIMING = 64
NO_CYC = 128

cdef const char* HEX = b"0123456789abcdef"

cdef const char* _NAMES[PK__COUNT]
_NAMES[:] = [b"<invalid>", b"pad", b"psb", b"psbend", b"tnt.8", b"tnt.64", b"tip", b"tip.pge", b"tip.pgd",
             b"fup", b"mode.exec", b"mode.tsx", b"pip", b"tsc", b"tma", b"mtc", b"cyc", b"cbr", b"vmcs",
             b"ovf", b"mnt", b"stop", b"ptw", b"mwait", b"pwre", b"pwrx", b"exstop", b"bbp", b"bip",
             b"bep", b"cfe", b"evd", b"trig"]
cdef const char* _CFE_TYPES[16]
_CFE_TYPES[:] = [b"unknown", b"intr", b"iret", b"smi", b"rsm", b"sipi", b"init", b"vmentry", b"vmexit",
                 b"vmexit_intr", b"shutdown", b"unknown", b"uintr", b"uiret", b"swintr", b"syscall"]
cdef const char* _EVD_TYPES[3]
_EVD_TYPES[:] = [b"cr2", b"vmxq", b"vmxr"]


cdef struct Text:
    char s[FIELD]
    int n


cdef inline void _put(Text* t, const char* s) noexcept nogil:
    cdef int k = <int>strlen(s)
    if t.n + k > FIELD - 1:
        k = FIELD - 1 - t.n
    memcpy(t.s + t.n, s, k)
    t.n += k


cdef inline void _hex(Text* t, uint64_t v, int width) noexcept nogil:
    """`%0{width}x` (width 0: no leading zeros)."""
    cdef char tmp[16]
    cdef int n = 0
    while True:
        tmp[15 - n] = HEX[v & 0xF]
        n += 1
        v >>= 4
        if v == 0 and n >= width:
            break
    memcpy(t.s + t.n, &tmp[16 - n], n)
    t.n += n


cdef inline void _dec(Text* t, uint64_t v) noexcept nogil:
    cdef char tmp[20]
    cdef int n = 0
    while True:
        tmp[19 - n] = <char>(48 + v % 10)
        n += 1
        v //= 10
        if v == 0:
            break
    memcpy(t.s + t.n, &tmp[20 - n], n)
    t.n += n


cdef inline uint64_t _sext48(uint64_t v) noexcept nogil:
    return v | <uint64_t>0xFFFF000000000000 if v & (<uint64_t>1 << 47) else v & <uint64_t>0xFFFFFFFFFFFF


cdef struct LastIp:
    # ptdump's own last-IP (dump.LastIp): reset only when the dump resynchronises.
    uint64_t ip
    int have_ip
    int suppressed


cdef inline void _track(Text* tid, Text* tv, const char* ident, Text* value) noexcept nogil:
    """ptdump_format.Line.set_track: the id cut to 4 characters, the value to 16."""
    tid.n = 0
    _put(tid, ident)
    if tid.n > TRACK_ID_WIDTH - 1:
        tid.n = TRACK_ID_WIDTH - 1
    tv.n = value.n if value.n < TRACK_WIDTH - 1 else TRACK_WIDTH - 1
    memcpy(tv.s, value.s, tv.n)


cdef void _describe(const PtPacket* p, Text* pay, int* wide, Text* tid, Text* tv) noexcept nogil:
    """ptdump_format.describe: the payload column (and PIP/VMCS/CFE/EVD's track)."""
    cdef int k = p.kind, i, c
    cdef uint64_t raw = p.payload
    cdef Text v
    v.n = 0
    if k == PK_TIP or k == PK_TIP_PGE or k == PK_TIP_PGD or k == PK_FUP:
        if p.ipc == 0:
            _put(pay, "0: ????????????????")
        elif p.ipc == 1:
            _put(pay, "1: ????????????")
            _hex(pay, raw, 4)
        elif p.ipc == 2:
            _put(pay, "2: ????????")
            _hex(pay, raw, 8)
        elif p.ipc == 4:
            _put(pay, "4: ????")
            _hex(pay, raw, 12)
        elif p.ipc == 3:
            _put(pay, "3: ")
            _hex(pay, _sext48(raw), 16)
        else:
            _hex(pay, p.ipc, 0)
            _put(pay, ": ")
            _hex(pay, raw, 16)
    elif k == PK_TNT8 or k == PK_TNT64:
        c = p.count
        for i in range(c):
            pay.s[pay.n] = 33 if (raw >> (c - 1 - i)) & 1 else 46      # '!' taken, '.' not
            pay.n += 1
        wide[0] = 1
    elif k == PK_MODE_EXEC or k == PK_MODE_TSX:
        if raw & 2:
            _put(pay, "cs.d" if k == PK_MODE_EXEC else "abrt")
        if raw & 1:
            if k == PK_MODE_EXEC:
                if pay.n:
                    _put(pay, ", ")
                _put(pay, "cs.l")
            else:
                # mode.tsx lists intx first: rebuild in that order
                pay.n = 0
                _put(pay, "intx")
                if raw & 2:
                    _put(pay, ", abrt")
    elif k == PK_PIP:
        _hex(pay, raw, 0)
        if p.aux:
            _put(pay, ", nr")
        _hex(&v, raw, 16)
        _track(tid, tv, "cr3", &v)
    elif k == PK_VMCS:
        _hex(pay, raw, 0)
        _hex(&v, raw, 16)
        _track(tid, tv, "vmcs", &v)
    elif k == PK_TSC or k == PK_MTC or k == PK_CYC or k == PK_CBR or k == PK_MNT:
        _hex(pay, raw, 0)
    elif k == PK_TMA:
        _hex(pay, raw, 0)
        _put(pay, ", ")
        _hex(pay, p.aux, 0)
    elif k == PK_EXSTOP or k == PK_BEP:
        if p.flags & 1:
            _put(pay, "ip")
    elif k == PK_MWAIT:
        _hex(pay, raw, 8)
        _put(pay, ", ")
        _hex(pay, p.aux, 8)
    elif k == PK_PWRE:
        _put(pay, "c")
        _dec(pay, ((raw >> 4) + 1) & 0xF)
        _put(pay, ".")
        _dec(pay, ((raw & 0xF) + 1) & 0xF)
        if p.flags & 1:
            _put(pay, ", hw")
    elif k == PK_PWRX:
        # ptdump names exactly one of interrupt / store / autonomous, else "bad"
        c = (p.flags & 1) + ((p.flags >> 2) & 1) + ((p.flags >> 3) & 1)
        if c != 1:
            _put(pay, "bad")
        elif p.flags & 1:
            _put(pay, "int")
        elif p.flags & 4:
            _put(pay, " st")
        else:
            _put(pay, " hw")
        _put(pay, ": c")
        _dec(pay, (raw + 1) & 0xF)
        _put(pay, ", c")
        _dec(pay, (p.aux + 1) & 0xF)
    elif k == PK_PTW:
        _put(pay, "0: " if p.aux == 4 else "1: ")
        _hex(pay, raw, 0)
        if p.flags & 1:
            _put(pay, ", ip")
    elif k == PK_CFE:
        _dec(pay, raw)
        if raw == 1 or raw == 9 or raw == 12 or raw == 14:
            _put(pay, ": ")
            _dec(pay, p.aux)
        elif raw == 5:
            _put(pay, ": ")
            _hex(pay, p.aux, 0)
        if p.flags & 1:
            _put(pay, ", ip")
        if raw < 16:
            _put(&v, _CFE_TYPES[raw])
        else:
            _put(&v, "unknown")
        _track(tid, tv, "type", &v)
    elif k == PK_EVD:
        _dec(pay, p.aux)
        _put(pay, ": ")
        _hex(pay, raw, 0)
        if p.aux < 3:
            _put(&v, _EVD_TYPES[p.aux])
        else:
            _put(&v, "unknown")
        _track(tid, tv, "type", &v)
    elif k == PK_TRIG:
        _hex(pay, raw, 2)
        if p.flags & 1:
            _put(pay, ", ip")
        if p.flags & 2:
            _put(pay, ", mult")
        if p.flags & 4:
            _put(pay, ", icnt: ")
            _dec(pay, p.aux)
        wide[0] = 1
    elif k == PK_BBP:
        _hex(pay, raw, 0)
        if p.flags & 1:
            _put(pay, ", sz")
    elif k == PK_BIP:
        _hex(pay, p.aux, 0)
        _put(pay, ": ")
        _hex(pay, raw, 0)


cdef inline char* _pad(char* o, const char* s, int n, int width) noexcept nogil:
    memcpy(o, s, n)
    if n < width:
        memset(o + n, 32, width - n)
        n = width
    return o + n


cdef class PacketText:
    """ptdump's lines for one dump (options fixed at construction); run() formats
    packets from a synchronised PacketDecoder into a TextSink until the end or a
    decoding error. reset() forgets the last IP, as ptdump does after a resync."""
    cdef int opts
    cdef LastIp lip

    def __cinit__(self, int opts):
        self.opts = opts
        self.reset()

    def reset(self):
        self.lip.ip = 0
        self.lip.have_ip = 0
        self.lip.suppressed = 0

    def run(self, PacketDecoder dec, TextSink sink, uint64_t limit=<uint64_t>-1):
        """Dump from the decoder's offset. Returns None at the end of the buffer
        (a packet cut off by the end included, as ptdump), (offset, code) of a
        decoding error for the caller to report and resynchronise after, or
        True after `limit` packets (call again to go on)."""
        cdef PtPacket pkt
        cdef uint64_t offset
        cdef int err
        cdef Text pay, tid, tv, num
        cdef int wide, n, k
        cdef char* o
        cdef const uint8_t* raw
        cdef int opts = self.opts
        cdef int no_ip_diag
        cdef uint64_t count = 0
        while True:
            if count == limit:
                return True
            count += 1
            offset = dec._pos
            err = dec.next_c(&pkt)
            if err:
                if err == -PTE_EOS:
                    return None
                return offset, -err
            k = pkt.kind
            pay.n = tid.n = tv.n = 0
            wide = 0
            no_ip_diag = 0
            _describe(&pkt, &pay, &wide, &tid, &tv)
            if (opts & SHOW_LAST_IP) and (k == PK_TIP or k == PK_TIP_PGE or k == PK_TIP_PGD or k == PK_FUP):
                num.n = 0
                if pkt.ipc == 0:
                    self.lip.suppressed = 1
                else:
                    if pkt.ipc == 3:
                        self.lip.ip = _sext48(pkt.payload)
                    elif pkt.ipc == 6:
                        self.lip.ip = pkt.payload
                    elif pkt.ipc == 1:
                        self.lip.ip = (self.lip.ip & ~<uint64_t>0xFFFF) | pkt.payload
                    elif pkt.ipc == 2:
                        self.lip.ip = (self.lip.ip & ~<uint64_t>0xFFFFFFFF) | pkt.payload
                    else:
                        self.lip.ip = (self.lip.ip & ~<uint64_t>0xFFFFFFFFFFFF) | pkt.payload
                    self.lip.have_ip = 1
                    self.lip.suppressed = 0
                if not self.lip.have_ip:
                    _put(&num, "<unavailable>")
                    no_ip_diag = 1
                elif self.lip.suppressed:
                    _put(&num, "<suppressed>")
                else:
                    _hex(&num, self.lip.ip, 16)
                _track(&tid, &tv, "ip", &num)
            elif (opts & SHOW_EXEC_MODE) and k == PK_MODE_EXEC:
                num.n = 0
                if pkt.payload & 1:
                    _put(&num, "unknown" if pkt.payload & 2 else "64-bit")
                else:
                    _put(&num, "32-bit" if pkt.payload & 2 else "16-bit")
                _track(&tid, &tv, "em", &num)
            # diagnostics print before the packet's line, and even with --quiet
            if (opts & SHOW_RAW) and pkt.size > RAW_MAX_BYTES:
                sink.write("[%x: truncating raw packet]\n" % pkt.offset)
            if no_ip_diag:
                sink.write("[%x: error tracking last-ip: %s]\n" % (pkt.offset, errstr(ErrorCode.NOIP)))
            if opts & QUIET:
                continue
            if (k == PK_PAD and opts & NO_PAD) \
                    or ((k == PK_TSC or k == PK_CBR or k == PK_TMA or k == PK_MTC) and opts & NO_TIMING) \
                    or (k == PK_CYC and opts & (NO_TIMING | NO_CYC)):
                continue
            # ptdump_format.render
            sink._room(LINE_MAX)
            o = sink.buf + sink.used
            if not wide and pay.n > PAYLOAD_WIDTH - 1:
                pay.n = PAYLOAD_WIDTH - 1
            if opts & SHOW_OFFSET:
                num.n = 0
                _hex(&num, pkt.offset, 16)
                o = _pad(o, num.s, num.n, OFFSET_WIDTH)
                o[0] = 32
                o += 1
            if opts & SHOW_RAW:
                num.n = 0
                raw = dec._buf + pkt.offset
                for n in range(pkt.size if pkt.size < RAW_MAX_BYTES else RAW_MAX_BYTES):
                    num.s[num.n] = HEX[raw[n] >> 4]
                    num.s[num.n + 1] = HEX[raw[n] & 0xF]
                    num.n += 2
                o = _pad(o, num.s, num.n, RAW_WIDTH)
                o[0] = 32
                o += 1
            o = _pad(o, _NAMES[k], <int>strlen(_NAMES[k]), OPCODE_WIDTH if pay.n else 0)
            if tid.n:
                o[0] = 32
                o = _pad(o + 1, pay.s, pay.n, PAYLOAD_WIDTH)
                o[0] = 32
                o = _pad(o + 1, tid.s, tid.n, TRACK_ID_WIDTH)
                memcpy(o, tv.s, tv.n)
                o += tv.n
            elif pay.n:
                o[0] = 32
                memcpy(o + 1, pay.s, pay.n)
                o += pay.n + 1
            o[0] = 10
            sink.used = o + 1 - sink.buf

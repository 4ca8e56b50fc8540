# cython: language_level=3
"""Compiled writers of the tools' text output: a large output buffer, and the
per-instruction lines of `ptdebug decode` (ptxed, ips, jsonl) formatted in C.

Layer: pt_decoder.tools (presentation, compiled). It formats the columns of a
FlowResult (ip, tsc, cycles, flags) straight into a buffer of about 1 MiB and
hands the buffer to the output stream when it is full, so a 5 M-instruction
flow costs a few dozen writes instead of 5 M Python strings. Items (events,
errors, end of trace) are rare; their text comes from the Python formatter
(ptxed_format.py) through a callback, so both paths keep one definition of
each line. Knows nothing of decoding.

The text equals ptxed_format's line functions byte for byte (tested):
  ips    `%x` of the IP
  ptxed  `%016x` of the IP, `? ` before it for speculative instructions,
         with insn_time `%016x  ` of the TSC before that
  jsonl  {"ip": N, "tsc": N, "cycles": N, "flags": N} (json.dumps's spacing)
"""
from libc.stdint cimport uint8_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy


cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil

cdef enum:
    FMT_IPS = 0
    FMT_PTXED = 1
    FMT_JSONL = 2
    LINE_MAX = 128            # longest instruction line (jsonl: 4 x 20 digits + 40)
    SPECULATIVE = 0x20        # insn_flags.SPECULATIVE

FORMAT_CODES = {"ips": FMT_IPS, "ptxed": FMT_PTXED, "jsonl": FMT_JSONL}

cdef char HEX_DIGITS[17]
HEX_DIGITS[:] = b"0123456789abcdef\0"
cdef char HEX_PAIRS[513]
HEX_PAIRS[:] = (b"".join(b"%02x" % i for i in range(256)) + b"\0")
cdef char DEC_PAIRS[201]
DEC_PAIRS[:] = (b"".join(b"%02d" % i for i in range(100)) + b"\0")


cdef inline char* _hex16(char* p, uint64_t v) noexcept nogil:
    cdef int k
    for k in range(14, -2, -2):
        memcpy(p + k, &HEX_PAIRS[(v & 0xFF) * 2], 2)
        v >>= 8
    return p + 16


cdef inline char* _hex(char* p, uint64_t v) noexcept nogil:
    """`%x`: no leading zeros ("0" for zero); two digits a step from HEX_PAIRS."""
    cdef int n = 1 if v == 0 else (67 - __builtin_clzll(v)) >> 2
    cdef int k = n
    while k >= 2:
        k -= 2
        memcpy(p + k, &HEX_PAIRS[(v & 0xFF) * 2], 2)
        v >>= 8
    if k:
        p[0] = HEX_DIGITS[v & 0xF]
    return p + n


cdef inline char* _dec(char* p, uint64_t v) noexcept nogil:
    cdef char tmp[20]
    cdef int n = 20, d
    while v >= 100:
        d = <int>(v % 100) * 2
        v //= 100
        n -= 2
        tmp[n] = DEC_PAIRS[d]
        tmp[n + 1] = DEC_PAIRS[d + 1]
    if v >= 10:
        d = <int>v * 2
        n -= 2
        tmp[n] = DEC_PAIRS[d]
        tmp[n + 1] = DEC_PAIRS[d + 1]
    else:
        n -= 1
        tmp[n] = <char>(48 + v)
    memcpy(p, &tmp[n], 20 - n)
    return p + (20 - n)


cdef inline char* _lit(char* p, const char* s, int n) noexcept nogil:
    memcpy(p, s, n)
    return p + n


cdef class TextSink:
    """An output buffer in front of a stream: `out` is a binary stream (anything
    with write(bytes)) or a text one (write(str); sys.stdout is written through
    its .buffer after a flush, so text already written keeps its place).

    write(str|bytes), flush(); the buffer is handed over when it holds `size`
    bytes, and by flush()."""
    # attributes and the C-level methods other compiled writers use: text_out.pxd

    def __cinit__(self, out, size_t size=1 << 20):
        self.size = size if size >= 4 * LINE_MAX else 4 * LINE_MAX
        self.buf = <char*>malloc(self.size)
        if self.buf == NULL:
            raise MemoryError()
        self.used = 0
        self.written = 0
        self._out = out
        raw = getattr(out, "buffer", None)
        if raw is not None and hasattr(raw, "write"):
            out.flush()               # text the stream holds goes first
            self._write = raw.write
            self._text = 0
        else:
            self._write = out.write
            self._text = not _is_binary(out)

    def __dealloc__(self):
        free(self.buf)

    cdef int _hand_over(self) except -1:
        if self.used:
            chunk = (<char*>self.buf)[:self.used]
            self.used = 0
            self._write(chunk.decode("latin-1") if self._text else chunk)
            self.written += len(chunk)
        return 0

    cdef int _room(self, size_t n) except -1:
        if self.used + n > self.size:
            self._hand_over()
        return 0

    def write(self, text):
        """Append a str (ASCII/latin-1) or bytes."""
        cdef bytes data = text.encode("latin-1") if isinstance(text, str) else bytes(text)
        cdef size_t n = len(data)
        if n > self.size // 2:
            self._hand_over()
            self._write(data.decode("latin-1") if self._text else data)
            self.written += n
            return
        self._room(n)
        memcpy(self.buf + self.used, <const char*>data, n)
        self.used += n

    def flush(self):
        """Hand the buffer to the stream and flush the stream."""
        self._hand_over()
        flush = getattr(self._out, "flush", None)
        if flush is not None:
            flush()

    cdef int _insns(self, int fmt, int insn_time, const uint64_t[:] ip, const uint64_t[:] tsc,
                    const uint64_t[:] cyc, const unsigned char[:] flags, Py_ssize_t lo, Py_ssize_t hi) except -1:
        """The lines of instructions lo..hi-1, formatted in C without the GIL."""
        cdef Py_ssize_t i = lo, stop
        cdef char* p
        while i < hi:
            self._room(LINE_MAX)
            # as many lines as surely fit in the free space, then hand over
            stop = i + <Py_ssize_t>((self.size - self.used) // LINE_MAX)
            if stop > hi:
                stop = hi
            with nogil:
                p = self.buf + self.used
                if fmt == FMT_IPS:
                    while i < stop:
                        p = _hex(p, ip[i])
                        p[0] = 10
                        p += 1
                        i += 1
                elif fmt == FMT_PTXED:
                    while i < stop:
                        if insn_time:
                            p = _hex16(p, tsc[i])
                            p = _lit(p, "  ", 2)
                        if flags[i] & SPECULATIVE:
                            p = _lit(p, "? ", 2)
                        p = _hex16(p, ip[i])
                        p[0] = 10
                        p += 1
                        i += 1
                else:
                    while i < stop:
                        p = _lit(p, '{"ip": ', 7)
                        p = _dec(p, ip[i])
                        p = _lit(p, ', "tsc": ', 9)
                        p = _dec(p, tsc[i])
                        p = _lit(p, ', "cycles": ', 12)
                        p = _dec(p, cyc[i])
                        p = _lit(p, ', "flags": ', 11)
                        p = _dec(p, flags[i])
                        p = _lit(p, "}\n", 2)
                        i += 1
                self.used = p - self.buf
        return 0

    def write_flow(self, flow, str fmt, item_text, bint insn_time=False):
        """Write a FlowResult's lines in format `fmt` ("ips", "ptxed", "jsonl"):
        each item's line (item_text(item) -> str, or None to print nothing)
        before the instruction it precedes, the rest after the last one.
        `insn_time` (ptxed) puts each instruction's TSC before it."""
        cdef int code = FORMAT_CODES[fmt]
        cdef Py_ssize_t n = len(flow.ip), pos = 0, at
        cdef const uint64_t[:] ip = flow.ip
        cdef const uint64_t[:] tsc = flow.tsc
        cdef const uint64_t[:] cyc = flow.cycles
        cdef const uint8_t[:] flags = flow.flags
        if n == 0:
            ip = tsc = cyc = _EMPTY_Q
            flags = _EMPTY_B
        for item in flow.items:
            at = item[1]
            if at > n:
                at = n
            if at > pos:
                self._insns(code, insn_time, ip, tsc, cyc, flags, pos, at)
                pos = at
            line = item_text(item)
            if line is not None:
                self.write(line + "\n")
        if pos < n:
            self._insns(code, insn_time, ip, tsc, cyc, flags, pos, n)


cdef object _is_binary(out):
    import io
    if isinstance(out, (io.RawIOBase, io.BufferedIOBase)):
        return True
    if isinstance(out, io.TextIOBase):
        return False
    mode = getattr(out, "mode", "")
    return isinstance(mode, str) and "b" in mode


from array import array as _array
_EMPTY_Q = _array("Q", [0])
_EMPTY_B = _array("B", [0])

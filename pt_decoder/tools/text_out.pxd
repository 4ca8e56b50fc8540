# The output buffer of the tools' compiled writers (implementation: text_out.pyx).
#
# Other compiled writers (ptdump_text.pyx) format straight into `buf`: they call
# _room(n) to be sure of n free bytes (handing the full buffer to the stream
# first when needed), write at buf + used and advance `used`.
from libc.stdint cimport uint64_t


cdef class TextSink:
    cdef char* buf
    cdef size_t used, size
    cdef object _write
    cdef int _text
    cdef object _out
    cdef public uint64_t written      # bytes handed to the stream so far

    cdef int _hand_over(self) except -1
    cdef int _room(self, size_t n) except -1
    cdef int _insns(self, int fmt, int insn_time, const uint64_t[:] ip, const uint64_t[:] tsc,
                    const uint64_t[:] cyc, const unsigned char[:] flags, Py_ssize_t lo, Py_ssize_t hi) except -1

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Packet layer: Intel PT bytes -> packets (every packet of the SDM's PT chapter).

Layer: pt_decoder, the lowest decoding layer (docs/decoding.md). It knows the
packet format (Intel SDM Vol. 3C, chapter "Intel Processor Trace", section
"Trace Packets and Data Types") and last-IP decompression, and nothing of
events, instructions, images or time. Higher layers (event.pyx, insn.pyx)
cimport `PacketDecoder` and call `next_c()` in their own loops (packet.pxd is
the contract). Output formatting lives in pt_decoder/tools, never here.

The decoder borrows its buffer through the buffer protocol (bytes, bytearray,
memoryview, mmap, a perf AUX ring memoryview) and never copies it. Every
read is bounds-checked against the buffer's length before it happens: a
packet that does not fit is reported as -PTE_EOS with its offset. Errors are
return values (-PTE_*) in C; `PtError` is raised only by the Python methods.

Compatibility with libipt 2.0.5 (the reference oracle): same packet sizes,
same error codes at the same offsets, same PSB search (sync forward finds a
PSB that began up to 15 bytes before the current offset, so a PSB partly
swallowed by a corrupt packet is found again). Packets newer than libipt
2.0.5 (BBP/BIP/BEP, CFE, EVD, TRIG) are decoded unless `sdm_packets=False`;
0xD9 (TRIG) was libipt 2.0.5's deliberate "bad opcode", so that switch is
what makes ptdump 2.0.5 outputs reproducible.
"""
cimport cython
from cpython.bytearray cimport PyByteArray_Resize
from libc.stdint cimport int64_t, uint8_t, uint64_t

from pt_decoder._errors cimport PTE_BAD_OPC, PTE_BAD_PACKET, PTE_EOS, PTE_NOSYNC
from pt_decoder._opcodes cimport *

from pt_decoder.packet_kinds import (  # re-exported: the packet layer's names
    RECORD_DTYPE, RECORD_FIELDS, RECORD_FORMAT, Kind, fields_of,
)

from pt_decoder.errors import ErrorCode, PtError


_KINDS = tuple(Kind)   # Kind by number, without an enum lookup per access
# packet_kinds.py spells out packet.pxd's PacketKind numbers for Python.
assert [k.value for k in _KINDS] == list(range(PK__COUNT))
assert tuple(_KINDS) == (
    PK_INVALID, PK_PAD, PK_PSB, PK_PSBEND, PK_TNT8, PK_TNT64, PK_TIP, PK_TIP_PGE, PK_TIP_PGD,
    PK_FUP, PK_MODE_EXEC, PK_MODE_TSX, PK_PIP, PK_TSC, PK_TMA, PK_MTC, PK_CYC, PK_CBR, PK_VMCS,
    PK_OVF, PK_MNT, PK_STOP, PK_PTW, PK_MWAIT, PK_PWRE, PK_PWRX, PK_EXSTOP, PK_BBP, PK_BIP,
    PK_BEP, PK_CFE, PK_EVD, PK_TRIG)


# ---------------------------------------------------------------------------
# First-byte dispatch table (one lookup per packet instead of a mask chain).

cdef enum:
    D_BAD = 0
    D_PAD = 1
    D_TNT8 = 2
    D_EXT = 3
    D_CYC = 4
    D_TIP = 5
    D_TIP_PGE = 6
    D_TIP_PGD = 7
    D_FUP = 8
    D_MODE = 9
    D_TSC = 10
    D_MTC = 11
    D_TRIG = 12

cdef uint8_t _DISPATCH[256]
# IP payload size per IPBytes value; -1 = reserved (SDM: 101b, 111b).
cdef int _IP_SIZE[8]


cdef void _init_tables() noexcept:
    cdef int b
    for b in range(256):
        if b == OPC_PAD:
            _DISPATCH[b] = D_PAD
        elif b == OPC_EXT:
            _DISPATCH[b] = D_EXT
        elif (b & OPM_TNT8) == 0:
            _DISPATCH[b] = D_TNT8
        elif (b & OPM_CYC) == OPC_CYC:
            _DISPATCH[b] = D_CYC
        elif (b & OPM_IP) == OPC_TIP:
            _DISPATCH[b] = D_TIP
        elif (b & OPM_IP) == OPC_TIP_PGE:
            _DISPATCH[b] = D_TIP_PGE
        elif (b & OPM_IP) == OPC_TIP_PGD:
            _DISPATCH[b] = D_TIP_PGD
        elif (b & OPM_IP) == OPC_FUP:
            _DISPATCH[b] = D_FUP
        elif b == OPC_MODE:
            _DISPATCH[b] = D_MODE
        elif b == OPC_TSC:
            _DISPATCH[b] = D_TSC
        elif b == OPC_MTC:
            _DISPATCH[b] = D_MTC
        elif b == OPC_TRIG:
            _DISPATCH[b] = D_TRIG
        else:
            _DISPATCH[b] = D_BAD
    _IP_SIZE[0] = 0
    _IP_SIZE[1] = 2
    _IP_SIZE[2] = 4
    _IP_SIZE[3] = 6
    _IP_SIZE[4] = 6
    _IP_SIZE[5] = -1
    _IP_SIZE[6] = 8
    _IP_SIZE[7] = -1


_init_tables()


# ---------------------------------------------------------------------------
# Little-endian reads; the caller has checked that the bytes exist. Written
# as shifts so they are right on any host (GCC folds them into one load).

cdef inline uint64_t _le(const uint8_t* p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v |= (<uint64_t>p[i]) << (8 * i)
    return v


cdef inline uint64_t _le16(const uint8_t* p) noexcept nogil:
    return (<uint64_t>p[0]) | ((<uint64_t>p[1]) << 8)


cdef inline uint64_t _le32(const uint8_t* p) noexcept nogil:
    return ((<uint64_t>p[0]) | ((<uint64_t>p[1]) << 8)
            | ((<uint64_t>p[2]) << 16) | ((<uint64_t>p[3]) << 24))


cdef inline uint64_t _le48(const uint8_t* p) noexcept nogil:
    return _le32(p) | (_le16(p + 4) << 32)


cdef inline uint64_t _le64(const uint8_t* p) noexcept nogil:
    return _le32(p) | (_le32(p + 4) << 32)


cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


cdef inline int _tnt_bits(uint64_t payload) noexcept nogil:
    # Index of the stop bit (the highest set bit) = number of TNT bits.
    if payload == 0:
        return 0
    return 63 - __builtin_clzll(payload)


cdef inline int _is_psb(const uint8_t* p) noexcept nogil:
    cdef int i
    for i in range(0, PS_PSB, 2):
        if p[i] != PSB_HI or p[i + 1] != PSB_LO:
            return 0
    return 1


# ---------------------------------------------------------------------------
# The decoder proper. One function does one packet; it reads the decoder's
# state through `d` and writes only `*pkt` (and, on success, d._pos and the
# last-IP / block-context state).

cdef inline int _fail(PtPacket* pkt, uint64_t pos, int err) noexcept nogil:
    pkt.offset = pos
    pkt.kind = PK_INVALID
    pkt.size = 0
    return -err


cdef inline int _ip_packet(PacketDecoder d, PtPacket* pkt, const uint8_t* p,
                           uint64_t left, uint8_t kind) noexcept nogil:
    cdef int ipc = p[0] >> OPM_IPC_SHR
    cdef int n = _IP_SIZE[ipc]
    cdef uint64_t raw = 0
    cdef uint64_t ip
    if n < 0:
        return _fail(pkt, d._pos, PTE_BAD_PACKET)
    if left < <uint64_t>(n + 1):
        return _fail(pkt, d._pos, PTE_EOS)
    pkt.kind = kind
    pkt.size = <uint8_t>(n + 1)
    pkt.ipc = <uint8_t>ipc
    # Last-IP decompression (SDM "IP Compression" table): the packet
    # carries the low bytes; the rest come from the last IP. A suppressed
    # IP leaves the last IP alone.
    if ipc == IPC_SUPPRESSED:
        pkt.ip = 0
        pkt.ip_valid = 0
        return 0
    if ipc == IPC_UPDATE_16:
        raw = _le16(p + 1)
        ip = (d._last_ip & ~(<uint64_t>0xFFFF)) | raw
    elif ipc == IPC_UPDATE_32:
        raw = _le32(p + 1)
        ip = (d._last_ip & ~(<uint64_t>0xFFFFFFFF)) | raw
    elif ipc == IPC_SEXT_48:
        raw = _le48(p + 1)
        ip = raw
        if raw & (<uint64_t>1 << 47):
            ip |= <uint64_t>0xFFFF000000000000
        d._last_ip_valid = 1
    elif ipc == IPC_UPDATE_48:
        raw = _le48(p + 1)
        ip = (d._last_ip & <uint64_t>0xFFFF000000000000) | raw
    else:  # IPC_FULL
        raw = _le64(p + 1)
        ip = raw
        d._last_ip_valid = 1
    d._last_ip = ip
    pkt.payload = raw
    pkt.ip = ip
    pkt.ip_valid = <uint8_t>d._last_ip_valid
    return 0


# Two-byte opcodes (0x02, ext): the kind and full size per ext byte; 0 =
# unknown. PTW (masked) and MNT (a third opcode byte) are handled apart.
cdef uint8_t _EXT_KIND[256]
cdef uint8_t _EXT_SIZE[256]
# Packets that end a PEBS-via-PT block (perf's intel_pt_upd_pkt_ctx).
cdef uint8_t _ENDS_BLOCK[PK__COUNT]


cdef void _init_ext_tables() noexcept:
    cdef int i
    for i in range(256):
        _EXT_KIND[i] = PK_INVALID
        _EXT_SIZE[i] = 0
    for i, kind, size in ((EXT_PSB, PK_PSB, PS_PSB), (EXT_TNT64, PK_TNT64, PS_TNT64),
                          (EXT_PIP, PK_PIP, PS_PIP), (EXT_OVF, PK_OVF, PS_OVF),
                          (EXT_PSBEND, PK_PSBEND, PS_PSBEND), (EXT_CBR, PK_CBR, PS_CBR),
                          (EXT_TMA, PK_TMA, PS_TMA), (EXT_STOP, PK_STOP, PS_STOP),
                          (EXT_VMCS, PK_VMCS, PS_VMCS), (EXT_EXT2, PK_MNT, 3),
                          (EXT_EXSTOP, PK_EXSTOP, PS_EXSTOP), (EXT_EXSTOP_IP, PK_EXSTOP, PS_EXSTOP),
                          (EXT_MWAIT, PK_MWAIT, PS_MWAIT), (EXT_PWRE, PK_PWRE, PS_PWRE),
                          (EXT_PWRX, PK_PWRX, PS_PWRX), (EXT_BBP, PK_BBP, PS_BBP),
                          (EXT_BEP, PK_BEP, PS_BEP), (EXT_BEP_IP, PK_BEP, PS_BEP),
                          (EXT_CFE, PK_CFE, PS_CFE), (EXT_EVD, PK_EVD, PS_EVD)):
        _EXT_KIND[i] = kind
        _EXT_SIZE[i] = size
    for i in range(PK__COUNT):
        _ENDS_BLOCK[i] = 0
    for i in (PK_TNT8, PK_TNT64, PK_TIP, PK_TIP_PGE, PK_TIP_PGD, PK_MODE_EXEC, PK_MODE_TSX,
              PK_PIP, PK_OVF, PK_VMCS, PK_STOP, PK_PSB, PK_PSBEND, PK_PTW, PK_MWAIT, PK_BEP):
        _ENDS_BLOCK[i] = 1


_init_ext_tables()


cdef int _ext_packet(PacketDecoder d, PtPacket* pkt, const uint8_t* p,
                     uint64_t left) noexcept nogil:
    cdef uint8_t ext, kind
    cdef uint64_t v
    cdef int n
    if left < 2:
        return _fail(pkt, d._pos, PTE_EOS)
    ext = p[1]
    kind = _EXT_KIND[ext]
    n = _EXT_SIZE[ext]
    if kind == PK_INVALID:
        if (ext & EXTM_PTW) != EXT_PTW:
            return _fail(pkt, d._pos, PTE_BAD_OPC)
        # PTWRITE: PayloadBytes 00b = 4 bytes, 01b = 8 bytes, others reserved.
        n = (ext >> EXT_PTW_PB_SHR) & 3
        if n > 1:
            return _fail(pkt, d._pos, PTE_BAD_PACKET)
        kind = PK_PTW
        n = PS_PTW32 if n == 0 else PS_PTW64
        pkt.aux = <uint64_t>(n - 2)
        pkt.flags = 1 if ext & EXT_PTW_IP else 0
    elif kind >= PK_BBP and not d._sdm_packets:
        return _fail(pkt, d._pos, PTE_BAD_OPC)
    if left < <uint64_t>n:
        return _fail(pkt, d._pos, PTE_EOS)
    if kind == PK_MNT:
        if p[2] != EXT2_MNT:
            return _fail(pkt, d._pos, PTE_BAD_OPC)
        n = PS_MNT
        if left < <uint64_t>n:
            return _fail(pkt, d._pos, PTE_EOS)
        pkt.payload = _le64(p + 3)
    elif kind == PK_PSB:
        if not _is_psb(p):
            return _fail(pkt, d._pos, PTE_BAD_PACKET)
        # PSB clears the last IP to zero (SDM "IP Compression").
        d._last_ip = 0
        d._last_ip_valid = 1
    elif kind == PK_TNT64:
        v = _le48(p + 2)
        pkt.count = <uint8_t>_tnt_bits(v)
        if pkt.count == 0:
            return _fail(pkt, d._pos, PTE_BAD_PACKET)
        pkt.payload = v & ~((<uint64_t>1) << pkt.count)
    elif kind == PK_TMA:
        v = _le16(p + 5)
        if (v & ~(<uint64_t>PL_TMA_FC_MASK)) or p[4]:
            if not d._errata_skz84:
                return _fail(pkt, d._pos, PTE_BAD_PACKET)
            # SKZ84 (VMX TSC scaling corrupts TMA): an invalid packet of TMA
            # size + 1, and decoding goes on, as libipt does.
            kind = PK_INVALID
            n = PS_TMA + 1 if left >= PS_TMA + 1 else PS_TMA
        else:
            pkt.payload = _le16(p + 2)
            pkt.aux = v
    elif kind == PK_PTW:
        pkt.payload = _le32(p + 2) if n == PS_PTW32 else _le64(p + 2)
    elif kind == PK_CBR:
        pkt.payload = p[2]
    elif kind == PK_PIP:
        v = _le48(p + 2)
        pkt.aux = v & PL_PIP_NR
        pkt.payload = (v >> PL_PIP_SHR) << PL_PIP_SHL
    elif kind == PK_VMCS:
        pkt.payload = _le(p + 2, 5) << PL_VMCS_SHL
    elif kind == PK_EXSTOP:
        pkt.flags = 1 if ext & PL_EXSTOP_IP else 0
    elif kind == PK_MWAIT:
        pkt.payload = _le32(p + 2)
        pkt.aux = _le32(p + 6)
    elif kind == PK_PWRE:
        v = _le16(p + 2)
        pkt.payload = (((v >> 12) & 0xF) << 4) | ((v >> 8) & 0xF)
        pkt.flags = 1 if v & PL_PWRE_HW else 0
    elif kind == PK_PWRX:
        v = _le(p + 2, 5)
        pkt.payload = (v >> 4) & 0xF
        pkt.aux = v & 0xF
        pkt.flags = <uint8_t>((v >> PL_PWRX_WR_SHR) & 0xF)
    elif kind == PK_BBP:
        pkt.payload = p[2] & PL_BBP_TYPE
        pkt.flags = 1 if p[2] & PL_BBP_SZ else 0
    elif kind == PK_BEP:
        pkt.flags = 1 if ext == EXT_BEP_IP else 0
    elif kind == PK_CFE:
        pkt.payload = p[2] & PL_CFE_TYPE
        pkt.aux = p[3]
        pkt.flags = 1 if p[2] & PL_CFE_IP else 0
    elif kind == PK_EVD:
        pkt.aux = p[2] & PL_EVD_TYPE
        pkt.payload = _le64(p + 3)
    pkt.kind = kind
    pkt.size = <uint8_t>n
    if kind == PK_BBP:
        d._block_ctx = 4 if pkt.flags else 8
    elif _ENDS_BLOCK[kind]:
        d._block_ctx = 0
    return 0


cdef inline int _decode_one(PacketDecoder d, PtPacket* pkt) noexcept nogil:
    cdef uint64_t pos = d._pos
    cdef uint64_t left
    cdef const uint8_t* p
    cdef uint8_t b
    cdef uint64_t v
    cdef int n, shl, err

    pkt.offset = pos
    pkt.payload = 0
    pkt.aux = 0
    pkt.ip = 0
    pkt.ipc = 0
    pkt.count = 0
    pkt.flags = 0
    pkt.ip_valid = 0
    if not d._synced:
        pkt.kind = PK_INVALID
        pkt.size = 0
        return -PTE_NOSYNC
    if pos >= d._size:
        pkt.kind = PK_INVALID
        pkt.size = 0
        return -PTE_EOS
    p = d._buf + pos
    left = d._size - pos
    b = p[0]

    # Inside a PEBS-via-PT block, xxxxx100b is a Block Item (SDM "BIP").
    if d._block_ctx and (b & OPM_BIP) == OPC_BIP:
        n = d._block_ctx
        if left < <uint64_t>(1 + n):
            return _fail(pkt, pos, PTE_EOS)
        pkt.kind = PK_BIP
        pkt.size = <uint8_t>(1 + n)
        pkt.aux = b >> 3
        pkt.payload = _le32(p + 1) if n == 4 else _le64(p + 1)
        pkt.flags = 1 if n == 4 else 0
        d._pos = pos + pkt.size
        return 0

    err = 0
    n = _DISPATCH[b]
    if n == D_TNT8:
        pkt.kind = PK_TNT8
        pkt.size = PS_TNT8
        v = b >> 1
        n = _tnt_bits(v)
        pkt.count = <uint8_t>n
        pkt.payload = v & ~((<uint64_t>1) << n)
        d._block_ctx = 0
    elif n == D_PAD:
        pkt.kind = PK_PAD
        pkt.size = PS_PAD
    elif n == D_CYC:
        # CYC: 5 count bits in byte 0, then 7 per byte while bit 0 is set.
        v = b >> OPM_CYC_SHR
        n = 1
        shl = 8 - OPM_CYC_SHR
        if b & OPM_CYC_EXT:
            while True:
                if <uint64_t>n >= left:
                    return _fail(pkt, pos, PTE_EOS)
                b = p[n]
                n += 1
                v |= (<uint64_t>(b >> OPM_CYCX_SHR)) << shl
                shl += 8 - OPM_CYCX_SHR
                if shl > 64:
                    return _fail(pkt, pos, PTE_BAD_PACKET)
                if not (b & OPM_CYCX_EXT):
                    break
        pkt.kind = PK_CYC
        pkt.size = <uint8_t>n
        pkt.payload = v
    elif n == D_TIP:
        err = _ip_packet(d, pkt, p, left, PK_TIP)
        d._block_ctx = 0
    elif n == D_FUP:
        err = _ip_packet(d, pkt, p, left, PK_FUP)
    elif n == D_EXT:
        err = _ext_packet(d, pkt, p, left)
    elif n == D_MTC:
        if left < PS_MTC:
            return _fail(pkt, pos, PTE_EOS)
        pkt.kind = PK_MTC
        pkt.size = PS_MTC
        pkt.payload = p[1]
    elif n == D_TSC:
        if left < PS_TSC:
            return _fail(pkt, pos, PTE_EOS)
        pkt.kind = PK_TSC
        pkt.size = PS_TSC
        pkt.payload = _le(p + 1, 7)
    elif n == D_TIP_PGE:
        err = _ip_packet(d, pkt, p, left, PK_TIP_PGE)
        d._block_ctx = 0
    elif n == D_TIP_PGD:
        err = _ip_packet(d, pkt, p, left, PK_TIP_PGD)
        d._block_ctx = 0
    elif n == D_MODE:
        if left < PS_MODE:
            return _fail(pkt, pos, PTE_EOS)
        b = p[1]
        if (b & PL_MODE_LEAF) == PL_MODE_EXEC:
            pkt.kind = PK_MODE_EXEC
        elif (b & PL_MODE_LEAF) == PL_MODE_TSX:
            pkt.kind = PK_MODE_TSX
        else:
            return _fail(pkt, pos, PTE_BAD_PACKET)
        pkt.size = PS_MODE
        pkt.payload = b & PL_MODE_BITS
        d._block_ctx = 0
    elif n == D_TRIG and d._sdm_packets:
        if left < PS_TRIG:
            return _fail(pkt, pos, PTE_EOS)
        b = p[1]
        n = PS_TRIG
        if b & PL_TRIG_ICNTV:
            n = PS_TRIG + 2
            if left < <uint64_t>n:
                return _fail(pkt, pos, PTE_EOS)
            pkt.aux = _le16(p + 3)
        pkt.kind = PK_TRIG
        pkt.size = <uint8_t>n
        pkt.payload = p[2]
        pkt.flags = ((1 if b & PL_TRIG_IP else 0) | (2 if b & PL_TRIG_MULT else 0)
                     | (4 if b & PL_TRIG_ICNTV else 0))
    else:
        return _fail(pkt, pos, PTE_BAD_OPC)
    if err < 0:
        return err
    d._pos = pos + pkt.size
    return 0


# ---------------------------------------------------------------------------
# PSB search, after libipt's pt_sync.c semantics but over offsets: look for
# an 8-byte word of PSB pattern, then walk to the end of the pattern run and
# step back one PSB. A run longer than one PSB (PSB payload-lookalikes)
# therefore resolves to the PSB that ends the run, as in libipt.

cdef inline int _word_is_pattern(const uint8_t* p) noexcept nogil:
    if p[0] == PSB_HI:
        return (p[1] == PSB_LO and p[2] == PSB_HI and p[3] == PSB_LO and p[4] == PSB_HI
                and p[5] == PSB_LO and p[6] == PSB_HI and p[7] == PSB_LO)
    if p[0] == PSB_LO:
        return (p[1] == PSB_HI and p[2] == PSB_LO and p[3] == PSB_HI and p[4] == PSB_LO
                and p[5] == PSB_HI and p[6] == PSB_LO and p[7] == PSB_HI)
    return 0


cdef int64_t _find_psb(const uint8_t* buf, uint64_t size, uint64_t pos) noexcept nogil:
    # `pos` is just after a word of pattern; returns the PSB's offset or -1.
    if pos < size and buf[pos] != PSB_HI:
        pos += 1
    while pos + 1 < size and buf[pos] == PSB_HI and buf[pos + 1] == PSB_LO:
        pos += 2
    if pos < PS_PSB:
        return -1
    pos -= PS_PSB
    if pos + PS_PSB > size or not _is_psb(buf + pos):
        return -1
    return <int64_t>pos


cdef int64_t _sync_forward_from(const uint8_t* buf, uint64_t size, uint64_t start) noexcept nogil:
    cdef uint64_t pos = (start + 7) & ~(<uint64_t>7)
    cdef int64_t found
    while pos + 8 <= size:
        if _word_is_pattern(buf + pos):
            found = _find_psb(buf, size, pos + 8)
            if found >= 0 and <uint64_t>found >= start:
                return found
        pos += 8
    return -1


cdef int64_t _sync_backward_from(const uint8_t* buf, uint64_t size, uint64_t start) noexcept nogil:
    cdef uint64_t pos = start & ~(<uint64_t>7)
    cdef uint64_t nxt
    cdef int64_t found
    while pos >= 8:
        nxt = pos
        pos -= 8
        if _word_is_pattern(buf + pos):
            found = _find_psb(buf, size, nxt)
            # A pattern run that continues into the PSB we stand on resolves
            # to that PSB (or a later one): only one strictly before counts,
            # so repeated calls always make progress.
            if found >= 0 and <uint64_t>found < start:
                return found
    return -1


# ---------------------------------------------------------------------------
# Python-facing packet object.

@cython.freelist(64)
cdef class Packet:
    """One decoded packet: a plain value, detached from the decoder.

    `kind` is a `Kind`; `offset`/`size` locate it in the buffer. The raw
    fields (`payload`, `aux`, `ip`, `ipc`, `count`, `flags`, `ip_valid`) have
    the per-kind meaning documented in packet.pxd; `fields` gives the same
    data under the SDM's names. Formatting is pt_decoder.tools' business.
    """
    cdef readonly uint64_t offset
    cdef readonly uint64_t payload
    cdef readonly uint64_t aux
    cdef readonly uint64_t ip
    cdef readonly int kind_id
    cdef readonly int size
    cdef readonly int ipc
    cdef readonly int count
    cdef readonly int flags
    cdef readonly bint ip_valid

    @property
    def kind(self):
        return _KINDS[self.kind_id]

    @property
    def name(self):
        """The kind's name, e.g. 'TIP_PGE'."""
        return _KINDS[self.kind_id].name

    @property
    def end(self):
        """Offset just after the packet."""
        return self.offset + self.size

    @property
    def fields(self):
        """The payload under the SDM's field names, as a dict."""
        return fields_of(self)

    def __repr__(self):
        return f"<Packet {self.name} @{self.offset:#x}+{self.size} {self.fields}>"

    def __eq__(self, other):
        if not isinstance(other, Packet):
            return NotImplemented
        return self._key() == (<Packet>other)._key()

    def __hash__(self):
        return hash(self._key())

    cdef tuple _key(self):
        return (self.kind_id, self.offset, self.size, self.payload, self.aux, self.ip,
                self.ipc, self.count, self.flags, self.ip_valid)


cdef Packet _make_packet(const PtPacket* pkt):
    cdef Packet p = Packet.__new__(Packet)
    p.offset = pkt.offset
    p.payload = pkt.payload
    p.aux = pkt.aux
    p.ip = pkt.ip
    p.kind_id = pkt.kind
    p.size = pkt.size
    p.ipc = pkt.ipc
    p.count = pkt.count
    p.flags = pkt.flags
    p.ip_valid = pkt.ip_valid
    return p


cdef object _error(int err, const PtPacket* pkt):
    # The Python-side error for a failed next_c(): its code and offset.
    return PtError(-err, pkt.offset, "truncated packet" if err == -PTE_EOS else "")


cdef Py_ssize_t _bulk(PacketDecoder d, int what, bytearray out, object errors) except -1:
    """Decode to the end without the GIL; return the number of packets.
    what: 0 count only, 1 kinds (a byte each into `out`), 2 PtPacket records
    into `out`. Errors are raised (errors None) or appended with a resync at
    the next PSB."""
    cdef PtPacket pkt
    cdef int err = 0
    cdef Py_ssize_t n = 0, cap = 0, width = 1 if what < 2 else sizeof(PtPacket)
    cdef uint8_t* dst = NULL
    if not d._synced and d.sync_forward_c() < 0:
        return 0
    while True:
        if n == cap:
            # First guess: one packet per 1 (kinds) or 3 (records) bytes left.
            cap = cap * 2 if cap else (d._size - d._pos) // (1 if what < 2 else 3) + 4096
            if what:
                PyByteArray_Resize(out, cap * width)
        if what:
            dst = out
        with nogil:
            while n < cap:
                err = _decode_one(d, &pkt)
                if err:
                    break
                if what == 1:
                    dst[n] = pkt.kind
                elif what == 2:
                    (<PtPacket*>dst)[n] = pkt
                n += 1
        if err == 0:
            continue
        if err == -PTE_EOS and pkt.offset >= d._size:
            break
        exc = _error(err, &pkt)
        if errors is None:
            raise exc
        errors.append(exc)
        if d.sync_forward_c() < 0:
            break
    if what:
        del out[n * width:]
    return n


cdef inline void _enter(PacketDecoder d, uint64_t offset) noexcept nogil:
    d._pos = offset
    d._sync = offset
    d._synced = 1
    d._last_ip = 0
    d._last_ip_valid = 0
    d._block_ctx = 0


# ---------------------------------------------------------------------------

cdef class PacketDecoder:
    """Decode Intel PT packets from a buffer, libipt's pt_pkt_* style.

    PacketDecoder(buffer, *, sdm_packets=True, errata_skz84=False)

    `buffer` is anything with the buffer protocol and C-contiguous bytes
    (bytes, bytearray, memoryview, mmap.mmap, a perf AUX ring view); it is
    borrowed, never copied, and kept alive (and, for mmap, pinned) while the
    decoder lives. `sdm_packets=False` restricts decoding to the packets
    libipt 2.0.5 knows (BBP/BIP/BEP/CFE/EVD/TRIG become unknown opcodes, as
    in ptdump 2.0.5). `errata_skz84` applies erratum SKZ84 (a TMA with
    reserved bits set is an INVALID packet of 8 bytes, not an error).

    A new decoder is not synchronised: call sync_forward() (or sync_set(),
    or seek() to trust an offset without a PSB) before next().
    """

    def __cinit__(self, buffer, *, sdm_packets=True, errata_skz84=False):
        cdef const uint8_t[::1] view
        try:
            view = memoryview(buffer).cast("B")
        except TypeError as exc:
            raise TypeError(f"PacketDecoder needs a C-contiguous byte buffer, not "
                            f"{type(buffer).__name__}: {exc}") from None
        self._view = view
        self._size = view.shape[0]
        self._buf = &view[0] if self._size else NULL
        self._pos = 0
        self._sync = 0
        self._synced = 0
        self._last_ip = 0
        self._last_ip_valid = 0
        self._sdm_packets = 1 if sdm_packets else 0
        self._errata_skz84 = 1 if errata_skz84 else 0
        self._block_ctx = 0

    # ---- C API (packet.pxd) ----

    cdef int next_c(self, PtPacket* pkt) noexcept nogil:
        return _decode_one(self, pkt)

    cdef int sync_forward_c(self) noexcept nogil:
        cdef uint64_t pos = self._pos if self._synced else 0
        cdef uint64_t back
        cdef int64_t found
        if self._synced and pos == self._sync:
            pos += PS_PSB
        # Start up to 15 bytes earlier: a PSB partly swallowed by a corrupt
        # packet before it is found again (libipt's pt_pkt_sync_forward).
        back = pos if pos < PS_PSB - 1 else PS_PSB - 1
        found = _sync_forward_from(self._buf, self._size, pos - back)
        if found < 0:
            return -PTE_EOS
        _enter(self, <uint64_t>found)
        return 0

    cdef int sync_backward_c(self) noexcept nogil:
        cdef uint64_t pos = self._pos if self._synced else self._size
        cdef int64_t found = _sync_backward_from(self._buf, self._size, pos)
        if found < 0:
            return -PTE_EOS
        _enter(self, <uint64_t>found)
        return 0

    cdef int sync_set_c(self, uint64_t offset) noexcept nogil:
        if offset > self._size or self._size - offset < 2:
            return -PTE_EOS
        if self._buf[offset] != PSB_HI or self._buf[offset + 1] != PSB_LO:
            return -PTE_NOSYNC
        if self._size - offset < PS_PSB:
            return -PTE_EOS
        if not _is_psb(self._buf + offset):
            return -PTE_BAD_PACKET
        _enter(self, offset)
        return 0

    cdef int set_offset_c(self, uint64_t offset) noexcept nogil:
        if offset > self._size:
            return -PTE_EOS
        _enter(self, offset)
        self._last_ip_valid = 0
        return 0

    # ---- Python API ----

    @property
    def offset(self):
        """Offset of the next packet (0 before the first sync)."""
        return self._pos

    @property
    def sync_offset(self):
        """Offset of the PSB (or seek() target) last synchronised on; None before."""
        return self._sync if self._synced else None

    @property
    def size(self):
        """Length of the buffer in bytes."""
        return self._size

    @property
    def last_ip(self):
        """The last-IP decompression state: (ip, known)."""
        return self._last_ip, bool(self._last_ip_valid)

    def sync_forward(self):
        """Synchronise at the next PSB; return its offset, or None if there is none.

        From an unsynchronised decoder the search starts at offset 0; from a
        synchronised one it skips the PSB it sits on and may find a PSB that
        began up to 15 bytes before the current offset (one a bad packet
        partly swallowed). Last-IP is reset.
        """
        if self.sync_forward_c() < 0:
            return None
        return self._pos

    def sync_backward(self):
        """Synchronise at the last PSB before the current offset (the end of the
        buffer when unsynchronised); return its offset, or None if there is none."""
        if self.sync_backward_c() < 0:
            return None
        return self._pos

    def sync_set(self, offset):
        """Synchronise at `offset`, which must hold a PSB.

        Raises PtError(NOSYNC) if there is no PSB there, PtError(BAD_PACKET)
        if it is a broken PSB, PtError(EOS) if `offset` is outside the buffer.
        """
        if offset < 0:
            raise PtError(ErrorCode.EOS, offset, "negative offset")
        cdef int err = self.sync_set_c(<uint64_t>offset)
        if err < 0:
            raise PtError(-err, offset)

    def seek(self, offset):
        """Trust `offset` as a packet boundary without a PSB (ptdump --no-sync).

        Last-IP is unknown until the next PSB or full IP. Raises
        PtError(EOS) if `offset` is outside the buffer.
        """
        if offset < 0 or self.set_offset_c(<uint64_t>offset) < 0:
            raise PtError(ErrorCode.EOS, offset, "offset outside the buffer")

    def next(self):
        """Decode the packet at the current offset and advance past it.

        Returns a Packet, or None at the end of the buffer. Raises
        PtError(NOSYNC) if not synchronised; PtError(BAD_OPC) or
        PtError(BAD_PACKET) on bad bytes, and PtError(EOS, detail='truncated
        packet') when the last packet is cut off by the end of the buffer:
        `.offset` of the error is the packet's offset, the decoder stays
        there, and sync_forward() resumes at the next PSB.
        """
        cdef PtPacket pkt
        cdef int err = _decode_one(self, &pkt)
        if err == 0:
            return _make_packet(&pkt)
        if err == -PTE_EOS and pkt.offset >= self._size:
            return None
        raise _error(err, &pkt)

    def __iter__(self):
        """The decoder is its own iterator: next() until the end of the
        buffer (PtError as next())."""
        return self

    def __next__(self):
        cdef PtPacket pkt
        cdef int err = _decode_one(self, &pkt)
        if err == 0:
            return _make_packet(&pkt)
        if err == -PTE_EOS and pkt.offset >= self._size:
            raise StopIteration
        raise _error(err, &pkt)

    def decode_all(self, errors=None):
        """Decode from the current offset to the end; return a list of Packets.

        Synchronises first (sync_forward) if the decoder is not synchronised.
        With `errors=None` the first error raises PtError as next() does.
        With a list, each error is appended to it as a PtError (code and
        offset) and decoding resumes at the next PSB, as ptdump does.
        """
        cdef PtPacket pkt
        cdef int err
        out = []
        if not self._synced and self.sync_forward_c() < 0:
            return out
        while True:
            err = _decode_one(self, &pkt)
            if err == 0:
                out.append(_make_packet(&pkt))
                continue
            if err == -PTE_EOS and pkt.offset >= self._size:
                return out
            exc = _error(err, &pkt)
            if errors is None:
                raise exc
            errors.append(exc)
            if self.sync_forward_c() < 0:
                return out

    def kinds(self, errors=None):
        """Fast path: the kind of every packet from here to the end, one byte
        each (`bytes`); synchronises first if needed. Errors as decode_all()."""
        out = bytearray()
        _bulk(self, 1, out, errors)
        return bytes(out)

    def records(self, errors=None):
        """Fast bulk decode: every packet from here to the end as packed
        PtPacket records (`RECORD_FORMAT`, `RECORD_FIELDS`), in a bytearray:
        `struct.iter_unpack(RECORD_FORMAT, buf)` or
        `numpy.frombuffer(buf, RECORD_DTYPE)` reads them without Python work
        per packet in the decoder. Synchronises first if needed; errors as
        decode_all()."""
        out = bytearray()
        _bulk(self, 2, out, errors)
        return out

    def count(self, errors=None):
        """Fast path: decode to the end and return (packets, errors),
        resynchronising at the next PSB after each error (`errors`, if a
        list, also receives them). The benchmark's Cython inner loop: no
        Python object, no GIL."""
        if errors is None:
            errors = []
        return _bulk(self, 0, None, errors), len(errors)

    def __repr__(self):
        state = f"at {self._pos:#x}" if self._synced else "not synchronised"
        return f"<PacketDecoder {self._size} bytes, {state}>"

# Packet layer contract (declarations only; implementation in packet.pyx).
#
# The C-level packet record that every higher layer (event.pyx, insn.pyx,
# timing.pyx) reads. Field meanings per kind are fixed here; packet.pyx may
# add fields at the END of PtPacket and new kinds at the END of the enum, but
# never change an existing one, because event.pyx/insn.pyx cimport this.
#
# Field use per kind (SDM Vol. 3C ch. 33 "Intel Processor Trace", packet table):
#   TNT8, TNT64   payload = branch bits, oldest branch in the MOST significant
#                 of the `count` valid bits (bit count-1 = first branch);
#                 count = number of TNT bits (stop bit removed). 1 = taken.
#   TIP, TIP_PGE, TIP_PGD, FUP
#                 ipc = IP compression (0 suppressed, 1 update-16, 2 update-32,
#                 3 sext-48, 4 update-48, 6 full); payload = the raw IP bytes
#                 of the packet (zero-extended); ip = the reconstructed full IP
#                 after applying last-IP; ip_valid = 1 if ip is meaningful
#                 (0 when suppressed or when last-IP was unknown).
#   MODE_EXEC     payload bit0 = CS.L, bit1 = CS.D (bit2 = IF where present)
#   MODE_TSX      payload bit0 = InTX, bit1 = TXAbort
#   PIP           payload = CR3 (bits 63:5 as in the packet, shifted into place),
#                 aux = NR (non-root) bit
#   TSC           payload = 56-bit TSC value
#   TMA           payload = CTC (16 bits), aux = FastCounter (9 bits)
#   MTC           payload = CTC (8 bits)
#   CYC           payload = cycle counter value
#   CBR           payload = core:bus ratio
#   VMCS          payload = VMCS base address (bits shifted into place)
#   MNT           payload = 64-bit maintenance payload
#   PTW           payload = 4- or 8-byte value, aux = payload size in bytes,
#                 flags bit0 = IP (an FUP follows)
#   MWAIT         payload = hints, aux = extensions
#   PWRE          payload = resolved C-state (4 bits) << 4 | sub-state (4 bits),
#                 flags bit0 = HW (hardware-initiated)
#   PWRX          payload = last core C-state, aux = deepest core C-state,
#                 flags = the 4-bit wake reason as in the packet (SDM: bit0
#                 interrupt, bit1 timer deadline, bit2 store to monitored
#                 address = libipt's "store", bit3 autonomous/HW)
#   EXSTOP        flags bit0 = IP (an FUP follows)
#   BBP           payload = type, flags bit0 = SZ (1: 4-byte BIP payloads, 0: 8-byte;
#                 as perf's decoder reads it)
#   BIP           payload = value, aux = id, flags bit0 = SZ of the enclosing block
#   BEP           flags bit0 = IP (an FUP follows)
#   CFE           payload = type, aux = vector, flags bit0 = IP (an FUP follows)
#   EVD           payload = 64-bit payload, aux = type
#   TRIG          payload = trigger bits, aux = ICNTR, flags bit0 = IP, bit1 = MULT,
#                 bit2 = ICNTV (aux valid)
#   INVALID       a TMA with reserved bits set under erratum SKZ84 (size 8),
#                 reported as a packet so decoding goes on, as libipt does
#   PAD PSB PSBEND OVF STOP   no payload
# Every packet: offset = byte offset of its first byte in the buffer, size = bytes.

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t

cdef enum PacketKind:
    PK_INVALID = 0
    PK_PAD = 1
    PK_PSB = 2
    PK_PSBEND = 3
    PK_TNT8 = 4
    PK_TNT64 = 5
    PK_TIP = 6
    PK_TIP_PGE = 7
    PK_TIP_PGD = 8
    PK_FUP = 9
    PK_MODE_EXEC = 10
    PK_MODE_TSX = 11
    PK_PIP = 12
    PK_TSC = 13
    PK_TMA = 14
    PK_MTC = 15
    PK_CYC = 16
    PK_CBR = 17
    PK_VMCS = 18
    PK_OVF = 19
    PK_MNT = 20
    PK_STOP = 21
    PK_PTW = 22
    PK_MWAIT = 23
    PK_PWRE = 24
    PK_PWRX = 25
    PK_EXSTOP = 26
    PK_BBP = 27
    PK_BIP = 28
    PK_BEP = 29
    PK_CFE = 30
    PK_EVD = 31
    PK_TRIG = 32
    PK__COUNT = 33

ctypedef struct PtPacket:
    uint64_t offset
    uint64_t payload
    uint64_t aux
    uint64_t ip
    uint8_t kind
    uint8_t size
    uint8_t ipc
    uint8_t count
    uint8_t flags
    uint8_t ip_valid

cdef class PacketDecoder:
    # The buffer is borrowed, never copied: `_view` keeps the exporter
    # (bytes, bytearray, mmap, memoryview of the perf AUX ring) alive.
    cdef object _view
    cdef const uint8_t* _buf
    cdef uint64_t _size
    cdef uint64_t _pos          # offset of the next packet
    cdef uint64_t _sync         # offset of the last PSB synchronised on
    cdef int _synced            # 0 until a sync_* succeeded
    cdef uint64_t _last_ip      # last-IP decompression state (SDM 33.4.2.2)
    cdef int _last_ip_valid

    # Decode the packet at the current offset into *pkt and advance.
    # Returns 0 on success, -PTE_EOS at the end of the buffer, -PTE_NOSYNC if
    # not synchronised, -PTE_BAD_OPC / -PTE_BAD_PACKET on bad bytes (pkt.offset
    # then holds the failing offset and the decoder does NOT advance; the caller
    # resynchronises with sync_forward_c()).
    cdef int next_c(self, PtPacket* pkt) noexcept nogil
    # Move to the next PSB; 0 or -PTE_EOS. Skips the PSB the decoder is
    # synchronised on; as libipt, the search starts up to 15 bytes before the
    # current offset so that a PSB partly swallowed by a bad packet is found.
    cdef int sync_forward_c(self) noexcept nogil
    # Move to the last PSB strictly before the current offset (the end of the
    # buffer when not synchronised); 0 or -PTE_EOS.
    cdef int sync_backward_c(self) noexcept nogil
    # Synchronise at `offset`, which must hold a PSB; 0 or -PTE_NOSYNC/-PTE_EOS.
    cdef int sync_set_c(self, uint64_t offset) noexcept nogil

    # ---- added by packet.pyx (appended; the members above are the contract) ----
    cdef int _sdm_packets       # 1: decode BBP/BIP/BEP/CFE/EVD/TRIG; 0: libipt 2.0.5 set
    cdef int _errata_skz84      # SKZ84: TMA with reserved bits -> PK_INVALID (size 8)
    cdef int _block_ctx         # PEBS-via-PT block item size after BBP: 0 none, 4 or 8

    # Position at `offset` without requiring a PSB there (libipt's
    # pt_pkt_sync_set; ptdump --no-sync). Last-IP becomes unknown until the
    # next PSB or full IP. 0 or -PTE_EOS.
    cdef int set_offset_c(self, uint64_t offset) noexcept nogil

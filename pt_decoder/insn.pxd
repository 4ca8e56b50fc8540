# Instruction-flow layer contract (declarations only; implementation in insn.pyx).
#
# The instruction decoder follows the code of an image from the IP the trace
# gives, asking its EventDecoder (owned, a cdef attribute) for each conditional
# branch's TNT bit and each indirect branch's target. Basic blocks are decoded
# once (insn_ild.h) into a block cache; the hot loop walks cached blocks.
#
# Output (columnar, appended by the decode loop without the GIL):
#   ip[i], tsc[i], cyc[i], flags[i]   one entry per executed instruction;
#                                     flags bits as pt_decoder/insn_flags.py
#   items[k]                          events, errors and end-of-trace markers,
#                                     each before instruction index `pos`

from libc.stdint cimport int32_t, uint8_t, uint16_t, uint32_t, uint64_t

from pt_decoder.event cimport EventDecoder, PtEvent

cdef extern from "insn_ild.h":
    ctypedef struct ild_insn:
        uint8_t len
        uint8_t iclass
        uint8_t ext
        uint8_t is_direct
        int32_t disp

ctypedef struct SectionRef:
    uint64_t vaddr
    uint64_t size
    const uint8_t* data

ctypedef struct Insn:
    uint64_t ip
    uint8_t size
    uint8_t iclass
    uint8_t ext
    uint8_t is_direct
    int32_t disp
    uint8_t mode
    uint8_t speculative

ctypedef struct Block:
    uint64_t start          # IP of the first instruction
    uint32_t lens           # index of the first instruction length in the length pool
    uint32_t ninsn          # instructions; 0: an error block (err says why)
    int32_t next            # hash chain
    int32_t err             # -PTE_NOMAP / -PTE_BAD_INSN for ninsn == 0
    int32_t succ[2]         # cached successors: [0] fall-through, [1] taken/direct target; -1 none
    uint8_t mode
    Insn last               # the last instruction, with its branch class

cdef enum ItemKind:
    ITEM_EVENT = 0
    ITEM_ERROR = 1
    ITEM_SYNC_ERROR = 2
    ITEM_EOS = 3

ctypedef struct Item:
    uint64_t pos            # index of the instruction the item precedes
    uint64_t offset         # trace offset (errors: where the decoder stood)
    uint64_t ip             # errors: the IP being decoded
    int32_t code            # errors: PTE_* code (positive)
    uint8_t kind
    PtEvent ev              # events

# Error codes of the Cython layers; mirror of pt_decoder/errors.py ErrorCode
# (tests/unit/test_errors.py checks the two agree). Hot loops return -PTE_*.
cdef enum:
    PTE_OK = 0
    PTE_INTERNAL = 1
    PTE_INVALID = 2
    PTE_NOSYNC = 3
    PTE_BAD_OPC = 4
    PTE_BAD_PACKET = 5
    PTE_BAD_CONTEXT = 6
    PTE_EOS = 7
    PTE_BAD_QUERY = 8
    PTE_NOMEM = 9
    PTE_BAD_CONFIG = 10
    PTE_NOIP = 11
    PTE_IP_SUPPRESSED = 12
    PTE_NOMAP = 13
    PTE_BAD_INSN = 14
    PTE_NO_TIME = 15
    PTE_NO_CBR = 16
    PTE_BAD_IMAGE = 17
    PTE_BAD_LOCK = 18
    PTE_NOT_SUPPORTED = 19
    PTE_RETSTACK_EMPTY = 20
    PTE_BAD_RETCOMP = 21
    PTE_BAD_STATUS_UPDATE = 22
    PTE_NO_ENABLE = 23
    PTE_EVENT_IGNORED = 24
    PTE_OVERFLOW = 25
    PTE_BAD_FILE = 26
    PTE_BAD_CPU = 27

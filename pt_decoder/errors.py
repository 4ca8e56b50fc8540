"""The decoder's one error tree: stable numeric codes and their text.

Layer: pt_decoder, shared by every layer. Cython code returns `-ErrorCode`
from its hot loops and never raises; `PtError(code)` is raised only at the
Python entry points. Codes and texts follow libipt's `enum pt_error_code` and
`pt_errstr()` so that ptdump/ptxed-format output matches libipt's line for
line (tests/unit/test_errors.py checks the texts against libipt itself).
The Cython side mirrors these numbers in `_errors.pxd`.
"""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    OK = 0
    INTERNAL = 1
    INVALID = 2
    NOSYNC = 3
    BAD_OPC = 4
    BAD_PACKET = 5
    BAD_CONTEXT = 6
    EOS = 7
    BAD_QUERY = 8
    NOMEM = 9
    BAD_CONFIG = 10
    NOIP = 11
    IP_SUPPRESSED = 12
    NOMAP = 13
    BAD_INSN = 14
    NO_TIME = 15
    NO_CBR = 16
    BAD_IMAGE = 17
    BAD_LOCK = 18
    NOT_SUPPORTED = 19
    RETSTACK_EMPTY = 20
    BAD_RETCOMP = 21
    BAD_STATUS_UPDATE = 22
    NO_ENABLE = 23
    EVENT_IGNORED = 24
    OVERFLOW = 25
    BAD_FILE = 26
    BAD_CPU = 27


_TEXT = {
    ErrorCode.OK: "OK",
    ErrorCode.INTERNAL: "internal error",
    ErrorCode.INVALID: "invalid argument",
    ErrorCode.NOSYNC: "decoder out of sync",
    ErrorCode.BAD_OPC: "unknown opcode",
    ErrorCode.BAD_PACKET: "unknown packet",
    ErrorCode.BAD_CONTEXT: "unexpected packet context",
    ErrorCode.EOS: "reached end of trace stream",
    ErrorCode.BAD_QUERY: "trace stream does not match query",
    ErrorCode.NOMEM: "out of memory",
    ErrorCode.BAD_CONFIG: "bad configuration",
    ErrorCode.NOIP: "no ip",
    ErrorCode.IP_SUPPRESSED: "ip has been suppressed",
    ErrorCode.NOMAP: "no memory mapped at this address",
    ErrorCode.BAD_INSN: "unknown instruction",
    ErrorCode.NO_TIME: "no timing information",
    ErrorCode.NO_CBR: "no core:bus ratio",
    ErrorCode.BAD_IMAGE: "bad image",
    ErrorCode.BAD_LOCK: "locking error",
    ErrorCode.NOT_SUPPORTED: "not supported",
    ErrorCode.RETSTACK_EMPTY: "compressed return without call",
    ErrorCode.BAD_RETCOMP: "bad compressed return",
    ErrorCode.BAD_STATUS_UPDATE: "bad status update",
    ErrorCode.NO_ENABLE: "expected tracing enabled event",
    ErrorCode.EVENT_IGNORED: "event ignored",
    ErrorCode.OVERFLOW: "overflow",
    ErrorCode.BAD_FILE: "bad file",
    ErrorCode.BAD_CPU: "unknown cpu",
}


def errstr(code: int) -> str:
    """The text of an error code; accepts `code` or `-code` as the Cython side returns it."""
    try:
        return _TEXT[ErrorCode(abs(int(code)))]
    except ValueError:
        return "unknown error"


class PtError(Exception):
    """A decoder error raised at a Python entry point.

    `code` is an ErrorCode; `offset` the byte offset in the trace where it
    happened, or None when the error is not tied to a position.
    """

    def __init__(self, code: int, offset: int | None = None, detail: str = ""):
        self.code = ErrorCode(abs(int(code)))
        self.offset = offset
        self.detail = detail
        where = f" at offset {offset:#x}" if offset is not None else ""
        extra = f": {detail}" if detail else ""
        super().__init__(f"{errstr(self.code)}{where}{extra}")

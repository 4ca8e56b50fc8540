"""Instruction breakpoints of a Go session: Delve's own (Delve serves DAP
`setInstructionBreakpoints` and says so in `initialize`).

Layer: adapter.golang, a feature plugged in by the Session for a backend that says it serves
instruction breakpoints itself (`native_instruction_breakpoints`). Forwards the request; the
backend records it with the other breakpoint requests, so a Delve attached again after a
recording is given it too and its ids stay the client's (breakpoint_ids.py). The stop comes
from Delve as `stopped {reason: "instruction breakpoint"}`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from adapter.protocol.channel import DEFERRED

if TYPE_CHECKING:
    from adapter.protocol.messages import Request
    from adapter.protocol.schema import SetInstructionBreakpointsArguments


class DelveInstructionBreakpoints:
    capabilities: ClassVar[dict] = {"supportsInstructionBreakpoints": True}

    def __init__(self, session):
        self.session = session

    def set(self, request: Request, args: SetInstructionBreakpointsArguments) -> object:
        self.session.backend.forward(request)
        return DEFERRED

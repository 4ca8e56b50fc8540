"""Data breakpoints of a Go session: Delve's own, which watch a Go expression with the debug
registers and follow the variable when its goroutine's stack moves (Delve 1.26.2 and later
serve `dataBreakpointInfo`/`setDataBreakpoints` in DAP; its dataId is "goid,frame,expr").

Layer: adapter.golang, a feature plugged in by the Session for a backend that says it serves
data breakpoints itself (`native_data_breakpoints`). Forwards the two requests unchanged; the
stop comes from Delve as `stopped {reason: "data breakpoint", threadId: <goroutine>}`.

Why not ptdebug's watchpoint engine (adapter/watchpoints.py) as for Python: Delve already holds
the debug registers of every thread it traces, and two owners of the same four registers
would overwrite each other's watches. So a Go session uses Delve's, and only Delve's.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from adapter.protocol.channel import DEFERRED

if TYPE_CHECKING:
    from adapter.protocol.messages import Request
    from adapter.protocol.schema import DataBreakpointInfoArguments, SetDataBreakpointsArguments


class DelveDataBreakpoints:
    capabilities: ClassVar[dict] = {"supportsDataBreakpoints": True}
    """What the session announces once this feature is in place (no `bytes`/`asAddress`:
    Delve watches expressions, not raw addresses)."""

    def __init__(self, session):
        self.session = session
        self.armed: list[dict] = []
        """The data breakpoints the client set last (a recorder must not take the thread's
        debug registers from under them: record breakpoints refuse while any is set)."""

    def info(self, request: Request, args: DataBreakpointInfoArguments) -> object:
        self.session.backend.forward(request)
        return DEFERRED

    def set(self, request: Request, args: SetDataBreakpointsArguments) -> object:
        self.armed = list((request.raw.get("arguments") or {}).get("breakpoints") or [])
        self.session.backend.forward(request)
        return DEFERRED

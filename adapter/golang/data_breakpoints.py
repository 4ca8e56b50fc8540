"""Data breakpoints of a Go session: Delve's own, which watch a Go expression with the debug
registers and follow the variable when its goroutine's stack moves (Delve 1.26.2 and later
serve `dataBreakpointInfo`/`setDataBreakpoints` in DAP; its dataId is "goid,frame,expr").

Layer: adapter.golang, a feature plugged in by the Session for a backend that says it serves
data breakpoints itself (`native_data_breakpoints`). Forwards the two requests unchanged; the
stop comes from Delve as `stopped {reason: "data breakpoint", threadId: <goroutine>}`, which
this feature completes (issue 34, item 3): the write watch trapped after the writing
instruction, so Delve's pc, and the line its stack shows, are the next instruction's (the next
line's when the write ended its line). The stop's top frame is given the line of the write
(write_site.py), and its `description` says what changed: "main.counter changed from 0 to 1:
written by goroutine 1 in main.update at main.go:17". The old value is the one read when the
watch was set or at its last stop, as a debugger shows it (the write itself is not observed).

Why not ptdebug's watchpoint engine (adapter/watchpoints.py) as for Python: Delve already holds
the debug registers of every thread it traces, and two owners of the same four registers
would overwrite each other's watches. So a Go session uses Delve's, and only Delve's.
"""
from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from adapter.protocol.channel import DEFERRED
from adapter.protocol.errors import AdapterError
from adapter.routes import DATA_BREAKPOINTS

if TYPE_CHECKING:
    from adapter.protocol.messages import Request
    from adapter.protocol.schema import DataBreakpointInfoArguments, SetDataBreakpointsArguments

log = logging.getLogger("ptdebug.dap")

VALUE_TIMEOUT = 2.0
"""Seconds for Delve to evaluate a watched expression (the program is stopped)."""


class DelveDataBreakpoints:
    capabilities: ClassVar[dict] = {"supportsDataBreakpoints": True}
    """What the session announces once this feature is in place (no `bytes`/`asAddress`:
    Delve watches expressions, not raw addresses)."""

    def __init__(self, session):
        self.session = session
        self.armed: list[dict] = []
        """The data breakpoints the client set last (a recorder must not take the thread's
        debug registers from under them: record breakpoints refuse while any is set)."""
        self.values: dict[str, str | None] = {}
        """dataId -> the watched expression's value when last read (None: unknown)."""
        self.names: dict[str, str] = {}
        """dataId -> the name the user picked it by, where Delve's dataId is an address
        expression: a variable of the Variables view (`hits`) becomes `*(*[8]byte)(0xc000012345)`,
        which says nothing to the user and reads as bytes (issue 35, seen in VS Code)."""
        self.typed: dict[str, str] = {}
        """dataId -> `*(*TYPE)(ADDRESS)`: its address read as the variable's own type (learned
        while the program is stopped where the user picked it), so the values shown are
        `0` and `2`, not eight bytes; frame-independent, as Delve's address expression is."""
        self.moved: dict[int, tuple[int, int]] = {}
        """goroutine -> (line Delve shows, line of the write) while it is stopped at a write."""
        self._lock = threading.Lock()
        session.routes.on_events(DATA_BREAKPOINTS, self._event)
        # acts only while a goroutine is stopped at a write whose line Delve shows wrong
        session.routes.add(DATA_BREAKPOINTS, "stackTrace", watch=self._observe_stack,
                           active=lambda command: bool(self.moved))

    def info(self, request: Request, args: DataBreakpointInfoArguments) -> object:
        self.session.backend.forward(request, lambda response: self._learn_name(args, response))
        return DEFERRED

    def _learn_name(self, args: DataBreakpointInfoArguments, response: dict) -> None:
        data_id = (response.get("body") or {}).get("dataId")
        if not data_id or not args.variablesReference or not ADDRESS_EXPRESSION.fullmatch(
                _expression(data_id)):
            return
        self.names[data_id] = args.name
        goroutine, frame, expression = _parts(data_id)
        found = self._eval(goroutine, frame, args.name)  # stopped where the user picked it
        kind = found.get("type") if found else None
        address = ADDRESS_EXPRESSION.fullmatch(expression or "")
        if kind and address and "(" not in kind:
            self.typed[data_id] = f"*(*{kind})({address.group('address')})"

    def set(self, request: Request, args: SetDataBreakpointsArguments) -> object:
        self.armed = list((request.raw.get("arguments") or {}).get("breakpoints") or [])
        if self.session.paused:  # a running program's values cannot be read now
            self.values = {bp.get("dataId"): self._value(bp.get("dataId"))
                           for bp in self.armed}
        else:
            self.values = {}
        self.session.backend.forward(request)
        return DEFERRED

    # --- the stop -------------------------------------------------------------------------
    def _event(self, raw: dict) -> bool:
        """Event filter: completes a data-breakpoint stop (never consumes an event)."""
        name = raw.get("event")
        if name == "continued" or (name == "stopped" and self.moved):
            self._forget_moves()
        body = raw.get("body") or {}
        if name == "stopped" and body.get("reason") == "data breakpoint":
            try:
                self._complete(body)
            except (AdapterError, OSError) as exc:
                log.warning("data breakpoint stop: its write not located: %s", exc)
            except Exception:  # a bug: the stop must reach the user all the same
                log.exception("data breakpoint stop: completing it failed")
        return False

    def _complete(self, body: dict) -> None:
        goroutine = body.get("threadId")
        backend = self.session.backend
        _, pc = backend.thread_of(goroutine)
        from adapter.golang.write_site import write_site
        site = write_site(backend.pid, pc, getattr(backend, "original_bytes", None))
        changes = self._changes()
        written = (f": written by goroutine {goroutine} in {site.where}" if site is not None
                   else f": written by goroutine {goroutine} just before pc {pc:#x}")
        text = (changes or "a watched expression was written") + written
        body["description"] = body["text"] = text
        if site is not None and site.shown_line not in (None, site.line):
            with self._lock:
                self.moved[goroutine] = (site.shown_line, site.line)
            self.session.update_fast_path()  # stackTrace's watch acts now

    def _changes(self) -> str:
        """'EXPR changed from OLD to NEW' for each watched expression whose value changed
        since it was last read (all of them, the same value written, when none did)."""
        changed, same = [], []
        for bp in self.armed:
            data_id = bp.get("dataId")
            old, new = self.values.get(data_id), self._value(data_id)
            self.values[data_id] = new
            expression = self.names.get(data_id) or _expression(data_id)
            if old is None or new is None:
                changed.append(f"{expression} written (now {new if new is not None else '?'})")
            elif old != new:
                changed.append(f"{expression} changed from {old} to {new}")
            else:
                same.append(f"{expression} written with the same value {new}")
        return "; ".join(changed or same)

    def _value(self, data_id) -> str | None:
        """The value of a dataId's expression in its goroutine and frame, None if unknown."""
        goroutine, frame, expression = _parts(data_id)
        variable = self._eval(goroutine, frame, self.typed.get(data_id) or expression)
        return None if variable is None else _shown(variable)

    def _eval(self, goroutine: int, frame: int, expression: str | None) -> dict | None:
        """Delve's `Variable` of `expression` in a goroutine's frame (None: unknown)."""
        rpc = getattr(self.session.backend, "rpc", None)
        if rpc is None or expression is None:
            return None
        try:
            found = rpc.call("Eval", timeout=VALUE_TIMEOUT,
                             Scope={"GoroutineID": goroutine, "Frame": frame}, Expr=expression)
        except AdapterError as exc:
            log.info("value of %s unknown: %s", expression, exc.message)
            return None
        return found.get("Variable") or {}

    # --- the stack of a goroutine stopped at a write --------------------------------------
    def _observe_stack(self, request: Request) -> Callable[[dict], None] | None:
        """Watches stackTrace answers while a goroutine is stopped at a moved write."""
        if not self.moved:
            return None
        return lambda response: self._fix_stack(request.raw, response)

    def _fix_stack(self, request: dict, response: dict) -> None:
        arguments = request.get("arguments") or {}
        with self._lock:
            moved = self.moved.get(arguments.get("threadId"))
        frames = (response.get("body") or {}).get("stackFrames") or []
        if moved is None or not frames or arguments.get("startFrame", 0):
            return
        shown, written = moved
        if frames[0].get("line") == shown:
            frames[0]["line"] = written
            frames[0]["column"] = 0  # the write's column is not known

    def _forget_moves(self) -> None:
        with self._lock:
            had = bool(self.moved)
            self.moved.clear()
        if had:
            self.session.update_fast_path()


ADDRESS_EXPRESSION = re.compile(r"\*\(\*\[(?P<size>\d+)\]byte\)\((?P<address>0x[0-9a-fA-F]+)\)")
"""Delve's dataId expression for a variable picked in the Variables view: its bytes."""


def _shown(variable: dict) -> str:
    """A Delve RPC `Variable` as text: its value, or an array's or struct's elements (Delve
    leaves `value` empty for those: comparing their type names said "written with the same
    value [8]uint8" when the bytes had changed)."""
    value = variable.get("value")
    if value:
        return str(value)
    children = variable.get("children")
    if children:
        return "[" + ", ".join(_shown(child) for child in children) + "]"
    return str(variable.get("type") or "?")


def _parts(data_id) -> tuple[int, int, str | None]:
    """Delve's dataId "goid,frame,expression" -> (goid, frame, expression)."""
    try:
        goroutine, frame, expression = str(data_id).split(",", 2)
        return int(goroutine), int(frame), expression
    except ValueError:
        return -1, 0, None


def _expression(data_id) -> str:
    return _parts(data_id)[2] or str(data_id)

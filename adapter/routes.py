"""The route table: which steps every DAP request and event the adapter touches goes through.

Layer: its own, below features, backends and the session (imports nothing of ptdebug). It is the one place to read where a request goes; nothing routes a
request that is not named here: `Router.add` refuses a step its row does not declare, and the
order of the steps is the row's, never the order in which the features happened to plug in.

A request, in `Session.route` (adapter/session.py):
1. `client`: answered by `ClientHandlers.<command>_request` (adapter/client.py), found by name
   by the channel; a row says so, and tests/adapter/test_routes.py keeps the two the same.
2. `takes`: feature steps, in order; each may answer the request (a body, or DEFERRED) or let
   it through (None). A step may also change the arguments in place before they go on.
3. the backend: `forward` to debugpy or Delve, or the replay backend, which answers the rows
   marked `replay` itself (backends/replay.py) and refuses any other ("no program runs").
4. `watches`: feature steps that see, and may change, the forwarded response, in order; each
   is asked when the request passes (it may say "not this one") and sees the response after.
The fast relay (protocol/relay.py) carries a request outside Python only when its row has no
client handler and none of its steps is active now (`Router.idle`), and the backend relays it
untouched (`Session.update_fast_path`): the table decides, there is no second list.

Events from the backend, in `Session.backend_event`: run control (features/run_control.py)
sees every event first; then the row's `EVENTS` steps in order, any of which may consume it
(return True); what is left goes to the client.

Which request goes through which steps (debugpy / Delve / replay sessions alike; a step that
does not apply to a session is simply not plugged in, e.g. thread_guard and run_control act
only for debugpy, data_breakpoints is debugpy's or Delve's own):

    request                 steps (in order) -> backend -> watches
    setBreakpoints          record -> backend
    pause                   thread_guard, record, run_control -> backend
    next/stepIn/stepOut     thread_guard, reverse (replaying), run_control -> backend
    continue                thread_guard, reverse (replaying), run_control -> backend
    stackTrace              data_breakpoints (native frames page), reverse -> backend
                              -> data_breakpoints, trace_scope (frame -> thread)
    scopes                  data_breakpoints (registers), reverse -> backend
                              -> data_breakpoints, trace_scope (Processor Trace scope)
    variables               record (ptdebug's references) -> backend -> data_breakpoints
    evaluate                data_breakpoints, reverse (refusals in their frames) -> backend
    threads                 backend -> data_breakpoints (names), goroutine_view (replay names)
    stepBack, reverseContinue, dataBreakpointInfo, setDataBreakpoints,
    setInstructionBreakpoints, readMemory, writeMemory, disassemble, initialize,
    launch, attach, cancel, disconnect: the client handlers
    ptdebug/captureNow      thread_guard, record
    ptdebug/goroutineHistory goroutine_history
    ptdebug/goroutines      backend (Delve's custom request; the replay answers it itself)
    anything else           backend
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Route:
    """One request's row: who answers it and which feature steps it passes."""

    takes: tuple[str, ...] = ()
    """Feature steps tried in order before the backend; the first to answer takes it."""
    watches: tuple[str, ...] = ()
    """Feature steps that see the forwarded response, in order."""
    client: bool = False
    """Answered by the client handler `<command>_request` (adapter/client.py)."""
    replay: bool = False
    """The replay backend answers it (`ReplayBackend._<command>`)."""


FORWARDED = Route()
"""The row of every request the table does not name: straight to the backend."""

# The steps, by name: who plugs each in.
THREAD_GUARD = "thread_guard"          # features/thread_guard.py (debugpy sessions)
RUN_CONTROL = "run_control"            # features/run_control.py (debugpy sessions)
RECORD = "record"                      # features/record_breakpoints.py
REVERSE = "reverse"                    # features/reverse.py (a thread replaying a capture)
TRACE_SCOPE = "trace_scope"            # features/trace_scope.py
GOROUTINE_VIEW = "goroutine_view"      # features/goroutine_view.py, GoroutineView
GOROUTINE_HISTORY = "goroutine_history"  # features/goroutine_view.py, custom request
DATA_BREAKPOINTS = "data_breakpoints"  # features/data_breakpoints.py or golang/data_breakpoints.py
BACKEND = "backend"                    # the backend's own custom requests (powers.ServesCustomRequests)

_RUN = Route(takes=(THREAD_GUARD, REVERSE, RUN_CONTROL))
_CLIENT = Route(client=True)

ROUTES: dict[str, Route] = {
    # the lifecycle and what ptdebug answers itself, whatever the backend
    "initialize": _CLIENT, "launch": _CLIENT, "attach": _CLIENT, "cancel": _CLIENT,
    "disconnect": Route(client=True, replay=True),  # Session.disconnect asks the backend
    "readMemory": _CLIENT, "writeMemory": _CLIENT, "disassemble": _CLIENT,
    "dataBreakpointInfo": _CLIENT, "setDataBreakpoints": _CLIENT,
    "setInstructionBreakpoints": _CLIENT, "stepBack": _CLIENT, "reverseContinue": _CLIENT,
    # forwarded, with what the features add
    "configurationDone": Route(replay=True),
    "setBreakpoints": Route(takes=(RECORD,), replay=True),
    "setFunctionBreakpoints": Route(replay=True),
    "setExceptionBreakpoints": Route(replay=True),
    "pause": Route(takes=(THREAD_GUARD, RECORD, RUN_CONTROL), replay=True),
    "next": _RUN, "stepIn": _RUN, "stepOut": _RUN, "continue": _RUN,
    "stackTrace": Route(takes=(DATA_BREAKPOINTS, REVERSE),
                        watches=(DATA_BREAKPOINTS, TRACE_SCOPE), replay=True),
    "scopes": Route(takes=(DATA_BREAKPOINTS, REVERSE),
                    watches=(DATA_BREAKPOINTS, TRACE_SCOPE), replay=True),
    "variables": Route(takes=(RECORD,), watches=(DATA_BREAKPOINTS,), replay=True),
    "evaluate": Route(takes=(DATA_BREAKPOINTS, REVERSE), replay=True),
    "threads": Route(watches=(DATA_BREAKPOINTS, GOROUTINE_VIEW), replay=True),
    "terminate": Route(replay=True),
    # ptdebug's custom requests (docs/protocol.md)
    "ptdebug/captureNow": Route(takes=(THREAD_GUARD, RECORD)),
    "ptdebug/goroutineHistory": Route(takes=(GOROUTINE_HISTORY,)),
    "ptdebug/goroutines": Route(takes=(BACKEND,), replay=True),
}
"""Every request the adapter treats otherwise than forwarding it as it is."""

EVENTS: dict[str, tuple[str, ...]] = {
    "thread": (THREAD_GUARD,),
    "stopped": (RUN_CONTROL, RECORD, REVERSE, DATA_BREAKPOINTS),
    "continued": (RUN_CONTROL, RECORD, REVERSE, DATA_BREAKPOINTS),
    "terminated": (REVERSE, DATA_BREAKPOINTS),
    "exited": (REVERSE, DATA_BREAKPOINTS),
}
"""Backend event -> the feature steps that see it, in order (one may consume it)."""

REPLAYED = frozenset(command for command, route in ROUTES.items() if route.replay)
"""What the replay backend answers itself."""

Take = Callable[[Any], object]
"""A step's handler of a request (a messages.Request): an answer, DEFERRED, or None."""
Watch = Callable[[Any], Callable[[dict], None] | None]
"""A step's watcher: asked with the request as it passes, returns what sees the response
(the raw response, which it may change in place), or None for not this one."""
Active = Callable[[str], bool]
"""Whether a step may act on `command` now; the fast relay carries it when none may."""


def route(command: str) -> Route:
    return ROUTES.get(command, FORWARDED)


def _always(command: str) -> bool:
    return True


class Router:
    """The steps plugged into one session, held in the table's order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._takes: dict[str, dict[str, tuple[Take, Active]]] = {}
        self._watches: dict[str, dict[str, tuple[Watch, Active]]] = {}
        self._events: dict[str, Callable[[dict], bool]] = {}

    def add(self, step: str, command: str, *, take: Take | None = None,
            watch: Watch | None = None, active: Active = _always) -> None:
        """Plug `step` into `command`'s row (one handler a step a command: a second replaces
        the first). `active(command)` says whether it may act now; the default, always. The
        caller tells the session's fast path when it plugs in after the backend started
        (Session.update_fast_path)."""
        row = route(command)
        if take is not None:
            _check(step, command, row.takes)
            with self._lock:
                self._takes.setdefault(command, {})[step] = (take, active)
        if watch is not None:
            _check(step, command, row.watches)
            with self._lock:
                self._watches.setdefault(command, {})[step] = (watch, active)

    def on_events(self, step: str, event_filter: Callable[[dict], bool]) -> None:
        """Plug `step`'s event filter into every event row that names it."""
        if not any(step in steps for steps in EVENTS.values()):
            raise ValueError(f"no event row of adapter/routes.py names {step!r}")
        with self._lock:
            self._events[step] = event_filter

    def takers(self, command: str) -> list[Take]:
        """The handlers plugged into `command`, in the row's order."""
        plugged = self._takes.get(command)
        if not plugged:
            return []
        return [plugged[step][0] for step in route(command).takes if step in plugged]

    def watcher(self, command: str, request: Any) -> Callable[[dict], None] | None:
        """What sees `request`'s response: every watch step that wants it, in the row's
        order, or None (the response is then relayed as it comes)."""
        plugged = self._watches.get(command)
        if not plugged:
            return None
        seen = [see for see in (plugged[step][0](request) for step in route(command).watches
                                if step in plugged) if see is not None]
        if not seen:
            return None
        if len(seen) == 1:
            return seen[0]

        def all_of(response: dict) -> None:
            for see in seen:
                see(response)
        return all_of

    def idle(self, command: str) -> bool:
        """Whether no step plugged into `command` may act on it now."""
        plugged = [*(self._takes.get(command) or {}).values(),
                   *(self._watches.get(command) or {}).values()]
        return not any(active(command) for _, active in plugged)

    def filter_event(self, raw: dict) -> bool:
        """Run the event's row; True when a step consumed it."""
        for step in EVENTS.get(raw.get("event"), ()):  # type: ignore[arg-type]
            event_filter = self._events.get(step)
            if event_filter is not None and event_filter(raw):
                return True
        return False


def _check(step: str, command: str, declared: tuple[str, ...]) -> None:
    if step not in declared:
        raise ValueError(f"the route table does not let {step!r} into {command!r} "
                         f"(adapter/routes.py: {declared or 'no such step'})")

"""Breakpoint ids that stay the same for the client while Delve is replaced under it.

Layer: adapter.golang. Pure bookkeeping over DAP message bodies; knows nothing of sockets,
Delve's processes or features.

A record breakpoint makes Delve let go of the program and a new Delve attach after the
recording (handover in adapter/backends/delve_handover.py). The new Delve numbers its
breakpoints from scratch, while the client (and ptdebug's features, which see the same ids)
still holds the old numbers. So every id that leaves the backend is a *client id*: until the
first handover it is Delve's own number (nothing is rewritten on the common path); after one,
the breakpoints replayed into the new Delve get back the client ids they had, by their
position in the replayed request, and breakpoints set later get fresh client ids above every
id ever handed out.
"""
from __future__ import annotations

import threading

BREAKPOINT_REQUESTS = ("setBreakpoints", "setFunctionBreakpoints", "setExceptionBreakpoints",
                       "setInstructionBreakpoints")
"""Requests whose answer carries breakpoints with ids, and which a new Delve is sent again."""


def request_key(command: str, arguments: dict | None) -> tuple:
    """What a breakpoint request replaces: one source's breakpoints, or all of a kind."""
    if command == "setBreakpoints":
        source = arguments.get("source") if isinstance(arguments, dict) else None
        if not isinstance(source, dict):
            return command, ""
        return command, str(source.get("path") or source.get("name") or "")
    return (command,)


class BreakpointIds:
    """Delve's ids <-> client ids, and the last arguments of every breakpoint request."""

    def __init__(self):
        self._lock = threading.Lock()
        self._to_client: dict[int, int] = {}
        self._translating = False
        """False until the first handover: Delve's ids are the client's."""
        self._highest = 0
        self._by_key: dict[tuple, list[int | None]] = {}
        self.requests: dict[tuple, tuple[str, dict]] = {}
        """key -> (command, arguments as sent to Delve), in the order first set."""

    def sent(self, command: str, arguments: dict | None) -> None:
        """Remember a breakpoint request forwarded to Delve (to replay it later)."""
        with self._lock:
            self.requests[request_key(command, arguments)] = (
                command, dict(arguments) if isinstance(arguments, dict) else {})

    def answered(self, command: str, arguments: dict | None, body: dict | None,
                 replay: bool = False) -> None:
        """Rewrite the ids in a breakpoint request's answer to client ids (in place). With
        `replay`, the answer's breakpoints are the ones the client already knows, in order."""
        key = request_key(command, arguments)
        breakpoints = body.get("breakpoints") if isinstance(body, dict) else None
        if not isinstance(breakpoints, list):
            breakpoints = []
        with self._lock:
            before = self._by_key.get(key, []) if replay else []
            given: list[int | None] = []
            for position, bp in enumerate(breakpoints):
                delve_id = bp.get("id") if isinstance(bp, dict) else None
                if not isinstance(delve_id, int):
                    given.append(None)
                    continue
                if position < len(before) and before[position] is not None:
                    client_id = before[position]
                elif delve_id in self._to_client:
                    client_id = self._to_client[delve_id]
                elif not self._translating:
                    client_id = delve_id
                else:
                    client_id = self._highest + 1
                self._to_client[delve_id] = client_id
                self._highest = max(self._highest, client_id, delve_id if not
                                    self._translating else 0)
                bp["id"] = client_id
                given.append(client_id)
            self._by_key[key] = given

    def new_delve(self) -> None:
        """A new Delve is attached: its ids mean nothing yet; translate from now on."""
        with self._lock:
            self._to_client = {}
            self._translating = True

    def event(self, raw: dict) -> None:
        """Rewrite the breakpoint ids in a `stopped` or `breakpoint` event (in place)."""
        body = raw.get("body")
        if not isinstance(body, dict):
            return
        if not self._translating:
            bp = body.get("breakpoint") if raw.get("event") == "breakpoint" else None
            if isinstance(bp, dict) and isinstance(bp.get("id"), int):
                with self._lock:  # handed out as it is: never to be given again
                    self._highest = max(self._highest, bp["id"])
            return
        with self._lock:
            if raw.get("event") == "stopped" and isinstance(body.get("hitBreakpointIds"), list):
                # an id this Delve never answered with (none should be) gets a fresh client id:
                # passed on as it is it could name an older breakpoint of the client
                body["hitBreakpointIds"] = [self._client_id(i) if isinstance(i, int) else i
                                            for i in body["hitBreakpointIds"]]
            elif raw.get("event") == "breakpoint":
                bp = body.get("breakpoint")
                if isinstance(bp, dict) and isinstance(bp.get("id"), int):
                    bp["id"] = self._client_id(bp["id"])

    def _client_id(self, delve_id: int) -> int:
        """The client id of one of this Delve's ids, a fresh one if it has none (lock held)."""
        if delve_id not in self._to_client:
            self._highest += 1
            self._to_client[delve_id] = self._highest
        return self._to_client[delve_id]

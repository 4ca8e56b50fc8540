"""Run-control requests that name a thread debugpy does not know are refused before debugpy
sees them.

Layer: Python-backend helper (beside the session; talks to it only through its hooks:
`routes`, its `thread_guard` steps first in their rows of adapter/routes.py, and `backend`).
Knows no framing and no other feature.

Why: debugpy 1.8 answers `next`, `stepIn`, `stepOut` or `continue` with `threadId: 0` (or any id
that is no thread of the debuggee) with "Server[1] disconnected unexpectedly" and loses its
connection to the debuggee for good: every later request of the session fails (issue 17). So
the ids are checked here against the threads debugpy announced (`thread` events), and an id not
among them is looked up once more with a `threads` request (a thread may have started a moment
ago) before the request is refused with InvalidRequest (1200) naming the thread. `pause` and
`ptdebug/captureNow` are checked too, for the same contract, though debugpy survives them
(captureNow's was "debugpy gave no stack for thread -1", after a hidden stop's hold).

Cost: these requests go through Python in a debugpy session (`intercepting` is always true
there), one dictionary look-up each; a Go session is not affected (Delve answers such ids
with an error of its own), and its requests keep the fast relay.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from adapter.features.hooks import SessionHooks
from adapter.powers import RunsInsidePython
from adapter.protocol.errors import AdapterError, InvalidRequest
from adapter.routes import THREAD_GUARD

if TYPE_CHECKING:
    from adapter.protocol.messages import Request

GUARDED = ("next", "stepIn", "stepOut", "continue", "pause", "ptdebug/captureNow")
"""The requests whose `threadId` must name a live thread of the debuggee."""
LOOKUP_TIMEOUT = 5.0
"""Seconds debugpy gets to answer the `threads` request that checks an unknown id."""


class ThreadGuard:
    """Keeps the ids of the debuggee's threads and refuses run control on any other id."""

    def __init__(self, session: SessionHooks):
        self.session = session
        self.known: set[int] = set()
        """Thread ids debugpy announced (`thread` started, not exited) or listed in `threads`."""
        self._lock = threading.Lock()

    @classmethod
    def install(cls, session: SessionHooks) -> ThreadGuard:
        guard = cls(session)
        for command in GUARDED:
            # first in each row: a thread that does not exist has no replay either
            session.routes.add(THREAD_GUARD, command, take=guard.check,
                               active=guard.intercepting)
        session.routes.on_events(THREAD_GUARD, guard.observe_event)
        return guard

    def _active(self) -> bool:
        return isinstance(self.session.backend, RunsInsidePython)

    def intercepting(self, command: str) -> bool:
        """Session.update_fast_path: every guarded request of a debugpy session is checked."""
        return self._active()

    def observe_event(self, raw: dict) -> bool:
        """Learn threads from `thread` events; never consumes the event."""
        if raw.get("event") == "thread" and self._active():
            body = raw.get("body") or {}
            thread_id = body.get("threadId")
            if type(thread_id) is int:
                with self._lock:
                    if body.get("reason") == "exited":
                        self.known.discard(thread_id)
                    else:
                        self.known.add(thread_id)
        return False

    def check(self, request: Request) -> None:
        """None (the request goes on) for a live thread; raises InvalidRequest for any other.
        The arguments' types were checked by the session before interceptors run."""
        if not self._active():
            return None
        thread_id = (request.raw.get("arguments") or {}).get("threadId")
        if type(thread_id) is not int:
            return None  # the schema check owns a missing or mistyped id
        with self._lock:
            if thread_id in self.known:
                return None
        threads = self._lookup()
        if thread_id in threads:
            return None
        listed = ", ".join(str(t) for t in sorted(threads)) or "none"
        raise InvalidRequest(f"arguments.threadId {thread_id} is not a thread of the debuggee "
                             f"(its threads: {listed}); {request.command!r} not sent")

    def _lookup(self) -> set[int]:
        """The thread ids debugpy lists now (and remembered from now on)."""
        backend = self.session.backend
        response = backend.request("threads", None, timeout=LOOKUP_TIMEOUT)
        if not response.success:
            raise AdapterError(f"cannot check the thread id: debugpy's threads request "
                               f"failed ({response.error_text})")
        threads = {t.get("id") for t in (response.raw.get("body") or {}).get("threads") or ()
                   if isinstance(t, dict) and type(t.get("id")) is int}
        with self._lock:
            self.known = threads
        return set(threads)

"""The client's requests while Delve is away for a recording (between hand_over and take_back
in delve_handover.py): none of them holds up the ones behind it.

Layer: backends (a part of the Go backend, used by delve.py's DelveBackend.forward). Knows DAP
requests and the `connected` event of the backend; nothing of the recorder.

Why (issue 34): `forward` waited on the session's reader thread for the Delve that comes back,
so a `threads` sent during a window held every later request behind it, `cancel` of that
window's progress included (30 s). Now, while Delve is away:
  * `threads` is answered at once with the threads Delve listed as it let go (hand_over asks
    it then): the goroutines as they were, which is what a client needs to draw its views;
  * `pause` is answered at once (DAP lets the `stopped` event come later): the record feature
    has closed the window (RecordBreakpoints._pause), and the Delve that comes back keeps the
    program stopped (its attach's stopOnEntry), which is when the client hears `stopped`
    (reason "pause");
  * every other request waits, in the order sent, on a thread of its own, and goes to the Delve
    that comes back (at most HANDOVER_WAIT seconds, then it fails saying so);
  * once the client has disconnected meanwhile, no Delve comes back (delve_detach.py): what
    waits fails at once, saying so.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from adapter.protocol.errors import BackendError, BackendGone
from adapter.protocol.messages import Request

log = logging.getLogger("ptdebug.dap")


class AwayRequests:
    """Requests that came while no Delve holds the program. `forward(request, observe)` is the
    backend's own forwarding, called for each once Delve is back."""

    def __init__(self, connected: threading.Event, forward: Callable, wait_s: float):
        self._connected = connected
        self._forward = forward
        self._wait_s = wait_s
        self._lock = threading.Lock()
        self._queue: list[tuple[Request, object]] = []
        self._drainer: threading.Thread | None = None
        self.threads_body: dict = {"threads": []}
        """The `threads` body Delve gave as it let go (DelveHandover.hand_over)."""
        self.pause_when_back = False
        """A `pause` came while Delve was away: take_back has the new Delve keep the program
        stopped (stopOnEntry)."""
        self.entry_is_pause = False
        """... and that Delve's `stopped` (reason "entry") is the client's pause."""
        self.left: str | None = None
        """Why no Delve comes back (the client disconnected meanwhile: delve_detach.py): the
        requests still waiting, and any later one, fail saying so."""

    def leave(self, why: str) -> None:
        """No Delve comes back: what waits, and what comes later, fails with `why`."""
        with self._lock:
            self.left = why

    def stopped_event(self, body: dict) -> None:
        """A `stopped` event of the Delve that came back: the stop of a pause the client sent
        while Delve was away says so ("pause", not Delve's "entry")."""
        if self.entry_is_pause and body.get("reason") == "entry":
            self.entry_is_pause = False
            body["reason"] = "pause"
            body["description"] = "Paused (asked while Delve was away for a recording)"

    def take(self, request: Request, observe=None) -> bool:
        """True when `request` was answered or queued here (Delve is away, or requests sent
        while it was are still going out: the order of the client's requests is kept)."""
        left = None
        with self._lock:
            if self.left is not None:
                left, body = self.left, None
            elif self._connected.is_set() and not self._queue:
                return False
            elif not self._connected.is_set() and request.command == "threads":
                body = self.threads_body
            elif not self._connected.is_set() and request.command == "pause":
                self.pause_when_back = True
                body = {}
            else:
                body = None
                self._queue.append((request, observe))
                if self._drainer is None:
                    self._drainer = threading.Thread(target=self._drain, daemon=True,
                                                     name="delve-away-requests")
                    self._drainer.start()
        if left is not None:
            request.fail(BackendGone(f"{request.command!r}: {left}"))
        elif body is not None:
            log.info("%s answered while Delve is away for a recording", request.command)
            request.respond(body)
        return True

    def _drain(self) -> None:
        back = self._connected.wait(self._wait_s)
        while True:
            with self._lock:
                if not self._queue:
                    self._drainer = None
                    return
                request, observe = self._queue.pop(0)
            if self.left is not None:
                request.fail(BackendGone(f"{request.command!r}: {self.left}"))
                continue
            if not back:
                request.fail(BackendError(f"{request.command!r}: Delve is still away for a "
                                          f"recording after {self._wait_s:g} s"))
                continue
            try:
                self._forward(request, observe)
            except BackendError as exc:
                request.fail(exc)
            except Exception as exc:  # noqa: BLE001 - a bug: answered, and its traceback logged
                log.exception("forwarding %s after a recording failed", request.command)
                request.fail(BackendError(f"{request.command!r} could not be forwarded: {exc}"))

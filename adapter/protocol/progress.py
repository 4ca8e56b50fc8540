"""DAP progress of the adapter's long operations: `progressStart` / `progressUpdate` /
`progressEnd` (DAP "Progress" events), and the client's `cancel` of one by `progressId`.

Layer: protocol. Knows DAP event bodies and a `send_event` callable; nothing of sessions,
backends or what the operation is. An operation (a capture's decode, a replayed bundle's
decode, copying a capture's images) gets a `Progress` from `ProgressReporter.start` and calls
it as `progress(message, fraction)`, the signature adapter.recording.recording's decode already
reports through.

Rules (issue 15 item 6):
- Nothing is sent unless the client said `supportsProgressReporting` in `initialize`.
- Nothing is sent for work that ends within DELAY s: `progressStart` goes out on the first
  report after DELAY, so quick decodes (most captures) cost the client nothing.
- Updates are sent at most every UPDATE_EVERY s; `progressEnd` follows every `progressStart`,
  also when the operation failed.
- A `cancel` naming the progressId makes the next report raise Cancelled in the operation's
  thread; the operation ends as a failure that says it was cancelled (its caller turns that
  into an error response or an `output` event, as for any other failure).
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable

from adapter.protocol.errors import Cancelled

DELAY = 0.5
"""Seconds of work before a progress is shown (PTDEBUG_PROGRESS_DELAY changes it: 0 shows
every operation's progress, which the tests use on small bundles)."""
UPDATE_EVERY = 0.1
"""Seconds between two progressUpdate events of one operation, at least."""


class Progress:
    """One operation's progress; call it with (message, fraction 0..1); `end()` when done."""

    def __init__(self, reporter: ProgressReporter, progress_id: str, title: str,
                 cancellable: bool):
        self._reporter = reporter
        self.id = progress_id
        self.title = title
        self.cancellable = cancellable
        self._began = time.monotonic()
        self._delay = _delay()
        self._started = False
        self._last_update = 0.0
        self.cancelled = threading.Event()

    def __call__(self, message: str, fraction: float) -> None:
        if self.cancelled.is_set():
            raise Cancelled(f"{self.title}: cancelled by the client")
        reporter = self._reporter
        if not reporter.supported:
            return
        now = time.monotonic()
        percentage = max(0.0, min(100.0, fraction * 100.0))
        if not self._started:
            if now - self._began < self._delay:
                return
            self._started = True
            self._last_update = now
            reporter.send_event("progressStart", {
                "progressId": self.id, "title": self.title, "message": message,
                "percentage": percentage, "cancellable": self.cancellable})
        elif now - self._last_update >= UPDATE_EVERY:
            self._last_update = now
            reporter.send_event("progressUpdate", {"progressId": self.id, "message": message,
                                                   "percentage": percentage})

    def end(self, message: str = "") -> None:
        """The operation is over (done, failed or cancelled): progressEnd if one was started."""
        self._reporter._forget(self)
        if self._started:
            self._started = False
            body = {"progressId": self.id}
            if message:
                body["message"] = message
            self._reporter.send_event("progressEnd", body)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.end("cancelled" if isinstance(value, Cancelled) else
                 "failed" if value is not None else "")


def _delay() -> float:
    try:
        return max(0.0, float(os.environ.get("PTDEBUG_PROGRESS_DELAY", DELAY)))
    except ValueError:
        return DELAY


class ProgressReporter:
    """The session's running operations with progress; answers `cancel` by progressId."""

    def __init__(self, send_event: Callable[[str, dict], object]):
        self.send_event = send_event
        self.supported = False
        """Set from the client's `initialize` (supportsProgressReporting)."""
        self._ids = itertools.count(1)
        self._running: dict[str, Progress] = {}
        self._lock = threading.Lock()

    def start(self, title: str, cancellable: bool = True) -> Progress:
        progress = Progress(self, f"ptdebug-{next(self._ids)}", title, cancellable)
        with self._lock:
            self._running[progress.id] = progress
        return progress

    def cancel(self, progress_id: str) -> bool:
        """Mark the operation cancelled; False when no running operation has that id."""
        with self._lock:
            progress = self._running.get(progress_id)
        if progress is None or not progress.cancellable:
            return False
        progress.cancelled.set()
        return True

    def _forget(self, progress: Progress) -> None:
        with self._lock:
            self._running.pop(progress.id, None)

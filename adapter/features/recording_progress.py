"""The DAP progress of a record window while it records: "ptdebug: recording thread N" from
the moment the recorder holds the thread until the window closes, cancellable.

Layer: adapter.features. Uses the session's ProgressReporter (adapter/protocol/progress.py)
and the RecorderWorker of the window; knows nothing of what is recorded.

Why: a window runs the thread a thousand times slower than usual (the stepper), for seconds
to a minute; the user saw nothing from the record breakpoint's hit to the capture, and could
not end a window that took too long but by ending the session. A `cancel` of the progress
closes the window where the thread stands (RecorderWorker.end_window("cancelled")): the
capture is kept, complete, its end reason "the user cancelled the recording", and the program
runs on. Sent only to a client that reports progress, after the reporter's usual delay
(PTDEBUG_PROGRESS_DELAY), and ended with the window, also when the recording fails.
"""
from __future__ import annotations

import logging
import threading
import time

from adapter.protocol.errors import Cancelled

log = logging.getLogger(__name__)

TICK = 0.25
"""Seconds between two reports (each may become a progressUpdate, at most every 0.1 s)."""


class RecordingProgress:
    """One window's progress; `end()` when the window is over."""

    def __init__(self, session, worker, thread_id: int, window):
        self.progress = session.progress.start(f"ptdebug: recording thread {thread_id}",
                                               cancellable=True)
        self.worker = worker
        self.window = window
        self.began = time.monotonic()
        self._over = threading.Event()
        self._ticker = threading.Thread(target=self._tick, name="recording progress",
                                        daemon=True)

    @classmethod
    def start(cls, session, worker, thread_id: int, window) -> RecordingProgress:
        recording = cls(session, worker, thread_id, window)
        recording._ticker.start()
        return recording

    def _tick(self) -> None:
        try:
            while not self._over.wait(TICK):
                elapsed = time.monotonic() - self.began
                limit = (self.window.milliseconds or 0) / 1000
                self.progress(f"{elapsed:.1f} s ({self.window.describe()})",
                              min(elapsed / limit, 1.0) if limit else 0.0)
        except Cancelled:
            log.info("recording progress cancelled by the client: closing the window")
            self.worker.end_window("cancelled")
        except Exception:  # noqa: BLE001 - the window goes on; only its progress is gone
            log.exception("recording progress failed")

    def end(self) -> None:
        self._over.set()
        self._ticker.join(timeout=2 * TICK)
        self.progress.end()

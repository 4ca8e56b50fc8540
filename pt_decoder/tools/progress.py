"""A one-line progress bar on stderr for the long commands (decode, dump, export).

Layer: pt_decoder.tools (presentation). Knows nothing of what it measures:
the command gives a total and calls update(done), or names its steps with
phase(label, fraction). The bar is drawn only when the stream is a terminal,
so pipes, files and CI logs get nothing; and only once the work has run
`after` seconds (PTDEBUG_PROGRESS_AFTER, default 0.5), so that short commands
do not flicker. A timer draws the latest state at that moment even when the
command is inside one long step; after that it is redrawn at most ten times
a second, and always at 100 %. close() erases it, leaving the terminal as it
was.

    with Progress(total_bytes, "decode") as bar:
        bar.update(done_bytes)
"""
from __future__ import annotations

import os
import sys
import threading
import time

WIDTH = 30
REDRAW_S = 0.1


def _after_default() -> float:
    try:
        return float(os.environ.get("PTDEBUG_PROGRESS_AFTER", "0.5"))
    except ValueError:
        return 0.5


class Progress:
    """`label [#####.....]  45%  12.3/27.1 MB  1.2 s` on `stream` (default stderr);
    `unit=None` leaves out the amounts (a bar over a fraction of steps)."""

    def __init__(self, total: int, label: str, stream=None, after: float | None = None,
                 unit: str | None = "MB", scale: float = 1e6) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.total = max(int(total), 1)
        self.label = label
        self.after = _after_default() if after is None else after
        self.unit, self.scale = unit, scale
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self._done: int | None = 0          # None: a step of unknown length (no bar)
        self._lock = threading.Lock()
        self.shown = False
        """True once the bar has been drawn (it is erased by close())."""
        self._timer = None
        if self.enabled:
            # the first draw does not wait for the command's next update
            self._timer = threading.Timer(max(self.after, 0.0), self._late_draw)
            self._timer.daemon = True
            self._timer.start()

    def update(self, done: int) -> None:
        """`done` of `total` are finished."""
        if self.enabled:
            self._set(self.label, min(int(done), self.total))

    def phase(self, label: str, fraction: float | None = None) -> None:
        """A named step: `label` and a bar at `fraction` (0..1), or no bar (None)
        for a step whose length is unknown."""
        if self.enabled:
            done = None if fraction is None else int(max(0.0, min(fraction, 1.0)) * self.total)
            self._set(label, done, force=label != self.label)

    def _set(self, label: str, done: int | None, force: bool = False) -> None:
        with self._lock:
            self.label, self._done = label, done
            if not self.enabled:
                return
            now = time.monotonic()
            if now - self.started < self.after:
                return
            if self.shown and not force and done != self.total and now - self._drawn_at < REDRAW_S:
                return
            self._draw(now)

    def _late_draw(self) -> None:
        with self._lock:
            if self.enabled and not self.shown:
                self._draw(time.monotonic())

    def _draw(self, now: float) -> None:
        done = self._done
        if done is None:
            text = "%s ...  %.1f s" % (self.label, now - self.started)
        else:
            frac = done / self.total
            filled = int(WIDTH * frac)
            text = "%s [%s%s] %3d%%" % (self.label, "#" * filled, "." * (WIDTH - filled), int(frac * 100))
            if self.unit:
                text += "  %.1f/%.1f %s" % (done / self.scale, self.total / self.scale, self.unit)
            text += "  %.1f s" % (now - self.started)
        try:
            self.stream.write("\r" + text + "\x1b[K")
            self.stream.flush()
        except (OSError, ValueError):      # the terminal went away: stop drawing
            self.enabled = False
            return
        self.shown = True
        self._drawn_at = now

    def print(self, text: str) -> None:
        """A line of text on the stream (a note, a warning) without garbling the bar:
        the bar is erased, the line written, and the bar drawn again below it."""
        with self._lock:
            if self.shown:
                self.stream.write("\r\x1b[K")
            self.stream.write(text + "\n")
            self.stream.flush()
            if self.shown:
                self._draw(time.monotonic())

    def close(self) -> None:
        """Erase the bar (the line it used is left empty for what follows)."""
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self.shown:
                try:
                    self.stream.write("\r\x1b[K")
                    self.stream.flush()
                except (OSError, ValueError):
                    pass
                self.shown = False
            self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

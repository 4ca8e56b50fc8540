"""A one-line progress bar on stderr for the long commands (decode, dump).

Layer: pt_decoder.tools (presentation). Knows nothing of what it measures:
the command gives a total and calls update(done). The bar is drawn only
when the stream is a terminal, so pipes, files and CI logs get nothing; and
only once the work has run `after` seconds (PTDEBUG_PROGRESS_AFTER, default
0.5), so that short commands do not flicker. Redrawn at most ten times a
second; close() erases it, leaving the terminal as it was.

    with Progress(total_bytes, "decode") as bar:
        bar.update(done_bytes)
"""
from __future__ import annotations

import os
import sys
import time

WIDTH = 30
REDRAW_S = 0.1


def _after_default() -> float:
    try:
        return float(os.environ.get("PTDEBUG_PROGRESS_AFTER", "0.5"))
    except ValueError:
        return 0.5


class Progress:
    """`label [#####.....]  45%  12.3/27.1 MB  1.2 s` on `stream` (default stderr)."""

    def __init__(self, total: int, label: str, stream=None, after: float | None = None,
                 unit: str = "MB", scale: float = 1e6) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.total = max(int(total), 1)
        self.label = label
        self.after = _after_default() if after is None else after
        self.unit, self.scale = unit, scale
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.started = time.monotonic()
        self._drawn_at = 0.0
        self.shown = False
        """True once the bar has been drawn (it is erased by close())."""

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self.started < self.after or (self.shown and now - self._drawn_at < REDRAW_S):
            return
        self._draw(min(done, self.total), now)

    def _draw(self, done: int, now: float) -> None:
        frac = done / self.total
        filled = int(WIDTH * frac)
        text = "%s [%s%s] %3d%%  %.1f/%.1f %s  %.1f s" % (
            self.label, "#" * filled, "." * (WIDTH - filled), int(frac * 100),
            done / self.scale, self.total / self.scale, self.unit, now - self.started)
        self.stream.write("\r" + text + "\x1b[K")
        self.stream.flush()
        self.shown = True
        self._drawn_at = now

    def close(self) -> None:
        """Erase the bar (the line it used is left empty for what follows)."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False
        self.enabled = False

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

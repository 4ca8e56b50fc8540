"""The progress bar (pt_decoder/tools/progress.py) as a unit: what it writes to a stream
that says it is a terminal, and that it writes nothing to one that is not.

Layer: tests of pt_decoder.tools.progress. A StringIO stands in for the terminal (a unit
test of one layer); the real pseudo-terminal and pipe are in test_decode_output.py.
"""
from __future__ import annotations

import io
import time

from pt_decoder.tools.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_nothing_on_a_stream_that_is_not_a_terminal():
    out = io.StringIO()
    bar = Progress(100, "decode", stream=out, after=0)
    bar.update(50)
    bar.phase("writing")
    bar.close()
    assert out.getvalue() == ""


def test_bar_waits_then_draws_and_is_erased():
    out = Terminal()
    bar = Progress(200_000_000, "decode", stream=out, after=0.2)
    bar.update(50_000_000)
    assert out.getvalue() == ""                     # too early: short commands stay quiet
    time.sleep(0.35)                                # the timer draws the latest state
    assert "decode [#######" in out.getvalue() and " 25%" in out.getvalue()
    assert "50.0/200.0 MB" in out.getvalue()
    bar.update(200_000_000)                         # 100 % is drawn even within the redraw limit
    assert "100%" in out.getvalue()
    bar.close()
    assert out.getvalue().endswith("\r\x1b[K")
    bar.update(10)                                  # closed: nothing more
    assert out.getvalue().endswith("\r\x1b[K")


def test_phases_name_the_step_and_unknown_lengths_have_no_bar():
    out = Terminal()
    with Progress(1000, "export", stream=out, after=0, unit=None) as bar:
        time.sleep(0.05)
        bar.phase("decoding thread 7", 0.5)
        bar.phase("writing perfetto")
    text = out.getvalue()
    assert "decoding thread 7 [###############...............]  50%" in text
    assert "writing perfetto ..." in text and "MB" not in text

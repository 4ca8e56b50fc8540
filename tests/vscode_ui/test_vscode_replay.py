"""Opening a saved capture for replay from a real VS Code (the vscode_ui tier): a Record-mode
breakpoint records score() of app.py (as test_vscode_ui.py does), the session is stopped, and
the capture, still listed in Trace Captures, is replayed through the view's context menu
(*Replay Capture*: a `"replay"` launch of its bundle, no program running,
docs/protocol.md "Replaying a bundle"). The replay stops at the end of the recorded history,
and Step Back walks it.

Same machinery as test_vscode_ui.py (conftest.py, workbench.py). Screenshots and views.txt go
to tests/vscode_ui/artifacts/<test>/.
"""
from __future__ import annotations

import re

import pytest
from test_vscode_ui import (
    CALL,
    SCORE_FIRST,
    SCORE_RET,
    _record_then_stop_after,
    _wait_paused_in,
)
from workbench import DOC_TOP

pytestmark = [pytest.mark.vscode_ui, pytest.mark.timeout(300)]


def test_replay_capture_from_trace_captures_then_step_back(vscode):
    bench = vscode()
    _record_then_stop_after(bench)
    bench.expand_pane("Trace Captures")
    row = bench.row("Trace Captures", f"app.py:{SCORE_FIRST} (breakpoint)")
    bench.wait_for("the capture of score() in the Trace Captures view", lambda: row.count())
    # the live session ends (Shift+F5, the Stop button's key): the capture stays listed
    bench.press("Shift+F5")
    bench.wait_for("the debug toolbar to go away (the session ended)",
                   lambda: not bench.page.locator(".debug-toolbar").is_visible())
    assert row.count(), bench.describe()
    bench.context_menu(row, "Replay Capture")
    # the end of the recorded history: score() had returned into main at its call
    top = _wait_paused_in(bench, "main", CALL, f"the replay's stop in main at app.py:{CALL}")
    assert "[recorded Python" in top, bench.describe()
    header = bench.pane_header("Call Stack")
    assert re.search(r"replay of \S*/\.ptdebug/captures/\S+ \(stepper recording, complete\): "
                     r"1 threads?, each at the end of its recorded history", header), bench.describe()
    bench.screenshot("replay-started", clip=DOC_TOP)
    step_back = bench.toolbar_button("Step Back")
    bench.wait_for("the Step Back button in the debug toolbar", lambda: step_back.is_visible())
    step_back.click()
    top = _wait_paused_in(bench, "score", SCORE_RET,
                          f"stepping back in the replay into score at app.py:{SCORE_RET}")
    assert "[recorded Python" in top, bench.describe()
    bench.screenshot("replay-stepped-back", clip=DOC_TOP)

"""The extension in a real VS Code, used through its UI as a person uses it (the vscode_ui tier).

code-server 4.139.1 (VS Code 1.139.1) with the .vsix of this checkout, Chromium driven by Playwright, real debugpy
behind the adapter: open app.py from the Explorer, click the gutter, press F5, read the Call
Stack and Variables views; "Break on Value Change" in the Variables view's context menu; a
breakpoint switched to Record mode with VS Code's breakpoint-mode UI and its capture in the
Trace Captures view; Step Back in the debug toolbar; and the notification a user gets when
ptdebug cannot be started. Set up by scripts/vscode_setup.sh (scripts/test.sh runs it).

Every test keeps screenshots under tests/vscode_ui/artifacts/<test>/, and a failure says what
each view showed (Workbench.describe()).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from conftest import APP, PTDEBUG
from workbench import DOC_BOTTOM, DOC_TOP, UI_TIMEOUT, marker_line

pytestmark = [pytest.mark.vscode_ui, pytest.mark.timeout(300)]

SCORE_RET = marker_line(APP, "score_ret")
SCORE_FIRST = marker_line(APP, "score_first")
CALL = marker_line(APP, "call")
AFTER = marker_line(APP, "after")
FILL = marker_line(APP, "fill")
WRITE = marker_line(APP, "write")


def _top_frame(bench) -> str:
    """The first frame row of the Call Stack view, one line ('' when there is none). Native
    frames VS Code folds away ("Show 2 More Stack Frames") are not frame rows."""
    rows = bench.pane("Call Stack").locator(".monaco-list-row .stack-frame")
    return rows.first.inner_text().replace("\n", " ") if rows.count() else ""


def _wait_paused_in(bench, function: str, line: int, what: str, poll: float = 0.25) -> str:
    """Waits until the Call Stack's top frame is `function` at app.py:`line`; its text."""
    pattern = re.compile(rf"^{re.escape(function)}\b.*app\.py\s*{line}(:\d+)?$")

    def paused():
        top = _top_frame(bench)
        return top if pattern.search(top) else None
    return bench.wait_for(what, paused, poll=poll)


def _start_at(bench, line: int, function: str) -> None:
    """Opens app.py, clicks the gutter at `line`, presses F5 and waits for the stop there."""
    bench.open_file("app.py")
    bench.click_gutter(line)
    bench.focus_editor()
    bench.press("F5")
    _wait_paused_in(bench, function, line, f"the stop in {function} at app.py:{line}")


def test_gutter_breakpoint_f5_stops_in_score_with_its_locals(vscode, artifacts):
    bench = vscode()
    bench.open_file("app.py")
    bench.click_gutter(SCORE_RET)
    bench.screenshot("breakpoint-set")
    bench.focus_editor()
    started = time.monotonic()
    bench.press("F5")
    top = _wait_paused_in(bench, "score", SCORE_RET, f"the stop in score at app.py:{SCORE_RET}",
                          poll=0.02)  # timed (docs/PERFORMANCE.md): read the view often
    f5_to_stop = time.monotonic() - started
    assert "Paused on breakpoint" in bench.pane_header("Call Stack"), bench.describe()
    assert _top_frame(bench) == top
    # the editor shows it too: the paused-here arrow in the margin of line 19
    bench.wait_for(f"the paused-here arrow at line {SCORE_RET} of the editor",
                   lambda: bench.margin_lines("debug-stackframe") == [SCORE_RET])
    # the callers come when VS Code asks for the rest of the stack (it asks for one frame first)
    bench.wait_for(f"main at app.py:{CALL} below score in the Call Stack", lambda: re.search(
        rf"score\s+app\.py\s+{SCORE_RET}:1\s+main\s+app\.py\s+{CALL}:",
        bench.pane_text("Call Stack")))
    # the Variables view lists score()'s locals with their values (a person opens Locals)
    bench.expand_scope("Locals")
    bench.wait_for("n = 4, total = 18 in the Variables view",
                   lambda: bench.variable("n") == "4" and bench.variable("total") == "18")
    assert bench.variable("i") == "3", bench.describe()
    bench.screenshot("stopped-in-score", clip=DOC_TOP)
    dap = _dap_first_stop(bench.workspace / "app.py", SCORE_RET)
    (artifacts / "timing.json").write_text(json.dumps(
        {"f5_to_stop_in_editor_s": round(f5_to_stop, 2), "launch_to_stop_over_dap_s": round(dap, 2)}))
    print(f"F5 -> stop in the editor: {f5_to_stop:.2f} s; ptdebug dap started -> stopped over "
          f"DAP alone: {dap:.2f} s")


def _dap_first_stop(program, line: int, timeout: float = UI_TIMEOUT) -> float:
    """Seconds from starting `ptdebug dap` to its `stopped` event at `program`:`line`, driving
    the adapter over stdio as VS Code does (initialize, launch, setBreakpoints,
    configurationDone): the same stop as the UI test's, without the editor."""
    started = time.monotonic()
    proc = subprocess.Popen([str(PTDEBUG), "dap"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, cwd=os.path.dirname(program))
    seq = 0

    def send(command, arguments):
        nonlocal seq
        seq += 1
        body = json.dumps({"seq": seq, "type": "request", "command": command,
                           "arguments": arguments}).encode()
        proc.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        proc.stdin.flush()

    def read():
        length = 0
        while True:
            header = proc.stdout.readline()
            if not header:
                raise AssertionError("ptdebug dap closed its output")
            if header in (b"\r\n", b"\n"):
                break
            if header.lower().startswith(b"content-length:"):
                length = int(header.split(b":")[1])
        return json.loads(proc.stdout.read(length))

    try:
        send("initialize", {"clientID": "vscode-ui-timing", "adapterID": "ptdebug",
                            "linesStartAt1": True, "columnsStartAt1": True, "pathFormat": "path"})
        send("launch", {"program": str(program), "cwd": os.path.dirname(program),
                        "console": "internalConsole"})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = read()
            if message.get("event") == "initialized":
                send("setBreakpoints", {"source": {"path": str(program)},
                                        "breakpoints": [{"line": line}]})
                send("configurationDone", {})
            elif message.get("event") == "stopped":
                return time.monotonic() - started
        raise AssertionError(f"no stop over DAP in {timeout} s")
    finally:
        proc.kill()
        proc.wait(10)


def test_break_on_value_change_stops_on_the_write(vscode):
    bench = vscode()
    _start_at(bench, FILL, "main")
    bench.expand_scope("Locals")
    row = bench.wait_for("buf in the Variables view", lambda: bench.variable("buf") and
                         bench.pane("Variables").locator('.monaco-list-row[aria-label^="buf, value"]'))
    bench.context_menu(row.first, "Break on Value Change")
    bench.wait_for("the data breakpoint on buf in the Breakpoints view",
                   lambda: "buf: bytearray" in bench.pane_text("Breakpoints"))
    bench.screenshot("data-breakpoint-set")
    bench.press("F5")
    _wait_paused_in(bench, "fill", WRITE, f"the stop on the write at app.py:{WRITE}")
    # the Call Stack's header carries the stop's description: what changed, and who wrote it
    header = bench.pane_header("Call Stack")
    assert "buf changed from [0, 0, 0, 0, 0, 0, 0, 0] to [1, 0, 0, 0, 0, 0, 0, 0]" in header, \
        bench.describe()
    assert "MainThread" in header, bench.describe()
    bench.expand_scope("Locals")
    bench.wait_for("r = 0 in fill's Variables", lambda: bench.variable("r") == "0")
    bench.wait_for(f"the paused-here arrow at line {WRITE} of the editor",
                   lambda: bench.margin_lines("debug-stackframe") == [WRITE])
    bench.screenshot("stopped-on-the-write", clip=DOC_TOP)


def _record_then_stop_after(bench) -> None:
    """Stops at @call, sets a breakpoint on score()'s first line and switches it to Record
    with VS Code's breakpoint-mode UI (the Breakpoints view's *Edit Mode...*), puts a normal
    one on @after and continues: score() is recorded, then the program stops at @after."""
    _start_at(bench, CALL, "main")
    bench.click_gutter(SCORE_FIRST)
    bench.set_breakpoint_mode(SCORE_FIRST, "Record")
    record = bench.pane("Breakpoints").locator(f'.monaco-list-row[aria-label^="app.py {SCORE_FIRST},"]')
    bench.wait_for(f"'Record: {SCORE_FIRST}' in the Breakpoints view",
                   lambda: f"Record: {SCORE_FIRST}" in record.first.inner_text())
    bench.click_gutter(AFTER)
    bench.screenshot("record-breakpoint-set")
    bench.focus_editor()
    bench.press("F5")
    _wait_paused_in(bench, "main", AFTER, f"the stop in main at app.py:{AFTER}")


def test_record_mode_breakpoint_shows_its_capture_in_trace_captures(vscode):
    bench = vscode()
    _record_then_stop_after(bench)
    bench.expand_pane("Trace Captures")
    capture = bench.wait_for(
        "the capture of score() in the Trace Captures view",
        lambda: re.search(rf"app\.py:{SCORE_FIRST} \(breakpoint\)\s*([\d.]+k?) insns",
                          bench.pane_text("Trace Captures")))
    assert capture.group(1) not in ("0", "0.0"), bench.describe()
    bench.screenshot("capture-shown", clip=DOC_BOTTOM)


def test_step_back_in_the_debug_toolbar_walks_back_into_score(vscode):
    bench = vscode()
    _record_then_stop_after(bench)
    step_back = bench.toolbar_button("Step Back")
    bench.wait_for("the Step Back button in the debug toolbar", lambda: step_back.is_visible())
    # The recorded history ends where score() returned into main (@call): the first step back
    # enters it there, the next one is score()'s `return total`.
    step_back.click()
    _wait_paused_in(bench, "main", CALL, f"stepping back to main at app.py:{CALL}")
    assert "entered capture 1" in bench.pane_header("Call Stack"), bench.describe()
    step_back.click()
    top = _wait_paused_in(bench, "score", SCORE_RET,
                          f"stepping back into score at app.py:{SCORE_RET}")
    assert "[recorded Python" in top, bench.describe()
    assert "stepped back one Python line" in bench.pane_header("Call Stack"), bench.describe()
    bench.wait_for(f"the paused-here arrow at line {SCORE_RET} of the editor",
                   lambda: bench.margin_lines("debug-stackframe") == [SCORE_RET])
    # a recorded Python frame has no recorded values: the Variables view says so, and does not
    # go on showing main()'s live locals as if they were score()'s
    bench.wait_for("the 'Locals (not recorded)' scope of the recorded frame in Variables",
                   lambda: bench.pane("Variables").locator(
                       '.monaco-list-row[aria-label="Scope Locals (not recorded)"]').count())
    bench.screenshot("stepped-back-into-score", clip=DOC_TOP)


MISSING = {
    # the setting names a file that does not exist
    "bad-adapterPath": ({"ptdebug.adapterPath": "/nonexistent/bin/ptdebug"},
                        "/nonexistent/bin/ptdebug dap"),
    # no setting, and ptdebug only on code-server's own PATH: the extension host takes the
    # login shell's PATH (docs/vscode.md), finds no `ptdebug` there and falls back to
    # `python3 -c ...`, an interpreter without ptdebug
    "not-on-the-login-PATH": ({"ptdebug.adapterPath": ""}, "python3 -c import sys"),
}


@pytest.mark.parametrize("case", sorted(MISSING))
def test_missing_ptdebug_shows_a_notification(vscode, case):
    settings, command = MISSING[case]
    venv_bin = str(PTDEBUG.parent)
    path = os.pathsep.join([venv_bin, os.environ.get("PATH", "")])
    bench = vscode(user_settings=settings, server_path=path)
    bench.open_file("app.py")
    bench.focus_editor()
    bench.press("F5")
    # (`command`: how the extension would have started the adapter; it now checks first, and
    # says what is wrong instead of starting it)
    text = bench.wait_for(f"a notification about ptdebug (instead of running {command!r})",
                          bench.notifications, timeout=30)
    bench.screenshot("notification")
    assert "ptdebug" in text and re.search(r"install|adapterPath|pythonPath", text,
                                           re.IGNORECASE), \
        f"the notification does not say that ptdebug is missing nor how to fix it:\n{text}"

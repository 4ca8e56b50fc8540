"""Go data and record breakpoints driven in a real VS Code (the vscode_ui tier): a `ptdebug`
Go launch of tests/vscode_ui/go_rec (no Go extension), Delve behind the adapter.

- *Break on Value Change* on a Go local in the Variables view: Delve's own watchpoint
  (docs/go.md, "Data breakpoints"), the stop in the goroutine that writes it, the Call Stack's
  header saying what changed and who wrote it.
- A breakpoint switched to *Record* in the Breakpoints view (*Edit Mode...*), the window on
  main.checksum (launch.json's `recordWindow`): Delve lets go, the ptrace stepper records,
  a new Delve takes the program back (docs/go.md, "Record breakpoints in a Go session"); the
  capture in Trace Captures; at the next stop, *Step Back* in the debug toolbar walks back
  into the recorded checksum() by Go line.

Same machinery as test_vscode_ui.py (conftest.py, workbench.py). Screenshots and views.txt go
to tests/vscode_ui/artifacts/<test>/.
"""
from __future__ import annotations

import pathlib
import re

import pytest
from test_vscode_flows import _call_stack_rows, _go_marker, _go_profile
from test_vscode_ui import _top_frame
from workbench import DOC_BOTTOM, DOC_TOP

pytestmark = [pytest.mark.vscode_ui, pytest.mark.timeout(300)]

GO_REC = pathlib.Path(__file__).resolve().parent / "go_rec"
MAIN_GO = GO_REC / "main.go"
MAIN_FIRST = _go_marker(MAIN_GO, "main_first")
PAYLOAD = _go_marker(MAIN_GO, "payload")
AFTER = _go_marker(MAIN_GO, "after")
BUMP = _go_marker(MAIN_GO, "bump")
BUMP_WRITE = _go_marker(MAIN_GO, "bump_write")
SUM_RETURN = _go_marker(MAIN_GO, "sum_return")
MIX = _go_marker(MAIN_GO, "mix")
SUM_INIT = _go_marker(MAIN_GO, "sum_init")

LAUNCH = {"type": "ptdebug", "request": "launch", "name": "ptdebug: Go package",
          "backend": "go", "program": "${workspaceFolder}", "cwd": "${workspaceFolder}",
          # a record breakpoint's window: from checksum's entry to its return
          "recordWindow": {"function": "main.checksum", "untilReturn": True}}


def _start(vscode):
    bench = vscode(launch=LAUNCH, files=[MAIN_GO, GO_REC / "go.mod"], profile=_go_profile())
    bench.open_file("main.go")
    return bench


def _wait_goroutine_paused_in(bench, function: str, line: int, what: str) -> str:
    """Waits until a goroutine of the Call Stack is paused in `function` at main.go:`line`
    (opening its row, which VS Code leaves collapsed when there are several threads:
    test_vscode_flows.py); the goroutine's row."""
    def paused():
        # Delve marks the goroutine of the stop with `*`; its row shows why it stopped
        stopped = [r for r in _call_stack_rows(bench) if re.match(r"^\*\s*\[Go \d+\]", r)]
        if not stopped:
            return None
        name = re.match(r"^\*\s*(\[Go \d+\][^(]*\(Thread \d+\))", stopped[0])
        thread = bench.pane("Call Stack").locator(".monaco-list-row", has_text=(
            name.group(1) if name else stopped[0])).first
        if thread.get_attribute("aria-expanded") == "false":
            thread.locator(".monaco-tl-twistie").click()  # (a click on the name only selects it)
        frames = [r for r in _call_stack_rows(bench) if not r.lstrip("* ").startswith("[Go ")]
        top = frames[0] if frames else ""
        return stopped[0] if re.search(rf"^{re.escape(function)}\b.*main\.go\s*{line}\b",
                                       top) else None
    return bench.wait_for(what, paused)


def test_go_break_on_value_change_stops_in_the_writing_goroutine(vscode):
    bench = _start(vscode)
    bench.click_gutter(BUMP)
    bench.focus_editor()
    bench.press("F5")  # Delve builds the package (`go build`, warm cache), then runs it
    _wait_goroutine_paused_in(bench, "main.main", BUMP, f"the stop in main.main at main.go:{BUMP}")
    bench.expand_scope("Locals")
    row = bench.wait_for("hits = 0 in the Variables view", lambda: bench.variable("hits") == "0"
                         and bench.pane("Variables").locator(
                             '.monaco-list-row[aria-label^="hits, value"]'))
    bench.context_menu(row.first, "Break on Value Change")
    bench.wait_for("the data breakpoint on hits in the Breakpoints view",
                   lambda: re.search(r"\bhits\b", bench.pane_text("Breakpoints")))
    bench.screenshot("go-data-breakpoint-set")
    bench.press("F5")
    stopped = _wait_goroutine_paused_in(bench, "main.bump", BUMP_WRITE,
                                        f"the stop on the write in main.bump at main.go:{BUMP_WRITE}")
    # the goroutine's row says why it stopped (with several goroutines listed, VS Code shows
    # the stop's description there, not in the view's header): the variable as the user picked
    # it, its values in its own type, the writer (was "*(*[8]byte)(0x...) written with the same
    # value [8]uint8" before adapter/golang/data_breakpoints.py named it)
    assert re.search(rf"hits changed from 0 to 2: written by goroutine 1 in main\.bump at "
                     rf"main\.go:{BUMP_WRITE}", stopped, re.IGNORECASE), bench.describe()
    bench.wait_for(f"the paused-here arrow at line {BUMP_WRITE} of main.go",
                   lambda: bench.margin_lines("debug-stackframe") == [BUMP_WRITE])
    bench.expand_scope("Locals")
    bench.wait_for("by = 2 in main.bump's Variables", lambda: bench.variable("by") == "2")
    bench.screenshot("go-stopped-on-the-write", clip=DOC_TOP)


def test_go_record_mode_breakpoint_then_step_back_into_the_capture(vscode):
    bench = _start(vscode)
    bench.click_gutter(MAIN_FIRST)
    bench.focus_editor()
    bench.press("F5")
    _wait_goroutine_paused_in(bench, "main.main", MAIN_FIRST,
                              f"the stop in main.main at main.go:{MAIN_FIRST}")
    bench.click_gutter(PAYLOAD)
    bench.set_breakpoint_mode(PAYLOAD, "Record", file="main.go")
    record = bench.pane("Breakpoints").locator(f'.monaco-list-row[aria-label^="main.go {PAYLOAD},"]')
    bench.wait_for(f"'Record: {PAYLOAD}' in the Breakpoints view",
                   lambda: f"Record: {PAYLOAD}" in record.first.inner_text())
    bench.click_gutter(AFTER)
    bench.screenshot("go-record-breakpoint-set")
    bench.focus_editor()
    bench.press("F5")
    # Delve lets go at @payload, the stepper records checksum(), a new Delve takes the program
    # back and it stops at @after, the breakpoint as the editor knows it
    _wait_goroutine_paused_in(bench, "main.main", AFTER, f"the stop in main.main at main.go:{AFTER}")
    bench.expand_pane("Trace Captures")
    capture = bench.wait_for(
        "the capture of checksum() in the Trace Captures view",
        lambda: re.search(rf"main\.go:{PAYLOAD} \(breakpoint\)\s*([\d.]+k?) insns",
                          bench.pane_text("Trace Captures")))
    assert capture.group(1) not in ("0", "0.0"), bench.describe()
    bench.screenshot("go-capture-shown", clip=DOC_BOTTOM)
    step_back = bench.toolbar_button("Step Back")
    bench.wait_for("the Step Back button in the debug toolbar", lambda: step_back.is_visible())
    # back from @after: into the recorded history, whose newest Go line in checksum() is its
    # return, then the loop's mixing line
    seen = []
    for _ in range(4):
        before = _top_frame(bench)
        step_back.click()
        bench.wait_for("the top frame to change after Step Back",
                       lambda before=before: _top_frame(bench) not in ("", before))
        top = _top_frame(bench)
        seen.append(top)
        if re.search(rf"^main\.checksum\b.*main\.go\s*{MIX}\b", top):
            break
    assert any(re.search(rf"^main\.checksum\b.*main\.go\s*{SUM_RETURN}\b", t) for t in seen), \
        f"{seen}\n{bench.describe()}"
    assert re.search(rf"^main\.checksum\b.*main\.go\s*{MIX}\b", seen[-1]), \
        f"{seen}\n{bench.describe()}"
    assert "[recorded" in seen[-1], bench.describe()
    # with several goroutines listed, the why of the stop is on the goroutine's row
    assert any(re.search(r"\[Go 1\].*stepped back one line: instruction \d+ of \d+ in capture 1",
                         r, re.IGNORECASE) for r in _call_stack_rows(bench)), bench.describe()
    bench.wait_for(f"the paused-here arrow at line {MIX} of main.go",
                   lambda: bench.margin_lines("debug-stackframe") == [MIX])
    # the capture's hot lines (`ptdebug lsp`'s code lenses): the mixing line ran once per
    # byte of the 8-byte payload, its lens labelled with the stepper's time, not cycles
    bench.wait_for("the hot-line lens '8× · N instructions · ...' above the mixing line",
                   lambda: [t for t in bench.code_lenses() if re.match(
                       r"^8× · \d+ instructions · [\d.]+% of window · .*stepper time", t)])
    bench.screenshot("go-stepped-back-into-checksum", clip=DOC_TOP)

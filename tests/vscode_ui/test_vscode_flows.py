"""More of the extension in a real VS Code, through its UI (the vscode_ui tier, beside
test_vscode_ui.py): a Go program launched with a `ptdebug` configuration (no Go extension
installed), its goroutines in the Call Stack; Reverse Continue in the debug toolbar after a
Record-mode capture; "Break on Value Change" on one element of a numpy array; an attach configuration whose process comes from the extension's process
picker (`${command:pickProcess}`), to a running Go program (Delve attaches with ptrace) and to
a running Python one (ptdebug starts debugpy in it with its own ptrace call,
adapter/python/inject.py: no gdb), stopped at a gutter breakpoint with its locals shown.

Same machinery as test_vscode_ui.py (conftest.py, workbench.py): code-server 4.139.1 with the
.vsix of this checkout, Chromium under Playwright, real Delve and debugpy behind the adapter.
Screenshots and views.txt go to tests/vscode_ui/artifacts/<test>/.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
from conftest import APP
from test_vscode_ui import _record_then_stop_after, _wait_paused_in
from workbench import DOC_TOP, marker_line

pytestmark = [pytest.mark.vscode_ui, pytest.mark.timeout(300)]

HERE = pathlib.Path(__file__).resolve().parent
GO_APP = HERE / "go_app"


def _go_marker(path: pathlib.Path, name: str) -> int:
    """The 1-based line of `// @name` in a Go program."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"// @{name}"):
            return number
    raise LookupError(f"no '// @{name}' marker in {path}")


GO_SCORE_RET = _go_marker(GO_APP / "main.go", "score_ret")
GO_WORKER_CALL = _go_marker(GO_APP / "main.go", "worker_call")

SCORE_ADD = marker_line(APP, "score_add")

GO_ATTACH = {"type": "ptdebug", "request": "attach", "name": "ptdebug: attach to a Go process",
             "backend": "go", "processId": "${command:pickProcess}"}

SERVE = HERE / "serve.py"
SERVE_RET = marker_line(SERVE, "serve_ret")
PY_ATTACH = {"type": "ptdebug", "request": "attach", "name": "ptdebug: attach to a Python process",
             "backend": "python", "processId": "${command:pickProcess}"}

GO_LAUNCH = {"type": "ptdebug", "request": "launch", "name": "ptdebug: Go package",
             "backend": "go", "program": "${workspaceFolder}", "cwd": "${workspaceFolder}"}


def _go_profile() -> str:
    """A ~/.profile that gives the login shell (so the extension host and the adapter) Go and
    Delve as this machine has them, with Go's caches where they are, so that Delve's `go build`
    is warm (a person's own HOME has them; the test's HOME is a fresh folder)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    env = subprocess.run([go, "env", "GOPATH", "GOCACHE", "GOMODCACHE"], capture_output=True,
                         text=True, check=True, timeout=30).stdout.split()
    gopath, gocache, gomodcache = env
    path = os.pathsep.join([os.path.dirname(go), os.path.join(gopath.split(os.pathsep)[0], "bin")])
    return (f'export PATH="{path}:$PATH"\nexport GOPATH="{gopath}"\n'
            f'export GOCACHE="{gocache}"\nexport GOMODCACHE="{gomodcache}"\n')


def _call_stack_rows(bench) -> list[str]:
    """Each row of the Call Stack view (threads/goroutines and frames), one line each."""
    return [label.replace("\n", " ") for label in bench.pane("Call Stack").locator(
        ".monaco-list-row").evaluate_all("rows => rows.map(r => r.innerText)")]


def test_go_launch_gutter_breakpoint_stops_with_goroutines_and_locals(vscode):
    bench = vscode(launch=GO_LAUNCH, files=[GO_APP / "main.go", GO_APP / "go.mod"],
                   profile=_go_profile())
    bench.open_file("main.go")
    bench.click_gutter(GO_SCORE_RET)
    bench.screenshot("breakpoint-set")
    bench.focus_editor()
    bench.press("F5")  # Delve builds the package (`go build`, warm cache), then runs it
    # The Call Stack lists the goroutines as threads: main's (blocked in the receive) and the
    # worker's, which stopped on the breakpoint in score().
    stopped = bench.wait_for(
        "the worker goroutine paused on the breakpoint in main.score (Call Stack)",
        lambda: [r for r in _call_stack_rows(bench)
                 if re.search(r"\[Go \d+\] main\.score\b.*PAUSED ON BREAKPOINT", r)])
    rows = _call_stack_rows(bench)
    assert any(re.search(r"\[Go 1\] main\.main\b", r) for r in rows), bench.describe()
    goroutines = [r for r in rows if re.match(r"^\*?\s*\[Go \d+\]", r)]
    assert len(goroutines) >= 2, bench.describe()
    bench.wait_for(f"the paused-here arrow at line {GO_SCORE_RET} of main.go",
                   lambda: bench.margin_lines("debug-stackframe") == [GO_SCORE_RET])
    # VS Code leaves the stopped goroutine collapsed (1.139, with several threads, Python's
    # too: the editor shows the stop, the Call Stack row does not open); a person opens it.
    thread = bench.pane("Call Stack").locator(".monaco-list-row", has_text=stopped[0].split(
        " PAUSED")[0].strip()).first
    if thread.get_attribute("aria-expanded") == "false":
        thread.locator(".monaco-tl-twistie").click()  # (a click on the name only selects it)
    bench.wait_for(f"main.score main.go {GO_SCORE_RET} under the stopped goroutine",
                   lambda: f"main.score main.go {GO_SCORE_RET}" in _call_stack_rows(bench))
    # Its callers come below, out of the view's few visible rows (the list renders only the
    # rows on screen): a person scrolls down to them.
    bench.pane("Call Stack").locator(".monaco-list").first.hover()
    bench.page.mouse.wheel(0, 600)
    bench.wait_for(f"main.worker main.go {GO_WORKER_CALL} below main.score (scrolled down)",
                   lambda: f"main.worker main.go {GO_WORKER_CALL}" in _call_stack_rows(bench))
    bench.expand_scope("Locals")
    bench.wait_for("n = 4, total = 18 in the Variables view",
                   lambda: bench.variable("n") == "4" and bench.variable("total") == "18")
    bench.screenshot("stopped-in-score", clip=DOC_TOP)


def test_reverse_continue_in_the_debug_toolbar_stops_at_a_breakpoint_in_the_history(vscode):
    bench = vscode()
    _record_then_stop_after(bench)  # score() recorded (Record mode), stopped at @after
    # A breakpoint set now, on a line the recording ran four times: Reverse Continue goes back
    # to its last hit in the recorded history (i = 3), not to the live program.
    bench.click_gutter(SCORE_ADD)
    reverse = bench.toolbar_button("Reverse")
    bench.wait_for("the Reverse (Continue) button in the debug toolbar",
                   lambda: reverse.is_visible())
    bench.screenshot("before-reverse-continue")
    reverse.click()
    top = _wait_paused_in(bench, "score", SCORE_ADD,
                          f"reverse-continuing to score at app.py:{SCORE_ADD}")
    assert "[recorded Python" in top, bench.describe()
    header = bench.pane_header("Call Stack")
    assert "reverse-continued to a breakpoint hit in the recorded history" in header, \
        bench.describe()
    assert f"line {SCORE_ADD}: hit 4 in the recorded history" in header, bench.describe()
    bench.wait_for(f"the paused-here arrow at line {SCORE_ADD} of the editor",
                   lambda: bench.margin_lines("debug-stackframe") == [SCORE_ADD])
    bench.screenshot("reverse-continued-into-score", clip=DOC_TOP)


@pytest.fixture
def scorer():
    """`scorer serve`: go_app built (as Delve builds it: no optimisation, no inlining) in the
    test's workspace, so that its source paths are the editor's main.go; running until the
    test ends. A factory taking the workspace; returns the process."""
    started: list[subprocess.Popen] = []

    def start(workspace: pathlib.Path) -> subprocess.Popen:
        go = shutil.which("go") or "/usr/local/go/bin/go"
        subprocess.run([go, "build", "-gcflags=all=-N -l", "-o", "scorer", "."], cwd=workspace,
                       check=True, timeout=120, env={**os.environ, "CGO_ENABLED": "0"})
        proc = subprocess.Popen([str(workspace / "scorer"), "serve"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)
        started.append(proc)
        assert proc.stdout.readline() == b"score 18\n"  # running, and past its first score
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait(10)


def test_attach_to_go_through_the_process_picker_stops_at_a_breakpoint(vscode, scorer):
    bench = vscode(launch=GO_ATTACH, files=[GO_APP / "main.go", GO_APP / "go.mod"],
                   profile=_go_profile())
    proc = scorer(bench.workspace)
    bench.open_file("main.go")
    bench.click_gutter(GO_SCORE_RET)
    bench.focus_editor()
    bench.press("F5")
    # `${command:pickProcess}`: the extension's quick pick of running Python and Go processes
    # (here Go only: the configuration's backend)
    _pick_process(bench, "Go", "scorer", f"scorer ({proc.pid})")
    stopped = bench.wait_for(
        "a goroutine of the attached process paused on the breakpoint in main.score",
        lambda: [r for r in _call_stack_rows(bench)
                 if re.search(r"\[Go \d+\] main\.score\b.*PAUSED ON BREAKPOINT", r)])
    thread = bench.pane("Call Stack").locator(".monaco-list-row", has_text=stopped[0].split(
        " PAUSED")[0].strip()).first
    if thread.get_attribute("aria-expanded") == "false":
        thread.locator(".monaco-tl-twistie").click()  # (as in the launch test above)
    bench.wait_for(f"main.score main.go {GO_SCORE_RET} under the stopped goroutine",
                   lambda: f"main.score main.go {GO_SCORE_RET}" in _call_stack_rows(bench))
    bench.expand_scope("Locals")
    bench.wait_for("n = 4, total = 18 in the Variables view",
                   lambda: bench.variable("n") == "4" and bench.variable("total") == "18")
    assert proc.poll() is None, "the attached process ended"
    bench.screenshot("stopped-in-the-attached-process", clip=DOC_TOP)


def _pick_process(bench, kind: str, typed: str, label: str) -> None:
    """The extension's quick pick of `${command:pickProcess}`: waits for its prompt, types
    `typed` (a person looks for the program's name) and picks the entry `label`."""
    box = bench.page.locator(".quick-input-widget input")
    bench.wait_for("the process picker (a quick pick)", lambda: box.is_visible())
    bench.wait_for(f"the picker's prompt 'Attach to which {kind} process?'", lambda: (
        f"Attach to which {kind} process?" in (box.get_attribute("placeholder") or "")
        + (box.get_attribute("aria-label") or "")))
    box.fill(typed)
    bench.screenshot("process-picker")
    bench.pick(label)


@pytest.fixture
def server():
    """serve.py run by the tests' interpreter until the test ends; returns the process."""
    started: list[subprocess.Popen] = []

    def start(workspace: pathlib.Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, str(workspace / "serve.py")],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        started.append(proc)
        assert proc.stdout.readline() == b"serving 18\n"
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait(10)


def test_attach_to_python_through_the_process_picker(vscode, server):
    bench = vscode(launch=PY_ATTACH, files=[SERVE])
    proc = server(bench.workspace)
    bench.open_file("serve.py")
    bench.click_gutter(SERVE_RET)
    bench.focus_editor()
    bench.press("F5")
    name = os.path.basename(os.readlink(f"/proc/{proc.pid}/exe"))
    _pick_process(bench, "Python", "serve.py", f"{name} ({proc.pid})")
    _wait_paused_in_serve(bench)
    bench.expand_scope("Locals")
    bench.wait_for("n = 4, total = 18 in the Variables view",
                   lambda: bench.variable("n") == "4" and bench.variable("total") == "18")
    bench.screenshot("stopped-in-the-attached-process", clip=DOC_TOP)


def _wait_paused_in_serve(bench) -> str:
    pattern = re.compile(rf"^score\b.*serve\.py\s*{SERVE_RET}(:\d+)?$")

    def paused():
        rows = bench.pane("Call Stack").locator(".monaco-list-row .stack-frame")
        top = rows.first.inner_text().replace("\n", " ") if rows.count() else ""
        return top if pattern.search(top) else None
    return bench.wait_for(f"the stop in score at serve.py:{SERVE_RET}", paused)



ARRAY_APP = HERE / "array_app.py"
ARRAY_FILL = marker_line(ARRAY_APP, "array_fill")
ARRAY_WRITE = marker_line(ARRAY_APP, "array_write")
ARRAY_LAUNCH = {"type": "ptdebug", "request": "launch", "name": "ptdebug: array_app.py",
                "program": "${workspaceFolder}/array_app.py", "cwd": "${workspaceFolder}",
                "console": "internalConsole"}



def test_break_on_value_change_on_a_numpy_element(vscode):
    bench = vscode(launch=ARRAY_LAUNCH, files=[ARRAY_APP])
    bench.open_file("array_app.py")
    bench.click_gutter(ARRAY_FILL)
    bench.focus_editor()
    bench.press("F5")
    bench.wait_for(f"the stop in main at array_app.py:{ARRAY_FILL}", lambda: re.search(
        rf"^main\s+array_app\.py\s+{ARRAY_FILL}:", bench.pane_text("Call Stack")))
    bench.expand_scope("Locals")
    variables = bench.pane("Variables").locator(".monaco-list-row")
    # debugpy shows a numpy array's elements under a range row ([0:4]); each element row
    # (`2, value np.float64(0.0)`) has no evaluateName, and the adapter names it from its
    # parent's (values[2]) when VS Code asks dataBreakpointInfo for it
    values = bench.wait_for("values in the Variables view", lambda: bench.variable("values") and
                            variables.filter(has_text=re.compile(r"^\s*values\b")).first)
    values.locator(".monaco-tl-twistie").click()
    chunk = variables.filter(has_text=re.compile(r"^\s*\[0:4\]"))
    bench.wait_for("the [0:4] row under values", lambda: chunk.count())
    chunk.first.locator(".monaco-tl-twistie").click()
    element = bench.pane("Variables").locator('.monaco-list-row[aria-label^="2, value"]')
    bench.wait_for("the element 2 of values (under [0:4])", lambda: element.count())
    bench.context_menu(element.first, "Break on Value Change")
    bench.wait_for("the data breakpoint on values[2] in the Breakpoints view",
                   lambda: "values[2]: numpy.ndarray" in bench.pane_text("Breakpoints"))
    bench.screenshot("element-data-breakpoint-set")
    bench.press("F5")
    # the write stops inside numpy's setitem (a native frame, shown dimmed on top); VS Code
    # focuses the first frame with a source, fill() at the assignment
    bench.wait_for(f"fill at array_app.py:{ARRAY_WRITE} in the Call Stack", lambda: re.search(
        rf"\bfill\s+array_app\.py\s+{ARRAY_WRITE}:", bench.pane_text("Call Stack")))
    header = bench.pane_header("Call Stack")
    assert "values[2] changed from 0.0 to 1.0" in header, bench.describe()
    assert "MainThread" in header, bench.describe()
    bench.expand_scope("Locals")
    bench.wait_for("r = 0 and values = array([0., 0., 1., 0.]) in fill's Variables", lambda: (
        bench.variable("r") == "0" and bench.variable("values") == "array([0., 0., 1., 0.])"))
    bench.screenshot("stopped-on-the-element-write", clip=DOC_TOP)

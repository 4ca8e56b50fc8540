"""More of the extension in a real VS Code, through its UI (the vscode_ui tier, beside
test_vscode_ui.py): a Go program launched with a `ptdebug` configuration (no Go extension
installed), its goroutines in the Call Stack.

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

import pytest
from workbench import DOC_TOP

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
    # VS Code leaves the stopped goroutine collapsed (seen with 1.139: the editor shows the
    # stop, the Call Stack row does not open); a person opens it to see the frames.
    thread = bench.pane("Call Stack").locator(".monaco-list-row", has_text=stopped[0].split(
        " PAUSED")[0].strip()).first
    if thread.get_attribute("aria-expanded") == "false":
        thread.locator(".monaco-tl-twistie").click()  # (a click on the name only selects it)
    bench.wait_for(f"main.score main.go {GO_SCORE_RET} under the stopped goroutine",
                   lambda: f"main.score main.go {GO_SCORE_RET}" in _call_stack_rows(bench))
    bench.expand_scope("Locals")
    bench.wait_for("n = 4, total = 18 in the Variables view",
                   lambda: bench.variable("n") == "4" and bench.variable("total") == "18")
    bench.screenshot("stopped-in-score", clip=DOC_TOP)

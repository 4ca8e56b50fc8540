"""The ptdebug adapter killed in the middle of a session, seen from a real VS Code (the vscode_ui
tier): what the user is told, and what becomes of the program.

The session is a launch of app.py stopped at a gutter breakpoint; then the `ptdebug dap`
process VS Code started is sent SIGKILL (an OOM kill, a `kill -9`: nothing of ptdebug runs
after it). The user must get a notification naming the ptdebug adapter, that it ended, and
where to look (`ptdebug.adapterLogFile`); the Run and Debug view must show no session any more;
and the launched program must end, as docs/protocol.md says of a launched program whose client
goes away ("Attach and detach (Python)": the client hangs up -> ended), not be left behind
stopped at the breakpoint.

Same machinery as test_vscode_ui.py (conftest.py, workbench.py). Screenshots and views.txt go
to tests/vscode_ui/artifacts/<test>/.
"""
from __future__ import annotations

import os
import re
import signal
import time

import pytest
from conftest import PTDEBUG
from e2e.dapclient import cmdline, descendants, process_start_time, still_alive
from test_vscode_ui import FILL, _start_at

pytestmark = [pytest.mark.vscode_ui, pytest.mark.timeout(300)]


def _session_processes(sid: int) -> dict[int, list[str]]:
    """pid -> command line of every live process in session `sid` (code-server's own, which it
    and everything it starts share: the extension host, the adapter, debugpy, the program)."""
    found = {}
    for pid in descendants(1):
        try:
            if os.getsid(pid) == sid:
                found[pid] = cmdline(pid)
        except OSError:  # ended meanwhile
            continue
    return found


def test_adapter_killed_mid_session_is_reported_and_the_program_ends(vscode):
    bench = vscode()
    _start_at(bench, FILL, "main")
    processes = _session_processes(bench.server.proc.pid)
    adapters = [pid for pid, argv in processes.items()
                if argv[-1:] == ["dap"] and any(a == str(PTDEBUG) for a in argv)]
    assert len(adapters) == 1, processes
    program = str(bench.workspace / "app.py")
    # debugpy's launcher starts the program as `python .../debugpy --connect HOST:PORT ...
    # app.py` (the launcher's own command line ends in app.py too)
    debuggees = [pid for pid, argv in processes.items()
                 if argv[-1:] == [program] and "--connect" in argv]
    assert len(debuggees) == 1, {pid: argv for pid, argv in processes.items() if program in argv}
    program_started = {debuggees[0]: process_start_time(debuggees[0])}  # (pids are reused)
    bench.screenshot("stopped-before-the-kill")
    os.kill(adapters[0], signal.SIGKILL)
    killed = time.monotonic()
    text = bench.wait_for(
        "a notification that the ptdebug adapter ended",
        lambda: (lambda t: t if re.search(r"ptdebug", t) and re.search(
            r"adapter", t, re.IGNORECASE) else None)(bench.notifications()), timeout=30)
    bench.screenshot("notification")
    # VS Code 1.139 hands the extension's tracker neither status nor signal for a killed adapter
    assert "was killed in the middle of the session" in text, \
        f"the notification does not say what happened to the adapter:\n{text}"
    assert "The program it launched ends with it" in text, text
    assert "ptdebug.adapterLogFile" in text, f"the notification does not say where to look:\n{text}"
    assert "Open Setting" in text, f"no button to open the setting:\n{text}"
    # the session is over: no thread left in the Call Stack, no debug toolbar
    bench.wait_for("the Call Stack to be empty (the session ended)",
                   lambda: "main" not in bench.pane_text("Call Stack"), timeout=30)
    bench.wait_for("the debug toolbar to go away",
                   lambda: not bench.page.locator(".debug-toolbar").is_visible(), timeout=30)
    # the program ptdebug launched does not outlive its session held at the breakpoint
    bench.wait_for(f"the launched program (process {debuggees[0]}) to end",
                   lambda: not still_alive(program_started), timeout=30)
    print(f"adapter killed -> program ended: {time.monotonic() - killed:.2f} s")
    assert not [pid for pid, argv in _session_processes(bench.server.proc.pid).items()
                if any("debugpy" in a for a in argv)], "debugpy outlived the killed adapter"

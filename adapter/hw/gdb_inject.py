"""Whether gdb can call a function inside another process on this machine, tried on a
throwaway process first.

Layer: adapter.hw (mechanism and probe; subprocesses and /proc only, no DAP).

debugpy attaches to a running Python process by pid with gdb: gdb stops the process, calls
into it, and writes its registers back. Where gdb cannot write the thread's extended register
state (XSAVE areas it does not know: seen with gdb 13 on Linux 6.18 on a Xeon VM, "Couldn't
write extended state status: Bad address"), that last step fails and the process dies of it
(a Python process raised `OSError: [Errno 514]` from its sleep and exited). So before a
user's process is handed to gdb, the same call is made into a child of our own: if the child
does not answer and survive, the attach is refused with gdb's words and the user's process is
never touched.
"""
from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import time

from adapter.hw import procfs

PROBE_TIMEOUT = 30.0
"""gdb starts slowly on a loaded machine (symbols of libpython); the probe gives it this long."""


def _sleeping(pid: int, deadline: float) -> bool:
    """Waits until process `pid` sleeps (state S in /proc/PID/stat: it is in its sleep call,
    the state a debuggee waiting for work is in when users attach)."""
    while time.monotonic() < deadline:
        try:
            state = procfs.stat(pid).state
        except OSError:
            return False
        if state.startswith("S"):
            return True
        time.sleep(0.02)
    return False


@functools.lru_cache(maxsize=1)
def gdb_injection_problem() -> str | None:
    """None when gdb called getpid() inside a throwaway Python process and the process lived
    on; else one sentence saying why attaching by pid would fail or harm the target. Run once
    per adapter process (about a second)."""
    gdb = shutil.which("gdb")
    if gdb is None:
        return "gdb is not installed (debugpy attaches by pid with gdb: apt-get install gdb)"
    child = subprocess.Popen([sys.executable, "-I", "-c", "import time; time.sleep(120)"],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        if not _sleeping(child.pid, time.monotonic() + PROBE_TIMEOUT):
            return "the throwaway process for the gdb check did not start"
        try:
            done = subprocess.run([gdb, "-p", str(child.pid), "-batch", "-nx",
                                   "-ex", "call (int)getpid()"],
                                  capture_output=True, text=True, timeout=PROBE_TIMEOUT,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return f"gdb did not finish a call into a test process within {PROBE_TIMEOUT:g} s"
        answered = f"= {child.pid}" in done.stdout
        time.sleep(0.05)  # a process gdb broke dies as soon as it runs again
        alive = child.poll() is None
        if answered and alive:
            return None
        said = [line.strip() for line in (done.stderr + done.stdout).splitlines()
                if "Couldn't" in line or "error" in line.lower() or "denied" in line]
        what = said[-1] if said else f"gdb exited with status {done.returncode}"
        harm = "" if alive else " and the test process died of it"
        return f"gdb cannot call into a process on this machine ({what}){harm}"
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
        child.wait()

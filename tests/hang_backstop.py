"""The test run's backstop against a hang that pytest-timeout does not end, and against
processes left holding the run's output.

Role: a pytest plugin (registered by tests/conftest.py) with two duties.
- A test that runs well past its timeout (pytest-timeout's alarm lost, or a wait that never
  checks for signals) ends the run: the stacks of every thread and the process tree are
  printed, the run's processes are killed, and pytest exits 3. Stop 22's CI ran into its 90
  minutes with nothing printed; this says which test hung, and where.
- When the run ends, a process still holding the run's stdout or stderr (a debuggee, a Delve
  or debugpy server a test left behind) is named and killed: CI reads the output to its end, so
  such a process would hold CI until its own timeout although every test passed. It is a
  warning, not a failure: the leak is the test's to fix, the run's verdict stands.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading
import time

import pytest

GRACE_S = float(os.environ.get("PTDEBUG_HANG_GRACE_S", 120))
"""How long past its pytest-timeout limit a test may run before the backstop ends the run
(tests/test_hang_backstop.py sets it short)."""
DEFAULT_TIMEOUT_S = 300
CHECK_EVERY_S = min(5.0, GRACE_S / 4)


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process this run can see."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(") ", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (OSError, IndexError, ValueError):
            continue
        found[int(entry)] = (ppid, cmd)
    return found


def _descendants(root: int) -> list[int]:
    table = _processes()
    out, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in table.items() if ppid == parent]
        out += children
        frontier += children
    return out


def _pipes_written(pid: int) -> list[str]:
    """The pipes ("pipe:[INODE]") process `pid` holds open for writing."""
    found = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return found
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if not target.startswith("pipe:"):
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                flags = next(int(line.split()[1], 8) for line in info
                             if line.startswith("flags:"))
        except (OSError, StopIteration, ValueError):
            continue
        if flags & os.O_ACCMODE != os.O_RDONLY:
            found.append(target)
    return found


def _ancestors() -> set[int]:
    table, pid, out = _processes(), os.getpid(), set()
    while pid in table and pid not in out:
        out.add(pid)
        pid = table[pid][0]
    return out


def _started(pid: int) -> int:
    """When process `pid` started (clock ticks since boot; /proc/PID/stat field 22), or -1."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(") ", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def _writing_to(pipes: set[str]) -> list[int]:
    """Processes started after this one that hold one of `pipes` open for writing: what the
    tests started. Those that started it, and whatever ran beside it before (CI's own), are
    left alone; whoever reads the run's output holds the pipe too, for reading only."""
    ours, since = _ancestors(), _started(os.getpid())
    return [pid for pid in _processes()
            if pid not in ours and _started(pid) >= since
            and pipes.intersection(_pipes_written(pid))]


def _describe(pids: list[int]) -> str:
    table = _processes()
    return "\n".join(f"  {pid} (parent {table[pid][0]}): {table[pid][1][:300]}"
                     for pid in pids if pid in table)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


class HangBackstop:
    def __init__(self, config):
        self.config = config
        self.lock = threading.Lock()
        self.running: tuple[str, float] | None = None  # (test id, when it must be over)
        # the pipes the run's output goes to (CI's): those of the process that started
        # pytest, whose stdout and stderr pytest's capture has not replaced as it has its own
        self.output_targets = set()
        for fd in (1, 2):
            try:
                target = os.readlink(f"/proc/{os.getppid()}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("pipe:"):
                self.output_targets.add(target)
        threading.Thread(target=self._watch, name="hang-backstop", daemon=True).start()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        marker = item.get_closest_marker("timeout")
        limit = float(marker.args[0] if marker and marker.args else
                      self.config.getoption("timeout", None) or DEFAULT_TIMEOUT_S)
        with self.lock:
            self.running = (item.nodeid, time.monotonic() + limit + GRACE_S)
        try:
            yield
        finally:
            with self.lock:
                self.running = None

    def _watch(self) -> None:
        while True:
            time.sleep(CHECK_EVERY_S)
            with self.lock:
                running = self.running
            if running is not None and time.monotonic() > running[1]:
                self._end_the_run(running[0])

    def _end_the_run(self, nodeid: str) -> None:
        capture = self.config.pluginmanager.getplugin("capturemanager")
        try:
            capture.suspend_global_capture(in_=True)  # the real stderr again
        except Exception:  # noqa: BLE001 - the run is ending; say what can be said
            pass
        err = sys.__stderr__
        children = _descendants(os.getpid())
        err.write(f"\n\nHANG: {nodeid} ran {GRACE_S:g} s past its timeout, which did not end "
                  f"it. The stacks of the test process:\n")
        err.flush()
        faulthandler.dump_traceback(file=err, all_threads=True)
        err.write(f"Its processes (killed now):\n{_describe(children)}\n")
        err.flush()
        _kill(children)
        os._exit(3)

    def pytest_sessionfinish(self, session):
        if not self.output_targets or hasattr(self.config, "workerinput"):
            # an xdist worker: the run's output is its controller's, which does this sweep
            # when every worker is done (a worker's sweep would take the other worker, started
            # after it and writing to the same output, for a leak)
            return
        left = _writing_to(self.output_targets)
        if left:
            session.config.get_terminal_writer().line(
                "\nWARNING: processes the tests left writing to the run's output (a leak to "
                "find; killed now):\n" + _describe(left), red=True)
            _kill(left)

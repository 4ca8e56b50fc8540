"""Leaving a launched Python program running at `disconnect {terminateDebuggee: false}` (issue 34;
docs/protocol.md, "Attach and detach (Python)").

Layer: backends (a part of the Python backend: `DebugpyDetach` is mixed into debugpy.py's
DebugpyBackend, whose attributes it uses). Knows debugpy's launch machinery, nothing of VS Code
or the features.

Why debugpy's own disconnect cannot do it: for a `launch`, debugpy's adapter ends the program
whatever `terminateDebuggee` says (debugpy/adapter/sessions.py `_finalize`: it waits up to
DEBUGPY_PROCESS_EXIT_TIMEOUT, 30 s, for the program to exit, then has the launcher kill its
process group), and its launcher, the program's parent, kills that group too when its
connection to the adapter closes or when it exits (launcher/debuggee.py `kill`, registered
with atexit). ptdebug gave debugpy 5 s, then ended it, and the program died with it.

So ptdebug lets go of the program itself:
1. In the program, through `evaluate` (debugpy still answers): pydevd's own disconnect,
   `request_disconnect(resume_threads=True)` (what pydevd does for a client that leaves an
   attached program: every breakpoint removed, every thread resumed, thread events off), its
   output redirection off, and each of the standard descriptors that is a pipe (the launcher
   reads the program's output from pipes) replaced by /dev/null: the reader is going away,
   and a write into a pipe without reader fails (EPIPE).
2. debugpy's adapter is stopped (SIGSTOP: it cannot react to what follows), the launcher is
   killed (SIGKILL: no atexit, no kill of the program's group), then the adapter. pydevd in
   the program sees its connection to the adapter close and ends its own threads (its
   reader's `_terminate_on_socket_close`), as when the adapter of an attached program dies.
3. The program, now a child of `ptdebug dap` (a child subreaper), is marked to outlive it
   (adapter/left_running.py).

Where step 1 fails (debugpy does not answer, the program has no pydevd), debugpy's own
disconnect is sent and the client is told that the program ends with the session.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from adapter.hw import procfs
from adapter.left_running import leave as leave_running
from adapter.protocol.errors import AdapterError
from adapter.protocol.messages import Event, Response

if TYPE_CHECKING:
    from adapter.protocol.channel import Channel

    from .base import BackendHooks

log = logging.getLogger("ptdebug.dap")

LET_GO_SOURCE = '''
def let_go():
    import os, stat, pydevd
    from _pydevd_bundle.pydevd_api import PyDevdAPI
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in (0, 1, 2):
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    os.dup2(null, fd)
            except OSError:
                pass  # a descriptor the program closed: nothing to replace
    finally:
        os.close(null)
    debugger = pydevd.get_global_debugger()
    debugger.enable_output_redirection(False, False)
    PyDevdAPI().request_disconnect(debugger, resume_threads=True)
    return "let go"
'''
"""Step 1 of the header, run in the program."""
LET_GO = f"(lambda ns: (exec({LET_GO_SOURCE!r}, ns), ns['let_go']())[1])({{}})"
"""The expression that runs LET_GO_SOURCE; evaluates to 'let go'."""
LET_GO_S = 5.0
"""Seconds debugpy gets to answer the evaluation of LET_GO."""


class DebugpyDetach:
    """`disconnect {terminateDebuggee: false}` after a launch, for DebugpyBackend: the
    attributes below are its (documented there)."""

    hooks: BackendHooks
    pid: int | None
    launched: bool
    closing: bool
    process: subprocess.Popen | None
    channel: Channel | None

    def disconnect(self, arguments: dict | None,
                   answered: Callable[[Response], None]) -> None:
        """debugpy's own disconnect, unless a program ptdebug launched is to run on: then the
        steps of the header, and `answered` once the program is on its own."""
        terminate = (arguments or {}).get("terminateDebuggee", self.launched)
        if terminate or not self.launched or self.process is None or self.pid is None:
            self.channel.send_request("disconnect", arguments, answered)
            return
        started = time.monotonic()
        why = self._let_go()
        if why is not None:
            log.warning("disconnect: process %d not let go: %s", self.pid, why)
            self.hooks.backend_event(_output(
                f"the program (process {self.pid}) could not be let go ({why}): it ends "
                "with this session, as debugpy ends a program it launched"))
            self.channel.send_request("disconnect", arguments, answered)
            return
        log.info("disconnect: process %d let go in %.3f s", self.pid,
                 time.monotonic() - started)
        answered(Response({"type": "response", "seq": 0, "request_seq": 0,
                           "command": "disconnect", "success": True}))

    def _let_go(self) -> str | None:
        """Steps 1-3 of the header; None when the program runs on its own, else why not
        (nothing was changed then but what step 1 did in the program)."""
        launcher = _parent(self.pid)
        if launcher is None or b"debugpy" not in _cmdline(launcher):
            return f"its parent is not debugpy's launcher (parent {launcher})"
        try:
            response = self.request("evaluate", {"expression": LET_GO, "context": "repl"},
                                    timeout=LET_GO_S)
        except AdapterError as exc:
            return exc.message
        if not response.success or "let go" not in str((response.raw.get("body") or {})
                                                      .get("result")):
            return (response.error_text or "pydevd did not let go").strip().splitlines()[-1]
        self.closing = True  # debugpy's end is expected from here
        leave_running(self.pid)
        adapter = self.process
        _signal(adapter.pid, signal.SIGSTOP)
        _signal(launcher, signal.SIGKILL)
        _signal(adapter.pid, signal.SIGKILL)
        try:
            adapter.wait(2.0)
        except subprocess.TimeoutExpired:
            log.warning("debugpy's adapter (pid %d) did not end after SIGKILL", adapter.pid)
        return None


def _parent(pid: int) -> int | None:
    try:
        return procfs.stat(pid).ppid
    except OSError:
        return None


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _output(text: str) -> Event:
    return Event({"type": "event", "seq": 0, "event": "output",
                  "body": {"category": "important", "output": f"ptdebug: {text}\n"}})

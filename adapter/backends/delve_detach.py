"""Leaving a Go program as it was at `disconnect {terminateDebuggee: false}` (issue 34;
docs/protocol.md, "Attach and detach, Go").

Layer: backends (a part of the Go backend: `DelveDetach` is mixed into delve.py's DelveBackend,
whose __init__ holds the state it uses). Delve's own DAP `disconnect` to a multiclient Delve
only closes the DAP connection and leaves the program as it is, traced, with every INT3 Delve
planted (the user's breakpoints and Delve's own at runtime.fatalpanic, fatalthrow...); and
Delve's JSON-RPC `Detach`, which clears them all and lets go of every thread, waits while the
program runs (it needs the target, which a running `Continue` holds). So ptdebug stops the
program first (DAP `pause`: the Continue is its DAP server's), then asks
`Detach{Kill: false}`, and answers the client only when the program runs untraced again. A
program ptdebug launched is also made to outlive ptdebug (HeldProgram.outlive_ptdebug: no
parent-death signal, its output to /dev/null).

A Delve that does not let go in time is killed, and the bytes it left are put back by ptdebug
(adapter/hw/left_breakpoints.py), which the client is told. Knows nothing of the requests
Delve answers, nor of recordings (delve_handover.py).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from adapter.hw import hold, left_breakpoints, procfs
from adapter.left_running import leave as leave_running
from adapter.protocol.errors import BackendError
from adapter.protocol.messages import Event, Response

from .delve_handover import _RetiredDelve
from .delve_process import STOP_GRACE, _kill_group, _tracer

if TYPE_CHECKING:
    from adapter.protocol.channel import Channel

    from .base import BackendHooks
    from .delve_away import AwayRequests
    from .delve_rpc import DelveRpc

log = logging.getLogger("ptdebug.dap")

HALT_S = 5.0
"""Seconds Delve gets to stop a running program before it detaches."""
DETACH_S = 5.0
"""Seconds Delve gets to clear its breakpoints and let go of every thread."""


class DelveDetach:
    """`disconnect` without ending the program, for DelveBackend: the attributes below are set
    by its __init__ (documented there)."""

    hooks: BackendHooks
    pid: int | None
    launched: bool
    closing: bool
    process: subprocess.Popen | None
    channel: Channel | None
    rpc: DelveRpc | None
    left_running: bool
    program: object
    _wait_connected: Callable[[str], None]
    _connected: threading.Event
    _away: AwayRequests
    _leave_lock: threading.Lock
    _leaving: dict | None
    _returning: bool
    _left_without_delve: str | None

    def disconnect_coming(self, arguments: dict | None) -> None:
        # from here a recording that ends lets go of the program (or ends it) as the client
        # asks, instead of bringing a new Delve back only to detach it (_leave_instead)
        with self._leave_lock:
            self._leaving = dict(arguments or {})

    def disconnect(self, arguments: dict | None,
                   answered: Callable[[Response], None]) -> None:
        """The client's `disconnect`: Delve's own, unless the program is to be left running
        by a Delve ptdebug started, or Delve is away for a recording; then off this thread,
        and `answered` once the program is as the client asked."""
        terminate = (arguments or {}).get("terminateDebuggee", self.launched)
        if self.process is None or self.pid is None or (terminate and self._connected.is_set()):
            # ended by Delve (close() asks Detach{Kill}), or a Delve the user runs, which
            # keeps the program: Delve's own disconnect does what the client asked
            self.channel.send_request("disconnect", arguments, answered)
            return
        self.closing = True  # Delve's end is expected from here
        threading.Thread(target=self._leave_running, args=(arguments, terminate, answered),
                         name="delve-detach", daemon=True).start()

    def _leave_running(self, arguments: dict | None, terminate: bool,
                       answered: Callable[[Response], None]) -> None:
        started = time.monotonic()
        try:
            # Delve away for a recording: the window was closed (the session's disconnect
            # does that first), and its end let the program go without a new Delve
            # (_leave_instead), unless that Delve was already attaching: then it is the one
            # to let go
            self._wait_connected("disconnect")
        except BackendError as exc:
            log.warning("disconnect: %s", exc.message)
        text = self._left_without_delve
        if text is None and terminate:
            self.channel.send_request("disconnect", arguments, answered)
            return
        if text is None:
            text = self._detach_untouched()
        if self.program is not None and not terminate:  # launched: it must outlive ptdebug too
            text = "; ".join(filter(None, (text, self._outlive_ptdebug())))
        log.info("disconnect: program %d %s in %.3f s", self.pid,
                 "ended" if terminate else "let go", time.monotonic() - started)
        if text:
            self.hooks.backend_event(_output(text))
        self.left_running = not terminate
        answered(Response({"type": "response", "seq": 0, "request_seq": 0,
                           "command": "disconnect", "success": True}))

    def _leave_instead(self, while_held: Callable[[], object] | None) -> bool:
        """take_back's other way, once the client has asked to disconnect: no new Delve (its
        attach alone takes 0.5-1 s: `dlv attach` stops every thread and reads the binary);
        ptdebug holds every thread itself for `while_held()` (the end park undone, sysmon's
        record given back) and lets them go, or ends the program if asked to. False when no
        disconnect was asked: the caller brings Delve back."""
        with self._leave_lock:
            arguments = self._leaving
            if arguments is None:
                self._returning = True
                return False
        text = ""
        try:
            if arguments.get("terminateDebuggee", self.launched):
                self._end_program()
            else:
                text = self._let_go_held(while_held)
        except Exception as exc:  # noqa: BLE001 - told to the user by the disconnect
            log.exception("letting go of process %s after the recording failed", self.pid)
            text = f"after the recording, process {self.pid} could not be let go: {exc}"
        finally:
            self._left_without_delve = text
            self._away.leave("the client disconnected while Delve was away for a recording")
            self._connected.set()
        log.info("the recording ended after the client asked to disconnect: no Delve comes "
                 "back, process %d %s", self.pid, "ended" if arguments.get(
                     "terminateDebuggee", self.launched) else "let go")
        return True

    def _let_go_held(self, while_held: Callable[[], object] | None) -> str:
        """Every thread held (PTRACE_SEIZE + INTERRUPT) for `while_held()`, then let go
        untraced; "" when done, else what the user must know."""
        try:
            held = hold.hold_all(self.pid)
        except (hold.TracedElsewhere, OSError) as exc:
            if while_held is not None:
                # a thread spinning on the end park runs nothing of the program, and unpark
                # writes the two bytes in one write: better than leaving it spinning for good
                while_held()
            return (f"process {self.pid} could not be held to undo the recording's park "
                    f"({exc}); it was undone while the program ran")
        try:
            if while_held is not None:
                while_held()
        finally:
            hold.let_go(held)
        return ""

    def _end_program(self) -> None:
        """terminateDebuggee while no Delve holds the program: SIGKILL, and wait until it is
        gone (reaped, or a zombie its parent reaps)."""
        if self.program is not None:
            self.program.kill()  # our child: killed and reaped
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + STOP_GRACE
        while time.monotonic() < deadline:
            try:
                if procfs.stat(self.pid).state == "Z":
                    return
            except OSError:
                return
            time.sleep(0.005)
        log.warning("process %d did not end within %g s of SIGKILL", self.pid, STOP_GRACE)

    def _detach_untouched(self) -> str | None:
        """Halt (if running) and Detach{Kill: false}; None when Delve let go of a program
        with its own code bytes, else what the user must know of how it was let go."""
        rpc = self.rpc
        try:
            if rpc.state().get("Running"):
                self._pause()
            self.channel.retarget(_RetiredDelve())  # Delve's last words are not the client's
            rpc.detach(kill=False, timeout=DETACH_S)
        except BackendError as exc:
            log.warning("Delve did not let go of process %d: %s", self.pid, exc.message)
            return self._kill_and_put_back(exc.message)
        finally:
            rpc.close()
        # Delve has let go of every thread when Detach answers: the program runs from here
        # (Delve exits meanwhile, close() waits for that)
        if any(_tracer(tid) for tid in _threads(self.pid)):
            return self._kill_and_put_back("the program was still traced after Detach")
        return None

    def _outlive_ptdebug(self) -> str | None:
        """The program ptdebug launched is let live on after ptdebug
        (adapter/golang/launch.py, HeldProgram.outlive_ptdebug); None when it is, else what
        the user must know."""
        try:
            self.program.outlive_ptdebug()
            leave_running(self.pid)
        except OSError as exc:
            log.warning("process %d cannot outlive ptdebug: %s", self.pid, exc)
            return (f"process {self.pid}, started by ptdebug, could not be made to outlive it "
                    f"({exc}): it ends with this session")
        return None

    def _pause(self) -> None:
        """Stop the running program through Delve's DAP server, which runs it: a JSON-RPC
        halt is not that server's, which continues again after a stop it did not ask for
        (service/dap/server.go, resumeOnceAndCheckStop), so the halt would wait forever for
        the target. Its `stopped` and Delve's last words are not the client's any more."""
        channel = self.channel
        answered = threading.Event()
        channel.send_request("pause", {"threadId": 1}, lambda response: answered.set())
        channel.retarget(_RetiredDelve())  # the pause's `stopped` is not the client's
        if not answered.wait(HALT_S):
            raise BackendError(f"Delve did not pause the program within {HALT_S:g} s")

    def _kill_and_put_back(self, why: str) -> str | None:
        """Delve failed to let go: kill it, and put back the bytes it planted. None when the
        program had ended anyway (Delve could not detach from nothing)."""
        _kill_group(self.process.pid, signal.SIGKILL)
        try:
            self.process.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            pass
        if not os.path.exists(f"/proc/{self.pid}"):
            return None
        try:
            done = left_breakpoints.put_back(self.pid)
        except OSError as exc:
            return (f"Delve did not let go of process {self.pid} ({why}) and was killed; "
                    f"ptdebug could not put back the code under its breakpoints ({exc}): "
                    "the program may die of SIGTRAP at one of them")
        if done is None:
            return (f"Delve did not let go of process {self.pid} ({why}); it is still "
                    "traced by another debugger")
        return (f"Delve did not let go of process {self.pid} ({why}) and was killed; "
                f"ptdebug put back {len(done.addresses)} byte(s) of code under its "
                "breakpoints and left the program running, untraced")


def _threads(pid: int) -> list[int]:
    try:
        return procfs.tasks(pid)
    except OSError:
        return []


def _output(text: str) -> Event:
    return Event({"type": "event", "seq": 0, "event": "output",
                  "body": {"category": "important", "output": f"ptdebug: {text}\n"}})

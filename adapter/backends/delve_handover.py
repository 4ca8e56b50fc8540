"""Letting go of a Go program for a recording and taking it back: the Go backend's
powers.HandsOverThreads (record breakpoints; docs/go.md, "Record breakpoints in a Go session").

Layer: backends (a part of the Go backend: `DelveHandover` is mixed into delve.py's
DelveBackend, whose __init__ holds the state it uses). Delve holds the program with ptrace,
which a recorder needs for itself: hand_over() clears Delve's breakpoints at the thread's pc,
parks the thread there (adapter/golang/park.py) and lets Delve detach and end; take_back()
attaches a new Delve (started by delve_process.py), gives it the client's breakpoints again
under the same ids (adapter/golang/breakpoint_ids.py) and lets the program run. In between,
the client's requests are answered or queued by delve_away.py; the features' own requests
wait for it (_wait_connected). It also answers what a recording asks of Delve
beforehand: the OS thread a goroutine is on (thread_of), where the recorder reads a thread's
goroutine id (thread_id_probe), and which of the user's breakpoints close the window
(window_stops). Knows nothing of the recorder or of the features that drive it.
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from adapter.golang.park import Parked, park, unpark
from adapter.protocol.errors import AdapterError, BackendError, BackendGone
from adapter.protocol.messages import Event, Request, Response

from .delve_process import (
    CONNECT_TIMEOUT,
    HEADLESS,
    STOP_GRACE,
    _kill_group,
    _tracer,
    find_dlv,
)

if TYPE_CHECKING:
    from adapter.golang.breakpoint_ids import BreakpointIds
    from adapter.protocol.channel import Channel

    from .base import BackendHooks
    from .delve_away import AwayRequests
    from .delve_rpc import DelveRpc

log = logging.getLogger("ptdebug.dap")

HANDOVER_WAIT = float(os.environ.get("PTDEBUG_HANDOVER_WAIT", "300"))
"""Seconds a request waits for the Delve that comes back after a recording."""


class DelveHandover:
    """hand_over / take_back and what a recording asks of Delve first, for DelveBackend: the
    attributes below are set by its __init__ (documented there); `_run_dlv` comes from
    delve_process.DelveProcesses, `_connect` and `_close_socket` from DelveBackend."""

    hooks: BackendHooks
    pid: int | None
    process: subprocess.Popen | None
    program: object
    channel: Channel | None
    rpc: DelveRpc | None
    address: tuple[str, int] | None
    breakpoint_ids: BreakpointIds
    _initialize_arguments: dict
    _attach_arguments: dict
    _connected: threading.Event
    _away: AwayRequests
    _leave_lock: threading.Lock
    _returning: bool
    _leave_instead: Callable[[Callable[[], object] | None], bool]

    def hand_over(self, tid: int, pc: int) -> Parked:
        """Let go of the program so that a recorder can trace thread `tid`, stopped at `pc`:
        Delve's breakpoints at `pc` are cleared, the thread is parked there
        (adapter/golang/park.py: it spins in place without running an instruction of the
        program, and is not preempted) and Delve detaches. The recorder unparks it once it
        holds it. Requests wait until take_back()."""
        if self.program is None and not (self.process is not None and self.pid is not None):
            raise AdapterError("recording needs a program ptdebug launched or attached to; "
                               "a session connected to a Delve the user runs cannot record")
        if self.pid is None:
            raise AdapterError("the program's process id is not known yet")
        rpc = self.rpc
        for bp in rpc.call("ListBreakpoints", All=False).get("Breakpoints") or []:
            if pc == bp.get("addr") or pc in (bp.get("addrs") or []):
                rpc.call("ClearBreakpoint", Id=bp["id"])
        parked = park(self.pid, pc, *self._preemption_guard(tid))
        log.info("thread %d parked at %#x for a recording (%d runtime words saved, sysmon "
                 "record %s)", tid, pc, len(parked.saved),
                 "pushed ahead" if parked.schedwhen_address else "untouched")
        threads = self.channel.request("threads", {}, CONNECT_TIMEOUT)
        if threads.success:  # answered from here while Delve is away (delve_away.py)
            self._away.threads_body = threads.raw.get("body") or {"threads": []}
        self._connected.clear()
        self._fast_path(False)  # requests wait in forward() for the Delve that comes back
        channel, process = self.channel, self.process
        channel.retarget(_RetiredDelve())  # its last words (terminated...) are not ours
        try:
            rpc.detach(kill=False, timeout=STOP_GRACE + 2)
        except BackendError as exc:
            log.warning("Delve's Detach: %s", exc.message)
        finally:
            rpc.close()
            self._close_socket()
            try:
                process.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                _kill_group(process.pid, signal.SIGKILL)
                process.wait(STOP_GRACE)
        if _tracer(self.pid):
            unpark(parked)  # never leave a thread spinning
            self.hooks.backend_gone(f"Delve did not let go of process {self.pid} for a "
                                    "recording")
            raise BackendError(f"Delve did not let go of process {self.pid}")
        return parked

    def _preemption_guard(self, tid: int) -> tuple[int | None, object]:
        """(fs_base of `tid`, the binary's RuntimeLayout) for park(); (None, None) where the
        layout cannot be read (the park then works without the guard)."""
        from adapter.golang.runtime_layout import LayoutError, layout_of
        try:
            layout = layout_of(os.readlink(f"/proc/{self.pid}/exe"))
            registers = self.rpc.call("ListRegisters", ThreadID=tid).get("Regs") or []
            fs_base = next(int(r["Value"], 16) for r in registers if r["Name"] == "Fs_base")
        except (LayoutError, OSError, BackendError, StopIteration, ValueError) as exc:
            log.warning("parking thread %d without the preemption guard: %s", tid, exc)
            return None, None
        return fs_base, layout

    def window_stops(self, goroutine: int, start_pc: int,
                     record_lines: set[tuple[str, int]]) -> tuple[dict, dict]:
        """(watched, unwatched) address -> adapter.golang.window_stops.WindowStop: where a
        recording of `goroutine` that starts at `start_pc` must close so that Delve, back,
        stops at the user's breakpoint; conditions are evaluated in the goroutine now."""
        from adapter.golang.window_stops import window_stops
        rpc = self.rpc
        listed = rpc.call("ListBreakpoints", All=False).get("Breakpoints") or []

        def holds(condition: str) -> bool | None:
            try:
                value = rpc.eval(condition, goroutine).get("value")
            except BackendError as exc:
                log.info("condition %r in goroutine %d: %s", condition, goroutine, exc.message)
                return None
            return {"true": True, "false": False}.get(value)

        return window_stops(listed, start_pc, record_lines, holds)

    def thread_id_probe(self) -> dict:
        """Where the recorder finds a thread's goroutine id (the runtime layout is read once
        per binary, here, instead of in every recorder process)."""
        from adapter.golang.runtime_layout import LayoutError, layout_of
        try:
            layout = layout_of(os.readlink(f"/proc/{self.pid}/exe"))
        except (LayoutError, OSError) as exc:
            raise AdapterError(f"cannot read goroutine ids in this binary: {exc}") from None
        from adapter.golang.thread_lock import LockLayout
        lock = LockLayout.of(layout, self.pid)
        return {"tls_g_offset": layout.tls_g_offset, "goid_offset": layout.goid_offset,
                "lock": lock.to_json() if lock is not None else None,
                "park_at": self._gopark(layout)}

    def _gopark(self, layout) -> int | None:
        """runtime.gopark's address in the process: a Go window closes before it runs (the
        goroutine parks), so that Delve comes back at once instead of after the window's
        time bound (issue 34; docs/go.md, "When the goroutine parks"). None where the binary
        has no symbol for it."""
        from adapter.hw.mappings import load_bias
        address = layout.symbols.get("runtime.gopark")
        if address is None:
            return None
        try:
            return address + load_bias(self.pid, layout.path)
        except OSError:
            return address

    def thread_of(self, goroutine: int) -> tuple[int, int]:
        """(OS thread id, pc) of a goroutine stopped on a thread; AdapterError if it is not
        on one (a parked goroutine has no thread to record)."""
        for thread in self.rpc.state().get("Threads") or []:
            if thread.get("goroutineID") == goroutine:
                return int(thread["id"]), int(thread["pc"])
        raise AdapterError(f"goroutine {goroutine} is not running on an OS thread; only a "
                           "goroutine stopped on a thread can be recorded")

    def take_back(self, while_held=None) -> None:
        """Attach a new Delve to the program after a recording, give it the client's
        breakpoints again (same ids for the client) and let the program run.
        `while_held()` runs once Delve holds every thread, before any breakpoint is set.
        After the client asked to disconnect, no Delve comes back: the program is let go (or
        ended) as asked, at once (delve_detach.py, _leave_instead)."""
        if self._leave_instead(while_held):
            return
        try:
            self.address = self._run_dlv([find_dlv(), "attach", str(self.pid), *HEADLESS],
                                         os.getcwd(), dict(os.environ), relay=False)
            self._connect()  # Delve accepts connections once it has attached (not when listening)
            if while_held is not None:
                while_held()
            self.breakpoint_ids.new_delve()
            channel = self.channel
            self._answer(channel.request("initialize", self._initialize_arguments,
                                         CONNECT_TIMEOUT), "initialize")
            # a `pause` the client sent while Delve was away (answered then, delve_away.py): the
            # new Delve keeps the program stopped (a DAP pause sent right after its
            # configurationDone was never answered: Delve had not begun to run the program)
            paused = self._away.pause_when_back
            self._away.pause_when_back = False
            self._away.entry_is_pause = paused
            self._answer(channel.request("attach", dict(self._attach_arguments,
                                                        stopOnEntry=paused), CONNECT_TIMEOUT),
                         "attach")
            for command, arguments in list(self.breakpoint_ids.requests.values()):
                response = channel.request(command, arguments, CONNECT_TIMEOUT)
                if response.success:
                    self.breakpoint_ids.answered(command, arguments, response.raw.get("body"),
                                                 replay=True)
                else:
                    log.warning("replaying %s: %s", command, response.error_text)
            self._answer(channel.request("configurationDone", {}, CONNECT_TIMEOUT),
                         "configurationDone")
            log.info("Delve is back (%d breakpoint requests given again)",
                     len(self.breakpoint_ids.requests))
        except BaseException as exc:
            # no debugger holds the program now: the session ends (a launched program is
            # ended with it at close) rather than let it run on unseen
            self.hooks.backend_gone(f"Delve could not attach again after a recording: {exc}")
            raise
        finally:
            with self._leave_lock:
                self._returning = False
            self._connected.set()
            self._fast_path(True)

    def _fast_path(self, enabled: bool) -> None:
        """The session's fast relay (protocol/relay.py) may carry plain requests only while a
        Delve is connected."""
        update = getattr(self.hooks, "update_fast_path", None)
        if update is not None:
            update(enabled)

    @staticmethod
    def _answer(response: Response, what: str) -> None:
        if not response.success:
            raise BackendError(f"the Delve attached after the recording refused {what}: "
                               f"{response.error_text}")

    def _wait_connected(self, command: str) -> None:
        if not self._connected.wait(HANDOVER_WAIT):
            raise BackendError(f"{command!r}: Delve is still away for a recording after "
                               f"{HANDOVER_WAIT:g} s")


class _RetiredDelve:
    """Channel handlers for the connection of a Delve that let go of the program: what it
    says while it goes (terminated, the connection closing) is not the session's end."""

    def default_event(self, event: Event) -> None:
        log.debug("retired Delve: %s event dropped", event.event)

    def default_request(self, request: Request) -> None:
        request.fail(BackendGone("this Delve has let go of the program"))

    def channel_closed(self, reason: str) -> None:
        log.debug("retired Delve's connection closed (%s)", reason)

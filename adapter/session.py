"""One debug session: the VS Code side, the backend debugger, and the features between them.

Layer: session, the hub of the adapter. It owns the client channel (handlers in client.py), the
backend (chosen by `backends.create_backend`) and the features (memory, disassembly, and the
slots where data breakpoints, recording and reverse stepping plug in). Features never talk to
each other; they talk through the Session: its `backend`, `pid`, `client` and
`announce_capabilities`. It does not know about hardware or trace formats.

Life of a session: `initialize` is answered here with ptdebug's own capabilities (the backend is
not chosen yet); `launch`/`attach` starts the backend, whose capabilities are merged and sent in
a `capabilities` event; requests are then forwarded or answered locally; the session ends when
the client disconnects or closes the stream, or shortly after the backend dies (the client then
gets `terminated` first, so it never waits on a dead debugger).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, BinaryIO

from adapter.backends import Backend, create_backend
from adapter.client import ClientHandlers
from adapter.features.record_breakpoints import install_trace_features
from adapter.features.run_control import RunControl
from adapter.features.thread_guard import ThreadGuard
from adapter.hw import procfs
from adapter.powers import (
    ServesCustomRequests,
    ServesDataBreakpoints,
    ServesInstructionBreakpoints,
    ShowsOriginalBytes,
)
from adapter.protocol.channel import DEFERRED, Channel
from adapter.protocol.errors import (
    AdapterError,
    BackendGone,
    NoDebugSession,
    NoProcess,
    UnsupportedRequest,
)
from adapter.protocol.framing import MAX_JSON_DEPTH, MessageReader, MessageWriter
from adapter.protocol.messages import Event, Request, Response
from adapter.protocol.progress import ProgressReporter
from adapter.protocol.relay import FastRelay, fits
from adapter.protocol.schema import DAP_REQUESTS
from adapter.protocol.validate import default_checker
from adapter.routes import BACKEND, Router
from adapter.routes import route as row_of

if TYPE_CHECKING:
    from adapter.disassemble import Disassembler
    from adapter.features.data_breakpoints import DataBreakpoints
    from adapter.features.record_breakpoints import RecordBreakpoints
    from adapter.memory import ProcessMemory

log = logging.getLogger("ptdebug.dap")

ADAPTER_CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsReadMemoryRequest": True,
    "supportsWriteMemoryRequest": True,
    "supportsDisassembleRequest": True,
    "supportsSteppingGranularity": True,
    "supportsCancelRequest": True,
}
"""What ptdebug answers itself, whatever the backend (steps by instruction: features/reverse.py
in a recorded history, Delve live; debugpy steps a line whatever the granularity). Features
add theirs at run time through `Session.announce_capabilities` (e.g. supportsDataBreakpoints
once the probe succeeds)."""

LOCAL_CAPABILITIES = frozenset({
    "supportsReadMemoryRequest", "supportsWriteMemoryRequest", "supportsDisassembleRequest",
    "supportsDataBreakpoints", "supportsDataBreakpointBytes", "supportsInstructionBreakpoints",
    "supportsStepBack", "breakpointModes", "supportsBreakpointLocationsRequest",
    "supportsLoadedSourcesRequest", "supportsRestartFrame", "supportsCancelRequest",
    "supportsTerminateThreadsRequest",
})
"""Capabilities whose requests never reach the backend: only ptdebug's own value counts."""

BACKEND_GONE_LINGER = 10.0
"""Seconds the session waits for the client's `disconnect` after the backend died."""
DISCONNECT_TIMEOUT = 5.0
"""Seconds the backend gets to answer `disconnect` before the session ends anyway."""
PROGRAM_GONE_GRACE = 2.0
"""Seconds the backend gets to report the debuggee's end itself before the session does."""


class Session:
    """The state of one debug session. Create it on a client stream and call `run()`."""

    def __init__(self, client_in: BinaryIO, client_out: BinaryIO):
        self._fast_path_lock = threading.Lock()
        """Held while the plain set is worked out and handed over, so the last one is current."""
        self.relay = FastRelay.for_streams(client_in, client_out)
        """The C relay of plain requests (protocol/relay.py), or None (streams that are no
        file descriptors, the extension not built, PTDEBUG_FAST_RELAY=0)."""
        if self.relay is not None:
            self.client = self.relay.client_channel(ClientHandlers(self))
        else:
            self.client = Channel(MessageReader(client_in, max_depth=MAX_JSON_DEPTH),
                                  MessageWriter(client_out),
                                  ClientHandlers(self), "client")
        """DAP to VS Code (or any client)."""
        self.initialized = False
        """Whether the client sent `initialize` (launch/attach before it are refused)."""
        self.client_arguments: dict = {}
        """The client's `initialize` arguments (supportsMemoryEvent, ...), forwarded as-is."""
        self.progress = ProgressReporter(lambda event, body: self.client.send_event(event, body))
        """DAP progress of long operations (a capture's or a replay's decode), cancellable by
        the client."""
        self.capabilities: dict = dict(ADAPTER_CAPABILITIES)
        """Everything told to the client so far (initialize response + capabilities events)."""
        self.backend: Backend | None = None
        """The debugger behind ptdebug, from launch/attach on."""
        self.pid: int | None = None
        """The debuggee's process id, once the backend learnt it."""
        self.memory: ProcessMemory | None = None
        """adapter.memory.ProcessMemory of the debuggee, once its pid is known."""
        self.disassembler: Disassembler | None = None
        """adapter.disassemble.Disassembler of the debuggee, created on first use."""
        self.data_breakpoints: DataBreakpoints | None = None
        """Data-breakpoint feature (dataBreakpointInfo, setDataBreakpoints); None until wired."""
        self.features_started = threading.Event()
        """Set once the features that need the debuggee's pid are plugged in (or never will
        be): a request for one waits for it instead of being refused at an early stop."""
        self.reverse = None
        """Reverse-execution feature (stepBack, reverseContinue); None until wired."""
        self.instruction_breakpoints = None
        """Instruction-breakpoint feature (setInstructionBreakpoints); None until wired."""
        self.routes = Router()
        """The steps the features plugged into the route table (adapter/routes.py): which
        request and event goes through which of them, in the table's order."""
        self.launch_arguments: dict = {}
        """The client's launch/attach arguments as sent (keys debugpy ignores included)."""
        self.recording: RecordBreakpoints | None = None
        """Record-breakpoint feature (captures); wired at creation by features.record_breakpoints."""
        self.argument_checker = default_checker()
        """Type checks of forwarded arguments (the DAP schema debugpy ships), or None."""
        self.paused = False
        """Whether the debuggee is stopped: a `stopped` event since the last `continued`."""
        self.terminated_sent = False
        """Whether the client has been sent `terminated` (by the backend or by us)."""
        self.backend_gone_at: float | None = None
        """monotonic() when the backend died (or was given up as stuck), if it did."""
        self.backend_gone_reason = "it exited"
        """Why, as the backend said."""
        self.disconnect_at: float | None = None
        self._disconnect_request: Request | None = None
        """The client's `disconnect`, answered when the session ends if the backend never did."""
        """monotonic() when the client asked to disconnect."""
        self.finished = threading.Event()
        """Set when the session is over: the run loop then shuts everything down."""
        self._program_end: ProgramEnd | None = None
        self._lock = threading.Lock()
        install_trace_features(self)
        self.run_control = RunControl(self)
        """The one owner of a Python session's run control (features/run_control.py): the
        program's run state, the user's run-control requests and ptdebug's hidden stops."""
        ThreadGuard.install(self)  # before the backend: its checks come first
        if self.recording is not None:
            # a capture wakes the trace features' interceptors up: they must see requests
            self.recording.on_capture(lambda capture: self.update_fast_path())
            # a window waiting for its thread to run its Python line while the user held the
            # program: its timeouts go on when the program does
            self.run_control.on_resume(self.recording.program_resumed)

    # --- running --------------------------------------------------------------------------
    def run(self) -> int:
        """Serve the client until the session ends; returns the process exit status."""
        self.client.start()
        while not self.finished.wait(0.1):
            now = time.monotonic()
            if self.client.closed.is_set():
                log.info("client closed the connection (%s)", self.client.close_reason)
                break
            if self.backend_gone_at is not None and now - self.backend_gone_at > BACKEND_GONE_LINGER:
                log.info("no disconnect %g s after the backend died; ending", BACKEND_GONE_LINGER)
                break
            if self._program_end is not None and self._program_end.unreported(now):
                self._program_gone(self._program_end.pid)
            if self.disconnect_at is not None and now - self.disconnect_at > DISCONNECT_TIMEOUT:
                log.warning("the backend did not answer disconnect; ending anyway")
                request = self._disconnect_request
                if request is not None and not request.answered:
                    try:
                        request.respond()  # the session ends (and what it started) all the same
                    except RuntimeError:
                        pass  # debugpy's answer came in just now
                break
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        """Stop the backend (it ends a launched debuggee) and the features."""
        self.update_fast_path(enabled=False)
        if self.relay is not None:
            log.info("fast relay: %s", self.relay.stats())
        for feature in (self.data_breakpoints, self.reverse, self.instruction_breakpoints,
                        self.recording):
            close = getattr(feature, "close", None)
            if close is not None:
                try:
                    close()
                except Exception:
                    log.exception("closing feature %r failed", feature)
        if self.backend is not None:
            self.backend.close()

    def finish(self) -> None:
        self.finished.set()

    # --- the backend ----------------------------------------------------------------------
    def start_backend(self, name: str, config) -> Backend:
        """Create and initialize the backend; tell the client its capabilities."""
        if self.backend is not None:
            raise AdapterError("this session already has a debuggee; one launch/attach only")
        backend = create_backend(name, self)
        self.backend = backend
        if isinstance(backend, ServesCustomRequests):
            # the backend's own custom requests are routed as every feature's are
            for command, handler in backend.custom_requests().items():
                self.routes.add(BACKEND, command, take=handler)
        try:
            backend.start(config)
            backend_capabilities = backend.initialize(self.client_arguments)
        except BaseException:
            # A backend that could not start is no session: a corrected launch may follow.
            self.backend = None
            backend.close()
            raise
        merged = {k: v for k, v in backend_capabilities.items() if k not in LOCAL_CAPABILITIES}
        merged.update(self.capabilities)
        self.announce_capabilities(**merged)
        self.update_fast_path()
        return backend

    def backend_channel(self, sock, handlers: Any, name: str) -> Channel:
        """The Channel over a backend's DAP socket: through the fast relay when there is one
        (its plain requests then never enter Python; update_fast_path says which)."""
        if self.relay is not None:
            return self.relay.backend_channel(sock, handlers, name)
        return Channel(MessageReader(sock.makefile("rb")), MessageWriter(sock.makefile("wb")),
                       handlers, name)

    def colocate_relay(self, cpu: int) -> None:
        """Run the fast relay's thread on `cpu`, the backend's
        (backends.delve_process.colocation_cpu says why)."""
        if self.relay is not None:
            self.relay.colocate(cpu)

    def update_fast_path(self, enabled: bool = True) -> None:
        """Tell the fast relay which requests route() would forward untouched right now:
        a standard request whose row of the route table has no client handler, that the
        backend relays as it comes (backends.Backend.relays_untouched), and none of whose
        plugged-in steps is active (routes.Router.idle). Called whenever one of these may
        change."""
        relay = self.relay
        if relay is None:
            return
        with self._fast_path_lock:
            self._update_fast_path(relay, enabled)

    def _update_fast_path(self, relay: FastRelay, enabled: bool) -> None:
        backend = self.backend
        plain: dict = {}
        if (enabled and backend is not None and self.backend_gone_at is None
                and not self.finished.is_set()):
            for command in DAP_REQUESTS:
                if (row_of(command).client or not backend.relays_untouched(command)
                        or not self.routes.idle(command)):
                    continue
                fields = (self.argument_checker.fields(command)
                          if self.argument_checker is not None else [])
                if fits(fields):
                    plain[command] = fields
        relay.set_plain(plain)
        log.debug("fast relay: plain requests now %s", sorted(plain) or "none")

    def announce_capabilities(self, **capabilities: Any) -> None:
        """Record capabilities and send a `capabilities` event with the ones that changed."""
        with self._lock:
            changed = {k: v for k, v in capabilities.items() if self.capabilities.get(k) != v
                       or k not in self.capabilities}
            self.capabilities.update(changed)
        if changed:
            self.client.send_event("capabilities", {"capabilities": changed})

    def route(self, request: Request) -> object:
        """A request no local handler claims: forward it, or say clearly why not."""
        backend = self.backend
        if backend is None:
            raise NoDebugSession(f"{request.command!r} needs a debuggee: send launch or "
                                 "attach first")
        if self.backend_gone_at is not None:
            raise BackendGone(f"{backend.name} is gone ({self.backend_gone_reason}); "
                              f"{request.command!r} cannot be served")
        interceptors = self.routes.takers(request.command)
        checked = None  # the arguments object already checked: checked once, not per step
        if interceptors and self.argument_checker is not None and request.command in DAP_REQUESTS:
            # a feature may forward it (changed or not): the same checks as any forwarded request
            checked = request.raw.get("arguments")
            self.argument_checker.check(request.command, checked)
        for intercept in interceptors:
            answer = intercept(request)
            if answer is not None:
                return answer
        if backend.handles(request.command) or request.command not in DAP_REQUESTS:
            arguments = request.raw.get("arguments")
            if (self.argument_checker is not None and request.command in DAP_REQUESTS
                    and (arguments is not checked or arguments is None)):
                self.argument_checker.check(request.command, arguments)
            backend.forward(request, self.routes.watcher(request.command, request))
            return DEFERRED
        raise UnsupportedRequest(f"{request.command!r} is not supported by ptdebug with the "
                                 f"{backend.name} backend")

    def require_memory(self):
        if self.memory is None:
            raise NoProcess("the debuggee's process id is not known yet (no 'process' event "
                            "from the backend)")
        return self.memory

    def disconnect(self, request: Request) -> object:
        """Forward disconnect to a live backend, answer the client, then end the session."""
        self.disconnect_at = time.monotonic()
        self._disconnect_request = request
        backend = self.backend
        if backend is None or self.backend_gone_at is not None:
            request.respond()
            self.finish()
            return DEFERRED

        def answered(response: Response) -> None:
            if request.answered:  # too late: the session answered it when it gave up waiting
                self.finish()
                return
            if response.raw.get("_gone") or backend.disconnect_done(request.raw, response.raw):
                request.respond()  # the backend died meanwhile: the disconnect is done anyway
            else:
                request.respond_like(response.raw)
            self.finish()

        def forward() -> None:
            backend.disconnect(request.raw.get("arguments"), answered)

        backend.disconnect_coming(request.raw.get("arguments"))

        recording = self.recording
        holds = recording is not None and recording.holds_a_thread()
        # the watches matter only to a program that outlives the session
        terminate = (request.raw.get("arguments") or {}).get("terminateDebuggee",
                                                             backend.launched)
        # (Go's data breakpoints are Delve's: its detach clears them, delve_detach.py)
        let_go_watches = None if terminate else getattr(self.data_breakpoints,
                                                        "let_go_before_disconnect", None)
        if holds or let_go_watches is not None:
            # What ptdebug put into the program goes first, while the backend still answers
            # (docs/protocol.md, "Attach and detach (Python)"): the recorded thread is let go
            # (RecordBreakpoints.let_go_before_disconnect), the watches are removed and the
            # SIGTRAP action restored (DataBreakpoints.let_go_before_disconnect). Off the
            # reader thread: the capture's own requests and events go on meanwhile.
            def let_go_then_forward() -> None:
                try:
                    if holds and recording is not None:
                        recording.let_go_before_disconnect()
                    if let_go_watches is not None:
                        let_go_watches()
                except Exception:
                    log.exception("letting the program go before the disconnect failed")
                finally:
                    forward()

            threading.Thread(target=let_go_then_forward, name="ptdebug-disconnect",
                             daemon=True).start()
        else:
            forward()
        return DEFERRED

    # --- BackendHooks ---------------------------------------------------------------------
    def backend_event(self, event: Event, observed: bool = False) -> None:
        """`observed`: an event a feature held back and delivers now, already seen by the
        run control when it came."""
        raw = event.raw
        name = raw["event"]
        if not observed:
            self.run_control.observe_event(raw)  # before any filter may consume the event
        if name == "stopped":
            self.paused = True
        elif name == "continued":
            self.paused = False
        if self.routes.filter_event(raw):
            return
        if name == "terminated":
            if self.terminated_sent:
                return  # ptdebug said it already (the program's or the backend's end)
            self.terminated_sent = True
        elif name == "capabilities":
            body = raw.get("body") or {}
            caps = {k: v for k, v in (body.get("capabilities") or {}).items()
                    if k not in LOCAL_CAPABILITIES}
            self.announce_capabilities(**caps)
            return
        del raw["seq"]
        self.client.send(raw)

    def backend_reverse_request(self, request: Request) -> None:
        self.client.send_request(request.command, request.raw.get("arguments"),
                                 lambda response: request.respond_like(response.raw))

    def backend_process(self, pid: int) -> None:
        from adapter.memory import ProcessMemory
        log.info("debuggee process id %d", pid)
        self.pid = pid
        self.memory = ProcessMemory(pid)
        backend = self.backend
        self.memory.originals = (backend.original_bytes if isinstance(backend, ShowsOriginalBytes)
                                 else None)
        self.disassembler = None
        if self._program_end is None or self._program_end.pid != pid:
            self._program_end = ProgramEnd.watch(pid)
        threading.Thread(target=self._start_features, args=(pid,), name="ptdebug-features",
                         daemon=True).start()

    def _program_gone(self, pid: int) -> None:
        """The debuggee ended and the backend did not say so (Delve holding a stopped program
        learns it only at the next `continue`): the user is told, and the session ends as if
        the backend had said it."""
        self._program_end = None
        if self.terminated_sent or self.disconnect_at is not None:
            return
        log.warning("the debuggee (process %d) ended; its debugger did not say so", pid)
        self.terminated_sent = True
        self.client.send_event("output", {"category": "important", "output":
                                          f"ptdebug: the program (process {pid}) ended\n"})
        self.client.send_event("terminated", {})

    def _start_features(self, pid: int) -> None:
        """Probe and start the features that need the debuggee's pid, off the reader thread
        (a probe may take a while and must never delay the backend's events)."""
        from adapter.features.data_breakpoints import DataBreakpoints
        try:
            backend = self.backend
            if isinstance(backend, ServesDataBreakpoints) and backend.native_data_breakpoints:
                from adapter.golang.data_breakpoints import DelveDataBreakpoints
                feature = DelveDataBreakpoints(self)  # the debugger owns the debug registers
            else:
                feature = DataBreakpoints.probe(self, pid)
        except Exception:
            log.exception("data breakpoints: probe failed")
            self.features_started.set()
            return
        if feature is not None and not self.finished.is_set():
            self.data_breakpoints = feature
            self.announce_capabilities(**feature.capabilities)
            self.update_fast_path()  # the feature may intercept or observe requests
        if isinstance(self.backend, ServesInstructionBreakpoints) and \
                self.backend.native_instruction_breakpoints:
            from adapter.golang.instruction_breakpoints import DelveInstructionBreakpoints
            self.instruction_breakpoints = DelveInstructionBreakpoints(self)
            self.announce_capabilities(**self.instruction_breakpoints.capabilities)
        self.features_started.set()

    def backend_progress(self, title: str):
        return self.progress.start(title)

    def backend_recording(self, replayed) -> None:
        """A replay instead of a program (backends.replay): the bundle's images stand in for
        the process memory (readMemory, disassemble), and its threads' histories become the
        captures the trace features show and step through, each thread in its history."""
        self.memory = replayed.memory
        self.disassembler = replayed.disassembler
        if self.recording is not None:
            self.recording.adopt_replay(replayed)
        self.update_fast_path()

    def backend_gone(self, reason: str) -> None:
        log.warning("backend gone: %s", reason)
        if self.backend_gone_at is None:
            self.backend_gone_reason = reason
        self.features_started.set()  # none will come: requests waiting for one are refused
        self.backend_gone_at = time.monotonic()
        self.update_fast_path()  # requests now get route()'s BackendGone
        if self.disconnect_at is not None:
            self.finish()
            return
        if not self.terminated_sent:
            self.terminated_sent = True
            self.client.send_event("output", {"category": "important",
                                              "output": f"ptdebug: {reason}\n"})
            self.client.send_event("terminated", {})


class ProgramEnd:
    """The debuggee's end, read from /proc/PID/stat: gone, or its main thread a zombie (a
    stopped program killed while its debugger waits for a command stays one, its other threads
    waiting for the debugger to reap them: a pidfd would not be readable before that), with
    the start time it had when watched (a reused pid is not the program)."""

    def __init__(self, pid: int, started: str):
        self.pid = pid
        self._started = started
        self._ended_at: float | None = None

    @classmethod
    def watch(cls, pid: int) -> ProgramEnd | None:
        state = _process_state(pid)
        if state is None or state[0] in "ZX":
            log.info("cannot watch process %d's end: it has ended", pid)
            return None  # the backend reports that
        return cls(pid, state[1])

    def unreported(self, now: float) -> bool:
        """Whether the process has been gone PROGRAM_GONE_GRACE seconds (the backend's own
        report of it, `terminated`, is awaited that long)."""
        if self._ended_at is None:
            state = _process_state(self.pid)
            if state is not None and state[0] not in "ZX" and state[1] == self._started:
                return False
            self._ended_at = now
        return now - self._ended_at > PROGRAM_GONE_GRACE


def _process_state(pid: int) -> tuple[str, str] | None:
    """(state letter, start time) of /proc/PID/stat; None when there is no such process."""
    try:
        stat = procfs.stat(pid)
    except OSError:
        return None
    return stat.state, stat.start_time

"""The Go backend: one headless Delve, spoken to in DAP (everything a Go user does in VS Code)
and through the Delve-RPC bridge (delve_rpc.py: the debuggee's pid, goroutine labels,
registers, memory, watchpoints).

Layer: backends. Starts `dlv attach PID --headless --accept-multiclient --api-version=2
--listen=127.0.0.1:0` (or connects to a headless Delve the user runs), attaches to it in DAP
with `{"mode": "remote"}`, forwards every request Delve's DAP server answers, and reports
Delve's events, the program's output and Delve's death to the session. Knows nothing of VS
Code or hardware. This module holds the backend class itself (lifecycle, forwarding, events);
its parts live beside it, one role each, and are mixed into DelveBackend:
delve_process.py (finding dlv, the launch plan, starting and ending Delve and the program,
relaying their output) and delve_handover.py (letting go of the program for a recording and
taking it back).

For a launch, ptdebug builds and starts the program itself, held at its first instruction
(adapter/golang/launch.py), and Delve attaches to it: a Delve that launched its debuggee kills
it when it detaches, and a record breakpoint needs Delve to let go of the program for the
window and a new Delve to take it back after (hand_over / take_back in delve_handover.py, with
the client's breakpoints given again under the same ids: adapter/golang/breakpoint_ids.py).

Why headless and not `dlv dap`: `dlv dap` serves DAP only, one client, and has no JSON-RPC;
a headless multiclient Delve serves both on one port (docs/go.md, "One Delve, two protocols").
Run control (continue, next, pause...) only ever goes through DAP: a JSON-RPC `Command` would
move the target without Delve's DAP server telling VS Code. The program's stdout and stderr
(a pipe ptdebug gives it, which the first Delve writes into too) are read by delve_process.py
and sent as `output` events. While Delve is away for a recording, the client's requests are
answered or queued by delve_away.py, never waited for on the session's reader thread.
"""
from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

from adapter.golang.breakpoint_ids import BREAKPOINT_REQUESTS, BreakpointIds
from adapter.golang.build_dir import make_build_dir
from adapter.hw import left_breakpoints
from adapter.protocol.channel import DEFERRED, Channel
from adapter.protocol.errors import BackendError, BackendGone
from adapter.protocol.messages import Event, Request, Response
from adapter.protocol.schema import AttachConfig, LaunchConfig

from .base import Backend, BackendHooks, dial, hang_up
from .delve_away import AwayRequests
from .delve_detach import DelveDetach
from .delve_handover import HANDOVER_WAIT, DelveHandover
from .delve_process import (
    CONNECT_TIMEOUT,
    HEADLESS,
    STOP_GRACE,
    DelveProcesses,
    _environment,
    _event,
    _kill_group,
    _kill_pid,
    _PipeLines,
    _read_layout,
    find_dlv,
    launch_plan,
)
from .delve_rpc import DelveRpc

log = logging.getLogger("ptdebug.dap")

NOT_FORWARDED = frozenset({
    # answered by ptdebug itself (session/client handlers), never by Delve
    "launch", "attach", "readMemory", "writeMemory", "disassemble", "dataBreakpointInfo",
    "setDataBreakpoints", "setInstructionBreakpoints", "stepBack", "reverseContinue",
    # Delve's DAP server only runs these for a target it launched itself (`dlv dap`), never
    # for the remote attach ptdebug uses: answered "unsupported" instead of half-working
    "restart",
})

GOROUTINES = "ptdebug/goroutines"
"""Custom request served by this backend (powers.ServesCustomRequests): Delve's goroutine list
with pprof labels, wait reasons and OS threads, which DAP's `threads` cannot carry."""


class DelveBackend(DelveDetach, DelveHandover, DelveProcesses, Backend):
    name = "delve"
    title = "Delve"
    native_data_breakpoints = False
    """True when this Delve serves DAP data breakpoints itself (1.26.2 and later say so in
    `initialize`): the session then plugs in adapter.golang.data_breakpoints instead of its own
    engine, which must not share Delve's debug registers."""
    native_instruction_breakpoints = False
    """True when this Delve serves DAP instruction breakpoints (its `initialize` says so): the
    session plugs in adapter.golang.instruction_breakpoints, which forwards them."""

    def __init__(self, hooks: BackendHooks):
        super().__init__(hooks)
        self.channel: Channel | None = None
        """DAP to Delve."""
        self.rpc: DelveRpc | None = None
        """The Delve-RPC bridge (JSON-RPC on the same port)."""
        self.address: tuple[str, int] | None = None
        """Where Delve listens."""
        self.output_dir: str | None = None
        """Temporary directory for the binary ptdebug builds (removed by close())."""
        self.stop_on_entry = False
        """launch's stopOnEntry, passed to Delve's remote attach."""
        self._socket: socket.socket | None = None
        self._pump: threading.Thread | None = None
        self._output: _PipeLines | None = None
        """Line splitter over Delve's (and the program's) stdout+stderr pipe."""
        self._output_lock = threading.Lock()
        self._early_output: list[bytes] = []
        self._spawner: ThreadPoolExecutor | None = None
        self.program = None
        """adapter.golang.launch.HeldProgram: the program ptdebug started (launch), else None."""
        self.breakpoint_ids = BreakpointIds()
        """Client ids of breakpoints, kept across Delves (hand_over / take_back)."""
        self._initialize_arguments: dict = {}
        self._attach_arguments: dict = {}
        self._connected = threading.Event()
        """Clear while no Delve holds the program (a recording): requests wait for it."""
        self._connected.set()
        self._away = AwayRequests(self._connected, self._send, HANDOVER_WAIT)
        """The client's requests while Delve is away (delve_away.py)."""
        self._attach_pid: int | None = None
        """`attach {pid}`'s pid (Delve tells it only once the program stops)."""
        self.left_running = False
        """True once a disconnect without terminateDebuggee let go of the program
        (delve_detach.py): close() then neither detaches nor kills it."""
        self._leave_lock = threading.Lock()
        self._leaving: dict | None = None
        """The client's `disconnect` arguments, from the moment it asked (disconnect_coming):
        a recording that ends after that is not followed by a new Delve (delve_detach.py)."""
        self._returning = False
        """take_back is attaching a new Delve (a disconnect then waits for it and detaches it)."""
        self._left_without_delve: str | None = None
        """Set when a recording's end let go of (or ended) the program for a disconnect instead
        of bringing Delve back: "" when cleanly, else what the user must be told."""

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, config: LaunchConfig | AttachConfig) -> None:
        # Every process is started from this one long-lived thread: PR_SET_PDEATHSIG fires
        # when the thread that forked ends, not the process, and Delve is started again from
        # recording threads (hand_over/take_back).
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="delve-spawner")
        if isinstance(config, AttachConfig) and config.connect is not None:
            # a headless Delve the user runs (`dlv ... --headless --accept-multiclient
            # --api-version=2 --listen=HOST:PORT`): ptdebug is one more client of it
            self.address = (config.connect.host, config.connect.port)
        else:
            self.launched = isinstance(config, LaunchConfig)
            self._attach_pid = None if self.launched else config.pid
            self.pid = self._attach_pid  # known before Delve tells it (_learn_pid)
            env = _environment(getattr(config, "env", None) or {})
            dlv = find_dlv()
            if isinstance(config, LaunchConfig):
                self.output_dir = make_build_dir()
                self._launch(dlv, launch_plan(config, self.output_dir), config, env)
            else:
                # not --continue: Delve's DAP server resumes the process at configurationDone
                # itself, and only the stops of runs it started are reported to its DAP client
                self.address = self._run_dlv([dlv, "attach", str(config.pid), *HEADLESS],
                                             os.getcwd(), env)
        if isinstance(config, LaunchConfig):
            self.stop_on_entry = config.stopOnEntry
        try:
            self._connect()
        except BaseException:
            if self.program is not None:
                self.program.kill()
            raise
        if self.program is not None:
            # Delve says it listens before it attaches, and accepts connections after: it
            # holds the program now, which runs at configurationDone
            self.pid = self.program.pid
            self.program.resume()

    def _connect(self) -> None:
        """The DAP channel and the JSON-RPC bridge to the Delve at self.address."""
        host, port = self.address
        sock = dial(host, port, "Delve", CONNECT_TIMEOUT)
        self._socket = sock
        # the session's Channel: its fast relay may carry plain requests (protocol/relay.py)
        self.channel = self.hooks.backend_channel(sock, self, "delve")
        self.channel.start()
        self.rpc = DelveRpc(host, port)
        version = self.rpc.version()
        log.info("Delve %s (API %s, backend %s) at %s:%d", version.get("DelveVersion"),
                 version.get("APIVersion"), version.get("Backend"), host, port)

    def initialize(self, client_arguments: dict) -> dict:
        arguments = dict(client_arguments)
        arguments["adapterID"] = "go"
        self._initialize_arguments = arguments
        response = self.request("initialize", arguments, timeout=CONNECT_TIMEOUT)
        if not response.success:
            raise BackendError(f"Delve refused initialize: {response.error_text}")
        capabilities = dict(response.raw.get("body") or {})
        self.native_data_breakpoints = bool(capabilities.get("supportsDataBreakpoints"))
        self.native_instruction_breakpoints = bool(
            capabilities.get("supportsInstructionBreakpoints"))
        return capabilities

    def launch(self, request: Request, config: LaunchConfig) -> None:
        self._attach_remote(request)

    def attach(self, request: Request, config: AttachConfig) -> None:
        self._attach_remote(request)

    def _attach_remote(self, request: Request) -> None:
        """DAP `attach {"mode": "remote"}` to the headless Delve, answered to the client's
        launch/attach; then the debuggee's pid from the bridge."""
        arguments = {"mode": "remote", "stopOnEntry": self.stop_on_entry}
        for key in ("substitutePath", "showGlobalVariables", "showRegisters",
                    "hideSystemGoroutines", "goroutineFilters", "showPprofLabels",
                    "stackTraceDepth"):
            if key in (request.raw.get("arguments") or {}):
                arguments[key] = request.raw["arguments"][key]
        self._attach_arguments = arguments

        def answered(response: Response) -> None:
            request.respond_like(response.raw)
            if response.success:
                threading.Thread(target=self._learn_pid, name="delve-pid", daemon=True).start()

        self.channel.send_request("attach", arguments, answered)

    def _learn_pid(self) -> None:
        # ptdebug knows the pid of a program it started or was told to attach to: Delve's
        # ProcessPid waits for the target, which a running program holds until it first
        # stops (and a disconnect before that must know whom to let go: delve_detach.py)
        pid = self.program.pid if self.program is not None else self._attach_pid
        if pid is None:  # a Delve the user runs
            try:
                pid = self.rpc.process_pid()
            except BackendError as exc:
                log.warning("Delve did not tell the debuggee's pid: %s", exc.message)
                return
        self.pid = pid
        name = ""
        try:
            name = os.path.basename(os.readlink(f"/proc/{pid}/exe"))
        except OSError:
            pass
        self.hooks.backend_event(_event("process", {
            "name": name or str(pid), "systemProcessId": pid, "isLocalProcess": True,
            "startMethod": "launch" if self.launched else "attach", "pointerSize": 64}))
        self.hooks.backend_process(pid)
        threading.Thread(target=_read_layout, args=(pid,), name="go-layout",
                         daemon=True).start()

    def close(self, timeout: float = STOP_GRACE) -> None:
        self.closing = True
        rpc = self.rpc
        if (rpc is not None and not rpc.closed.is_set() and self.process is not None
                and not self.left_running):
            if not self.launched and self.pid is not None:
                # the session ends without a disconnect (the client hung up): an attached
                # program is let go as a disconnect would (delve_detach.py)
                text = self._detach_untouched()
                if text:
                    log.warning("%s", text)
            else:
                try:
                    rpc.detach(kill=self.launched, timeout=timeout)  # Delve ends the program
                except BackendError as exc:
                    log.info("Detach: %s", exc.message)
        if rpc is not None:
            rpc.close()
        self._close_socket()
        process = self.process
        if process is not None:
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("Delve did not exit within %g s; killing it", timeout)
                _kill_group(process.pid, signal.SIGKILL)
                process.wait(timeout)
            if self.launched and self.pid is not None and not self.left_running:
                # Delve killed by someone else leaves its debuggee detached and running
                _kill_pid(self.pid)
        if self.program is not None and not self.left_running:
            self.program.kill()  # and reaped: it is our child
        if self.channel is not None:
            self.channel.join(timeout)
        if self._pump is not None:
            self._pump.join(timeout)
        if self.output_dir is not None:
            shutil.rmtree(self.output_dir, ignore_errors=True)
        if self._spawner is not None:
            self._spawner.shutdown(wait=False)

    def _close_socket(self) -> None:
        hang_up(self._socket)
        self._socket = None

    def channel_closed(self, reason: str) -> None:
        if not self.closing and not self.launched and self.pid is not None:
            self._put_back_left_breakpoints(self.pid)
        super().channel_closed(reason)

    def _put_back_left_breakpoints(self, pid: int) -> None:
        """Delve ended while attached (killed, crashed): the kernel let the program's threads
        go with Delve's INT3 bytes still in its code, and the next run of a breakpoint's line
        would kill it with SIGTRAP. Put the program's own bytes back and tell the user."""
        if not os.path.exists(f"/proc/{pid}"):
            return
        try:
            done = left_breakpoints.put_back(pid)
        except OSError as exc:
            text = (f"Delve ended while attached to process {pid}, and ptdebug could not put "
                    f"back the code under its breakpoints: {exc}; the program may die of "
                    "SIGTRAP at one of them")
        else:
            if done is None:
                text = f"process {pid} is still traced by another debugger; ptdebug left it alone"
            else:
                rewound = (f"; {len(done.rewound)} thread(s) that had hit one go on as if not"
                           if done.rewound else "")
                text = (f"Delve ended while attached: ptdebug put back {len(done.addresses)} "
                        f"byte(s) of code under the breakpoints it left{rewound}, and left "
                        f"process {pid} running, untraced")
        log.warning("%s", text)
        self.hooks.backend_event(_event("output", {"category": "important",
                                                   "output": f"ptdebug: {text}\n"}))

    def disconnect_done(self, request: dict, response: dict) -> bool:
        # Delve killing a process it attached to detaches its threads after the kill and may
        # report ESRCH ("could not detach process N: no such process"): the program ptdebug
        # launched is gone, which is what terminateDebuggee asked
        if response.get("success") or self.program is None:
            return False
        if not (request.get("arguments") or {}).get("terminateDebuggee", self.launched):
            return False
        self.program.wait(STOP_GRACE)
        return self.program.poll() is not None

    # --- the program's own bytes under Delve's breakpoints (powers.ShowsOriginalBytes) ----
    def original_bytes(self, address: int, count: int) -> dict[int, int]:
        """address -> the program's own byte, for Delve's breakpoints (user and internal)
        within `count` bytes from `address`: readMemory and disassemble show the program's
        instructions, not Delve's int3. Empty while no Delve holds the program."""
        rpc = self.rpc
        if not self._connected.is_set() or rpc is None or rpc.closed.is_set():
            return {}
        try:
            listed = rpc.call("ListBreakpoints", All=True).get("Breakpoints") or []
        except BackendError as exc:
            log.info("original bytes: Delve's breakpoints unknown: %s", exc.message)
            return {}
        planted = {a for bp in listed for a in (bp.get("addrs") or [bp.get("addr")])
                   if a and address <= a < address + count}
        from adapter.golang.planted import original_bytes
        return original_bytes(self.pid, sorted(planted))

    # --- forwarding -----------------------------------------------------------------------
    def handles(self, command: str) -> bool:
        # Delve's DAP server answers every command, an unknown one with an error (no stall).
        return command not in NOT_FORWARDED

    def relays_untouched(self, command: str) -> bool:
        # what forward() sends on as it is and relays as it comes (no custom request, no
        # fixup): the session's fast relay may carry it outside Python
        return (self.handles(command) and command not in RESPONSE_FIXUPS
                and command not in BREAKPOINT_REQUESTS)

    def custom_requests(self) -> dict:
        return {GOROUTINES: self._goroutines_request}

    def forward(self, request: Request, observe=None) -> None:
        if self._away.take(request, observe):  # Delve is away: nothing waits on this thread
            return
        self._send(request, observe)

    def _send(self, request: Request, observe=None) -> None:
        if self.channel is None:
            raise BackendGone("Delve is not running")
        fixup = RESPONSE_FIXUPS.get(request.command)
        if request.command in BREAKPOINT_REQUESTS:
            arguments = request.raw.get("arguments")
            self.breakpoint_ids.sent(request.command, arguments)
            fixup = lambda raw: self.breakpoint_ids.answered(
                request.command, arguments, raw.get("body"))
        if observe is None and fixup is None:
            relay = lambda response: request.relay(response.raw)  # untouched: body as received
        else:
            def relay(response: Response) -> None:
                try:
                    if fixup is not None:
                        fixup(response.raw)
                    if observe is not None:
                        observe(response.raw)
                finally:
                    request.respond_like(response.raw)
        self.channel.send_request(request.command, request.raw.get("arguments"), relay)

    def request(self, command: str, arguments: dict | None = None,
                timeout: float = 10.0) -> Response:
        self._wait_connected(command)
        if self.channel is None:
            raise BackendGone("Delve is not running")
        return self.channel.request(command, arguments, timeout)

    def _goroutines_request(self, request: Request) -> object:
        threading.Thread(target=self._goroutines, args=(request,), daemon=True,
                         name="delve-goroutines").start()
        return DEFERRED

    def _goroutines(self, request: Request) -> None:
        """`ptdebug/goroutines`: every goroutine with its OS thread, status, location, labels."""
        try:
            goroutines = self.rpc.goroutines()
        except BackendError as exc:
            request.fail(exc)
            return
        request.respond({"goroutines": [
            {"id": g.id, "threadId": g.thread_id, "status": g.status,
             "waitReason": g.wait_reason, "function": g.function, "file": g.file,
             "line": g.line, "userFunction": g.user_function, "labels": g.labels}
            for g in goroutines]})

    # --- Delve -> us (Channel handlers) ---------------------------------------------------
    def default_event(self, event: Event) -> None:
        if event.event in ("exited", "terminated"):
            self._drain_output()
        elif event.event == "initialized" and not self._connected.is_set():
            return  # a Delve attached again after a recording: the client configured long ago
        elif event.event == "stopped":
            self._away.stopped_event(event.raw.setdefault("body", {}))
        self.breakpoint_ids.event(event.raw)
        super().default_event(event)

    def _exit_status(self) -> int | None:
        # dlv closes its socket a moment before it exits: give it a second to say why
        if self.process is None:
            return None
        try:
            return self.process.wait(1.0)
        except subprocess.TimeoutExpired:
            return None


def _exception_break_mode(response: dict) -> None:
    """Delve sends `breakMode: ""`, which DAP's schema does not allow: a panic or fatal error
    Delve stops at is one nobody handled."""
    body = response.get("body")
    if isinstance(body, dict) and body.get("breakMode") not in (
            "never", "always", "unhandled", "userUnhandled"):
        body["breakMode"] = "unhandled"


RESPONSE_FIXUPS = {"exceptionInfo": _exception_break_mode}
"""command -> fix(response) making one of Delve's answers valid DAP before it is relayed."""

"""The Go backend: one headless Delve, spoken to in DAP (everything a Go user does in VS Code)
and through the Delve-RPC bridge (delve_rpc.py: the debuggee's pid, goroutine labels,
registers, memory, watchpoints).

Layer: backends. Starts `dlv attach PID --headless --accept-multiclient --api-version=2
--listen=127.0.0.1:0` (or connects to a headless Delve the user runs), attaches to it in DAP
with `{"mode": "remote"}`, forwards every request Delve's DAP server answers, and reports
Delve's events, the program's output and Delve's death to the session. Knows nothing of VS
Code or hardware.

For a launch, ptdebug builds and starts the program itself, held at its first instruction
(adapter/golang/launch.py), and Delve attaches to it: a Delve that launched its debuggee kills
it when it detaches, and a record breakpoint needs Delve to let go of the program for the
window and a new Delve to take it back after (hand_over / take_back, with the client's
breakpoints given again under the same ids: adapter/golang/breakpoint_ids.py).

Why headless and not `dlv dap`: `dlv dap` serves DAP only, one client, and has no JSON-RPC;
a headless multiclient Delve serves both on one port (docs/go.md, "One Delve, two protocols").
Run control (continue, next, pause...) only ever goes through DAP: a JSON-RPC `Command` would
move the target without Delve's DAP server telling VS Code. The program's stdout and stderr
(a pipe ptdebug gives it, which the first Delve writes into too) are read here and sent as
`output` events.
"""
from __future__ import annotations

import logging
import os
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from adapter.golang.breakpoint_ids import BREAKPOINT_REQUESTS, BreakpointIds
from adapter.golang.build_dir import make_build_dir
from adapter.golang.park import Parked, park, unpark
from adapter.protocol.channel import DEFERRED, Channel
from adapter.protocol.errors import (
    AdapterError,
    BackendError,
    BackendGone,
    InvalidLaunchConfig,
)
from adapter.protocol.messages import Event, Request, Response
from adapter.protocol.schema import AttachConfig, LaunchConfig

from . import Backend, BackendHooks, dial, hang_up
from .delve_rpc import DelveRpc

log = logging.getLogger("ptdebug.dap")

STARTUP_TIMEOUT = float(os.environ.get("PTDEBUG_DLV_STARTUP_TIMEOUT", "120"))
"""Seconds for Delve to build the program and listen (a cold `go build` can be slow)."""
CONNECT_TIMEOUT = 10.0
STOP_GRACE = 3.0
"""Seconds Delve gets to end after a polite request before it is killed."""

LISTENING = re.compile(rb"API server listening at: (\S+):(\d+)")
HANDOVER_WAIT = float(os.environ.get("PTDEBUG_HANDOVER_WAIT", "300"))
"""Seconds a request waits for the Delve that comes back after a recording."""

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


def find_dlv() -> str:
    """The dlv to run: $PTDEBUG_DLV, else $(go env GOPATH)/bin/dlv (where scripts/bootstrap.sh
    installs it), else `dlv` on PATH. Raises BackendError naming where it looked."""
    explicit = os.environ.get("PTDEBUG_DLV")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise BackendError(f"PTDEBUG_DLV={explicit} is not an executable")
        return explicit
    candidates = []
    go = shutil.which("go")
    if go:
        try:
            gopath = subprocess.run([go, "env", "GOPATH"], check=False, capture_output=True,
                                    text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            gopath = ""
        for entry in filter(None, gopath.split(os.pathsep)):
            candidates.append(os.path.join(entry, "bin", "dlv"))
    candidates.append(os.path.expanduser("~/go/bin/dlv"))
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    on_path = shutil.which("dlv")
    if on_path:
        return on_path
    raise BackendError("Delve (dlv) was not found in $(go env GOPATH)/bin, ~/go/bin or PATH; "
                       "install it with `go install github.com/go-delve/delve/cmd/dlv@latest` "
                       "(scripts/bootstrap.sh does) or set PTDEBUG_DLV")


def go_mode(config: LaunchConfig) -> str:
    """vscode-go's `mode` resolved: "auto" is "exec" for an ELF file, "debug" otherwise."""
    mode = config.mode or "auto"
    if not config.program:
        raise InvalidLaunchConfig("a Go launch needs 'program': a package directory, a .go "
                                  "file or (mode \"exec\") a built binary")
    if mode == "auto":
        try:
            with open(config.program, "rb") as f:
                mode = "exec" if f.read(4) == b"\x7fELF" else "debug"
        except OSError:
            mode = "debug"
    return mode


HEADLESS = ["--headless", "--accept-multiclient", "--api-version=2", "--listen=127.0.0.1:0"]


@dataclass
class LaunchPlan:
    """What a Go launch runs: the package to build (mode debug/test; None for exec), the
    binary, its arguments and working directory."""
    mode: str
    binary: str
    argv: list[str]
    cwd: str
    package: str | None = None
    package_dir: str | None = None


def launch_plan(config: LaunchConfig, output_dir: str) -> LaunchPlan:
    """The build and run of `config` (vscode-go's attributes). Raises InvalidLaunchConfig
    naming what is wrong with the configuration."""
    mode = go_mode(config)
    program = os.path.abspath(os.path.expanduser(config.program))
    if mode == "exec":
        if not os.path.isfile(program):
            raise InvalidLaunchConfig(f"program {config.program!r} is not a file; mode "
                                      "\"exec\" runs a built binary")
        plan = LaunchPlan(mode, program, [program], os.path.dirname(program))
    elif mode in ("debug", "test"):
        if program.endswith(".go") and os.path.isfile(program):
            package, package_dir = program, os.path.dirname(program)
        elif os.path.isdir(program):
            package, package_dir = ".", program
        else:
            raise InvalidLaunchConfig(f"program {config.program!r} is neither a package "
                                      f"directory nor a .go file (mode {mode!r})")
        binary = os.path.join(output_dir, "__debug_bin")
        plan = LaunchPlan(mode, binary, [binary], package_dir, package, package_dir)
    else:
        raise InvalidLaunchConfig(f"mode {mode!r} is not one of auto, debug, test, exec")
    if config.cwd:
        if not os.path.isdir(config.cwd):
            raise InvalidLaunchConfig(f"cwd {config.cwd!r} is not a directory")
        plan.cwd = os.path.abspath(config.cwd)
    plan.argv += list(config.args or [])
    return plan


class DelveBackend(Backend):
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

    def _launch(self, dlv: str, plan: LaunchPlan, config: LaunchConfig, env: dict) -> None:
        """Build (mode debug/test), start the program held at its first instruction, and
        attach a headless Delve to it (adapter/golang/launch.py says why not `dlv debug`)."""
        from adapter.golang import launch as go_launch
        if plan.package is not None:
            log.info("building %s (mode %s) into %s", plan.package_dir, plan.mode, plan.binary)
            try:
                go_launch.build(plan.mode, plan.package, plan.package_dir, plan.binary,
                                config.buildFlags)
            except go_launch.BuildFailed as exc:
                # the client sees the compiler's words, then the end of the session: nothing
                # was started that could be debugged
                self.hooks.backend_event(_event("output", {"category": "stderr",
                                                           "output": exc.text + "\n"}))
                self.hooks.backend_event(_event("terminated", {}))
                raise BackendError(f"the build failed (go exit status {exc.status}): "
                                   f"{exc.text}") from None
            except go_launch.StartFailed as exc:
                raise BackendError(str(exc)) from None
        read_end, write_end = os.pipe()
        try:
            self.program = self._spawner.submit(go_launch.HeldProgram.start, plan.argv,
                                                plan.cwd, env, write_end).result()
        except go_launch.StartFailed as exc:
            os.close(read_end)
            os.close(write_end)
            raise BackendError(str(exc)) from None
        try:
            self.address = self._run_dlv([dlv, "attach", str(self.program.pid), *HEADLESS],
                                         plan.cwd, env, pipe=(read_end, write_end))
        except BaseException:
            self.program.kill()
            raise

    def _run_dlv(self, argv: list[str], run_dir: str, env: dict,
                 pipe: tuple[int, int] | None = None, relay: bool = True) -> tuple[str, int]:
        """Start Delve and wait until it listens; (host, port). Its output (and, with `pipe`,
        the program's, which writes into the same pipe) is relayed as `output` events; with
        `relay` False (a Delve attached again after a recording, whose program writes into
        the first pipe) it only goes to the log."""
        log.info("starting %s (in %s)", shlex.join(argv), run_dir)
        cpu = colocation_cpu()
        _prepare_prctl(cpu)
        read_end, write_end = pipe if pipe is not None else os.pipe()
        try:
            # its own session: Delve and its children can be ended as a group
            # preexec_fn: only prctl runs between fork and exec (see _die_with_parent)
            self.process = self._spawner.submit(
                subprocess.Popen, argv, cwd=run_dir, env=env, stdin=subprocess.DEVNULL,
                stdout=write_end, stderr=write_end, start_new_session=True,
                preexec_fn=_die_with_parent).result()
        except OSError as exc:
            os.close(read_end)
            raise BackendError(f"cannot start Delve ({argv[0]}): {exc}") from None
        finally:
            os.close(write_end)  # the pipe ends when Delve and the program have both gone
        deadline = time.monotonic() + STARTUP_TIMEOUT
        output = _PipeLines(read_end)
        if relay:
            self._output = output
        while True:
            if time.monotonic() > deadline:
                raise BackendError(f"Delve did not start listening within {STARTUP_TIMEOUT:g} s"
                                   f"{self._early_text()}")
            line = output.next_line(deadline - time.monotonic())
            if line is None:
                continue
            if not line:
                status = self.process.wait()
                text = self._early_text()
                self.hooks.backend_event(_event("output", {"category": "stderr",
                                                           "output": text[2:] + "\n"}))
                self.hooks.backend_event(_event("terminated", {}))
                raise BackendError(f"Delve exited (dlv exit status {status}){text}")
            match = LISTENING.search(line)
            if match:
                break
            self._early_output.append(line)
        if cpu is not None:
            log.info("Delve and the fast relay share CPU %d", cpu)
            colocate = getattr(self.hooks, "colocate_relay", None)
            if colocate is not None:
                colocate(cpu)
        if relay:
            self._pump = threading.Thread(target=self._pump_output, name="delve-output",
                                          daemon=True)
            self._pump.start()
        else:
            threading.Thread(target=_log_lines, args=(output,), name="delve-log",
                             daemon=True).start()
        return match.group(1).decode(), int(match.group(2))

    def _early_text(self) -> str:
        text = b"".join(self._early_output).decode(errors="replace").strip()
        return f": {text}" if text else ""

    def _pump_output(self) -> None:
        """The program's output (and Delve's own lines) as `output` events."""
        while not self._output.ended:
            self._output.readable(0.2)  # wait for data outside the lock, then take it
            if not self._emit_output(wait=0):
                return

    def _emit_output(self, wait: float) -> bool:
        """Send the complete lines readable within `wait` seconds; False at end of output.
        Reading and sending happen under one lock, so the pump and `_drain_output` never
        reorder lines."""
        with self._output_lock:
            lines = self._output.read_lines(wait)
            for line in lines:
                if line:
                    self.hooks.backend_event(_event("output", {
                        "category": "stdout", "output": line.decode(errors="replace")}))
            return not (lines and lines[-1] == b"")

    def _drain_output(self) -> None:
        """Relay what the program wrote before it ended: Delve's DAP reports `exited` over
        its socket, possibly before the last lines crossed the pipe, and a client must see
        the output before the end of the session. Bounded: a quiet pipe for 50 ms is empty."""
        if self._output is None:
            return
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and self._output.readable(0.05):
            if not self._emit_output(wait=0):
                return

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
        if rpc is not None and not rpc.closed.is_set() and self.process is not None:
            try:
                # Delve ends (launch) or lets go of (attach) the debuggee itself
                rpc.detach(kill=self.launched, timeout=timeout)
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
            if self.launched and self.pid is not None:
                # Delve killed by someone else leaves its debuggee detached and running
                _kill_pid(self.pid)
        if self.program is not None:
            self.program.kill()  # and reaped: it is our child
        if self.channel is not None:
            self.channel.join(timeout)
        if self._pump is not None:
            self._pump.join(timeout)
        if self.output_dir is not None:
            shutil.rmtree(self.output_dir, ignore_errors=True)
        if self._spawner is not None:
            self._spawner.shutdown(wait=False)

    # --- letting go of the program for a recording (record breakpoints) ------------------
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
        from adapter.golang.bundle_index import runtime_layout
        from adapter.golang.runtime_layout import LayoutError
        try:
            layout = runtime_layout(os.readlink(f"/proc/{self.pid}/exe"))
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
        from adapter.golang.bundle_index import runtime_layout
        from adapter.golang.runtime_layout import LayoutError
        try:
            layout = runtime_layout(os.readlink(f"/proc/{self.pid}/exe"))
        except (LayoutError, OSError) as exc:
            raise AdapterError(f"cannot read goroutine ids in this binary: {exc}") from None
        return {"tls_g_offset": layout.tls_g_offset, "goid_offset": layout.goid_offset}

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
        `while_held()` runs once Delve holds every thread, before any breakpoint is set."""
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
            self._answer(channel.request("attach", dict(self._attach_arguments,
                                                        stopOnEntry=False), CONNECT_TIMEOUT),
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

    def _close_socket(self) -> None:
        hang_up(self._socket)
        self._socket = None

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
        self._wait_connected(request.command)
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


class _PipeLines:
    """Complete lines from a pipe, read with os.read so that nothing hides in a Python
    buffer where select() cannot see it. `b""` marks the end of the pipe."""

    def __init__(self, fd: int):
        self.fd = fd
        self.pending = b""
        self.ended = False

    def readable(self, wait: float) -> bool:
        return not self.ended and bool(select.select([self.fd], [], [], max(wait, 0))[0])

    def read_lines(self, wait: float) -> list[bytes]:
        """The complete lines available after waiting up to `wait` s for data (the partial
        last line at the end of the pipe counts as complete), then b"" if the pipe ended."""
        if b"\n" in self.pending:  # left over from next_line()
            *lines, self.pending = self.pending.split(b"\n")
            return [line + b"\n" for line in lines]
        if not self.readable(wait):
            return []
        chunk = os.read(self.fd, 65536)
        if not chunk:
            self.ended = True
            rest, self.pending = self.pending, b""
            return ([rest] if rest else []) + [b""]
        *lines, self.pending = (self.pending + chunk).split(b"\n")
        return [line + b"\n" for line in lines]

    def next_line(self, wait: float) -> bytes | None:
        """One line (b"" at the end of the pipe), or None if none came within `wait` s."""
        deadline = time.monotonic() + max(wait, 0)
        while b"\n" not in self.pending and not self.ended:
            if not self.readable(deadline - time.monotonic()):
                return None
            chunk = os.read(self.fd, 65536)
            if not chunk:
                self.ended = True
                break
            self.pending += chunk
        if b"\n" in self.pending:
            line, self.pending = self.pending.split(b"\n", 1)
            return line + b"\n"
        rest, self.pending = self.pending, b""
        return rest


class _RetiredDelve:
    """Channel handlers for the connection of a Delve that let go of the program: what it
    says while it goes (terminated, the connection closing) is not the session's end."""

    def default_event(self, event: Event) -> None:
        log.debug("retired Delve: %s event dropped", event.event)

    def default_request(self, request: Request) -> None:
        request.fail(BackendGone("this Delve has let go of the program"))

    def channel_closed(self, reason: str) -> None:
        log.debug("retired Delve's connection closed (%s)", reason)


def _read_layout(pid: int) -> None:
    """Read the program's Go runtime layout, line table and function symbols now, off the path
    of the first record breakpoint and of the first stop after its capture (each is kept per
    binary by its build-id: adapter.golang.bundle_index.runtime_layout, LineTable.for_elf,
    pt_decoder.image's symbol tables; issue 14 saw the trace scope take 7.7 s to open when
    they were read at that stop)."""
    from adapter.export.trace import load_bias
    from adapter.golang.bundle_index import runtime_layout
    from adapter.golang.runtime_layout import LayoutError
    from adapter.golang.user_lines import WithoutRuntime
    from pt_decoder.errors import PtError
    from pt_decoder.image import Image
    from pt_decoder.lines import LineTable
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        runtime_layout(exe)
        bias = load_bias(pid, exe)
        WithoutRuntime.wrap(LineTable.for_elf(exe, bias))
        symbols = Image()
        symbols.symbolize(symbols.add_elf(exe, bias).load_address)  # its function symbols
    except (LayoutError, PtError, OSError) as exc:
        log.info("no Go runtime layout or lines for process %d: %s", pid, exc)


def _log_lines(lines: _PipeLines) -> None:
    while not lines.ended:
        for line in lines.read_lines(1.0):
            if line:
                log.info("dlv: %s", line.decode(errors="replace").rstrip())


def _tracer(pid: int) -> int:
    """The process tracing `pid`'s main thread, 0 for none (or no such process)."""
    from adapter.hw.ptrace import tracer_of
    try:
        return tracer_of(pid)
    except OSError:
        return 0


def _environment(changes: dict) -> dict:
    """This process's environment with a configuration's `env` applied (None removes)."""
    env = dict(os.environ)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _event(name: str, body: dict) -> Event:
    return Event({"type": "event", "seq": 0, "event": name, "body": body})


_prctl = None


_affinity = None
"""(libc sched_setaffinity, its mask argument) for the dlv child, or None (see colocation_cpu)."""


def _die_with_parent() -> None:
    """In the dlv child before exec: SIGTERM when ptdebug dies, however it dies (prctl(2)
    PR_SET_PDEATHSIG), so Delve ends the program it launched (or lets go of an attached one)
    instead of waiting for clients forever: a headless multiclient Delve does not exit when
    its clients go. And, when chosen, Delve's CPU (sched_setaffinity(2), before the Go runtime
    starts any thread). Only these calls run in the child (resolved by _prepare_prctl before
    the fork: no dlopen, no lock, between fork and exec)."""
    _prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    if _affinity is not None:
        setaffinity, mask = _affinity
        setaffinity(0, len(mask), mask)


def _prepare_prctl(cpu: int | None = None) -> None:
    global _prctl, _affinity
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if _prctl is None:
        _prctl = libc.prctl
    if cpu is None:
        _affinity = None
    else:
        mask = ctypes.create_string_buffer(128)  # a cpu_set_t of 1024 CPUs
        mask[cpu // 8] = 1 << (cpu % 8)
        _affinity = (libc.sched_setaffinity, mask)


def colocation_cpu() -> int | None:
    """The CPU that Delve and the fast relay's thread share, or None to leave them to the
    scheduler (PTDEBUG_COLOCATE=0, or a CPU this process may not use).

    Why: a plain request crosses the relay thread twice (client -> relay -> Delve -> relay ->
    client). On different CPUs each crossing wakes an idle CPU, which costs an inter-processor
    interrupt, and on a VM an exit to the hypervisor (tens of microseconds each on the
    Firecracker VMs here, whose idle vCPUs halt at once); on one CPU it is a context switch.
    docs/PERFORMANCE.md has the figures side by side. The CPU taken is the one this process
    runs on when Delve starts."""
    if os.environ.get("PTDEBUG_COLOCATE", "1") == "0":
        return None
    try:
        with open("/proc/self/stat") as f:
            cpu = int(f.read().rpartition(")")[2].split()[36])  # field 39: processor
    except (OSError, ValueError, IndexError):
        return None
    return cpu if cpu in os.sched_getaffinity(0) else None


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_pid(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass

"""The Python backend: debugpy's own adapter (`python -m debugpy.adapter`) as a subprocess,
spoken to in DAP over its stdin/stdout; or, to attach with `connect`, the debugpy adapter a
`python -m debugpy --listen` debuggee already runs, spoken to over TCP.

Layer: backends. Forwards what debugpy implements, unchanged, and reports its events, its
reverse requests (runInTerminal, startDebugging) and its exit to the session. Knows nothing of
VS Code, features or hardware.

Why a list of forwarded commands: debugpy (1.8.22, verified by tests/e2e/test_dap_local.py
and the probe in docs/protocol.md) never answers a standard DAP request it does not implement,
such as readMemory or stepBack, and then stalls every later request of the session. So only
the requests below are ever sent to it; the session answers the rest itself.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import os
import shlex
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from adapter.protocol.channel import Channel
from adapter.protocol.errors import (
    AdapterError,
    BackendError,
    BackendGone,
    BackendTimeout,
    InvalidLaunchConfig,
)
from adapter.protocol.framing import MessageReader, MessageWriter
from adapter.protocol.messages import Event, Request, Response
from adapter.protocol.schema import AttachConfig, LaunchConfig
from adapter.python.inject import InjectError, read_report, report_file, run_python
from adapter.spawn import die_with_parent, package_main_command

from .base import Backend, BackendHooks, dial, hang_up
from .debugpy_detach import DebugpyDetach
from .debugpy_pid_attach import LISTEN_HOST, attach_source, listen_arguments

log = logging.getLogger("ptdebug.dap")

FORWARDED = frozenset({
    # answered by debugpy's adapter itself (src/debugpy/adapter/clients.py)
    "initialize", "launch", "attach", "configurationDone", "disconnect", "terminate",
    "debugpySystemInfo", "pause", "continue",
    # answered by pydevd in the debuggee (pydevd_process_net_command_json.py on_*_request)
    "threads", "completions", "next", "stepIn", "stepInTargets", "stepOut",
    "setFunctionBreakpoints", "setBreakpoints", "setExceptionBreakpoints", "stackTrace",
    "exceptionInfo", "scopes", "evaluate", "setExpression", "variables", "setVariable",
    "modules", "source", "gotoTargets", "goto", "setDebuggerProperty", "pydevdSystemInfo",
    "setPydevdSourceMap",
})
"""Requests debugpy answers. A custom (non-DAP) command is forwarded too: debugpy answers
unknown commands with an error instead of stalling."""

NATIVE_ID = "__import__('threading').get_native_id()"
"""What native_thread_id evaluates in a thread's top frame."""
STARTUP_TIMEOUT = 20.0
FORWARD_TIMEOUT = float(os.environ.get("PTDEBUG_FORWARD_TIMEOUT") or 30.0)
"""Seconds debugpy gets to answer a forwarded request before the client gets BackendTimeout
(1402): a stuck debugpy must never leave the client waiting silently (the environment
variable changes it, for tests)."""
FORWARD_TIMEOUTS = {"launch": None, "attach": None, "disconnect": None, "evaluate": 120.0,
                    "setExpression": 120.0, "setVariable": 120.0, "completions": 60.0}
"""Other limits by command: `launch`/`attach` are answered after configurationDone, whenever
the user sends it; `disconnect` has the session's own limit; an evaluation runs user code."""
STUCK_AFTER = 3
"""Requests in a row that debugpy let time out, answering nothing at all meanwhile, after which
it is taken as stuck for good (its adapter serves one request at a time: one it never answers
holds every later one): the user is told, and the session ends as if debugpy had exited."""
CONNECT_TIMEOUT = 10.0
ATTACH_CONNECT_TIMEOUT = 30.0
"""How long debugpy started in a process attached by pid may take to connect (importing it in a
busy process on a loaded machine takes seconds)."""
BACKEND_MAX_MESSAGE = 512 * 1024 * 1024
"""debugpy is ptdebug's own child, not an untrusted peer: a huge `variables` or `evaluate`
answer (a long repr) must reach the client rather than end the session."""


def check_launch_paths(config: LaunchConfig) -> None:
    """Refuse a launch whose `cwd` or `program` does not exist, naming the full path, before
    debugpy is started: debugpy reports a missing program's directory as "Failed to spawn
    launcher: [Errno 2] ... '/dir'" (it is the default cwd), and a missing file in an existing
    directory as the interpreter's "can't open file" in the program's output (issue 35).
    A relative program is the interpreter's: relative to `cwd`, else the adapter's directory.
    Raises InvalidLaunchConfig (shown to the user)."""
    if config.cwd is not None and not os.path.isdir(config.cwd):
        raise InvalidLaunchConfig(f"the launch's cwd {os.path.abspath(config.cwd)} does not exist "
                                  "or is not a directory")
    if config.program is None or config.module is not None:
        return
    program = os.path.join(config.cwd or os.getcwd(), os.path.expanduser(config.program))
    if not os.path.exists(program):
        raise InvalidLaunchConfig(f"the program {os.path.abspath(program)} does not exist "
                                  f"(launch 'program': {config.program!r}"
                                  + (f", relative to cwd {config.cwd}" if config.cwd and
                                     not os.path.isabs(config.program) else "") + ")")


class DebugpyBackend(DebugpyDetach, Backend):
    name = "debugpy"
    title = "debugpy"

    def __init__(self, hooks: BackendHooks):
        super().__init__(hooks)
        self.channel: Channel | None = None
        """DAP to that process."""
        self.socket: socket.socket | None = None
        """The connection to a debugpy server (attach with `connect`), else None."""
        self.deadlines = _Deadlines()
        """Forwarded requests still waiting for debugpy's answer, each with its limit."""
        self._silent_timeouts = 0
        """Requests timed out since debugpy last answered anything (STUCK_AFTER)."""
        self._given_up = False
        self._stuck_lock = threading.Lock()
        self._evaluating = 0
        """`evaluate` requests sent and not answered (`evaluations_done`)."""
        self._evaluating_changed = threading.Condition()
        self._native_ids: dict[int, int] = {}
        """DAP thread id -> its OS thread id (asked once: two round trips to debugpy)."""
        self._spawner: ThreadPoolExecutor | None = None
        """The thread debugpy's adapter was started from: its end would end the adapter."""
        self._server_waiting = threading.Event()
        """Set when debugpy's adapter listens for the process of an attach by pid."""
        self._server_address: tuple[str, int] = (LISTEN_HOST, 0)

    # --- lifecycle ------------------------------------------------------------------------
    def start(self, config: LaunchConfig | AttachConfig) -> None:
        if isinstance(config, LaunchConfig):
            check_launch_paths(config)
        if isinstance(config, AttachConfig) and config.connect is not None:
            self._connect(config.connect.host, config.connect.port)
            return
        command = os.environ.get("PTDEBUG_DEBUGPY_ADAPTER")
        # Another debugpy adapter command (a different interpreter's debugpy, or, in
        # benchmarks/bench_dap.py, a stand-in peer that answers at once).
        # Started isolated, by path (adapter/spawn.py says why): `python -m debugpy.adapter`
        # would put the workspace (our cwd) first on its sys.path, and its `bisect.py` would run.
        argv = shlex.split(command) if command else package_main_command("debugpy.adapter")
        log_dir = os.environ.get("PTDEBUG_DEBUGPY_LOG_DIR")
        if log_dir:
            argv += ["--log-dir", log_dir]
        # Started from a spawner thread of its own that lives as long as the backend, dying with
        # it (die_with_parent): when ptdebug is killed outright, debugpy's adapter would
        # otherwise stay, holding pydevd's connection in a process attached by pid (debugpy's
        # adapter waits for its servers to disconnect, and an attached one never does).
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="debugpy-spawner")
        try:
            # stderr must not be a pipe nobody reads: a full pipe would block debugpy.
            self.process = self._spawner.submit(
                subprocess.Popen, argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, preexec_fn=die_with_parent).result()
        except OSError as exc:
            raise BackendError(f"cannot start debugpy ({' '.join(argv)}): {exc}") from None
        self.channel = Channel(MessageReader(self.process.stdout, max_content_length=
                                             BACKEND_MAX_MESSAGE),
                               MessageWriter(self.process.stdin), self, "debugpy")
        self.channel.start()
        log.info("debugpy adapter started, pid %d", self.process.pid)

    def _connect(self, host: str, port: int) -> None:
        """`python -m debugpy --listen HOST:PORT prog.py` runs a debugpy adapter in the
        debuggee's process tree that waits for one DAP client: ptdebug becomes that client."""
        sock = dial(host, port, "the debugpy server", CONNECT_TIMEOUT)
        self.socket = sock
        self.channel = Channel(MessageReader(sock.makefile("rb"), max_content_length=
                                             BACKEND_MAX_MESSAGE), MessageWriter(
            sock.makefile("wb")), self, "debugpy")
        self.channel.start()
        log.info("connected to the debugpy server at %s:%d", host, port)

    def initialize(self, client_arguments: dict) -> dict:
        self._client_runs_terminals = bool(client_arguments.get("supportsRunInTerminalRequest"))
        response = self.request("initialize", client_arguments, timeout=STARTUP_TIMEOUT)
        if not response.success:
            raise BackendError(f"debugpy refused initialize: {response.error_text}")
        return dict(response.raw.get("body") or {})

    def launch(self, request: Request, config: LaunchConfig) -> None:
        arguments = self._common_arguments(request)
        if "console" not in arguments and not self._client_runs_terminals:
            # Without a terminal on the client side, debugpy must capture the output itself.
            arguments["console"] = "internalConsole"
        self.launched = True
        self._send_and_relay(request, "launch", arguments)

    def attach(self, request: Request, config: AttachConfig) -> None:
        arguments = self._common_arguments(request)
        arguments.pop("pid", None)
        if config.pid is None:
            self._send_and_relay(request, "attach", arguments)
            return
        # debugpy would inject itself with gdb (attach {processId}); ptdebug starts debugpy's
        # attach script in the process itself (backends/debugpy_pid_attach.py)
        arguments.pop("processId", None)
        arguments.update(listen_arguments())
        self.pid = config.pid
        self._server_waiting.clear()
        answered = threading.Event()
        once = threading.Lock()  # debugpy's answer, or ptdebug's failure: whichever is first

        def relay(response: Response) -> None:
            answered.set()
            if once.acquire(blocking=False):
                request.relay(response.raw)

        self.channel.send_request("attach", arguments, relay)
        if not self._server_waiting.wait(STARTUP_TIMEOUT):
            once.acquire(blocking=False)
            raise BackendError(f"cannot attach to process {config.pid}: debugpy's adapter did "
                               "not start listening for it")
        host, port = self._server_address
        report = report_file()
        started = time.monotonic()
        try:
            ran_on = run_python(config.pid, attach_source(host, port, os.environ.get(
                "PTDEBUG_DEBUGPY_LOG_DIR"), report), log=log.info)
        except InjectError as exc:
            once.acquire(blocking=False)
            os.unlink(report)
            raise BackendError(f"cannot attach to process {config.pid} by pid: {exc}") from None
        log.info("debugpy's attach thread started in process %d from %s in %.3f s",
                 config.pid, ran_on, time.monotonic() - started)
        # the features bound to the pid start at debugpy's `process` event, once: started here
        # too, two data-breakpoint engines watched side by side, and a write the user's
        # breakpoint no longer watched still stopped in the other's handler, or a hit was
        # matched by neither ("did not stop in ptdebug's SIGTRAP handler": issue 34)
        threading.Thread(target=self._await_attached, args=(request, config.pid, answered,
                                                            once, report),
                         name="ptdebug-await-attach", daemon=True).start()
        # a failure before this point is answered by the caller, as any raised BackendError
        # (debugpy's late answer, if any, is then dropped by `once`)

    def _await_attached(self, request: Request, pid: int, answered: threading.Event,
                        once: threading.Lock, report: str) -> None:
        """Fails the attach, saying why, when debugpy in process `pid` does not connect: its
        attach thread raised (seen at once), or nothing came within ATTACH_CONNECT_TIMEOUT."""
        deadline = time.monotonic() + ATTACH_CONNECT_TIMEOUT
        try:
            raised = ""
            while not answered.wait(0.05) and not raised and time.monotonic() < deadline:
                raised = read_report(report)
            if answered.is_set() or not once.acquire(blocking=False):
                return
            why = (f"debugpy's attach code raised in it: {raised.splitlines()[-1]}\n{raised}"
                   if raised else f"debugpy did not connect from it within "
                                  f"{ATTACH_CONNECT_TIMEOUT:g} s")
            request.fail(BackendError(f"cannot attach to process {pid} by pid: {why}"))
        finally:
            os.unlink(report)

    def debugpyWaitingForServer_event(self, event: Event) -> None:
        """debugpy's adapter listens for the debuggee of an attach by pid: where."""
        body = event.raw.get("body") or {}
        self._server_address = (str(body.get("host") or LISTEN_HOST), int(body.get("port") or 0))
        self._server_waiting.set()

    def close(self, timeout: float = 3.0) -> None:
        self.closing = True
        hang_up(self.socket)
        process = self.process
        if process is None:
            if self.channel is not None:
                self.channel.join(timeout)
            return
        try:
            process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("debugpy did not exit within %g s; killing it", timeout)
            process.kill()
            process.wait(timeout)
        if self._spawner is not None:
            self._spawner.shutdown(wait=False)  # the adapter it started has ended
        if self.channel is not None:
            self.channel.join(timeout)

    # --- forwarding -----------------------------------------------------------------------
    def handles(self, command: str) -> bool:
        return command in FORWARDED

    def forward(self, request: Request, observe=None) -> None:
        self._send_and_relay(request, request.command, request.raw.get("arguments"), observe)

    def request(self, command: str, arguments: dict | None = None,
                timeout: float = 10.0) -> Response:
        if self.channel is None:
            raise BackendGone("debugpy is not running")
        self._refuse_if_given_up(command)
        self._evaluation(command, +1)
        try:
            response = self.channel.request(command, arguments, timeout)
        except BackendTimeout:
            self._timed_out(command, timeout)
            raise
        finally:
            self._evaluation(command, -1)
        self._answered()
        return response

    def _evaluation(self, command: str, change: int) -> None:
        if command == "evaluate":
            with self._evaluating_changed:
                self._evaluating += change
                self._evaluating_changed.notify_all()

    def native_thread_id(self, thread_id: int) -> int:
        """The OS id of DAP thread `thread_id`: `threading.get_native_id()` evaluated in its
        top frame (it must be paused), asked once per thread (pydevd never gives a thread's
        id to another thread). Raises AdapterError."""
        known = self._native_ids.get(thread_id)
        if known is not None:
            return known
        frames = self.request("stackTrace", {"threadId": thread_id, "levels": 1}, timeout=10)
        stack = (frames.raw.get("body") or {}).get("stackFrames") or []
        if not frames.success or not stack:
            raise AdapterError(f"debugpy gave no stack for thread {thread_id}")
        answer = self.request("evaluate", {"expression": NATIVE_ID, "frameId": stack[0]["id"],
                                           "context": "repl"}, timeout=10)
        if not answer.success:
            raise AdapterError(f"cannot learn the OS id of thread {thread_id}: "
                               f"{answer.error_text}")
        self._native_ids[thread_id] = int(answer.raw["body"]["result"])
        return self._native_ids[thread_id]

    def evaluations_done(self, timeout: float) -> bool:
        """Wait until no `evaluate` is out (at most `timeout` s). pydevd runs an evaluation
        in the stopped thread with tracing on, and a `pause` that comes meanwhile suspends
        that thread inside its own evaluation: the evaluation never ends and pydevd answers
        nothing more (the DAP fuzzer: a pause during dataBreakpointInfo's probe)."""
        with self._evaluating_changed:
            return self._evaluating_changed.wait_for(lambda: self._evaluating == 0, timeout)

    # --- a debugpy that answers nothing any more ------------------------------------------
    def _refuse_if_given_up(self, command: str) -> None:
        """Once debugpy is given up, a request fails at once instead of waiting out its limit
        (a feature asking debugpy on the client's thread would hold every later request,
        the client's `disconnect` among them)."""
        if self._given_up:
            raise BackendGone(f"debugpy stopped answering; {command!r} was not sent")

    def _answered(self) -> None:
        with self._stuck_lock:
            self._silent_timeouts = 0

    def _timed_out(self, command: str, limit: float) -> None:
        """One more request debugpy did not answer in time; at STUCK_AFTER in a row with no
        answer to anything between them, the session gives debugpy up: every later request
        would wait out its limit just the same, and the user would see only 1402 errors."""
        with self._stuck_lock:
            self._silent_timeouts += 1
            if self._silent_timeouts < STUCK_AFTER or self._given_up or self.closing:
                return
            self._given_up = True
        attached = not self.launched
        log.error("debugpy answered none of the last %d requests (the last: %r, %g s); "
                  "giving it up", STUCK_AFTER, command, limit)
        self.hooks.backend_gone(
            f"debugpy stopped answering: none of the last {STUCK_AFTER} requests got an answer "
            f"(the last, {command!r}, waited {limit:g} s). This session cannot go on and ends "
            "now; " + ("ptdebug does not end the attached program: attach again to debug it."
                       if attached else "the program is ended: launch it again to debug it.")
            + " If it happens again, run with PTDEBUG_DEBUGPY_LOG_DIR=<folder> and report "
              "debugpy's logs.")

    def _send_and_relay(self, request: Request, command: str, arguments: dict | None,
                        observe=None) -> None:
        if self.channel is None:
            raise BackendGone("debugpy is not running")
        self._refuse_if_given_up(command)
        if observe is None:
            answer = lambda response: request.relay(response.raw)  # untouched: body as received
        else:
            def answer(response: Response) -> None:
                try:
                    observe(response.raw)
                finally:
                    request.respond_like(response.raw)
        limit = FORWARD_TIMEOUTS.get(command, FORWARD_TIMEOUT)
        if limit is None:
            self.channel.send_request(command, arguments, answer)
            return
        # one answer, whichever comes first: debugpy's, or the timeout's error
        once = threading.Lock()

        def relay(response: Response) -> None:
            self._answered()  # late or not, debugpy answers
            if once.acquire(blocking=False):
                self.deadlines.cancel(token)
                self._evaluation(command, -1)
                answer(response)
            else:
                log.warning("debugpy answered %r after its %g s limit; dropped", command, limit)

        def expired() -> None:
            if once.acquire(blocking=False):
                self._evaluation(command, -1)
                error = BackendTimeout(f"debugpy did not answer {command!r} within {limit:g} s")
                log.warning("%s", error.message)
                if observe is not None:
                    try:
                        observe({"success": False, "command": command,
                                 "message": error.message})
                    except Exception:
                        log.exception("observer of %r failed on a timeout", command)
                if not request.answered:
                    request.fail(error)
                self._timed_out(command, limit)

        self._evaluation(command, +1)
        token = self.deadlines.add(limit, expired)
        self.channel.send_request(command, arguments, relay)

    def _common_arguments(self, request: Request) -> dict:
        arguments = dict(request.raw.get("arguments") or {})
        arguments.pop("backend", None)
        return arguments

    _client_runs_terminals = False
    """Whether the client announced supportsRunInTerminalRequest (learnt in initialize)."""

    # --- debugpy -> us (Channel handlers) ----------------------------------------------------
    def process_event(self, event: Event) -> None:
        pid = (event.raw.get("body") or {}).get("systemProcessId")
        if isinstance(pid, int) and pid > 0:
            self.pid = pid
            self.hooks.backend_process(pid)
        self.hooks.backend_event(event)



class _Deadlines:
    """Limits of forwarded requests, watched by one thread (started on first use) rather than
    a timer thread per request."""

    def __init__(self):
        self._heap: list[tuple[float, int]] = []
        self._actions: dict[int, object] = {}
        self._ids = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def add(self, seconds: float, expired) -> int:
        token = next(self._ids)
        with self._cond:
            self._actions[token] = expired
            heapq.heappush(self._heap, (time.monotonic() + seconds, token))
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True,
                                                name="ptdebug-debugpy-deadlines")
                self._thread.start()
            self._cond.notify()
        return token

    def cancel(self, token: int) -> None:
        with self._cond:
            self._actions.pop(token, None)

    def _watch(self) -> None:
        while True:
            with self._cond:
                while self._heap and self._heap[0][1] not in self._actions:
                    heapq.heappop(self._heap)  # answered in time
                if not self._heap:
                    self._cond.wait()
                    continue
                deadline, token = self._heap[0]
                now = time.monotonic()
                if deadline > now:
                    self._cond.wait(deadline - now)
                    continue
                heapq.heappop(self._heap)
                expired = self._actions.pop(token, None)
            if expired is not None:
                try:
                    expired()
                except Exception:
                    log.exception("answering an expired request failed")

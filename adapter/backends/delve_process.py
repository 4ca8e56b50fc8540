"""The Go backend's processes: which dlv to run, what a Go launch builds and runs, and the
starting, output and ending of Delve and of the program ptdebug launches.

Layer: backends (a part of the Go backend: `DelveProcesses` is mixed into delve.py's
DelveBackend, whose __init__ holds the state it uses). Finds dlv (find_dlv), turns a launch
configuration into a LaunchPlan, builds the program and starts it held at its first instruction
(adapter/golang/launch.py), and starts `dlv attach PID --headless ...` from one long-lived
spawner thread, dying with ptdebug (PR_SET_PDEATHSIG) and, by choice, on the CPU of the fast
relay's thread (colocation_cpu); waits until it listens, then relays the pipe that Delve and the
program write into as `output` events. Its module functions end processes (_kill_group,
_kill_pid), tell whether one is still traced (_tracer) and read a started program's Go runtime
layout ahead of its first recording (_read_layout). Knows nothing of the requests Delve answers
(delve.py forwards them) or of the hand-over of the program for a recording
(delve_handover.py, which calls `_run_dlv` for the Delve that takes the program back).
"""
from __future__ import annotations

import logging
import os
import re
import select
import shlex
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapter.hw import procfs
from adapter.protocol.errors import BackendError, InvalidLaunchConfig
from adapter.protocol.messages import Event
from adapter.protocol.schema import LaunchConfig
from adapter.spawn import die_with_parent

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    from .base import BackendHooks

log = logging.getLogger("ptdebug.dap")

STARTUP_TIMEOUT = float(os.environ.get("PTDEBUG_DLV_STARTUP_TIMEOUT", "120"))
"""Seconds for Delve to build the program and listen (a cold `go build` can be slow)."""
CONNECT_TIMEOUT = 10.0
"""Seconds to reach a listening Delve, and for each request that sets it up (initialize...)."""
STOP_GRACE = 3.0
"""Seconds Delve gets to end after a polite request before it is killed."""

LISTENING = re.compile(rb"API server listening at: (\S+):(\d+)")


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


class DelveProcesses:
    """Starting Delve (and, for a launch, the program) and relaying their output, for
    DelveBackend: the attributes below are set by its __init__ (documented there)."""

    hooks: BackendHooks
    process: subprocess.Popen | None
    program: object
    address: tuple[str, int] | None
    _spawner: ThreadPoolExecutor | None
    _output: _PipeLines | None
    _output_lock: threading.Lock
    _early_output: list[bytes]
    _pump: threading.Thread | None

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
        _prepare_affinity(cpu)
        read_end, write_end = pipe if pipe is not None else os.pipe()
        try:
            # its own session: Delve and its children can be ended as a group
            # preexec_fn: only prctl runs between fork and exec (see _die_with_parent)
            # pass_fds: Delve holds the pipe's read end too, so a line it writes after
            # ptdebug died does not kill it with SIGPIPE (the Go runtime dies of it on fds 1
            # and 2, ignored or not) halfway through letting go of an attached program, whose
            # INT3 bytes then stayed and killed it with SIGTRAP (tests/e2e/test_fault_matrix.py).
            # What it writes then only fills the pipe's buffer, far from full when it exits.
            self.process = self._spawner.submit(
                subprocess.Popen, argv, cwd=run_dir, env=env, stdin=subprocess.DEVNULL,
                stdout=write_end, stderr=write_end, start_new_session=True,
                pass_fds=(read_end,), preexec_fn=_die_with_parent).result()
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


def _read_layout(pid: int) -> None:
    """Read the program's Go runtime layout, line table and function symbols now, off the path
    of the first record breakpoint and of the first stop after its capture (each is kept per
    binary by its build-id: adapter.golang.runtime_layout.layout_of, LineTable.for_elf,
    pt_decoder.image's symbol tables; issue 14 saw the trace scope take 7.7 s to open when
    they were read at that stop)."""
    from adapter.golang.runtime_layout import LayoutError, layout_of
    from adapter.golang.user_lines import WithoutRuntime
    from adapter.hw.mappings import load_bias
    from pt_decoder.errors import PtError
    from pt_decoder.image import Image
    from pt_decoder.lines import LineTable
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        layout_of(exe)
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


_affinity = None
"""(libc sched_setaffinity, its mask argument) for the dlv child, or None (see colocation_cpu)."""


def _die_with_parent() -> None:
    """In the dlv child before exec: SIGTERM when ptdebug dies, however it dies (prctl(2)
    PR_SET_PDEATHSIG), so Delve ends the program it launched (or lets go of an attached one)
    instead of waiting for clients forever: a headless multiclient Delve does not exit when
    its clients go. And, when chosen, Delve's CPU (sched_setaffinity(2), before the Go runtime
    starts any thread). Only these calls run in the child (resolved before the fork, by
    adapter.spawn and _prepare_affinity: no dlopen, no lock, between fork and exec)."""
    die_with_parent()
    if _affinity is not None:
        setaffinity, mask = _affinity
        setaffinity(0, len(mask), mask)


def _prepare_affinity(cpu: int | None = None) -> None:
    global _affinity
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
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
        cpu = procfs.stat(os.getpid()).processor
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

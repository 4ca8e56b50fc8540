"""Starting a Go program for a Delve session: build it as `dlv debug|test` would, and start it
held at its first instruction, so that Delve attaches to it instead of launching it.

Layer: adapter.golang. Runs `go build` / `go test -c` and the program; holds it with ptrace
only for the moment of its exec (adapter.hw.ptrace). Knows nothing of DAP or of Delve itself.

Why ptdebug starts the program and not Delve: a Delve that launched its debuggee always kills
it when it detaches (service/debugger: `if d.config.AttachPid == 0 { kill = true }`), and a
record breakpoint needs Delve to let go of the process for the recording and attach again
after (DelveBackend.hand_over / take_back in adapter/backends/delve_handover.py). A process Delve
attached to survives that.

How it is held: the child stops itself before exec, is seized (PTRACE_O_TRACEEXEC), runs to
the exec stop, gets a SIGSTOP queued and is detached: it then sits in a group-stop at the
entry point of the new program, no instruction of it run, until Delve attaches (PTRACE_ATTACH
of a stopped task reports the stop) and ptdebug sends SIGCONT (clearing the group stop, which
would otherwise come back when Delve detaches).
"""
from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import signal
import subprocess
import time

from adapter.hw import procfs
from adapter.hw import ptrace as pt

DEBUG_GCFLAGS = "-gcflags=all=-N -l"
"""What `dlv debug` builds with: no optimisation, no inlining (variables and lines as written)."""
BUILD_TIMEOUT = float(os.environ.get("PTDEBUG_GO_BUILD_TIMEOUT", "300"))
PR_SET_PDEATHSIG = 1


class BuildFailed(Exception):
    """`go build` / `go test -c` failed; the text is the compiler's."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status
        self.text = text


class StartFailed(Exception):
    """The program could not be started (not found, not executable, ended at once)."""


def find_go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go"
                               if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise StartFailed("the Go toolchain (go) is not on PATH; install Go or use mode "
                          "\"exec\" with a built binary")
    return go


def build(mode: str, package: str, package_dir: str, output: str,
          build_flags: str | None) -> str:
    """Build `package` (a directory's "." or a .go file) for debugging into `output`; `mode`
    is "debug" (go build) or "test" (go test -c). Returns `output`; raises BuildFailed with
    the compiler's words.

    The build runs in ptdebug's own environment: a launch configuration's `env` is the
    program's (as in vscode-go, where Delve builds with its own environment), and
    `{"HOME": null}` there must not take the Go cache from the build. `buildFlags` is how a
    configuration steers the build."""
    command = [find_go(), *(["build"] if mode == "debug" else ["test", "-c"]), DEBUG_GCFLAGS,
               "-o", output]
    if build_flags:
        command += shlex.split(build_flags)
    command.append(package)
    try:
        done = subprocess.run(command, check=False, cwd=package_dir, capture_output=True,
                              text=True, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise BuildFailed(-1, f"{shlex.join(command)} took longer than {BUILD_TIMEOUT:g} s")
    if done.returncode != 0:
        raise BuildFailed(done.returncode, (done.stderr + done.stdout).strip())
    if mode == "test" and not os.path.exists(output):
        # `go test -c` writes nothing for a package without test files
        raise BuildFailed(0, f"no test files in {package_dir}: `go test -c` built nothing")
    return output


def _failure(failure_read: int, program: str, cwd: str) -> str | None:
    """What the child said failed before its exec (see HeldProgram.start), as a sentence."""
    try:
        step, _, number = os.read(failure_read, 64).decode().partition(" ")
        reason = os.strerror(int(number))
    except (OSError, ValueError):
        return None
    if step == "chdir":
        return f"cannot start {program!r} in {cwd!r}: the working directory: {reason}"
    if step == "execve":
        return f"cannot start {program!r}: {reason}"
    return f"cannot start {program!r}: {step} failed: {reason}" if step else None


class HeldProgram:
    """A program started held at its first instruction (see the module docstring); a child
    of this process, so its exit status is ours to collect."""

    def __init__(self, pid: int):
        self.pid = pid
        self.status: int | None = None
        """Exit code (or -signal) once reaped."""

    @classmethod
    def start(cls, argv: list[str], cwd: str, env: dict, output_fd: int) -> HeldProgram:
        """Start `argv` in `cwd` with `env`, stdout and stderr to `output_fd`, stdin from
        /dev/null, in its own session, killed if ptdebug dies. Raises StartFailed."""
        libc = ctypes.CDLL(None, use_errno=True)
        devnull = os.open(os.devnull, os.O_RDONLY)
        # the child writes "STEP ERRNO" here if a step fails; a successful exec closes it
        failure_read, failure_write = os.pipe2(os.O_CLOEXEC)
        child = os.fork()
        if child == 0:  # nothing here may return into the caller's code
            step = "setsid"
            try:
                os.setsid()
                step = "chdir"
                os.chdir(cwd)
                step = "dup2"
                os.dup2(devnull, 0)
                os.dup2(output_fd, 1)
                os.dup2(output_fd, 2)
                libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
                os.kill(os.getpid(), signal.SIGSTOP)
                step = "execve"
                os.execve(argv[0], argv, env)
            except OSError as exc:
                os.write(failure_write, f"{step} {exc.errno or 0}".encode())
            finally:
                os._exit(127)
        os.close(devnull)
        os.close(failure_write)
        try:
            return cls._hold(child, argv, cwd, failure_read)
        finally:
            os.close(failure_read)

    @classmethod
    def _hold(cls, child: int, argv: list[str], cwd: str, failure_read: int) -> HeldProgram:
        held = cls(child)
        _, status = os.waitpid(child, os.WUNTRACED)
        if not os.WIFSTOPPED(status):
            held.status = os.waitstatus_to_exitcode(status)
            raise StartFailed(_failure(failure_read, argv[0], cwd)
                              or f"{argv[0]!r} ended before it started")
        try:
            pt.seize(child, pt.O_TRACEEXEC)
        except pt.PtraceError as exc:
            held.kill()
            raise StartFailed(f"cannot hold {argv[0]!r} for Delve: {exc}") from None
        os.kill(child, signal.SIGCONT)
        while True:  # to the exec stop
            st = pt.waitpid(child)
            if st.gone:
                held.status = st.exit_code if st.exited else -st.term_signal
                raise StartFailed(_failure(failure_read, argv[0], cwd) or
                                  f"{argv[0]!r} could not be executed ({st.describe()})")
            if st.event == pt.EVENT_EXEC:
                break
            pt.cont(child, 0 if st.event or st.stop_signal in (signal.SIGSTOP, signal.SIGCONT)
                    else st.stop_signal)
        os.kill(child, signal.SIGSTOP)  # taken at once after the detach: a group-stop
        pt.detach(child, 0)
        return held

    def stopped(self) -> bool:
        """True while the program sits in its group-stop (state T in /proc)."""
        try:
            return procfs.stat(self.pid).state == "T"
        except OSError:
            return False

    def wait_stopped(self, timeout: float = 2.0) -> bool:
        deadline = time.monotonic() + timeout
        while not self.stopped():
            if time.monotonic() > deadline or self.poll() is not None:
                return False
            time.sleep(0.001)
        return True

    def resume(self) -> None:
        """SIGCONT: ends the group-stop (Delve, attached, then decides when it runs)."""
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass

    def poll(self) -> int | None:
        if self.status is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.status
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
        return self.status

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.status

    def outlive_ptdebug(self) -> None:
        """Let the program live on after ptdebug (a disconnect that leaves it running): its
        parent-death signal, set at its start so that it dies with ptdebug however ptdebug
        ends, is cleared (prctl(2) PR_SET_PDEATHSIG 0, made by its main thread, whose setting
        it is), and its stdout and stderr, the pipe ptdebug reads, go to /dev/null: the pipe
        ends with ptdebug, and the Go runtime dies of SIGPIPE writing to fds 1 and 2. Every
        thread is held for the moment of it. Raises OSError when it cannot be done."""
        from adapter.hw import hold, remote_syscall
        held = hold.hold_all(self.pid)
        try:
            with remote_syscall.RemoteThread(self.pid, self.pid) as thread:
                _outlive(thread)
        finally:
            hold.let_go(held)

    def kill(self) -> None:
        """SIGKILL the program (its whole session) and reap it."""
        if self.poll() is not None:
            return
        for kill in (lambda: os.killpg(self.pid, signal.SIGKILL),
                     lambda: os.kill(self.pid, signal.SIGKILL)):
            try:
                kill()
            except (ProcessLookupError, PermissionError):
                pass
        self.wait(5.0)


# x86-64 system call numbers and flags (asm/unistd_64.h, asm-generic/mman-common.h, fcntl.h)
_MMAP, _MUNMAP, _OPEN, _CLOSE, _DUP2, _PRCTL = 9, 11, 2, 3, 33, 157
_PROT_RW, _MAP_PRIVATE_ANONYMOUS, _O_WRONLY_CLOEXEC = 3, 0x22, 0o1 | 0o2000000


def _outlive(thread) -> None:
    """The calls of HeldProgram.outlive_ptdebug, made by the program's main thread."""
    def check(what: str, result: int) -> int:
        if result < 0:
            raise OSError(-result, f"{what} in process {thread.pid}: {os.strerror(-result)}")
        return result

    check("prctl(PR_SET_PDEATHSIG, 0)", thread.call(_PRCTL, PR_SET_PDEATHSIG, 0))
    page = check("mmap", thread.call(_MMAP, 0, 4096, _PROT_RW, _MAP_PRIVATE_ANONYMOUS, -1, 0))
    try:
        thread.write(page, os.devnull.encode() + b"\0")
        null = check("open(/dev/null)", thread.call(_OPEN, page, _O_WRONLY_CLOEXEC))
        try:
            for fd in (1, 2):
                check(f"dup2(/dev/null, {fd})", thread.call(_DUP2, null, fd))
        finally:
            thread.call(_CLOSE, null)
    finally:
        thread.call(_MUNMAP, page, 4096)

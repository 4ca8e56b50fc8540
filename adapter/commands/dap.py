"""`ptdebug dap`: the Debug Adapter Protocol server, on stdio or on a TCP port of 127.0.0.1.

Layer: adapter.commands, the entry point of the DAP server. Sets up logging, the stream and the process
hygiene, then runs one `Session`. It owns the guarantee that no process is left behind: the
adapter makes itself a child subreaper (prctl(2) PR_SET_CHILD_SUBREAPER), so processes whose
parent dies (the debuggee when debugpy is killed) are re-parented to it, and at exit it ends
every descendant it still has (SIGTERM, then SIGKILL) and reaps them, but a launched program
the client asked to leave running (adapter/left_running.py).

`--port` binds 127.0.0.1 only: a DAP server runs arbitrary code on request, so it is never
offered to the network. `--port 0` picks a free port; the chosen one is printed on stderr as
`ptdebug dap: listening on 127.0.0.1:PORT`.
"""
from __future__ import annotations

import argparse
import ctypes
import logging
import os
import signal
import socket
import sys
import time

from adapter.hw import procfs

log = logging.getLogger("ptdebug.dap")

PR_SET_CHILD_SUBREAPER = 36  # prctl(2), linux/prctl.h
ACCEPT_TIMEOUT = 600.0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ptdebug dap", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=None,
                        help="listen on 127.0.0.1:PORT for one client instead of using stdio "
                             "(0 picks a free port)")
    parser.add_argument("--log-file", default=None, help="write the adapter log here "
                        "(default: stderr)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    options = parser.parse_args(argv)
    handler = (logging.FileHandler(options.log_file) if options.log_file
               else logging.StreamHandler(sys.stderr))
    handler.setFormatter(logging.Formatter("%(asctime)s ptdebug-dap %(levelname)s %(message)s"))
    log.addHandler(handler)
    log.setLevel(options.log_level)
    log.propagate = False
    _become_subreaper()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # A client that quits sends SIGHUP to the adapter's process group (Emacs does, for its
    # pipe subprocesses): without a handler the adapter died there and left a debuggee that
    # waited for configurationDone with no debugger behind it.
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    try:
        if options.port is None:
            return _serve_stdio()
        return _serve_port(options.port)
    finally:
        end_descendants()


def _serve_stdio() -> int:
    from adapter.session import Session
    client_in = os.fdopen(os.dup(0), "rb")
    client_out = os.fdopen(os.dup(1), "wb")
    # The protocol owns fd 1 now: anything printed by mistake goes to stderr instead.
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return Session(client_in, client_out).run()


def _serve_port(port: int) -> int:
    from adapter.session import Session
    if not 0 <= port <= 65535:
        print(f"ptdebug dap: --port must be 0..65535, got {port}", file=sys.stderr)
        return 2
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind(("127.0.0.1", port))
    except OSError as exc:
        print(f"ptdebug dap: cannot listen on 127.0.0.1:{port}: {exc.strerror}", file=sys.stderr)
        return 1
    server.listen(1)
    print(f"ptdebug dap: listening on 127.0.0.1:{server.getsockname()[1]}", file=sys.stderr,
          flush=True)
    server.settimeout(ACCEPT_TIMEOUT)
    try:
        conn, peer = server.accept()
    except TimeoutError:
        log.error("no client connected within %g s", ACCEPT_TIMEOUT)
        return 1
    finally:
        server.close()
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    log.info("client connected from %s:%d", *peer)
    with conn:
        return Session(conn.makefile("rb"), conn.makefile("wb")).run()


def _become_subreaper() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_CHILD_SUBREAPER) failed: %s",
                        os.strerror(ctypes.get_errno()))
    except OSError as exc:
        log.warning("cannot become a child subreaper: %s", exc)


def descendants(root: int, spared: frozenset[int] = frozenset()) -> list[int]:
    """Process ids below `root`, read from /proc/*/stat (field 4 is the parent, proc(5)),
    without those in `spared` and what runs below them."""
    children: dict[int, list[int]] = {}
    for pid in procfs.pids():
        try:
            parent = procfs.stat(pid).ppid
        except OSError:
            continue
        children.setdefault(parent, []).append(pid)
    out, stack = [], [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child in spared:
                continue
            out.append(child)
            stack.append(child)
    return out


def end_descendants(grace: float = 2.0) -> None:
    """SIGTERM every descendant, SIGKILL what is left after `grace` seconds, reap them all;
    but not a program the client asked to leave running (adapter/left_running.py)."""
    from adapter.left_running import spared
    me = os.getpid()
    left = frozenset(spared())
    pids = descendants(me, left)
    if not pids:
        return
    log.info("ending %d leftover process(es): %s", len(pids), pids)
    for pid in pids:
        _signal(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap()
        if not _alive(descendants(me, left)):
            return
        time.sleep(0.05)
    for pid in descendants(me, left):
        _signal(pid, signal.SIGKILL)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(descendants(me, left)):
        _reap()
        time.sleep(0.02)
    _reap()


def _alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = procfs.stat(pid).state
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass

"""What every backend is: the `Backend` base class, the `BackendHooks` it reports to (the
Session), and the socket helpers the debuggers' connections share.

Layer: backends, under `session`; below every concrete backend (debugpy.py, delve.py,
replay.py import it) and below the package's `create_backend` switch (__init__.py), which
names them. It may not know about VS Code, features (watchpoints, recorder, reverse) or
hardware. Optional powers a backend may have later (e.g. evaluating an address for a data
breakpoint) are separate interfaces it can implement (adapter/powers.py), never flags in this
base class.
"""
from __future__ import annotations

import abc
import socket
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from adapter.protocol.channel import DEFERRED
from adapter.protocol.errors import BackendError

if TYPE_CHECKING:
    import subprocess

    from adapter.protocol.channel import Channel
    from adapter.protocol.messages import Event, Request, Response
    from adapter.protocol.progress import Progress
    from adapter.protocol.schema import AttachConfig, LaunchConfig


class BackendHooks(Protocol):
    """What a backend reports to the session."""

    def backend_event(self, event: Event) -> None:
        """An event from the debugger, to be forwarded to the client (or consumed)."""

    def backend_reverse_request(self, request: Request) -> None:
        """A reverse request (runInTerminal, startDebugging) for the client to answer."""

    def backend_process(self, pid: int) -> None:
        """The debuggee's operating-system process id became known."""

    def backend_gone(self, reason: str) -> None:
        """The debugger's connection closed: it exited, crashed or was killed."""

    def backend_recording(self, replayed: object) -> None:
        """The backend replays a recording (replay.ReplayedBundle) instead of running a
        program: its histories are to be shown and stepped through, its images read."""

    def backend_progress(self, title: str) -> Progress:
        """A progress (protocol/progress.py) for a long operation of the backend's own: shown
        to the client when it takes over half a second, cancellable by it."""

    def backend_channel(self, sock: socket.socket, handlers: object, name: str) -> Channel:
        """The Channel to use over a debugger's DAP socket (the session may relay its plain
        requests outside Python: adapter/protocol/relay.py)."""


class Backend(abc.ABC):
    """One debugger process (or connection) serving one debug session."""

    name = "backend"
    """Short name used in log lines and error texts ('debugpy', 'delve')."""
    title = "the backend"
    """The debugger's name in messages to the user ('debugpy', 'Delve')."""

    def __init__(self, hooks: BackendHooks):
        self.hooks = hooks
        """Where events, reverse requests and the end of the backend are reported."""
        self.pid: int | None = None
        """The debuggee's process id, once known."""
        self.launched = False
        """True when the debuggee was started by this session (so it is ours to end)."""
        self.process: subprocess.Popen | None = None
        """The debugger's process, when ptdebug started it."""
        self.closing = False
        """Set by close(): the end of the channel is then expected, not a crash."""

    # --- the debugger -> us: Channel handlers every backend shares ------------------------
    def default_event(self, event: Event) -> None:
        self.hooks.backend_event(event)

    def default_request(self, request: Request) -> object:
        """A reverse request (runInTerminal, startDebugging): the client answers it."""
        self.hooks.backend_reverse_request(request)
        return DEFERRED

    def channel_closed(self, reason: str) -> None:
        if self.closing:
            return
        code = self._exit_status()
        self.hooks.backend_gone(f"{self.title}'s connection closed ({reason}"
                                f"{'' if code is None else f', exit status {code}'})")

    def _exit_status(self) -> int | None:
        """The debugger process's exit status if it has ended, else None."""
        return self.process.poll() if self.process else None

    def disconnect_coming(self, arguments: dict | None) -> None:
        """The client asked to disconnect (its `arguments`); `disconnect` follows once what
        the features put into the program is let go. A backend that would otherwise start
        something the disconnect makes useless (a Delve coming back after a recording) learns
        it here; the others have nothing to do."""
        return

    def disconnect(self, arguments: dict | None,
                   answered: Callable[[Response], None]) -> None:
        """The client's `disconnect` (its `arguments`), sent to the debugger;
        `answered(response)` gets the answer. A backend that must do more to leave the
        program as the client asked does it here."""
        self.channel.send_request("disconnect", arguments, answered)

    def disconnect_done(self, request: dict, response: dict) -> bool:
        """True when a failed `disconnect` did what it was asked all the same (the debugger
        stumbled over a debuggee that is already gone)."""
        return False

    @abc.abstractmethod
    def start(self, config: LaunchConfig | AttachConfig) -> None:
        """Start (or connect to) the debugger for `config`. Raises BackendError if it cannot."""

    @abc.abstractmethod
    def initialize(self, client_arguments: dict) -> dict:
        """Send `initialize` with the client's arguments; return the debugger's capabilities."""

    @abc.abstractmethod
    def launch(self, request: Request, config: LaunchConfig) -> None:
        """Start the program; `request` is answered when the debugger answers."""

    @abc.abstractmethod
    def attach(self, request: Request, config: AttachConfig) -> None:
        """Attach to a process or server; `request` is answered when the debugger answers."""

    @abc.abstractmethod
    def handles(self, command: str) -> bool:
        """True when forwarding `command` gets an answer (never a silent stall)."""

    def relays_untouched(self, command: str) -> bool:
        """True when `forward` sends `command` on as it is and relays its response as it comes
        (no custom handling, no fixup): the session may then let the fast relay carry it.
        False unless a backend says otherwise."""
        return False

    @abc.abstractmethod
    def forward(self, request: Request,
                observe: Callable[[dict], None] | None = None) -> None:
        """Send a client request on unchanged; its response goes back to the client.

        `observe(response)` sees the raw response first (a feature learning, say, which
        frame a variablesReference belongs to); it must not change it."""

    @abc.abstractmethod
    def request(self, command: str, arguments: dict | None = None,
                timeout: float = 10.0) -> Response:
        """A request of the adapter's own (e.g. `evaluate` for a feature); waits for the answer."""

    @abc.abstractmethod
    def close(self, timeout: float = 3.0) -> None:
        """Stop the debugger process (politely, then by force) and wait for it."""


def dial(host: str, port: int, what: str, timeout: float) -> socket.socket:
    """A blocking TCP connection to a debugger's server, Nagle off (one small message waits
    for the answer before the next). Raises BackendError naming `what` could not be reached."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise BackendError(f"cannot connect to {what} at {host}:{port}: "
                           f"{exc.strerror or exc}") from None
    sock.settimeout(None)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def hang_up(sock: socket.socket | None) -> None:
    """Shut a debugger connection down both ways (its reader sees the end at once) and close
    it; None and an already broken socket are fine."""
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()

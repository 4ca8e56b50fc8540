"""What a feature sees of the Session: its hooks, as a protocol the Session meets.

Layer: features, below every feature module and below session.py, which implements it (the
session builds the features and passes itself in; a feature never imports the session, so
the two do not name each other: tests/test_layering.py, test_the_modules_have_no_cycle).
Only what a feature module that declares its types uses is listed; the rest of the Session's
hooks are documented on the Session (adapter/session.py).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from adapter.protocol.messages import Request, Response
    from adapter.routes import Router


class Debugger(Protocol):
    """The backend as a feature uses it (adapter/backends/base.py, Backend): what it may send
    on; its optional powers are asked with isinstance (adapter/powers.py)."""

    def forward(self, request: Request,
                observe: Callable[[dict], None] | None = None) -> None:
        """Send a client request on unchanged; its response goes back to the client."""

    def request(self, command: str, arguments: dict | None = None,
                timeout: float = 10.0) -> Response:
        """A request of the adapter's own; waits for the answer."""


class SessionHooks(Protocol):
    """The Session's hooks a feature plugs into (adapter/session.py documents each)."""

    paused: bool
    routes: Router

    @property
    def backend(self) -> Debugger | None:
        """The debugger behind ptdebug, from launch/attach on."""

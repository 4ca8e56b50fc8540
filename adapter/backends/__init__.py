"""Backends: the debugger behind ptdebug (debugpy for Python, Delve for Go, or the replay of a
recorded trace bundle), and the one function that names them.

Layer: backends, under `session`. A backend runs its debugger, forwards the requests that
debugger handles, and reports its events, reverse requests and death to a `BackendHooks`
(the Session). It may not know about VS Code, features (watchpoints, recorder, reverse) or
hardware. The base class and its hooks are in base.py, below the backends this module names
(re-exported here for the session).
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING

from adapter.protocol.errors import InvalidLaunchConfig, UnsupportedBackend

from .base import Backend, BackendHooks, dial, hang_up

if TYPE_CHECKING:
    from adapter.protocol.schema import AttachConfig, LaunchConfig

__all__ = ["Backend", "BackendHooks", "create_backend", "dial", "hang_up", "infer_backend"]


def infer_backend(config: LaunchConfig | AttachConfig) -> str:
    """The backend a configuration needs: its `backend` field, else guessed from the target.

    Raises InvalidLaunchConfig when nothing tells Python from Go.
    """
    if getattr(config, "replay", None) is not None:
        return "replay"  # a recording, whatever language it was: no debugger runs
    if config.backend:
        return config.backend
    program = getattr(config, "program", None)
    if getattr(config, "module", None) or getattr(config, "connect", None):
        return "python"
    if program:
        if program.endswith((".py", ".pyw")):
            return "python"
        if program.endswith(".go") or os.path.isdir(program):
            return "go"
        try:
            with open(program, "rb") as f:
                head = f.read(64)
        except OSError:
            head = b""
        if head.startswith(b"\x7fELF"):
            return "go"
        if head.startswith(b"#!") and b"python" in head.split(b"\n", 1)[0]:
            return "python"
    pid = getattr(config, "pid", None)
    if pid is not None:
        return _process_language(pid)
    raise InvalidLaunchConfig(f"cannot tell whether {program!r} is a Python or a Go program; "
                              "set \"backend\": \"python\" or \"go\"")


def _process_language(pid: int) -> str:
    """"python" for a process running CPython (the interpreter, or a program embedding
    libpython), "go" for a Go program; else InvalidLaunchConfig naming what it is."""
    from adapter.python.inject import InjectError, python_api
    from pt_decoder.image import is_go_binary
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except FileNotFoundError:
        raise InvalidLaunchConfig(f"no process {pid} (it is not running)") from None
    except OSError as exc:
        raise InvalidLaunchConfig(f"cannot read process {pid}'s program: {exc}") from None
    if os.path.basename(exe).startswith("python"):
        return "python"
    try:
        python_api(pid)
        return "python"
    except InjectError:
        pass
    if is_go_binary(exe):
        return "go"
    raise InvalidLaunchConfig(f"process {pid} ({exe}) is neither a Python nor a Go program: "
                              "ptdebug attaches to CPython processes (through debugpy) and Go "
                              "programs (through Delve)")


def create_backend(name: str, hooks: BackendHooks) -> Backend:
    """The one place that names concrete backends."""
    if name == "python":
        from .debugpy import DebugpyBackend
        return DebugpyBackend(hooks)
    if name == "go":
        from .delve import DelveBackend
        return DelveBackend(hooks)
    if name == "replay":
        from .replay import ReplayBackend
        return ReplayBackend(hooks)
    raise UnsupportedBackend(f"unknown backend {name!r}; expected 'python' or 'go'")

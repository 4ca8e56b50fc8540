"""Processes a session started and the client asked to leave running (`disconnect` with
`terminateDebuggee: false` after a launch): `ptdebug dap` ends every descendant it still has
when it exits (adapter/commands/dap.py), except these and what runs below them.

Layer: shared state at the adapter's root (imports nothing of ptdebug): a backend records here,
the command that owns the process hygiene reads it.
"""
from __future__ import annotations

import threading

_lock = threading.Lock()
_pids: set[int] = set()


def leave(pid: int) -> None:
    """`pid` is to outlive ptdebug."""
    with _lock:
        _pids.add(pid)


def spared() -> set[int]:
    """The processes to leave running."""
    with _lock:
        return set(_pids)

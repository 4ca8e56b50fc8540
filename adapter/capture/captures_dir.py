"""Where a debug session keeps its captures: a directory that outlives the session, one bundle
directory per capture (kept within a size limit, oldest unpinned and unused first:
retention.py; the program files they ran through stored once beside them: image_store.py).

Layer: adapter.capture (storage, beside bundle.py). Knows paths and the launch configuration's
two keys that place them (`captures`, `cwd`); nothing of DAP or of how a capture is recorded.

The directory, in order: the launch configuration's `captures` (relative to its `cwd`); else
`.ptdebug/captures/` in the launch's `cwd` (the workspace, for the VS Code extension's
configurations; a `.gitignore` there keeps the captures out of the user's commits); else the
user's data directory, `$XDG_DATA_HOME/ptdebug/captures` (`~/.local/share/ptdebug/captures`).
A capture's directory is named after the time, the program and its number in the session, and
is created exclusively, so two sessions never write into one bundle.
"""
from __future__ import annotations

import datetime
import os
import pathlib
import re

WORKSPACE_DIRECTORY = ".ptdebug"
"""The folder ptdebug keeps in a workspace (its captures under `captures/`)."""


def user_captures_directory() -> pathlib.Path:
    """`$XDG_DATA_HOME/ptdebug/captures`, `~/.local/share/ptdebug/captures` by default (the XDG
    Base Directory specification's data home)."""
    data = os.environ.get("XDG_DATA_HOME")
    if not data or not os.path.isabs(data):  # the specification says to ignore relative ones
        data = os.path.join(os.path.expanduser("~"), ".local", "share")
    return pathlib.Path(data) / "ptdebug" / "captures"


def captures_directory(configured: str | None, cwd: str | None) -> pathlib.Path:
    """The directory a session's captures go to (see the module docstring); not created."""
    if configured:
        path = pathlib.Path(os.path.expanduser(configured))
        if not path.is_absolute():
            path = pathlib.Path(cwd or os.getcwd()) / path
        return path
    if cwd:
        return pathlib.Path(cwd) / WORKSPACE_DIRECTORY / "captures"
    return user_captures_directory()


def prepare(directory: pathlib.Path) -> pathlib.Path:
    """Create `directory` (and its parents). In a workspace's `.ptdebug/`, also a `.gitignore`
    ignoring everything, written once. Raises OSError when it cannot be created or written."""
    directory.mkdir(parents=True, exist_ok=True)
    if directory.parent.name == WORKSPACE_DIRECTORY:
        ignore = directory.parent / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# ptdebug's captures and state: not for version control\n*\n")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(f"{directory}: not writable")
    return directory


def new_capture_directory(directory: pathlib.Path, program: str | None, number: int) -> pathlib.Path:
    """A new, empty directory for capture `number` of a session in `directory`:
    `20260502-101500-service-capture-3` (a suffix `-2`, `-3`, ... if the name is taken)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", pathlib.Path(program or "session").stem)[:40]
    base = f"{stamp}-{name or 'session'}-capture-{number}"
    for attempt in range(1, 1000):
        path = directory / (base if attempt == 1 else f"{base}-{attempt}")
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{directory}: no free name for {base}")

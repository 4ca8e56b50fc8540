"""The folder a Go launch builds its program into, and the sweep of folders whose adapter died.

Layer: adapter.golang. Files and /proc only; knows nothing of Delve or DAP.

A launch builds `__debug_bin` into a fresh `ptdebug-go-*` folder under the temporary directory
and the backend removes it when the session ends. An adapter killed outright (SIGKILL, the OOM
killer) never gets there, so each folder carries an owner file naming the adapter's pid and
that process's start time (/proc/PID/stat field 22: a pid alone can be reused), and every new
launch removes the folders whose owner is gone. Only folders that are real directories (not
links) owned by this user are touched; a folder without an owner file (another version, a hand
made one) is left alone.
"""
from __future__ import annotations

import os
import shutil
import stat
import tempfile

from adapter.hw import procfs

PREFIX = "ptdebug-go-"
OWNER_FILE = ".ptdebug-owner"


def _start_time(pid: int) -> str | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), None if there is no such
    process. The command name (field 2) may hold spaces and parentheses: split after its
    last ')'."""
    try:
        fields = procfs.stat(pid).fields
    except OSError:
        return None
    return fields[19] if len(fields) > 19 else None


def _owner_alive(folder: str) -> bool:
    """Whether the adapter named in `folder`'s owner file still runs. A missing or unreadable
    owner file counts as alive: nothing is removed that ptdebug cannot show is its own."""
    try:
        fd = os.open(os.path.join(folder, OWNER_FILE), os.O_RDONLY | os.O_NOFOLLOW
                     | os.O_NONBLOCK)
    except OSError:
        return True
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return True
        text = os.read(fd, 64).decode("ascii", "replace").split()
    finally:
        os.close(fd)
    if len(text) != 2 or not text[0].isdigit():
        return True
    return _start_time(int(text[0])) == text[1]


def sweep_orphans(parent: str | None = None) -> list[str]:
    """Removes the `ptdebug-go-*` folders in `parent` (the temporary directory) whose adapter
    is gone; returns the paths removed."""
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(PREFIX)]
    except OSError:
        return removed
    uid = os.geteuid()
    for name in names:
        path = os.path.join(parent, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or _owner_alive(path):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def make_build_dir(parent: str | None = None) -> str:
    """A fresh private folder for one launch's build, marked as this process's; folders left by
    dead adapters are swept first."""
    sweep_orphans(parent)
    folder = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
    me = os.getpid()
    with open(os.path.join(folder, OWNER_FILE), "w") as f:
        f.write(f"{me} {_start_time(me)}\n")
    return folder

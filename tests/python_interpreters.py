"""The CPython interpreters of this machine that Python attribution is tested on (3.10-3.13):
the one running the tests and any other `python3.N` on PATH or under ~/.pyenv/versions."""
from __future__ import annotations

import glob
import os
import shutil
import sys

VERSIONS = ("3.10", "3.11", "3.12", "3.13")


def interpreter(version: str) -> str | None:
    """An executable of CPython `version` ("3.11"), or None when this machine has none."""
    if f"{sys.version_info[0]}.{sys.version_info[1]}" == version:
        return sys.executable
    for path in sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python3")),
                       reverse=True):
        if os.access(path, os.X_OK):
            return path
    found = shutil.which(f"python{version}")
    return found if found and ".pyenv/shims" not in found else None

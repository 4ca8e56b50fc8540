"""Command lines for the Python processes ptdebug starts, independent of the current directory.

Layer: shared helper at the adapter's root (imports nothing of ptdebug). A debug session runs
with the user's workspace as its current directory, and `python -m NAME` puts that directory
first on `sys.path`: a workspace with its own `adapter/` package would replace ptdebug's code in
the child, and any `bisect.py` or `random.py` there would run inside it (as root, when ptdebug
runs as root). Every Python child is therefore started isolated (`-I`: no current directory,
no PYTHONPATH, no user site-packages) from an absolute path whose `__main__` puts the right
directory on `sys.path` itself: ptdebug's (adapter/__main__.py) or debugpy's
(debugpy/adapter/__main__.py does the same for the way VS Code's Python extension starts it).
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import sys

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
"""This package's directory: `python -I PACKAGE_DIR` runs adapter/__main__.py."""


def ptdebug_command(*args: str) -> list[str]:
    """`ptdebug ARGS` as a child's command line (this interpreter, this copy of ptdebug)."""
    return [sys.executable, "-I", PACKAGE_DIR, *args]


def module_command(module: str, *args: str) -> list[str]:
    """`python -m MODULE ARGS` for one of ptdebug's own modules, without the current
    directory on its `sys.path`."""
    return ptdebug_command("-m", module, *args)


def package_main_command(package: str, *args: str) -> list[str]:
    """A package's `__main__` started by path and isolated, for a package that fixes its own
    `sys.path` when started so (debugpy.adapter does). The package is found where this
    process imports it from; raises ModuleNotFoundError if it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"no package {package!r}", name=package)
    return [sys.executable, "-I", os.path.abspath(next(iter(spec.submodule_search_locations))),
            *args]


_libc_prctl = ctypes.CDLL(None, use_errno=True).prctl
"""prctl(2), resolved before any fork: between fork and exec a child may not dlopen or lock."""
PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """A subprocess `preexec_fn`: the child gets SIGTERM when the thread that started it ends
    (prctl(2) PR_SET_PDEATHSIG: the *thread*, so the caller starts children from a thread that
    lives as long as they should), however ptdebug ends, SIGKILL included."""
    _libc_prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)

"""A hostile workspace for the tests of ptdebug's independence from the current directory: its
own `adapter/` and `pt_decoder/` packages and a `bisect.py` (imported by the standard library's
`random`), each of which, if imported, leaves a marker file and fails the import."""
from __future__ import annotations

import pathlib

SHADOWS = ("adapter/__init__.py", "pt_decoder/__init__.py", "bisect.py")

MODULE = """import os
open(os.path.join({markers!r}, "imported-" + __name__), "w").close()
raise ImportError("the workspace's " + __name__ + " was imported")
"""


def make_workspace(root: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """(workspace, markers directory) under `root`."""
    workspace, markers = root / "workspace", root / "markers"
    markers.mkdir(parents=True)
    for relative in SHADOWS:
        path = workspace / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MODULE.format(markers=str(markers)))
    return workspace, markers


def imported(markers: pathlib.Path) -> list[str]:
    """The workspace modules imported so far."""
    return sorted(p.name[len("imported-"):] for p in markers.iterdir())

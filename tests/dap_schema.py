"""Where the tests find the DAP JSON schema: ../shared/dap's (the current protocol, the richer
source) where present, else the copy debugpy ships in its vendored pydevd, so that a clone
without ../shared still validates every message. debugpy's copy is a few definitions older (no
BreakpointMode and no `locations` request); tests that need those ask for `shared_dir`."""
from __future__ import annotations

import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHARED = pathlib.Path(os.environ.get("PTDEBUG_SHARED", ROOT.parent / "shared")).resolve()


def dap_schema_path() -> pathlib.Path:
    shared = SHARED / "dap" / "debugAdapterProtocol.json"
    if shared.is_file():
        return shared
    import debugpy
    shipped = (pathlib.Path(debugpy.__file__).parent / "_vendored" / "pydevd" / "_pydevd_bundle"
               / "_debug_adapter" / "debugProtocol.json")
    if not shipped.is_file():
        pytest.fail(f"no DAP schema: neither {shared} (PTDEBUG_SHARED) nor debugpy's {shipped}")
    return shipped

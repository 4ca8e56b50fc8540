"""The Go toolchain as the tests use it, from any test folder: `go_tool()` finds `go`, and
`pprof_top()` reads `go tool pprof -top` (the reference reader of ptdebug's pprof exports)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

_TOP_ROW = re.compile(r"\s*(\d+)[a-z]*\s+[\d.]+%\s+[\d.]+%\s+(\d+)[a-z]*\s+[\d.]+%\s+(.+)$")
"""flat flat% sum% cum cum% name; a unit may follow the numbers (`-unit=ns`: 120ns)."""


def go_tool() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go")
                                else None)
    if go is None:
        pytest.fail("the Go toolchain is missing (a documented requirement of ptdebug; "
                    "scripts/bootstrap.sh installs it)")
    return go


def pprof_top(path, *options: str) -> dict[str, tuple[int, int]]:
    """{function: (flat, cum)} of every function `go tool pprof -top OPTIONS PATH` lists
    (all of them: -nodecount=100000 -nodefraction=0)."""
    out = subprocess.run([go_tool(), "tool", "pprof", "-top", "-nodecount=100000",
                          "-nodefraction=0", *options, str(path)],
                         capture_output=True, text=True, check=True, timeout=120).stdout
    rows = {}
    for line in out.splitlines():
        m = _TOP_ROW.match(line)
        if m:
            rows[m.group(3).strip()] = (int(m.group(1)), int(m.group(2)))
    assert rows, out
    return rows

"""Builds the fixture programs of tests/fixtures/programs at test time and finds marked lines.

Binaries go to pytest's temporary directories, never into the repository.
Source lines are named by `// @marker` comments, never by number.
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

PROGRAMS = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "programs"


def build_c(source: str, out_dir: pathlib.Path, *flags: str) -> pathlib.Path:
    """Compile tests/fixtures/programs/`source` with gcc and `flags`; returns the binary."""
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: scripts/bootstrap.sh installs build-essential")
    suffix = "".join(f.replace("-", "_") for f in flags)
    out = out_dir / f"{pathlib.Path(source).stem}{suffix}"
    subprocess.run(["gcc", *flags, "-o", str(out), str(PROGRAMS / source)], check=True)
    return out


def build_go(source: str, out_dir: pathlib.Path) -> pathlib.Path:
    """`go build` tests/fixtures/programs/`source` as a one-file module; returns the binary."""
    go = shutil.which("go")
    if go is None:
        pytest.fail("the Go toolchain is missing (it is a documented requirement)")
    module = out_dir / "gomod"
    module.mkdir(exist_ok=True)
    shutil.copy(PROGRAMS / source, module / source)
    (module / "go.mod").write_text("module fixture\n\ngo 1.21\n")
    out = out_dir / pathlib.Path(source).stem
    env = dict(os.environ, CGO_ENABLED="0", GOFLAGS="-mod=mod")
    subprocess.run([go, "build", "-o", str(out), "."], cwd=module, check=True, env=env)
    return out


def marker_line(source: str, name: str) -> int:
    """The 1-based line of tests/fixtures/programs/`source` carrying `// @name`."""
    pattern = re.compile(r"//\s*@" + re.escape(name) + r"\b")
    for number, line in enumerate((PROGRAMS / source).read_text().splitlines(), 1):
        if pattern.search(line):
            return number
    raise AssertionError(f"marker @{name} not found in {source}")

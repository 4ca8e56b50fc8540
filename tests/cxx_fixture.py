"""The C++ capture fixture (tests/fixtures/programs/cxx_service.cpp over the shared library
cxx_kernels.cpp), built with g++ at test time, and real stepper recordings of its `serve`.

Binaries go to pytest's temporary directories, never into the repository.
"""
from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PROGRAMS = ROOT / "tests" / "fixtures" / "programs"


def build_cxx_service(out_dir: pathlib.Path, *flags: str) -> tuple[pathlib.Path, pathlib.Path]:
    """(program, library): cxx_service linked against libcxx_kernels.so, both in `out_dir`
    (the program finds the library through its RUNPATH)."""
    if shutil.which("g++") is None:
        pytest.fail("g++ is missing: scripts/bootstrap.sh installs build-essential")
    out_dir.mkdir(parents=True, exist_ok=True)
    library = out_dir / "libcxx_kernels.so"
    build_library(library, *flags)
    program = out_dir / "cxx_service"
    subprocess.run(["g++", "-O0", "-g", "-o", str(program), str(PROGRAMS / "cxx_service.cpp"),
                    f"-L{out_dir}", "-lcxx_kernels", f"-Wl,-rpath,{out_dir}"], check=True)
    return program, library


def build_library(library: pathlib.Path, *flags: str) -> None:
    subprocess.run(["g++", "-O0", "-g", *flags, "-shared", "-fPIC", "-o", str(library),
                    str(PROGRAMS / "cxx_kernels.cpp")], check=True)


def ptdebug(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([sys.executable, "-m", "adapter.cli", *args], cwd=ROOT,
                         capture_output=True, text=True, timeout=240)
    if check:
        assert run.returncode == 0, f"ptdebug {args}: {run.stdout}\n{run.stderr}"
    return run


def record(program: pathlib.Path, bundle: pathlib.Path) -> pathlib.Path:
    """A stepper recording of one `serve` call, referencing the program's files by path (as a
    debug session's recorder writes a capture)."""
    ptdebug("record", "--backend", "stepper", "--no-copy-images", "--from", "serve",
            "--until-return", "-o", str(bundle), "--", str(program), "2")
    return bundle


def decoded_ips(bundle: pathlib.Path) -> list[int]:
    """The executed addresses, in order."""
    return [int(line, 16) for line in ptdebug("decode", str(bundle), "--format", "ips")
            .stdout.splitlines() if re.fullmatch(r"(0x)?[0-9a-f]+", line)]

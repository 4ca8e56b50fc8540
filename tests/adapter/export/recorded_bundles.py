"""Real bundles for the export and language-server tests: the hot-path fixtures
(tests/fixtures/programs/hotpath.c / hotpath.go) built here and recorded by `ptdebug record`
with the ptrace stepper, which works on every x86-64 Linux machine (no Intel PT needed).

Also an independent symbolizer (`nm` / `go tool nm`), so that the tests check the exports'
function attribution against a tool other than the one the exports use.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from go_toolchain import go_tool

ROOT = pathlib.Path(__file__).resolve().parents[3]
PROGRAMS = ROOT / "tests" / "fixtures" / "programs"
REQUESTS = 12
"""How many requests the fixtures' serve() handles."""


def ptdebug(*args: str, env: dict | None = None, timeout: float = 120,
            check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "adapter.cli", *args], cwd=ROOT,
                            capture_output=True, text=True, timeout=timeout,
                            env={**os.environ, **(env or {})})
    if check and result.returncode != 0:
        raise AssertionError(f"ptdebug {' '.join(args)} exited {result.returncode}:\n"
                             f"{result.stdout}\n{result.stderr}")
    return result


def marker_line(path: pathlib.Path, name: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if f"// @{name}" in line or f"# @{name}" in line:
            return number
    raise AssertionError(f"no @{name} marker in {path}")


@pytest.fixture(scope="session")
def c_program(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("hotpath_c") / "hotpath"
    subprocess.run(["gcc", "-O0", "-g", "-no-pie", "-o", str(out), str(PROGRAMS / "hotpath.c")],
                   check=True)
    return out


@pytest.fixture(scope="session")
def c_bundle(c_program, tmp_path_factory) -> pathlib.Path:
    bundle = tmp_path_factory.mktemp("hotpath_c_bundle") / "bundle"
    ptdebug("record", "--backend", "stepper", "--from", "serve", "--until-return",
            "-o", str(bundle), "--", str(c_program), str(REQUESTS))
    return bundle


@pytest.fixture(scope="session")
def go_program(tmp_path_factory) -> pathlib.Path:
    work = tmp_path_factory.mktemp("hotpath_go")
    module = work / "mod"
    module.mkdir()
    shutil.copy(PROGRAMS / "hotpath.go", module / "hotpath.go")
    (module / "go.mod").write_text("module fixture\n\ngo 1.21\n")
    out = work / "hotpath_go"
    subprocess.run([go_tool(), "build", "-o", str(out), "."], cwd=module, check=True,
                   env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"})
    return out


@pytest.fixture(scope="session")
def go_bundle(go_program, tmp_path_factory) -> pathlib.Path:
    bundle = tmp_path_factory.mktemp("hotpath_go_bundle") / "bundle"
    # No asynchronous preemption signal may interrupt the recorded function.
    ptdebug("record", "--backend", "stepper", "--from", "main.serve", "--until-return",
            "-o", str(bundle), "--", str(go_program), env={"GODEBUG": "asyncpreemptoff=1"})
    return bundle


def nm_functions(binary: pathlib.Path, go: bool = False) -> list[tuple[int, int, str]]:
    """(start, end, name) of the text symbols of a non-PIE binary, from nm / go tool nm."""
    if go:
        out = subprocess.run([go_tool(), "tool", "nm", "-size", "-sort", "address", str(binary)],
                             capture_output=True, text=True, check=True).stdout
        rows = []
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("T", "t"):
                rows.append((int(parts[0], 16), int(parts[0], 16) + int(parts[1]), parts[3]))
        return rows
    out = subprocess.run(["nm", "-S", "--defined-only", str(binary)], capture_output=True,
                         text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        parts = line.split()
        code = ("T", "t", "W", "w", "i")  # code, weak, ifunc
        if len(parts) == 4 and parts[2] in code:
            start = int(parts[0], 16)
            rows.append((start, start + int(parts[1], 16), parts[3]))
        elif len(parts) == 3 and parts[1] in code:  # no size (assembly labels)
            rows.append((int(parts[0], 16), None, parts[2]))
    rows.sort(key=lambda r: r[0])
    # A symbol without a size runs to the next symbol's start (as perf and gdb read them), but
    # not past the end of its section (readelf's): glibc's sizeless _init in .init is not the
    # .plt after it (pt_decoder.symbols bounds them so since issue 35).
    sections = code_sections(binary)

    def section_end(start: int) -> int:
        return next((hi for lo, hi, _ in sections if lo <= start < hi), start + 1)

    return [(start, end if end is not None else
             min(next((s for s, _, _ in rows[i + 1:] if s > start), section_end(start)),
                 section_end(start)), name)
            for i, (start, end, name) in enumerate(rows)]


def code_sections(binary: pathlib.Path) -> list[tuple[int, int, str]]:
    """(start, end, name) of the executable sections of an ELF file, from `readelf -SW`."""
    out = subprocess.run(["readelf", "-SW", str(binary)], capture_output=True, text=True,
                         check=True).stdout
    found = []
    for line in out.splitlines():
        parts = line.replace("[ ", "[").split()
        # [Nr] Name Type Address Off Size ES Flg Lk Inf Al
        if len(parts) >= 8 and parts[0].startswith("[") and parts[0] != "[Nr]" and "X" in parts[7]:
            start = int(parts[3], 16)
            found.append((start, start + int(parts[5], 16), parts[1]))
    return found


def function_at(rows: list[tuple[int, int, str]], ip: int) -> str | None:
    for start, end, name in rows:
        if start <= ip < end:
            return name
    return None


def spread_cycles(history) -> list[int]:
    """Cycles per instruction by the rule in adapter/recording/recording.py's header, computed here
    from the history's cumulative column alone: a report's cycles spread evenly over the
    instructions since the previous report (remainder to the last); none across gaps."""
    cycles = list(history.cycles_range())
    gaps = {g.position for g in history.gaps}
    out = [0] * len(cycles)
    pending: list[int] = []
    for pos in range(1, len(cycles)):
        if pos in gaps:
            pending = []
            continue
        pending.append(pos)
        delta = cycles[pos] - cycles[pos - 1]
        if delta > 0:
            for k in pending:
                out[k] = delta // len(pending)
            out[pos] += delta % len(pending)
            pending = []
    return out

"""Hits symbolised where the code has no ordinary ELF symbol or line table.

- JIT code: a C fixture (watch_jit.c) writes through machine code it copies
  into anonymous memory and names only in /tmp/perf-PID.map, written after
  the watch is armed (as a JIT compiles on first use): the report names it.
- Go: a goroutine stores into a package variable (watch_go.go); the variable
  is found by its Go name, the store reported in `main.bump` at the marked
  line through Go's pclntab, whichever runtime thread ran the goroutine.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent.parent
PROGRAMS = ROOT / "tests" / "fixtures" / "programs"

pytestmark = pytest.mark.live


def _watch(pid: int, *argv) -> subprocess.Popen:
    cli = subprocess.Popen([sys.executable, "-m", "adapter.cli", "watch", "--pid", str(pid), "--json",
                            *map(str, argv)], cwd=ROOT, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    armed = cli.stderr.readline()
    assert "watching" in armed, armed + cli.stderr.read()
    return cli


def _start(argv) -> tuple[subprocess.Popen, dict[str, int]]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    ready = proc.stdout.readline()
    return proc, {k: int(v, 16) for k, v in re.findall(r"(\w+)=(0x[0-9a-f]+)", ready)}


def _marker_line(path: pathlib.Path, name: str) -> int:
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if f"// @{name}" in text:
            return number
    raise AssertionError(f"no marker @{name} in {path}")


def test_jit_code_is_named_from_the_perf_map(tmp_path):
    binary = tmp_path / "watch_jit"
    subprocess.run(["gcc", "-O1", "-o", str(binary), str(PROGRAMS / "watch_jit.c")], check=True)
    proc, addr = _start([str(binary), "4"])
    try:
        cli = _watch(proc.pid, "--addr", hex(addr["value"]), "--count", 4)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = cli.communicate(timeout=60)
        assert cli.returncode == 0, err
        hits = [json.loads(line) for line in out.splitlines()]
        assert len(hits) == 4
        news = [int(h["new"], 16) for h in hits if h["new"]]
        assert news == sorted(set(news)) and news[-1] == 4   # the last hit's value is final
        for hit in hits:
            # The trap IP follows the 3-byte store at the start of the JIT page.
            assert int(hit["ip"], 16) == addr["code"] + 3
            assert hit["symbol"] == "jit_store_value+0x2"
            assert hit["file"] is None
    finally:
        proc.kill()
        proc.wait()
        pathlib.Path(f"/tmp/perf-{proc.pid}.map").unlink(missing_ok=True)


def test_go_variable_by_name_and_line_from_pclntab(tmp_path):
    binary = tmp_path / "watch_go"
    subprocess.run(["go", "build", "-o", str(binary), str(PROGRAMS / "watch_go.go")], check=True,
                   cwd=tmp_path, env={**os.environ, "GO111MODULE": "off"})
    proc, addr = _start([str(binary), "5"])
    try:
        cli = _watch(proc.pid, "--symbol", "main.counter", "--count", 5)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = cli.communicate(timeout=60)
        assert cli.returncode == 0, err
        hits = [json.loads(line) for line in out.splitlines()]
        assert len(hits) == 5
        line = _marker_line(PROGRAMS / "watch_go.go", "bump")
        for hit in hits:
            assert hit["address"] == hex(addr["counter"])
            assert hit["symbol"].startswith("main.bump")
            assert hit["file"].endswith("watch_go.go") and hit["line"] == line
    finally:
        proc.kill()
        proc.wait()

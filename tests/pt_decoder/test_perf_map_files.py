"""Perf maps are untrusted files (issue 17: anyone can create /tmp/perf-PID.map): a FIFO there
held `record --pid`, `watch` and a DAP disassemble forever, a link to /dev/zero read without
bound. Now a perf map is opened without following links and without blocking, must be a
regular file of the target's user or root, and is read up to a bound; a refused one is named
in the image's warnings and the image is built without it."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from pt_decoder import symbols
from pt_decoder.errors import PtError
from pt_decoder.image import Image


@pytest.fixture
def target():
    """A live process and its /tmp/perf-PID.map path (removed afterwards). The process has
    said it runs: read before, a loaded machine showed it still exec'ing, with no ELF mapped
    (session 17, beside a busy loop)."""
    proc = subprocess.Popen([sys.executable, "-c",
                             "import time; print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    path = f"/tmp/perf-{proc.pid}.map"
    yield proc, path
    proc.kill()
    proc.wait()
    if os.path.lexists(path):
        os.unlink(path)


def _from_process_in_time(pid: int) -> Image:
    started = time.monotonic()
    image = Image.from_process(pid)
    assert time.monotonic() - started < 10
    return image


def test_a_fifo_is_refused_at_once(target):
    proc, path = target
    os.mkfifo(path)
    image = _from_process_in_time(proc.pid)
    assert "is not a regular file" in image.warnings[-1]
    assert any(m.kind == "elf" for m in image.modules)  # the rest of the image is there


@pytest.mark.parametrize("points_to", ["/dev/zero", "/etc/hostname"])
def test_a_symbolic_link_is_not_followed(target, points_to):
    proc, path = target
    os.symlink(points_to, path)
    image = _from_process_in_time(proc.pid)
    assert "it is a symbolic link" in image.warnings[-1]


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_another_users_file_is_refused(target):
    proc, path = target
    with open(path, "w") as f:
        f.write("1000 10 planted\n")
    os.chown(path, 4321, 4321)
    image = _from_process_in_time(proc.pid)
    assert "belongs to uid 4321" in image.warnings[-1]
    assert image.symbolize(0x1005) is None
    os.chown(path, 0, 0)  # root's file is trusted
    assert Image.from_process(proc.pid).symbolize(0x1005).name == "planted"


def test_reading_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(symbols, "PERF_MAP_MAX_BYTES", 64)
    path = tmp_path / "big.map"
    path.write_text("".join(f"{0x1000 + 16 * i:x} 10 f{i}\n" for i in range(100)))
    entries, warnings = symbols.read_perf_map(str(path))
    assert 0 < len(entries) <= 64 // 8 and entries[-1][2] == f"f{len(entries) - 1}"
    assert "only the first" in warnings[-1]


def test_add_perf_map_refuses_a_fifo_with_an_error(tmp_path):
    path = tmp_path / "fifo.map"
    os.mkfifo(path)
    with pytest.raises(PtError, match="not a regular file"):
        Image().add_perf_map(str(path))

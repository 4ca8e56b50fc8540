"""`ptdebug export` shows its progress on a terminal and nothing in a pipe.

Layer: tests of adapter/commands/export.py with pt_decoder/tools/progress.py, as real processes:
the real Intel PT recording of DynamoRIO's static-glibc "hello" (../shared/traces, wrapped in
a bundle in tmp), exported to Perfetto JSON with stderr on a pseudo-terminal (pty), then on a
pipe. PTDEBUG_PROGRESS_AFTER=0 draws from the start (the export takes well under the default
half second's threshold here).
"""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

import pytest

from adapter.capture.bundle import BundleWriter

HELLO = "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"
CLI = "import sys; from adapter.cli import main; sys.exit(main())"


@pytest.fixture(scope="module")
def bundle(traces_dir, tmp_path_factory):
    source = traces_dir / HELLO
    root = tmp_path_factory.mktemp("export_progress") / "bundle"
    writer = BundleWriter(root, "intel_pt", {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 7},
                          timing={"tsc_hz": None, "cyc": True}, command=["hello"], copy_images=False)
    writer.add_stream_bytes(1, (source / "pt.bin").read_bytes(), pid=1)
    # the executable PT_LOAD of the static binary: file offset 0x1000 at 0x401000
    writer.add_image(str(source / "hello"), 0x401000, 0x1000, 0x86FB1, kind="elf")
    writer.add_thread(1, 1, "hello")
    writer.finish()
    return root


def _argv(bundle, out) -> list[str]:
    return [sys.executable, "-c", CLI, "export", "perfetto", str(bundle), "-o", str(out), "--force"]


def test_bar_on_a_terminal(bundle, tmp_path):
    master, slave = pty.openpty()
    env = {**os.environ, "PTDEBUG_PROGRESS_AFTER": "0"}
    proc = subprocess.Popen(_argv(bundle, tmp_path / "t.json"), stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:                 # EIO: the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    out = proc.stdout.read()
    assert proc.wait(timeout=120) == 0, seen
    assert b"decoding thread 1 [" in seen or b"decoded [" in seen, seen
    assert b"writing perfetto ..." in seen, seen
    assert seen.endswith(b"\r\x1b[K"), seen          # erased before the result is printed
    assert out.startswith(b"wrote ") and (tmp_path / "t.json").stat().st_size > 0


def test_nothing_in_a_pipe(bundle, tmp_path):
    env = {**os.environ, "PTDEBUG_PROGRESS_AFTER": "0"}
    run = subprocess.run(_argv(bundle, tmp_path / "p.json"), capture_output=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr == b""
    assert run.stdout.startswith(b"wrote ")

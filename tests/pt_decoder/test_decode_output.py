"""`ptdebug decode` output at decoder speed: streamed in pieces with bounded memory, the
same bytes as before, and a progress bar on a terminal only.

Layer: tests of pt_decoder.tools.decode (+ text_out, progress) as a real process. The
long stream is benchmarks/corpus.py's: the real static-glibc hello path re-encoded with
timing, 0.25 MiB = 1.7 M instructions (cached in ~/.cache/ptdebug), whose exact flow is
the recorded path repeated; the progress bar is checked on a pseudo-terminal (pty) and on
a pipe.
"""
from __future__ import annotations

import os
import pty
import select
import subprocess
import sys

import pytest

GLIBC = "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"
# The decode as a process; it writes its own peak RSS (VmHWM) to stderr at exit.
CHILD = ("import sys; from pt_decoder.tools import decode; rc = decode.main(sys.argv[1:]); "
         "sys.stderr.write([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0]); "
         "sys.exit(rc)")


@pytest.fixture(scope="module")
def long_stream(shared_dir):
    from benchmarks.corpus import DECODE, cached_stream
    path, info = cached_stream(0.25)
    eax, ebx = DECODE["cpuid_0x15"]
    options = ["--elf", info["elf"], "--cpu", DECODE["cpu"], "--mtc-freq", str(DECODE["mtc_freq"]),
               "--nom-freq", str(DECODE["nom_freq"]), "--cpuid-0x15.eax", str(eax),
               "--cpuid-0x15.ebx", str(ebx)]
    return path, info, options


def test_long_decode_streams_the_exact_path_in_bounded_memory(long_stream, tmp_path):
    """Regression (issue 15): the ips output of 5 M instructions was built as one Python
    string per instruction and a whole-history list (337 MB RSS, 8.6-14.3 s). Now the
    pieces are printed as they are decoded: every IP in order across the piece
    boundaries, and a peak RSS that does not grow with the trace."""
    from benchmarks.corpus import recorded_path
    path, info, options = long_stream
    out = tmp_path / "ips.txt"
    with open(out, "wb") as fh:
        run = subprocess.run([sys.executable, "-c", CHILD, str(path), *options, "--format", "ips"],
                             stdout=fh, stderr=subprocess.PIPE, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    ips, _ = recorded_path()
    with open(out) as fh:
        got = [int(line, 16) for line in fh if not line.startswith("[")]
    assert len(got) == info["instructions"] > 1_000_000
    assert got == ips * info["passes"]
    peak_kb = int(run.stderr.split("VmHWM:")[1].split()[0])
    # the interpreter and modules take ~30 MB; the old path needed ~55 MB per million
    # instructions on top (about 120 MB here)
    assert peak_kb < 64 * 1024, f"peak RSS {peak_kb} kB"


def _decode_argv(traces_dir) -> list[str]:
    folder = traces_dir / GLIBC
    return [sys.executable, "-m", "pt_decoder.tools.decode", str(folder / "pt.bin"), "--elf",
            str(folder / "hello"), "--cpu", "6/85/7", "--format", "ips"]


def test_progress_bar_is_drawn_on_a_terminal(traces_dir, tmp_path):
    master, slave = pty.openpty()
    env = {**os.environ, "PTDEBUG_PROGRESS_AFTER": "0"}     # draw from the first piece on
    with open(tmp_path / "out", "wb") as out:
        proc = subprocess.Popen(_decode_argv(traces_dir), stdout=out, stderr=slave, env=env)
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
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
    assert proc.wait(timeout=60) == 0
    assert b"decode [" in seen and b"100%" in seen, seen
    assert seen.endswith(b"\r\x1b[K"), seen          # the bar is erased at the end
    assert (tmp_path / "out").read_text().count("\n") > 59_000


def test_no_progress_bar_on_a_pipe(traces_dir):
    env = {**os.environ, "PTDEBUG_PROGRESS_AFTER": "0"}
    run = subprocess.run(_decode_argv(traces_dir), capture_output=True, env=env, timeout=60)
    assert run.returncode == 0
    assert run.stderr == b""
    assert run.stdout.count(b"\n") > 59_000


def test_a_reader_that_goes_away_is_not_an_error(traces_dir):
    """`ptdebug decode ... | head`: no traceback, exit status 0."""
    proc = subprocess.Popen(_decode_argv(traces_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and first and b"Traceback" not in err, err

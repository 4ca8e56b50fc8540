"""`ptdebug decode` and `ptdebug dump` output at decoder speed: streamed in pieces with
bounded memory, the same bytes as before, a progress bar on a terminal only, and `dump`
of a bundle directory.

Layer: tests of pt_decoder.tools.decode and dump (+ text_out, progress) as real
processes. The
long stream is benchmarks/corpus.py's: the real static-glibc hello path re-encoded with
timing, 0.25 MiB = 1.7 M instructions (cached in ~/.cache/ptdebug), whose exact flow is
the recorded path repeated; the progress bar is checked on a pseudo-terminal (pty) and on
a pipe.
"""
from __future__ import annotations

import contextlib
import io
import json
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


def _dump_argv(traces_dir) -> list[str]:
    return [sys.executable, "-m", "pt_decoder.tools.dump", str(traces_dir / GLIBC / "pt.bin")]


@pytest.mark.parametrize("command", ["decode", "dump"])
def test_progress_bar_is_drawn_on_a_terminal(traces_dir, tmp_path, command):
    master, slave = pty.openpty()
    env = {**os.environ, "PTDEBUG_PROGRESS_AFTER": "0"}     # draw from the first piece on
    argv = _decode_argv(traces_dir) if command == "decode" else _dump_argv(traces_dir)
    with open(tmp_path / "out", "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=slave, env=env)
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
    assert command.encode() + b" [" in seen and b"100%" in seen, seen
    assert seen.endswith(b"\r\x1b[K"), seen          # the bar is erased at the end
    assert (tmp_path / "out").read_text().count("\n") > 5_000


@pytest.mark.parametrize("command", ["decode", "dump"])
def test_no_progress_bar_on_a_pipe(traces_dir, command):
    env = {**os.environ, "PTDEBUG_PROGRESS_AFTER": "0"}
    argv = _decode_argv(traces_dir) if command == "decode" else _dump_argv(traces_dir)
    run = subprocess.run(argv, capture_output=True, env=env, timeout=60)
    assert run.returncode == 0
    assert run.stderr == b""
    assert run.stdout.count(b"\n") > 5_000


def _bundle(traces_dir, tmp_path):
    """A two-stream bundle of the DynamoRIO x86-64 recording (as ptdebug record writes one)."""
    folder = traces_dir / "dynamorio-drpt2trace/test_simple.raw-2022-07-07-x86_64-hello"
    bundle = tmp_path / "bundle"
    (bundle / "streams").mkdir(parents=True)
    data = (folder / "pt.bin").read_bytes()
    (bundle / "streams" / "1.pt").write_bytes(data)
    (bundle / "streams" / "2.pt").write_bytes(data)
    manifest = {"format": "ptdebug-bundle", "version": 1, "status": "complete", "backend": "intel_pt",
                "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 4},
                "timing": {"mtc_freq": 3, "nom_freq": 37, "cpuid_0x15_eax": 2, "cpuid_0x15_ebx": 308},
                "streams": [{"tid": 1, "pid": 1, "cpu": None, "file": "streams/1.pt", "size": len(data)},
                            {"tid": 2, "pid": 1, "cpu": None, "file": "streams/2.pt", "size": len(data)}],
                "images": []}
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    return bundle, folder / "pt.bin"


def _dump(argv):
    from pt_decoder.tools import dump
    out = io.StringIO()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = dump.main([str(a) for a in argv], out)
    return rc, out.getvalue(), err.getvalue()


def test_dump_takes_a_bundle_directory_with_its_cpu_and_timing(traces_dir, tmp_path):
    bundle, trace = _bundle(traces_dir, tmp_path)
    rc, out, _ = _dump(["--time", "--time-delta", bundle])
    direct = _dump(["--time", "--time-delta", "--cpu", "6/85/4", "--mtc-freq", "3", "--nom-freq", "37",
                    "--cpuid-0x15.eax", "2", "--cpuid-0x15.ebx", "308", trace])[1]
    assert rc == 0 and "tsc" in direct
    assert out == "[stream tid 1]\n" + direct + "[stream tid 2]\n" + direct
    # without the manifest's timing the same dump reports errors: the bundle's were used
    assert _dump(["--time", "--time-delta", trace])[1] != direct
    rc, out, _ = _dump([bundle])
    assert rc == 0 and out.count("[stream tid") == 2 and "psb" in out


def test_dump_of_a_bad_bundle_is_a_one_line_error(tmp_path):
    (tmp_path / "notabundle").mkdir()
    rc, out, err = _dump([tmp_path / "notabundle"])
    assert rc == 2 and out == "" and "manifest.json" in err and len(err.splitlines()) == 1
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "manifest.json").write_text('{"format": "x"}')
    rc, _, err = _dump([tmp_path / "other"])
    assert rc == 2 and "not a ptdebug bundle" in err
    rc, _, err = _dump([f"{tmp_path / 'other'}:0-16"])
    assert rc == 2


def test_a_reader_that_goes_away_is_not_an_error(traces_dir):
    """`ptdebug decode ... | head`: no traceback, exit status 0."""
    proc = subprocess.Popen(_decode_argv(traces_dir), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 0 and first and b"Traceback" not in err, err

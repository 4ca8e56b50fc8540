"""One convention for every `ptdebug` command (adapter/cli.py): exit 0 when the work is done,
1 when it failed, 2 for bad usage or input, and a one-line message naming what was wrong, never
a traceback or a raw `[Errno N]`. Table-driven: every command with a missing file, a PID that
names no process, bad arguments, and an existing output without --force; plus --version."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

from adapter import __version__
from adapter.cli import COMMANDS

ROOT = pathlib.Path(__file__).resolve().parents[2]
MISSING = "/nonexistent/ptdebug-test"
NO_PID = "4194304"  # above pid_max's largest value (2^22): never a process


def _ptdebug(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "adapter.cli", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
                          check=False)


# (command line, text the one message line must hold). {out} is an existing file, {dir} an
# existing directory.
BAD_INPUT = [
    # a missing file
    (["dump", MISSING], f"cannot read trace {MISSING}: No such file or directory"),
    (["decode", MISSING], f"{MISSING}: No such file or directory"),
    (["record", "-o", "{dir}/new.bundle", "--", MISSING], f"{MISSING}: no such file"),
    (["record", "-o", "{dir}/new.bundle", "--", "no-such-program-x"],
     "no-such-program-x: no such program on PATH"),
    (["import", MISSING, "-o", "{dir}/new.bundle"], f"{MISSING}: No such file or directory"),
    (["export", "pprof", MISSING, "-o", "{dir}/new.pb.gz"], f"{MISSING}: not a bundle directory"),
    (["latency", MISSING, "--from", "a", "--to", "b"], f"{MISSING}: not a bundle directory"),
    (["lsp", "--bundle", MISSING], f"--bundle {MISSING}: not a bundle directory"),
    (["dap", "--log-file", MISSING + "/adapter.log"],
     f"{MISSING}/adapter.log: No such file or directory"),
    # a PID that names no process
    (["record", "--pid", NO_PID, "-o", "{dir}/new.bundle"], f"no process {NO_PID}"),
    (["watch", "--pid", NO_PID, "--addr", "0x1000"], f"no process {NO_PID}"),
    # bad arguments
    (["dump", "--bogus", "x.pt"], "unknown option: --bogus"),
    (["decode", "--bogus", "x.pt"], "unrecognized arguments: --bogus"),
    (["record", "--count", "0", "-o", "{dir}/new.bundle", "--", "true"],
     "--count must be a positive number"),
    (["import", "--bogus"], "the following arguments are required"),
    (["watch", "--pid", "abc", "--addr", "1"], "argument --pid: invalid int value: 'abc'"),
    (["doctor", "--bogus"], "unrecognized arguments: --bogus"),
    (["dap", "--port", "99999"], "--port must be 0..65535, got 99999"),
    (["demo", "--bogus"], "unrecognized arguments: --bogus"),
    (["bench", "no_such_benchmark"], "unknown benchmark(s) no_such_benchmark"),
    (["lsp", "--bogus"], "unrecognized arguments: --bogus"),
    (["export", "svg", "{dir}", "-o", "{dir}/x"], "invalid choice: 'svg'"),
    (["latency", "{dir}"], "the following arguments are required: --from, --to"),
    (["captures", "--dir", MISSING], f"{MISSING}: no captures directory"),
    (["captures", "--dir", "{dir}", "pin", "nope"], "nope: no such capture in {dir}"),
    (["captures", "--dir", "{dir}", "gc", "--limit", "lots"], "'lots' is not a size"),
    (["captures", "frob"], "invalid choice: 'frob'"),
    # an existing output without --force
    (["record", "-o", "{dir}", "--", "true"], "{dir} exists; give --force to replace it"),
    (["import", "{out}", "-o", "{dir}"], "{dir} exists; give --force to replace it"),
    (["export", "pprof", "{dir}", "-o", "{out}"], "{out} exists; give --force to replace it"),
    (["latency", "{dir}", "--from", "a", "--to", "b", "--png", "{out}"],
     "{out} exists; give --force to replace it"),
    (["captures", "pack", "{dir}", "-o", "{out}"], "{out} exists; give --force to replace it"),
]


def test_the_table_covers_every_command():
    assert {args[0] for args, _ in BAD_INPUT} == set(COMMANDS)


@pytest.mark.parametrize("args,message", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_usage_or_input_exits_2_with_one_line_naming_it(tmp_path, args, message):
    out = tmp_path / "existing.out"
    out.write_text("not to be replaced\n")
    fill = {"out": str(out), "dir": str(tmp_path)}
    args = [a.format(**fill) for a in args]
    message = message.format(**fill)
    done = _ptdebug(*args, cwd=tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "[Errno" not in done.stderr, done.stderr
    naming = [line for line in done.stderr.splitlines() if message in line]
    assert len(naming) == 1, done.stderr
    assert naming[0].startswith(f"ptdebug {args[0]}:"), naming[0]
    assert out.read_text() == "not to be replaced\n"
    assert not (tmp_path / "new.bundle").exists() and not (tmp_path / "new.pb.gz").exists()


def test_an_unknown_command_exits_2_naming_it():
    done = _ptdebug("frobnicate")
    assert done.returncode == 2
    assert done.stderr.strip() == ("ptdebug: unknown command 'frobnicate' "
                                   "(`ptdebug --help` lists them)")


def test_version_names_the_release_and_where_it_runs_from():
    done = _ptdebug("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == (f"ptdebug {__version__} from {ROOT} (Python "
                                   f"{'.'.join(map(str, sys.version_info[:3]))})")


def test_an_unexpected_os_error_is_one_line_through_the_boundary(tmp_path):
    """An OSError a command lets through (here: a log file in a directory it cannot create)
    becomes `ptdebug COMMAND: PATH: reason`, exit 2 for a path that does not exist."""
    done = _ptdebug("dap", "--log-file", str(tmp_path / "no" / "such" / "dir.log"))
    assert done.returncode == 2
    assert done.stderr.strip() == (f"ptdebug dap: {tmp_path}/no/such/dir.log: "
                                   "No such file or directory")

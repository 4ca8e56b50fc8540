"""adapter/golang/launch.py with the machine's Go: build() as `dlv debug` / `dlv test` would
(tests/fixtures/programs/go_held, whose main first writes a file), a compile error and a
package without tests as BuildFailed with the compiler's words; HeldProgram.start leaves the
program stopped at its entry point without having run an instruction (no file written until
resume()), a tracer can attach to it there as Delve does, kill() reaps it, and a program that
cannot start says why.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

from adapter.capture.target import Target
from adapter.golang.launch import DEBUG_GCFLAGS, BuildFailed, HeldProgram, StartFailed, build
from adapter.hw import ptrace as pt

pytestmark = [pytest.mark.live, pytest.mark.timeout(180)]

PROGRAMS = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "programs"
GO_ENV = dict(os.environ, CGO_ENABLED="0")


@pytest.fixture(scope="module")
def held_binary(tmp_path_factory):
    """go_held built in mode debug, with a greeting set through buildFlags."""
    package = tmp_path_factory.mktemp("held") / "go_held"
    shutil.copytree(PROGRAMS / "go_held", package)
    out = str(package.parent / "held")
    flags = "-ldflags='-X main.greeting=hello' -tags=ptdebug"
    assert build("debug", ".", str(package), out, flags) == out
    return out


def _go() -> str:
    return shutil.which("go") or "/usr/local/go/bin/go"


def test_build_debug_builds_unoptimised_with_the_users_flags(held_binary, tmp_path):
    info = subprocess.run([_go(), "version", "-m", held_binary], capture_output=True,
                          text=True, check=True).stdout
    assert DEBUG_GCFLAGS == "-gcflags=all=-N -l"
    assert '\tbuild\t-gcflags="all=-N -l"\n' in info  # no optimisation, no inlining, as dlv
    assert "\tbuild\t-tags=ptdebug\n" in info  # the user's buildFlags, as given
    done = subprocess.run([held_binary, str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out").read_text() == "hello\n"  # -X from buildFlags


def test_build_test_makes_the_package_test_binary(tmp_path):
    package = tmp_path / "go_held"
    shutil.copytree(PROGRAMS / "go_held", package)
    out = str(tmp_path / "held.test")
    assert build("test", ".", str(package), out, None) == out
    done = subprocess.run([out, "-test.v", "-test.run", "TestGreet"], capture_output=True,
                          text=True, timeout=30, cwd=package, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "--- PASS: TestGreetWritesTheGreeting" in done.stdout


def test_a_compile_error_is_a_build_failure_with_the_compilers_words(tmp_path):
    package = tmp_path / "go_held"
    shutil.copytree(PROGRAMS / "go_held", package)
    (package / "broken.go").write_text('package main\n\nvar broken int = "text"\n')
    out = tmp_path / "held"
    with pytest.raises(BuildFailed) as info:
        build("debug", ".", str(package), str(out), None)
    assert info.value.status == 1
    assert "broken.go:3" in info.value.text and "cannot use" in info.value.text
    assert str(info.value) == info.value.text
    assert not out.exists()


def test_a_bad_build_flag_is_a_build_failure(tmp_path):
    package = tmp_path / "go_held"
    shutil.copytree(PROGRAMS / "go_held", package)
    with pytest.raises(BuildFailed) as info:
        build("debug", ".", str(package), str(tmp_path / "held"), "-no-such-flag")
    assert info.value.status != 0 and "no-such-flag" in info.value.text


def test_go_test_of_a_package_without_tests_is_a_clear_build_failure(tmp_path):
    package = tmp_path / "go_park"
    shutil.copytree(PROGRAMS / "go_park", package)
    with pytest.raises(BuildFailed) as info:
        build("test", ".", str(package), str(tmp_path / "park.test"), None)
    assert "no test files" in info.value.text and str(package) in info.value.text


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def _auxv_entry(pid: int) -> int:
    with open(f"/proc/{pid}/auxv", "rb") as f:
        data = f.read()
    for i in range(0, len(data) - 15, 16):
        if int.from_bytes(data[i:i + 8], "little") == 9:  # AT_ENTRY (getauxval(3))
            return int.from_bytes(data[i + 8:i + 16], "little")
    raise LookupError("no AT_ENTRY")


def test_held_program_waits_at_its_entry_point_until_resumed(held_binary, tmp_path):
    marker = tmp_path / "started"
    read_end, write_end = os.pipe()
    program = HeldProgram.start([held_binary, str(marker)], str(tmp_path), GO_ENV, write_end)
    os.close(write_end)
    try:
        assert program.wait_stopped(5.0)
        assert _state(program.pid) == "T"
        assert os.readlink(f"/proc/{program.pid}/exe") == held_binary  # exec'd already
        # a tracer attaching (as Delve does) finds it at the entry point, nothing run
        target = Target.attach(pid=program.pid)
        try:
            assert pt.getregs(program.pid).rip == _auxv_entry(program.pid)
        finally:
            target.release()
        assert program.wait_stopped(5.0)  # back in its group-stop once the tracer left
        assert not marker.exists() and program.poll() is None
        program.resume()
        assert program.wait(30) == 0
        assert marker.read_text() == "hello\n"
        assert os.read(read_end, 4096) == f"wrote {marker}\n".encode()
        assert not os.path.exists(f"/proc/{program.pid}")  # reaped
    finally:
        program.kill()
        os.close(read_end)


def test_kill_ends_and_reaps_a_held_program(held_binary, tmp_path):
    program = HeldProgram.start([held_binary, str(tmp_path / "never")], str(tmp_path), GO_ENV,
                                1)
    assert program.wait_stopped(5.0)
    program.kill()
    assert program.status == -9
    assert not os.path.exists(f"/proc/{program.pid}")
    assert not (tmp_path / "never").exists()
    program.kill()  # again: nothing to do
    program.resume()  # gone: harmless


@pytest.mark.parametrize("argv, cwd, words", [
    (["/nonexistent/ptdebug-program"], None, "No such file or directory"),
    ([str(PROGRAMS / "go_held" / "main.go")], None, "Permission denied"),
    ([None], "/nonexistent/ptdebug-dir", "the working directory: No such file or directory"),
])
def test_a_program_that_cannot_start_says_why(held_binary, tmp_path, argv, cwd, words):
    argv = [held_binary if a is None else a for a in argv]
    before = set(os.listdir("/proc"))
    with pytest.raises(StartFailed) as info:
        HeldProgram.start(argv, cwd or str(tmp_path), GO_ENV, 1)
    text = str(info.value)
    assert words in text and repr(argv[0]) in text
    if cwd:
        assert cwd in text
    # the child that failed was reaped (no zombie of ours is left)
    assert not {p for p in set(os.listdir("/proc")) - before if p.isdigit()
                and _parent(p) == os.getpid()}


def _parent(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rpartition(")")[2].split()[1])
    except OSError:
        return None

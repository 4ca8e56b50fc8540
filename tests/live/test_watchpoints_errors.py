"""Bad input to `ptdebug watch`: a clear error each, and nothing left armed in the target.

"Nothing left armed" is checked from outside: no perf event fd is left in this
process, nobody traces the target, and all four of its debug registers can be
taken again (the kernel would say ENOSPC for a register still held).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from test_watchpoints import Target, _perf_fds, watch_threads  # noqa: F401

from adapter import watch_cli
from adapter import watchpoints as wp

pytestmark = pytest.mark.live


@pytest.fixture
def target(watch_threads):  # noqa: F811
    t = Target(watch_threads, 1, 0, 3, 1000)
    yield t
    if t.proc.poll() is None:
        t.proc.kill()
        t.proc.wait()


def _watch(capsys, *argv) -> tuple[int, str]:
    rc = watch_cli.main([str(a) for a in argv])
    return rc, capsys.readouterr().err


def _assert_untouched(target: Target) -> None:
    assert _perf_fds() == []
    with open(f"/proc/{target.pid}/status") as f:
        assert "TracerPid:\t0\n" in f.read()
    with wp.PerfWatcher(target.pid) as again:   # four registers free on every thread
        again.add(wp.WatchRequest(target.addr["region"], 32, wp.Access.WRITE))
    target.go()
    target.wait_done()
    target.close()
    assert target.proc.returncode == 0


@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
@pytest.mark.parametrize("offset,length,access,message", [
    (4, 8, "w", "is not aligned to 8 bytes"),
    (2, 4, "rw", "is not aligned to 4 bytes"),
    (4, 16, "w", "is not 8-byte aligned"),
    (0, 3, "w", "length 3: a watch is 1, 2, 4 or 8 bytes, or 16, 24 or 32 bytes"),
    (0, 64, "w", "length 64 is more than the 32 bytes the four debug registers can cover"),
    (0, 8, "x", "an execute watch covers one instruction: length must be 1, not 8"),
])
def test_bad_length_or_alignment(capsys, target, mechanism, offset, length, access, message):
    rc, err = _watch(capsys, "--pid", target.pid, "--addr", hex(target.addr["value"] + offset),
                     "--len", length, "--access", access, "--mechanism", mechanism, "--count", 1)
    assert rc == 1 and message in err
    _assert_untouched(target)


@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
def test_unmapped_address(capsys, target, mechanism):
    rc, err = _watch(capsys, "--pid", target.pid, "--addr", "0x10", "--mechanism", mechanism)
    assert rc == 1 and f"address 0x10 is not mapped in process {target.pid}" in err
    _assert_untouched(target)


def test_execute_watch_on_data_is_refused(capsys, target):
    rc, err = _watch(capsys, "--pid", target.pid, "--addr", hex(target.addr["value"]), "--access", "x")
    assert rc == 1 and "non-executable mapping" in err
    _assert_untouched(target)


def test_unknown_symbol(capsys, target):
    rc, err = _watch(capsys, "--pid", target.pid, "--symbol", "no_such_variable")
    assert rc == 1 and "no symbol 'no_such_variable'" in err
    _assert_untouched(target)


def test_read_only_access_is_not_offered(capsys, target):
    with pytest.raises(SystemExit) as info:
        watch_cli.main(["--pid", str(target.pid), "--addr", hex(target.addr["value"]), "--access", "r"])
    assert info.value.code == 2 and "invalid choice: 'r'" in capsys.readouterr().err
    with pytest.raises(wp.WatchError, match="no read-only watchpoint"):
        wp.plan(wp.WatchRequest(target.addr["value"], 8, "r"))
    _assert_untouched(target)


@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
def test_dead_pid(capsys, mechanism):
    gone = subprocess.Popen(["true"])
    gone.wait()
    rc, err = _watch(capsys, "--pid", gone.pid, "--addr", "0x1000", "--mechanism", mechanism)
    assert rc == 1 and f"no process {gone.pid}" in err


def test_registers_held_by_another_tool(capsys, target):
    with wp.PerfWatcher(target.pid) as other:          # another tool holds all four
        other.add(wp.WatchRequest(target.addr["region"], 32, wp.Access.WRITE))
        rc, err = _watch(capsys, "--pid", target.pid, "--addr", hex(target.addr["value"]))
        assert rc == 1 and "are taken by another tool" in err and "ENOSPC" in err
    _assert_untouched(target)


@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
def test_permission_denied_for_another_users_process(target, mechanism):
    """The watcher runs as `nobody` (a forked child drops root); the target is root's."""
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        try:
            os.dup2(write_fd, 2)
            sys.stderr = open(2, "w", closefd=False)
            os.setgroups([])
            os.setresgid(65534, 65534, 65534)
            os.setresuid(65534, 65534, 65534)
            rc = watch_cli.main(["--pid", str(target.pid), "--addr", hex(target.addr["value"]),
                                 "--mechanism", mechanism, "--count", "1"])
        except BaseException as exc:  # anything else is a failure the parent reports
            os.write(2, f"unexpected {exc!r}".encode())
            rc = 3
        sys.stderr.flush()
        os._exit(rc)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        err = f.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 1, err
    assert f"permission denied reading /proc/{target.pid}/maps" in err
    _assert_untouched(target)

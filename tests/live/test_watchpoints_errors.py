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

from adapter import watchpoints as wp
from adapter.commands import watch as watch_cli

pytestmark = pytest.mark.live


@pytest.fixture
def target(watch_threads):
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


# A request that names nothing or that the hardware cannot watch is bad input (exit 2, as for
# every command: adapter/cli.py); a machine or process state that refuses it is a failure (1).
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
    assert rc == 2 and message in err
    _assert_untouched(target)


@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
def test_unmapped_address(capsys, target, mechanism):
    rc, err = _watch(capsys, "--pid", target.pid, "--addr", "0x10", "--mechanism", mechanism)
    assert rc == 2 and f"address 0x10 is not mapped in process {target.pid}" in err
    _assert_untouched(target)


def test_execute_watch_on_data_is_refused(capsys, target):
    rc, err = _watch(capsys, "--pid", target.pid, "--addr", hex(target.addr["value"]), "--access", "x")
    assert rc == 2 and "non-executable mapping" in err
    _assert_untouched(target)


def test_unknown_symbol(capsys, target):
    rc, err = _watch(capsys, "--pid", target.pid, "--symbol", "no_such_variable")
    assert rc == 2 and "no symbol 'no_such_variable'" in err
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
    assert rc == 2 and f"no process {gone.pid}" in err


def test_registers_held_by_another_tool(capsys, target):
    with wp.PerfWatcher(target.pid) as other:          # another tool holds all four
        other.add(wp.WatchRequest(target.addr["region"], 32, wp.Access.WRITE))
        rc, err = _watch(capsys, "--pid", target.pid, "--addr", hex(target.addr["value"]))
        assert rc == 1 and "are taken by another tool" in err and "ENOSPC" in err
    _assert_untouched(target)


def _watch_as_nobody(argv: list[str]) -> tuple[int, str, str]:
    """watch_cli.main(argv) in a forked child that dropped root for `nobody`: (rc, out, err)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the child
        rc = 3
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            sys.stdout = open(1, "w", closefd=False)
            sys.stderr = open(2, "w", closefd=False)
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            rc = watch_cli.main(argv)
        except BaseException as exc:  # noqa: BLE001 - reported to the parent as a failure
            os.write(2, f"unexpected {exc!r}".encode())
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    os.close(out_w)
    os.close(err_w)
    with os.fdopen(out_r) as out_f, os.fdopen(err_r) as err_f:
        out, err = out_f.read(), err_f.read()
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status), out, err


NOBODY = 65534
# A process of `nobody` writing a word every 10 ms; with argv[1] == "0" it makes itself
# non-dumpable first (prctl PR_SET_DUMPABLE = 4), which hides it even from its own user.
_NOBODY_TARGET = """
import ctypes, sys, time
if sys.argv[1] == "0":
    ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
word = ctypes.c_uint64(0)
print(f"ready value={ctypes.addressof(word):#x}", flush=True)
for i in range(1, 3000):
    word.value = i
    time.sleep(0.01)
"""


@pytest.fixture
def nobody_target(request):
    proc = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                             "/usr/bin/python3", "-c", _NOBODY_TARGET, request.param],
                            stdout=subprocess.PIPE, text=True, cwd="/")
    value = int(proc.stdout.readline().split("value=")[1], 16)
    yield proc, value
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("nobody_target", ["1"], indirect=True)
@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
def test_an_unprivileged_user_watches_its_own_process(nobody_target, mechanism):
    proc, value = nobody_target
    rc, out, err = _watch_as_nobody(["--pid", str(proc.pid), "--addr", hex(value), "--count", "2",
                                     "--json", "--mechanism", mechanism])
    assert rc == 0, err
    assert len(out.splitlines()) == 2
    assert proc.poll() is None
    with open(f"/proc/{proc.pid}/status") as f:
        assert "TracerPid:\t0\n" in f.read()


@pytest.mark.parametrize("nobody_target", ["0"], indirect=True)
@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
def test_permission_denied_for_a_non_dumpable_process_of_the_same_user(nobody_target, mechanism):
    proc, value = nobody_target
    rc, _, err = _watch_as_nobody(["--pid", str(proc.pid), "--addr", hex(value), "--count", "1",
                                   "--mechanism", mechanism])
    assert rc == 1, err
    assert f"permission denied reading /proc/{proc.pid}/maps" in err
    assert proc.poll() is None


@pytest.mark.parametrize("mechanism", ["perf", "ptrace"])
def test_permission_denied_for_another_users_process(target, mechanism):
    """The watcher runs as `nobody` (a forked child drops root); the target is root's."""
    rc, _, err = _watch_as_nobody(["--pid", str(target.pid), "--addr", hex(target.addr["value"]),
                                   "--mechanism", mechanism, "--count", "1"])
    assert rc == 1, err
    assert f"permission denied reading /proc/{target.pid}/maps" in err
    _assert_untouched(target)

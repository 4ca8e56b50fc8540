"""Bad input and bad luck while recording with the stepper: each gives a clear
error, keeps the bundle marked partial with the reason, and never leaves the
target stopped, traced or with a debug register armed."""
from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import threading
import time

import pytest
from stepper_support import PTDEBUG, ROOT, build_c, decode_ips, errors_in

from adapter.capture import record, stepper
from adapter.capture.bundle import read_manifest
from adapter.hw import ptrace as pt

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def rec_work(tmp_path_factory):
    return build_c("rec_work.c", tmp_path_factory.mktemp("rec_err"))


@pytest.fixture
def running(rec_work):
    """rec_work looping for a long time, started by the test (not traced)."""
    proc = subprocess.Popen([str(rec_work), "200", "1000000"], stdout=subprocess.DEVNULL)
    time.sleep(0.05)
    yield proc
    proc.kill()
    proc.wait()


def assert_free(pid: int) -> None:
    """The process runs on: not traced, not stopped, no debug register armed."""
    assert pt.tracer_of(pid) == 0
    time.sleep(0.02)
    with open(f"/proc/{pid}/stat") as f:
        state = f.read().rsplit(") ", 1)[1][0]
    assert state in "RS", state
    pt.seize(pid)  # look at the debug registers of every thread ourselves
    try:
        for tid in pt.threads_of(pid):
            if tid != pid:
                continue
            pt.interrupt(tid)
            pt.waitpid(tid)
            assert pt.peekuser(tid, pt.DEBUGREG_OFFSET + 8 * 7) & 0xFF == 0
    finally:
        pt.detach(pid)


def run_cli(*args, **kw):
    return subprocess.run([*PTDEBUG, "record", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, **kw)


def test_dead_pid(tmp_path):
    proc = subprocess.Popen(["true"])
    proc.wait()
    out = tmp_path / "dead.bundle"
    run = run_cli("--pid", proc.pid, "-o", out)
    # bad input (adapter/cli.py's convention): exit 2, said in one line, nothing written
    assert run.returncode == 2
    assert run.stderr.splitlines()[-1] == (f"ptdebug record: error: no process {proc.pid} "
                                           "(it is not running)")
    assert not out.exists()


def test_pid_already_traced_by_someone_else(running, tmp_path):
    pt.seize(running.pid)  # this test process is now its tracer
    try:
        run = run_cli("--pid", running.pid, "-o", tmp_path / "traced.bundle")
        assert run.returncode == 1
        assert "not permitted to trace" in run.stderr
        assert f"already traced by process {os.getpid()}" in run.stderr
    finally:
        pt.interrupt(running.pid)  # PTRACE_DETACH needs a stopped tracee
        pt.waitpid(running.pid)
        pt.detach(running.pid)
    assert_free(running.pid)


def test_pid_of_another_user(running):
    """Tracing a process of another user without CAP_SYS_PTRACE: as root, a forked
    child drops to user nobody and tries the test's process; as a user, PID 1."""
    from adapter.capture.target import Target, TargetError
    if os.geteuid() != 0:
        with pytest.raises(TargetError, match="not permitted to trace 1") as info:
            Target.attach(pid=1)
        assert "CAP_SYS_PTRACE" in str(info.value)
        return
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the child: report the error text through the pipe, never return
        try:
            os.setgid(65534)
            os.setuid(65534)
            try:
                Target.attach(pid=running.pid).release()
                message = "attached"
            except TargetError as exc:
                message = str(exc)
            os.write(write_end, message.encode())
        finally:
            os._exit(0)
    os.close(write_end)
    message = os.read(read_end, 4096).decode()
    os.close(read_end)
    os.waitpid(child, 0)
    assert message.startswith(f"not permitted to trace {running.pid}")
    assert "CAP_SYS_PTRACE" in message
    assert_free(running.pid)


def test_symbol_that_does_not_exist(rec_work, tmp_path):
    out = tmp_path / "nosym.bundle"
    run = run_cli("--from", "no_such_function", "--until-return", "-o", out, "--", rec_work)
    assert run.returncode == 1
    assert "no function named 'no_such_function'" in run.stderr
    assert read_manifest(out)["status"] == "partial"
    assert f"partial bundle kept at {out}" in run.stderr


def test_symbol_missing_in_attached_process_leaves_it_running(running, tmp_path):
    with pytest.raises(record.RecordFailed, match="no function named"):
        record.record_stepper(str(tmp_path / "b"), pid=running.pid, start="nope_nope",
                              end=stepper.EndCondition(count=10))
    assert_free(running.pid)


def test_target_exits_mid_recording(rec_work, tmp_path):
    out = tmp_path / "exits.bundle"
    run = run_cli("--count", 5_000_000, "-o", out, "--", rec_work, "3")
    assert run.returncode == 1
    assert "partial: the target called exit before the end condition" in run.stderr
    m = read_manifest(out)
    assert m["status"] == "partial"
    ips, events = decode_ips(out)   # what was recorded is a sound trace
    assert len(ips) == m["stats"]["instructions"] > 10_000
    assert errors_in(events) == []


def test_target_killed_mid_recording(running, tmp_path):
    out = tmp_path / "killed.bundle"
    timer = threading.Timer(0.4, os.kill, (running.pid, signal.SIGKILL))
    timer.start()
    try:
        result = record.record_stepper(str(out), pid=running.pid,
                                       end=stepper.EndCondition(duration_ms=20_000))
    finally:
        timer.cancel()
    m = result.manifest
    assert m["status"] == "partial"
    assert m["partial_reason"] == "the target was killed by signal 9 before the end condition"
    assert m["stats"]["instructions"] > 0
    ips, events = decode_ips(out)
    assert len(ips) == m["stats"]["instructions"] and errors_in(events) == []


def test_duration_on_a_running_process(running, tmp_path):
    out = tmp_path / "duration.bundle"
    t0 = time.monotonic()
    result = record.record_stepper(str(out), pid=running.pid,
                                   end=stepper.EndCondition(duration_ms=300))
    assert time.monotonic() - t0 < 5
    assert result.manifest["status"] == "complete"
    assert result.recording.reason == "recorded for 300 ms"
    assert_free(running.pid)


def _limit_file_size(limit):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_full_disk_keeps_a_partial_bundle(rec_work, tmp_path):
    """RLIMIT_FSIZE makes every write past 8 KiB fail with EFBIG, as a full disk would."""
    out = tmp_path / "full.bundle"
    run = subprocess.run([*PTDEBUG, "record", "--no-copy-images", "--from", "work",
                          "--count", "40000", "-o", str(out), "--", str(rec_work), "100"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         preexec_fn=_limit_file_size(8192))
    assert run.returncode == 1, run.stdout
    assert "the disk is full" in run.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "partial" and "the disk is full" in m["partial_reason"]
    stream = out / m["streams"][0]["file"]
    assert stream.stat().st_size == 8192  # everything that fitted was kept


def test_full_tmpfs_keeps_a_partial_bundle(rec_work, tmp_path):
    """A real ENOSPC: a 256 KiB tmpfs mounted in a private mount namespace
    (unshare -m; as a user, -r maps us to root in a user namespace first)."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    record_cmd = " ".join([*PTDEBUG, "record", "--from", "work", "--until-return", "-o",
                           f"{mnt}/b", "--", str(rec_work), "5"])
    script = (f"mount -t tmpfs -o size=256k tmpfs {mnt} || exit 99; "
              f"{record_cmd}; echo rc=$?; cat {mnt}/b/manifest.json")
    unshare = ["unshare", "-m"] if os.geteuid() == 0 else ["unshare", "-r", "-m"]
    run = subprocess.run([*unshare, "sh", "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode != 99, f"cannot mount a tmpfs here: {run.stderr}"
    assert "rc=1" in run.stdout
    assert "the disk is full (No space left on device)" in run.stderr
    m = json.loads(run.stdout.split("rc=1", 1)[1])
    assert m["status"] == "partial" and "No space left on device" in m["partial_reason"]


def _ctrl_c_mid_recording(running, tmp_path) -> float:
    """SIGINT to ourselves 0.3 s into a 20 s recording of `running`: the recording fails as
    interrupted, its bundle partial, the process free; the seconds it took."""
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    began = time.monotonic()
    try:
        with pytest.raises(record.RecordFailed, match="interrupted by the user"):
            record.record_stepper(str(tmp_path / "b"), pid=running.pid,
                                  end=stepper.EndCondition(duration_ms=20_000))
    finally:
        timer.cancel()
    assert read_manifest(tmp_path / "b")["partial_reason"] == "interrupted by the user"
    assert_free(running.pid)
    return time.monotonic() - began


def test_ctrl_c_mid_recording_lets_the_process_go(running, tmp_path):
    """SIGINT to ptdebug while the traced thread runs: the recording stops, the
    bundle is marked partial, the process runs on with no debug register armed."""
    _ctrl_c_mid_recording(running, tmp_path)


def test_ctrl_c_whose_keyboard_interrupt_is_swallowed_still_ends_the_recording(running,
                                                                               tmp_path):
    """Python raises the KeyboardInterrupt of a SIGINT in whatever Python code runs then; in a
    gc callback or a __del__ it is swallowed ("Exception ignored in ...": ci42, hypothesis's gc
    callback in the same test worker), and the recording went on to its end. Here the handler
    swallows it every time: the recording still stops, partial, and the process runs on."""
    swallowed = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: swallowed.append(signum))
    try:
        took = _ctrl_c_mid_recording(running, tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert swallowed == [signal.SIGINT]
    assert took < 10  # not the window's 20 s

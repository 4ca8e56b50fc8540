"""Follow the goroutine, not the thread (issue 14, item 3): a Go recording keeps the recorded
goroutine on the recorded thread through what takes it away by the runtime's own hand (a
sleep, a garbage collection's stop-the-world, a wait), locked there as by
runtime.LockOSThread for the window (adapter/golang/thread_lock.py), and gives the lock back
(where the goroutine runs again, or where it ends) without changing what the program computes.

Real `ptdebug record` runs of go_held.go (worker goroutines allocating all through the window,
no GODEBUG), each checked against the program's plain run: same checksum, exit status 0.
Without the lock the `sleep` window ended with the program, partial, in 3 of 3 runs
(2026-12-03: the goroutine woke on another thread).
"""
from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest
from stepper_support import PTDEBUG, ROOT, build_go

from adapter.capture.bundle import read_manifest

pytestmark = pytest.mark.live


@pytest.fixture(scope="module")
def held_program(tmp_path_factory):
    return build_go("go_held.go", tmp_path_factory.mktemp("go_held"))


def plain_checksum(program, mode: str) -> str:
    out = subprocess.run([str(program), mode], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    return re.search(r"^checksum (\d+)$", out, re.M)[1]


def record(program, mode: str, bundle, *end_args) -> tuple[subprocess.CompletedProcess, dict]:
    """`ptdebug record -o BUNDLE END_ARGS -- PROGRAM MODE`: the result and the manifest."""
    done = subprocess.run([*PTDEBUG, "record", "-o", str(bundle), *end_args, "--",
                           str(program), mode], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    return done, read_manifest(bundle)


def test_a_goroutine_that_sleeps_in_the_window_is_recorded_to_its_return(held_program,
                                                                         tmp_path):
    expected = plain_checksum(held_program, "sleep")
    done, manifest = record(held_program, "sleep", tmp_path / "b", "--from", "main.work",
                            "--until-return")
    assert f"checksum {expected}" in done.stdout, done.stderr
    assert done.returncode == 0, done.stderr
    assert manifest["status"] == "complete", manifest
    assert manifest["stats"]["end_reason"] == "the trigger function returned", manifest
    go = manifest["go"]
    assert go["goroutines"] == "goroutine 1 throughout", go
    assert go["thread_lock"] == "goroutine 1 held on the thread: released", go


def test_a_stack_grown_in_the_window_does_not_hide_the_return(held_program, tmp_path):
    """Go grows a stack by copying it elsewhere: the trigger function's return then comes at
    another RSP than its entry's + 8 (GoroutineLock.stack_moved). Before (2026-12-03), the
    window missed the return and recorded on to the program's exit, partial."""
    expected = plain_checksum(held_program, "grows")
    done, manifest = record(held_program, "grows", tmp_path / "b", "--from", "main.work",
                            "--until-return")
    assert f"checksum {expected}" in done.stdout, done.stderr
    assert done.returncode == 0, done.stderr
    assert manifest["status"] == "complete", manifest
    assert manifest["stats"]["end_reason"] == "the trigger function returned", manifest


def test_a_goroutine_that_ends_in_the_window_gives_its_thread_back(held_program, tmp_path):
    """The lock is given back where the goroutine ends (a locked goroutine that exits takes its
    thread with it): the window goes on, on the same thread, to its end condition."""
    expected = plain_checksum(held_program, "exits")
    done, manifest = record(held_program, "exits", tmp_path / "b", "--from", "main.short",
                            "--duration", "1500")
    assert f"checksum {expected}" in done.stdout, done.stderr
    assert done.returncode == 0, done.stderr
    assert manifest["status"] == "complete", manifest
    assert manifest["stats"]["end_reason"] == "recorded for 1500 ms", manifest
    assert manifest["go"]["thread_lock"].endswith("released where the goroutine ended"), \
        manifest["go"]


def test_a_goroutine_still_waiting_after_the_window_stays_locked_and_the_user_is_told(
        held_program, tmp_path):
    """The window ends (the user's Ctrl-C, a second after the goroutine said it waits) while
    the goroutine waits on a channel (closed 5 s after the start) and its locked thread
    sleeps: the lock can only be given back by that thread running the goroutine, which does
    not happen within the grace (stepper.HOME_GRACE_S), so it stays, and ptdebug says so; the
    program computes and ends as without ptdebug."""
    expected = plain_checksum(held_program, "waits")
    bundle = tmp_path / "b"
    proc = subprocess.Popen([*PTDEBUG, "record", "-o", str(bundle), "--from", "main.work",
                             "--count", "10000000", "--", str(held_program), "waits"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = []
        for line in proc.stdout:
            out.append(line)
            if line.strip() == "waiting":
                break
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert f"checksum {expected}" in "".join(out) + rest, err
    assert proc.returncode == 1, err  # interrupted: the bundle is partial
    manifest = read_manifest(bundle)
    assert manifest["partial_reason"] == "interrupted by the user", manifest
    told = "goroutine 1 stays locked to its thread, as after runtime.LockOSThread, until it ends"
    assert told in err, err
    assert manifest["go"]["thread_lock"].startswith(told), manifest["go"]

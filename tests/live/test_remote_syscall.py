"""adapter/hw/remote_syscall.py on a real process: system calls made by a thread held in a
ptrace stop inside a system call of its own (`sleep`'s nanosleep), which is restarted when the
thread is let go; the calls' effects are the process's own (its parent-death signal, read back
through memory it mapped itself)."""
from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from adapter.hw import hold, remote_syscall

pytestmark = pytest.mark.live

GETPID, MMAP, MUNMAP, PRCTL = 39, 9, 11, 157
PR_SET_PDEATHSIG, PR_GET_PDEATHSIG = 1, 2


def test_calls_made_by_a_sleeping_thread_and_its_sleep_goes_on():
    sleep = shutil.which("sleep")
    proc = subprocess.Popen([sleep, "1.5"])
    try:
        time.sleep(0.3)  # in its nanosleep
        started = time.monotonic()
        held = hold.hold_all(proc.pid)
        try:
            with remote_syscall.RemoteThread(proc.pid, proc.pid) as thread:
                assert thread.call(GETPID) == proc.pid
                assert thread.call(PRCTL, PR_SET_PDEATHSIG, 10) == 0  # SIGUSR1
                page = thread.call(MMAP, 0, 4096, 3, 0x22, -1, 0)
                assert page > 0
                assert thread.call(PRCTL, PR_GET_PDEATHSIG, page) == 0
                with open(f"/proc/{proc.pid}/mem", "rb", buffering=0) as mem:
                    mem.seek(page)
                    assert int.from_bytes(mem.read(4), "little") == 10
                assert thread.call(MUNMAP, page, 4096) == 0
                assert thread.call(MUNMAP, 1, 4096) < 0  # an error is a negative errno
        finally:
            hold.let_go(held)
        # its own nanosleep was restarted: it sleeps out its time and exits 0
        assert proc.wait(10) == 0
        assert time.monotonic() - started >= 0.9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)

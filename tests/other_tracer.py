"""Another tracer for the tests that must show ptdebug copes with one: a child process that
seizes chosen threads (as a debugger or a record window's recorder would) and holds them, and
a reading of each thread's tracer and state, for the checks that nothing is left held."""
from __future__ import annotations

import contextlib
import os
import time

from adapter.hw import ptrace


@contextlib.contextmanager
def another_tracer(tids: list[int]):
    """A child process that seizes `tids` and holds them until the block ends; yields its pid."""
    read_fd, write_fd = os.pipe()
    tracer = os.fork()
    if tracer == 0:  # pragma: no cover - the other tracer: seizes, says so, then waits
        for tid in tids:
            ptrace.seize(tid)
        os.write(write_fd, b"x")
        time.sleep(60)
        os._exit(0)
    try:
        os.read(read_fd, 1)
        yield tracer
    finally:
        os.kill(tracer, 9)
        os.waitpid(tracer, 0)
        os.close(read_fd)
        os.close(write_fd)


def thread_states(pid: int) -> dict[int, tuple[int, str]]:
    """tid -> (TracerPid, state letter of /proc/PID/task/TID/stat: 't' is ptrace-stopped)."""
    states = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{name}/status") as f:
            tracer = int(next(x for x in f if x.startswith("TracerPid:")).split()[1])
        with open(f"/proc/{pid}/task/{name}/stat") as f:
            state = f.read().rsplit(") ", 1)[1][0]
        states[int(name)] = (tracer, state)
    return states

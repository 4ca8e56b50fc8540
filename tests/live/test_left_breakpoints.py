"""adapter/hw/left_breakpoints.py on a real threaded program: the INT3 bytes a dead debugger
left in its code are put back from the mapped file, and every thread goes on untraced; a
thread another tracer takes meanwhile makes it leave the program alone, holding nothing.

The fixture is tests/fixtures/programs/watch_threads.c: its threads wait for "go", then the
main thread calls counted_call() (the planted byte's function) and prints "done"."""
from __future__ import annotations

import pathlib
import re
import signal
import subprocess

import pytest
from other_tracer import another_tracer, thread_states

from adapter.hw import left_breakpoints

pytestmark = pytest.mark.live
PROGRAMS = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "programs"


@pytest.fixture(scope="module")
def watch_threads(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("left") / "watch_threads"
    subprocess.run(["gcc", "-g", "-O0", "-pthread", "-o", str(out),
                    str(PROGRAMS / "watch_threads.c")], check=True)
    return str(out)


@pytest.fixture
def program(watch_threads):
    """watch_threads with 3 waiting writers and 5 calls of counted_call after "go", and a
    debugger's INT3 planted on counted_call's first byte: (process, address, original byte)."""
    proc = subprocess.Popen([watch_threads, "3", "0", "2", "100", "5"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    ready = proc.stdout.readline()
    counted = int(re.search(r"counted=(0x[0-9a-f]+)", ready).group(1), 16)
    with open(f"/proc/{proc.pid}/mem", "r+b", buffering=0) as mem:
        mem.seek(counted)
        original = mem.read(1)
        assert original != b"\xcc"
        mem.seek(counted)
        mem.write(b"\xcc")
    yield proc, counted, original
    if proc.poll() is None:
        proc.kill()
        proc.wait(10)


def _byte(pid: int, address: int) -> bytes:
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(address)
        return mem.read(1)


def test_a_planted_byte_is_put_back_and_the_program_runs_on(program):
    proc, counted, original = program
    done = left_breakpoints.put_back(proc.pid)
    assert done is not None and done.addresses == [counted] and done.rewound == []
    assert done.threads == 4
    assert _byte(proc.pid, counted) == original
    assert all(tracer == 0 and state != "t" for tracer, state in
               thread_states(proc.pid).values()), thread_states(proc.pid)
    out, _ = proc.communicate("go\n", timeout=30)
    # the planted byte would have ended it with SIGTRAP at the first counted_call
    assert proc.returncode == 0 and "done" in out, (proc.returncode, out)


def test_a_thread_another_tracer_takes_meanwhile_leaves_the_program_alone(program,
                                                                          monkeypatch):
    """Another tracer seizes a thread between put_back's wait for the dead debugger's threads
    to go free and its hold (simulated: the wait is told all is free). put_back leaves the
    program to that tracer and holds none of the threads it seized before meeting it; before
    the fix those stayed stopped, traced by the adapter, for good."""
    proc, counted, _ = program
    last = max(thread_states(proc.pid))
    monkeypatch.setattr(left_breakpoints, "_wait_untraced", lambda pid: True)
    with another_tracer([last]):
        assert left_breakpoints.put_back(proc.pid) is None
        others = {tid: state for tid, state in thread_states(proc.pid).items() if tid != last}
        assert len(others) == 3 and all(tracer == 0 and state != "t"
                                        for tracer, state in others.values()), others
        assert _byte(proc.pid, counted) == b"\xcc"  # the other debugger's to deal with
    proc.send_signal(signal.SIGKILL)

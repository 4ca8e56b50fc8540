"""Checks of a live program that a debugger let go, for the tests of faults (issue 17, item 3):
no thread traced or stopped, no debug register armed, and its machine code byte for byte what
its files hold (no INT3 a dead debugger planted is left behind).

Debug registers: those a ptrace tracer set (PTRACE_POKEUSER) stay after it detaches or dies
(the kernel's flush on PTRACE_DETACH was reverted, 35114fcbe0b9), so each thread's DR7 is read
here, holding the thread for that moment. Perf breakpoints live as long as the fds of the
process that opened them (the tests check that no process of the session is left).
"""
from __future__ import annotations

import os
import re

from adapter.hw import ptrace as pt


def thread_states(pid: int) -> dict[int, tuple[int, str]]:
    """tid -> (TracerPid, state letter) of every thread of `pid`."""
    states = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{name}/status") as f:
                status = f.read()
        except OSError:
            continue  # the thread ended meanwhile
        tracer = int(re.search(r"^TracerPid:\s+(\d+)", status, re.M).group(1))
        state = re.search(r"^State:\s+(\S)", status, re.M).group(1)
        states[int(name)] = (tracer, state)
    return states


def changed_code(pid: int) -> list[str]:
    """Where the executable file-backed mappings of `pid` differ from their files, one line per
    differing byte (address, file, byte in memory, byte in the file)."""
    differences = []
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
        for line in maps:
            parts = line.split(None, 5)
            if len(parts) < 6 or "x" not in parts[1] or not parts[5].startswith("/"):
                continue
            path = parts[5].rstrip("\n")
            if path.endswith(" (deleted)"):
                continue
            low, high = (int(x, 16) for x in parts[0].split("-"))
            with open(path, "rb") as f:
                f.seek(int(parts[2], 16))
                in_file = f.read(high - low)
            mem.seek(low)
            in_memory = mem.read(len(in_file))
            differences += [f"{low + i:#x} in {path}: {in_memory[i]:#04x}, file {byte:#04x}"
                            for i, byte in enumerate(in_file) if in_memory[i] != byte]
    return differences


def armed_debug_registers(pid: int) -> dict[int, int]:
    """tid -> DR7 for each thread of `pid` with a debug register enabled (seized, stopped for
    the read and let go at once)."""
    armed = {}
    for tid in pt.threads_of(pid):
        try:
            pt.seize(tid)
        except pt.PtraceError:
            continue  # it ended meanwhile
        try:
            pt.interrupt(tid)
            status = pt.waitpid(tid)
            if status is None or status.gone:
                continue
            dr7 = pt.peekuser(tid, pt.DEBUGREG_OFFSET + 8 * 7)
            if dr7 & 0xFF:  # L0-L3/G0-G3: a register enabled
                armed[tid] = dr7
            deliver = status.stop_signal if status.stopped and not status.event else 0
            pt.detach(tid, deliver)
        except pt.PtraceError:
            continue
    return armed


def assert_unharmed(pid: int) -> None:
    """The program `pid` runs on as if no debugger had been there."""
    states = thread_states(pid)
    assert states, f"process {pid} is gone"
    assert all(tracer == 0 for tracer, _ in states.values()), f"still traced: {states}"
    assert not any(state in "tT" for _, state in states.values()), f"stopped: {states}"
    assert changed_code(pid) == [], f"code bytes changed: {changed_code(pid)[:10]}"
    assert armed_debug_registers(pid) == {}, "debug registers left armed"

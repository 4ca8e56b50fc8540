"""Parking a stopped goroutine's thread on a `jmp .` while no debugger holds the program.

Layer: adapter.golang. Reads and writes the process's memory through /proc/PID/mem with the
runtime layout of runtime_layout.py; knows nothing of Delve, DAP or the recorder.

Why: a thread has one ptrace tracer. For a record breakpoint Delve lets go of the program and
the recorder seizes the thread; in between, the thread would run on unobserved. Parked, the
instruction at its pc is replaced by the two bytes EB FE (JMP rel8 with displacement -2,
Intel SDM Vol. 2A "JMP"), so the thread (and any other that reaches the same pc) spins in
place, running nothing of the program, until the recorder holds it and puts the bytes back.

A goroutine that seems to run for a long time is what Go's scheduler preempts: sysmon marks
one whose P has scheduled nothing for 10 ms (g.preempt, g.stackguard0 = stackPreempt,
p.preempt) and signals its thread (SIGURG); the handler moves it off the thread at once
(asynchronous preemption), or the next function prologue does (runtime/proc.go retake and
preemptone, stack.go newstack). Either would take the goroutine away from the thread the
recorder follows, and a single-stepped goroutine runs a thousand times slower than usual, so
any window longer than a few microseconds of its own time would be cut. Delve turns
asynchronous preemption off while attached and back on when it detaches (pkg/proc/target.go
setAsyncPreemptOff). So:
  * parking sets the P's sysmon record (p.sysmontick: the P's schedtick sysmon last saw and
    when) to the P's current tick and a time far in the future: sysmon then leaves this P's
    goroutine alone until the P schedules again (which resets the record) or
    `resume_preemption` puts the time back;
  * unparking puts the goroutine's preemption state back as it was before the park
    (stackguard0, g.preempt, p.preempt), dropping a request made meanwhile, as the runtime
    itself does when it lets a goroutine run on (newstack, execute);
  * a request already pending when the park begins (sysmon asked while the debugger held the
    program) is dropped the same way: else the signal that comes with it moves the goroutine
    off its thread while parked, and its stackguard0 makes it yield at the window's first
    call. Without a request stackguard0 is g.stack.lo + the runtime's stack guard, which is
    read from the thread's g0 (mstart0 sets g0.stackguard0 = g0.stack.lo + stackGuard).
    sysmon asks again 10 ms after `resume_preemption`; a stop-the-world asks again at once.
A stop-the-world for the garbage collector still asks every goroutine to yield; the recording
then follows the thread into the scheduler and says so.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

PARK = b"\xeb\xfe"


@dataclass
class Parked:
    pid: int
    address: int
    original: str
    """The replaced code bytes, hex."""
    saved: list[list[int]] = field(default_factory=list)
    """[address, size, value] of runtime words to put back when unparking."""
    schedwhen_address: int | None = None
    """&p.sysmontick.schedwhen of the thread's P, pushed ahead while parked and recorded."""
    dropped_request: bool = False
    """A preemption request was pending when parked, and was dropped (module docstring)."""

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Parked:
        return cls(**data)


class _Memory:
    def __init__(self, pid: int):
        self.pid = pid
        self.file = open(f"/proc/{pid}/mem", "r+b", buffering=0)  # noqa: SIM115 - closed by close()

    def read(self, address: int, size: int) -> bytes:
        try:
            self.file.seek(address)
            data = self.file.read(size)
        except OSError as exc:  # EIO: nothing mapped there
            raise OSError(exc.errno, f"cannot read {size} bytes at {address:#x} in process "
                                     f"{self.pid}: {exc.strerror}") from None
        if len(data) != size:
            raise OSError(f"cannot read {size} bytes at {address:#x} in process {self.pid}")
        return data

    def word(self, address: int, size: int) -> int:
        return int.from_bytes(self.read(address, size), "little")

    def write(self, address: int, data: bytes) -> None:
        try:
            self.file.seek(address)
            self.file.write(data)
        except OSError as exc:
            raise OSError(exc.errno, f"cannot write {len(data)} bytes at {address:#x} in "
                                     f"process {self.pid}: {exc.strerror}") from None

    def put(self, address: int, size: int, value: int) -> None:
        self.write(address, value.to_bytes(size, "little"))

    def close(self) -> None:
        self.file.close()


def park(pid: int, address: int, fs_base: int | None = None, layout=None) -> Parked:
    """Write `jmp .` at `address`; with the thread's `fs_base` and the binary's RuntimeLayout,
    also keep its goroutine on the thread (see the module docstring)."""
    memory = _Memory(pid)
    try:
        parked = Parked(pid, address, memory.read(address, len(PARK)).hex())
        if fs_base is not None and layout is not None:
            _guard(memory, parked, fs_base, layout)
        memory.write(address, PARK)
    finally:
        memory.close()
    return parked


def _guard(memory: _Memory, parked: Parked, fs_base: int, layout) -> None:
    offsets = layout.offsets
    g = memory.word((fs_base + layout.tls_g_offset) % (1 << 64), 8)
    m = memory.word(g + offsets["runtime.g"]["m"], 8) if g else 0
    p = memory.word(m + offsets["runtime.m"]["p"], 8) if m else 0
    if not p:
        return
    # sysmon's record first, so that sysmon stops choosing this P before a pending request is
    # dropped. It is (schedtick, schedwhen): a tick that differs from the P's makes sysmon
    # note "scheduled now" instead of looking at the time, so both are set
    record = p + offsets["runtime.p"]["sysmontick"]
    memory.put(record + offsets["runtime.sysmontick"]["schedtick"], 4,
               memory.word(p + offsets["runtime.p"]["schedtick"], 4))
    schedwhen = record + offsets["runtime.sysmontick"]["schedwhen"]
    memory.put(schedwhen, 8, time.monotonic_ns() + FAR_AHEAD_NS)
    parked.schedwhen_address = schedwhen
    words = [(g + offsets["runtime.g"]["stackguard0"], 8), (g + offsets["runtime.g"]["preempt"], 1),
             (p + offsets["runtime.p"]["preempt"], 1)]
    if memory.word(words[0][0], 8) != STACK_PREEMPT:
        parked.saved += [[a, size, memory.word(a, size)] for a, size in words]
    else:  # a request is pending: the state without it, if the stack guard can be known
        unrequested = _stack_guard_unrequested(memory, g, m, offsets)
        if unrequested is not None:
            parked.saved += [[a, size, value] for (a, size), value in
                             zip(words, (unrequested, 0, 0))]
            for address, size, value in parked.saved:
                memory.put(address, size, value)
            parked.dropped_request = True


def _stack_guard_unrequested(memory: _Memory, g: int, m: int, offsets) -> int | None:
    """g.stackguard0 as the runtime sets it when no preemption is asked for: g.stack.lo +
    stackGuard, the guard taken from the M's g0 (runtime/proc.go mstart0); None if what is
    read does not look like a stack guard."""
    stack_lo = offsets["runtime.g"].get("stack", 0)  # g.stack.lo: g's first word in every Go
    g0 = memory.word(m + offsets["runtime.m"]["g0"], 8)
    if not g0:
        return None
    guard = (memory.word(g0 + offsets["runtime.g"]["stackguard0"], 8)
             - memory.word(g0 + stack_lo, 8))
    if not 0 < guard < MAX_STACK_GUARD:
        return None
    return memory.word(g + stack_lo, 8) + guard


MAX_STACK_GUARD = 1 << 16
"""Larger than runtime.stackGuard in any build (928 on linux/amd64, a few times that with
-race): a bigger difference means the g0 words were not what they seemed."""
FAR_AHEAD_NS = 24 * 3600 * 10**9
"""How far ahead of now p.sysmontick.schedwhen is set (Go's nanotime is CLOCK_MONOTONIC on
Linux, as time.monotonic_ns)."""
STACK_PREEMPT = (1 << 64) - 1314
"""runtime.stackPreempt on 64-bit (runtime/stack.go): stackguard0 of a goroutine asked to
yield."""


def in_a_file(pid: int, ip: int) -> bool:
    """Whether `ip` is in a mapping of a file (a bundle references the file, whose bytes a
    park does not change), not the kernel's [vdso] or anonymous memory (which a bundle
    snapshots, a park's `jmp .` included, if it is taken while parked)."""
    from adapter.hw import procfs
    try:
        return any(m.start <= ip < m.end and m.path.startswith("/") for m in procfs.maps(pid))
    except OSError:
        return False


def unpark(parked: Parked) -> bool:
    """Undo park() if it is still in place; True if it was. Safe to call twice."""
    memory = _Memory(parked.pid)
    try:
        if memory.read(parked.address, len(PARK)) != PARK:
            return False
        for address, size, value in parked.saved:
            memory.put(address, size, value)
        memory.write(parked.address, bytes.fromhex(parked.original))
    finally:
        memory.close()
    return True


def resume_preemption(parked: Parked) -> None:
    """After the window: sysmon's record of the P says "scheduled just now" again, so the
    goroutine is preempted as usual from 10 ms on. Harmless if the P has scheduled since
    (sysmon then keeps its own newer record after one look)."""
    if parked.schedwhen_address is None:
        return
    memory = _Memory(parked.pid)
    try:
        if memory.word(parked.schedwhen_address, 8) > time.monotonic_ns():
            memory.put(parked.schedwhen_address, 8, time.monotonic_ns())
    finally:
        memory.close()


def hold_preemption(pid: int, fs_base: int, layout) -> Parked:
    """Keep the goroutine on the thread whose fs_base is given for a recording that runs it,
    without parking any code: sysmon's record of its P pushed ahead and a pending preemption
    request dropped, as park() does. `resume_preemption` ends it; nothing else is put back
    (the goroutine runs meanwhile, so the words saved before are stale)."""
    memory = _Memory(pid)
    try:
        held = Parked(pid, 0, "")
        _guard(memory, held, fs_base, layout)
    finally:
        memory.close()
    held.saved = []
    return held

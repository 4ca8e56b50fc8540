"""park / unpark on a real running Go program (tests/fixtures/programs/go_park, GOMAXPROCS=1):
a goroutine adding step(i) is stopped by a debug-register breakpoint at `// @park`, parked
there with the runtime layout and its thread's fs_base, and let go. While it spins, the test
reads the runtime's words back from /proc/PID/mem: the goroutine stays on its thread and its
P schedules nothing (sysmon's record pushed ahead); parked without the guard, the same
program is preempted within sysmon's 10 ms, which shows what the guard prevents. Unparked, the
program computes exactly the sum it would have.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import time

import pytest

from adapter.capture.target import Target
from adapter.golang.park import FAR_AHEAD_NS, PARK, STACK_PREEMPT, park, resume_preemption, unpark
from adapter.golang.runtime_layout import layout_of
from adapter.golang.stepper_probe import GoidProbe
from adapter.hw import ptrace as pt
from pt_decoder.lines import LineTable

pytestmark = [pytest.mark.live, pytest.mark.timeout(120)]

PROGRAMS = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "programs"
STEPS = 5000
SPIN = 0.15
"""How long the parked thread spins unobserved: 15 times sysmon's 10 ms preemption limit."""


def expected_sum(n: int) -> int:
    return sum((i * 3) ^ (i >> 2) for i in range(n))


def marker(path: pathlib.Path, name: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"// @{name}"):
            return number
    raise LookupError(f"no '// @{name}' in {path}")


@pytest.fixture(scope="module")
def fixture(tmp_path_factory):
    go = shutil.which("go") or "/usr/local/go/bin/go"
    package = tmp_path_factory.mktemp("park") / "go_park"
    shutil.copytree(PROGRAMS / "go_park", package)
    binary = package.parent / "park"
    subprocess.run([go, "build", "-gcflags=all=-N -l", "-o", str(binary), "."], cwd=package,
                   check=True, env=dict(os.environ, CGO_ENABLED="0"))
    source = package / "main.go"
    (pc, *_) = LineTable.for_elf(str(binary)).statement_addresses(str(source),
                                                                   marker(source, "park"))
    return binary, pc, layout_of(str(binary))


class Runtime:
    """The runtime words of the goroutine stopped on `tid`, read through /proc/PID/mem."""

    def __init__(self, pid: int, fs_base: int, layout):
        self.memory = pt.Memory(pid)
        self.layout = layout
        off = layout.offsets
        self.g = self.memory.read_u64((fs_base + layout.tls_g_offset) % (1 << 64))
        self.p = self.memory.read_u64(self.memory.read_u64(self.g + off["runtime.g"]["m"])
                                      + off["runtime.m"]["p"])
        record = self.p + off["runtime.p"]["sysmontick"]
        self.schedwhen_address = record + off["runtime.sysmontick"]["schedwhen"]
        self.record_tick_address = record + off["runtime.sysmontick"]["schedtick"]

    def u(self, address: int, size: int) -> int:
        return int.from_bytes(self.memory.read(address, size), "little")

    def field(self, struct: str, name: str, size: int) -> int:
        base = self.g if struct == "runtime.g" else self.p
        return self.u(base + self.layout.offsets[struct][name], size)

    def schedtick(self) -> int:
        return self.field("runtime.p", "schedtick", 4)

    def preemption(self) -> tuple[int, int, int]:
        """(g.stackguard0, g.preempt, p.preempt)"""
        return (self.field("runtime.g", "stackguard0", 8), self.field("runtime.g", "preempt", 1),
                self.field("runtime.p", "preempt", 1))

    def close(self) -> None:
        self.memory.close()


def _start(binary) -> subprocess.Popen:
    proc = subprocess.Popen([str(binary), str(STEPS)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=dict(os.environ, GOMAXPROCS="1"))
    assert proc.stdout.readline() == b"ready\n"
    return proc


def _stop_at(proc: subprocess.Popen, pc: int) -> tuple[Target, int]:
    """The goroutine's thread stopped at `pc` (debug-register breakpoint), the only one
    traced."""
    target = Target.attach(pid=proc.pid)
    try:
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        tid = target.run_to(pc, timeout=30)
        target.keep_only(tid)
    except BaseException:
        target.release()
        raise
    return target, tid


def _state(pid: int, tid: int) -> str:
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def _finish(proc: subprocess.Popen) -> bytes:
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    return out


def _park_and_spin(proc, pc, layout, tid, target, before, clean=None) -> None:
    """Park the stopped goroutine with the guard, let it spin, check it stayed unpreempted on
    its thread, unpark it while held; the program then computes the right sum. `before`: its
    preemption state when parked; `clean`: the state it had before a request was made."""
    regs = pt.getregs(tid)
    probe = GoidProbe(proc.pid, layout)
    goid = probe(regs)
    assert goid and goid > 1  # the summing goroutine, not main
    runtime = Runtime(proc.pid, regs.fs_base, layout)
    try:
        original = runtime.memory.read(pc, 2)
        tick = runtime.schedtick()
        parked = park(proc.pid, pc, regs.fs_base, layout)
        assert runtime.memory.read(pc, 2) == PARK
        assert bytes.fromhex(parked.original) == original
        guarded = tuple(value for _, _, value in parked.saved)  # what the park leaves
        assert len(parked.saved) == 3
        if before[0] == STACK_PREEMPT:  # asked to yield before the park: the request is gone
            assert parked.dropped_request
            assert guarded[1:] == (0, 0)
            if clean is not None:
                assert guarded == clean
        else:
            assert not parked.dropped_request
            assert guarded == before
        # (the state right now is not checked: a preemption sysmon began before the park set
        # its record may still land; unparking puts `guarded` back whatever happened)
        # sysmon's record: "P scheduled at tick `tick`, far in the future"
        assert parked.schedwhen_address == runtime.schedwhen_address
        assert runtime.u(runtime.record_tick_address, 4) == tick
        assert runtime.u(runtime.schedwhen_address, 8) > time.monotonic_ns() + FAR_AHEAD_NS // 2
        target.release()

        time.sleep(SPIN)
        assert _state(proc.pid, tid) == "R"  # spinning on `jmp .`, not waiting
        assert runtime.schedtick() == tick  # its P ran nothing else: no preemption

        held = Target.attach(tid=tid)
        try:
            regs = pt.getregs(tid)
            assert regs.rip == pc
            assert probe(regs) == goid  # the same goroutine, on the same thread
            assert unpark(parked) is True
            assert runtime.memory.read(pc, 2) == original
            assert runtime.preemption() == guarded
            assert unpark(parked) is False  # twice: nothing more happens
            assert runtime.memory.read(pc, 2) == original
            resume_preemption(parked)
            assert abs(runtime.u(runtime.schedwhen_address, 8) - time.monotonic_ns()) < 10**9
        finally:
            held.release()
    finally:
        probe.close()
        runtime.close()
    assert _finish(proc) == f"{expected_sum(STEPS)}\n".encode()


def test_parked_goroutine_spins_on_its_thread_unpreempted_and_computes_the_same(fixture):
    binary, pc, layout = fixture
    proc = _start(binary)
    try:
        target, tid = _stop_at(proc, pc)
        before = Runtime(proc.pid, pt.getregs(tid).fs_base, layout).preemption()
        _park_and_spin(proc, pc, layout, tid, target, before)
    finally:
        proc.kill()
        proc.wait()


def test_a_request_pending_at_the_park_is_dropped(fixture):
    """The thread is held while the rest of the program runs: sysmon asks its goroutine to
    yield (and signals the thread). Parked then, the request is dropped (stackguard0 back to
    what it was without one) and the signal finds nothing to do when it arrives."""
    binary, pc, layout = fixture
    for _ in range(5):  # a start where no request is pending yet at the breakpoint
        proc = _start(binary)
        target, tid = _stop_at(proc, pc)
        runtime = Runtime(proc.pid, pt.getregs(tid).fs_base, layout)
        clean = runtime.preemption()
        if clean[0] != STACK_PREEMPT:
            break
        target.release()
        runtime.close()
        proc.kill()
        proc.wait()
    else:
        pytest.fail("a preemption request was pending at every breakpoint stop")
    try:
        deadline = time.monotonic() + 2.0
        while runtime.preemption()[0] != STACK_PREEMPT:  # sysmon: after 10 ms at most 20
            assert time.monotonic() < deadline, "sysmon never asked the held goroutine to yield"
            time.sleep(0.005)
        asked = runtime.preemption()
        assert asked[1] == 1
        runtime.close()
        _park_and_spin(proc, pc, layout, tid, target, asked, clean)
    finally:
        proc.kill()
        proc.wait()


def test_without_the_guard_sysmon_preempts_the_parked_goroutine(fixture):
    """The control of the test above: the same park without fs_base and layout saves and
    pushes nothing, and within a few sysmon rounds the goroutine is asked to yield or moved
    (its P schedules again)."""
    binary, pc, layout = fixture
    proc = _start(binary)
    try:
        target, tid = _stop_at(proc, pc)
        runtime = Runtime(proc.pid, pt.getregs(tid).fs_base, layout)
        tick = runtime.schedtick()
        parked = park(proc.pid, pc)
        assert parked.saved == [] and parked.schedwhen_address is None
        target.release()
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            preempted = runtime.schedtick() != tick or runtime.preemption()[0] == STACK_PREEMPT
            if preempted:
                break
            time.sleep(0.005)
        assert preempted, "sysmon never preempted the parked goroutine"
        everyone = Target.attach(pid=proc.pid)  # no thread runs while the bytes go back
        try:
            assert unpark(parked) is True
        finally:
            everyone.release()
            runtime.close()
        resume_preemption(parked)  # nothing to put back: harmless
        assert _finish(proc) == f"{expected_sum(STEPS)}\n".encode()
    finally:
        proc.kill()
        proc.wait()


def test_park_at_an_unmapped_address_raises_a_clear_oserror(fixture):
    binary, _, _ = fixture
    proc = _start(binary)
    try:
        with pytest.raises(OSError) as info:
            park(proc.pid, 0x10)
        assert "0x10" in str(info.value) and str(proc.pid) in str(info.value)
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        assert _finish(proc) == f"{expected_sum(STEPS)}\n".encode()  # nothing was written
    finally:
        proc.kill()
        proc.wait()

"""Goroutine attribution against ground truth, on a real Go program whose goroutines hand a
token around channels (tests/fixtures/programs/go_handoff, GOMAXPROCS=1):

* the stepper records it with the goid probe writing PTWRITEs; the bundle is decoded and the
  index built; at every stop of the recording the test's own log of the goid (read
  independently, through PTRACE_PEEKDATA) equals the index's label;
* the same program single-stepped instruction by instruction, the goid logged at every
  instruction; the index built only from the flow and from observations where the stepper
  would stop (branches, syscalls) agrees on every instruction;
* the layout read from DWARF finds the goroutine Delve reports.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import pytest
from stepper_support import PROGRAMS

from adapter.capture import blocks, record, stepper
from adapter.capture.target import Target
from adapter.golang.goroutine_index import Confidence, GoroutineIndex
from adapter.golang.runtime_layout import RuntimeLayout
from adapter.golang.stepper_probe import GoidProbe
from adapter.hw import ptrace as pt
from adapter.recording.recording import Recording

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]

GO_ENV = dict(os.environ, GODEBUG="asyncpreemptoff=1")
PTRACE_PEEKDATA = 2
_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def peek(tid: int, addr: int) -> int:
    """One word of the tracee by PTRACE_PEEKDATA (not /proc/PID/mem, which the probe uses)."""
    ctypes.set_errno(0)
    value = _libc.ptrace(PTRACE_PEEKDATA, tid, ctypes.c_void_p(addr), None)
    if value == -1 and ctypes.get_errno():
        raise OSError(ctypes.get_errno(), f"PEEKDATA {addr:#x}")
    return value & 0xFFFFFFFFFFFFFFFF


@pytest.fixture(scope="module")
def handoff(tmp_path_factory):
    go = shutil.which("go") or "/usr/local/go/bin/go"
    package = tmp_path_factory.mktemp("handoff") / "go_handoff"
    shutil.copytree(PROGRAMS / "go_handoff", package)
    binary = package.parent / "handoff"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=package, check=True,
                   env=dict(os.environ, CGO_ENABLED="0"))
    return binary


def _start(binary, rounds: int) -> subprocess.Popen:
    proc = subprocess.Popen([str(binary), str(rounds)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=GO_ENV)
    assert proc.stdout.readline() == b"ready\n"
    return proc


def test_stepper_recording_agrees_with_the_goid_at_every_stop(handoff, tmp_path):
    layout = RuntimeLayout.from_elf(str(handoff))
    proc = _start(handoff, 3)
    probe = GoidProbe(proc.pid, layout)
    truth: list[tuple[int, int]] = []  # (rip, goid) at every stop, in order

    def logging_probe(regs):
        tid = _tid_of(regs)
        g = peek(tid, regs.fs_base + layout.tls_g_offset)
        truth.append((regs.rip, peek(tid, g + layout.goid_offset) if g else -1))
        return probe(regs)

    def _tid_of(regs):
        if not recording_tid:  # the recorded thread: the one in a ptrace stop now
            recording_tid.extend(int(t) for t in os.listdir(f"/proc/{proc.pid}/task")
                                 if _state(proc.pid, t) == "t")
        return recording_tid[0]

    recording_tid: list[int] = []
    try:
        out = tmp_path / "handoff.bundle"
        _Writer(proc).start()
        result = record.record_stepper(
            str(out), pid=proc.pid, start="main.handoff",
            end=stepper.EndCondition(until_return=True), ptw_probe=logging_probe,
            trigger_timeout=60, wait_for_exit=False)
    finally:
        probe.close()
    assert proc.wait(60) == 0
    assert proc.stdout.read().strip() == b"9"  # sum of i + 2 for i < 3
    assert result.manifest["status"] == "complete", result.manifest.get("partial_reason")
    rec = result.recording
    stamps = [index for index, _ in rec.stamps]
    assert len(stamps) == len(truth) > 100

    (thread,) = Recording.open(out).goroutines().values()
    assert list(thread.history.ips()) == list(rec.ips)
    assert thread.samples == [(i, v) for i, v in rec.ptw]  # PTWRITEs survive encode/decode
    index = thread.index
    checked = 0
    for position, (rip, goid) in zip(stamps, truth):
        if position >= len(rec.ips):
            continue  # the stop that ended the recording
        assert rec.ips[position] == rip
        assert index.goid_at(position)[0] == goid, (position, hex(rip))
        checked += 1
    assert checked >= len(truth) - 1  # all but, perhaps, the stop that ended it
    # three goroutines of the program took turns, with g0 (the scheduler) between them
    user = [g for g in index.goroutines() if g > 0]
    assert len(user) == 3, index.goroutines()
    assert 0 in index.goroutines()
    assert len(index.switches()) >= 3 * 2 * 3  # every round passes through three goroutines


def _state(pid, tid) -> str:
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        stat = f.read()
    return stat[stat.rfind(")") + 2]


class _Writer:
    """Sends the line the fixture waits for once the recorder's trigger is armed (shortly
    after attaching: the fixture then runs handoff on its own)."""

    def __init__(self, proc):
        self.proc = proc

    def start(self):
        import threading

        def go():
            import time
            time.sleep(1.0)
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
        threading.Thread(target=go, daemon=True).start()


def test_index_agrees_with_the_goid_at_every_instruction(handoff):
    layout = RuntimeLayout.from_elf(str(handoff))
    proc = _start(handoff, 2)
    target = Target.attach(pid=proc.pid)
    try:
        trigger = target.resolve("main.handoff")
        _Writer(proc).start()
        tid = target.run_to(trigger, timeout=60)
        target.keep_only(tid)
        regs = pt.getregs(tid)
        probe = GoidProbe(proc.pid, layout)
        with pt.Memory(tid) as mem:
            code = blocks.CodeCache(mem.read)
            ret, ret_rsp = mem.read_u64(regs.rsp), regs.rsp + 8
            ips, truth, samples = [], [], []
            last = None
            while not (regs.rip == ret and regs.rsp == ret_rsp):
                goid = probe(regs)
                ins = code.insn(regs.rip)
                # where the stepper stops (it starts with one), it writes changed goids
                if (ins.kind in blocks.STOP_KINDS or not ips) and goid != last:
                    samples.append((len(ips), goid))
                    last = goid
                ips.append(regs.rip)
                truth.append(goid)
                pt.singlestep(tid)
                status = pt.waitpid(tid)
                assert not status.gone, status.describe()
                pt.getregs(tid, regs)
                assert len(ips) < 400_000
        probe.close()
    finally:
        target.release()
    assert proc.wait(60) == 0
    from array import array
    index = GoroutineIndex.build(array("Q", ips), samples, layout.g_stores)
    labels = index.labels().tolist()
    wrong = [i for i, (a, b) in enumerate(zip(labels, truth)) if a != b]
    assert wrong == [], f"{len(wrong)} of {len(ips)} differ, first at {wrong[:5]}"
    assert len({g for g in truth if g}) == 3
    # the labels between a switch and the next observation come from the flow
    assert Confidence.FLOW in {c for *_, c in index.segments()}

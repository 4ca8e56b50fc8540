"""The stepper shares the thread's four debug-register slots with data breakpoints (issue 17):
with 1-4 of them held by perf write-breakpoint events on the recorded thread (what a DAP data
breakpoint arms on every thread, adapter.watchpoints), it records with the slots left free, and
with none left it steps every instruction. Each recording equals the independent single-step
reference of the same run, and the held events are untouched (their slots still theirs)."""
from __future__ import annotations

import errno
import os

import pytest
from stepper_support import build_c, reference_launched

from adapter.capture import stepper
from adapter.capture.target import Target
from adapter.hw import perf
from adapter.hw import ptrace as pt

pytestmark = pytest.mark.live

WATCHED = 0x2000
"""Never written by the fixture (page 2 is never mapped): the held events never fire."""


@pytest.fixture(scope="module")
def rec_work(tmp_path_factory):
    return build_c("rec_work.c", tmp_path_factory.mktemp("shared_slots"))


@pytest.fixture(scope="module")
def reference(rec_work):
    return reference_launched([rec_work, "12", "2"], "work")


def _hold_slots(tid: int, count: int) -> list[int]:
    """`count` data-breakpoint-like events on `tid`, one per CPU each as PerfWatcher opens
    them (per (thread, CPU) pair): each takes one slot of the thread."""
    fds = []
    for slot in range(count):
        attr = perf.breakpoint_attr(WATCHED + 8 * slot, 8, perf.HW_BREAKPOINT_W, inherit=True)
        for cpu in range(os.cpu_count()):
            fds.append(perf.perf_event_open(attr, tid, cpu))
    return fds


@pytest.mark.parametrize("held", [1, 3, 4])
def test_records_with_the_slots_data_breakpoints_leave(rec_work, reference, held):
    target = Target.launch([str(rec_work), "12", "2"], no_aslr=True)
    fds: list[int] = []
    try:
        tid = target.run_to(target.resolve("work"))
        target.keep_only(tid)
        fds = _hold_slots(tid, held)
        assert stepper.free_slots(tid) == 4 - held
        regs = pt.getregs(tid)
        with pt.Memory(tid) as mem:
            return_address = mem.read_u64(regs.rsp)
        recorder = stepper.ThreadRecorder(tid, target.pid,
                                          stepper.EndCondition(until_return=True),
                                          entry_rsp=regs.rsp, return_address=return_address,
                                          breakpoints="dr")
        rec = recorder.run()
        assert rec.partial_reason is None, rec.partial_reason
        assert list(rec.ips) == reference
        if held == 4:  # no slot: every instruction is stepped but the branches it performs
            assert rec.single_steps >= len(reference) * 0.6
        else:
            assert rec.single_steps < len(reference) / 2
        # the held events still have their slots: no fifth breakpoint fits
        assert stepper.free_slots(tid) == 4 - held
        if held == 4:
            attr = perf.exec_trap_attr(WATCHED)
            with pytest.raises(OSError) as refused:
                os.close(perf.perf_event_open(attr, tid))
            assert refused.value.errno == errno.ENOSPC
    finally:
        for fd in fds:
            os.close(fd)
        target.release()
        if target.launched is not None:
            assert target.launched.wait(30) == 0


def test_records_with_the_slots_it_is_told_are_held(rec_work, reference):
    """A caller that knows better than the kernel's count (a DAP session's data breakpoints,
    held_slots) keeps the recorder to the other slots: told 3, it uses one."""
    target = Target.launch([str(rec_work), "12", "2"], no_aslr=True)
    try:
        tid = target.run_to(target.resolve("work"))
        target.keep_only(tid)
        regs = pt.getregs(tid)
        with pt.Memory(tid) as mem:
            return_address = mem.read_u64(regs.rsp)
        recorder = stepper.ThreadRecorder(tid, target.pid,
                                          stepper.EndCondition(until_return=True),
                                          entry_rsp=regs.rsp, return_address=return_address,
                                          breakpoints="dr", held_slots=3)
        rec = recorder.run()
        assert rec.partial_reason is None, rec.partial_reason
        assert list(rec.ips) == reference
        assert recorder.bp.usable == 1
        assert recorder.bp.regs.method == "perf"
    finally:
        target.release()
        if target.launched is not None:
            target.launched.wait(30)

"""adapter.hw.perf against the running kernel: real breakpoint events on this test process.

These pin down the ABI facts the watchpoint engine relies on (perf_event_open(2)
and arch/x86/kernel/hw_breakpoint.c): what x86 accepts, the sample layout, the
per-CPU rings that inherited events need, and ENOSPC for a fifth register.
"""
from __future__ import annotations

import ctypes
import errno
import os
import struct
import threading
import time

import pytest

from adapter.hw import perf

pytestmark = pytest.mark.live


@pytest.fixture
def buffer():
    buf = (ctypes.c_uint64 * 8)()
    return buf, ctypes.addressof(buf)


def _open(addr, length, bp_type, cpu=-1, inherit=False):
    return perf.perf_event_open(perf.breakpoint_attr(addr, length, bp_type, inherit=inherit),
                                os.getpid(), cpu)


# offsetof(struct perf_event_attr, ...) in include/uapi/linux/perf_event.h (x86-64,
# Linux 6.13+: aux_action took __reserved_3's word; config3 came in 6.3).
ATTR_OFFSETS = {
    "type": 0, "size": 4, "config": 8, "sample_period": 16, "sample_type": 24,
    "read_format": 32, "flags": 40, "wakeup_events": 48, "bp_type": 52,
    "bp_addr": 56, "config1": 56, "bp_len": 64, "config2": 64, "branch_sample_type": 72,
    "sample_regs_user": 80, "sample_stack_user": 88, "clockid": 92, "sample_regs_intr": 96,
    "aux_watermark": 104, "sample_max_stack": 108, "aux_sample_size": 112,
    "aux_action": 116, "sig_data": 120, "config3": 128,
}


def test_attr_layout_matches_perf_event_attr_ver8():
    assert ctypes.sizeof(perf.PerfEventAttr) == perf.PERF_ATTR_SIZE_VER8 == 136
    got = {name: getattr(perf.PerfEventAttr, name).offset for name in ATTR_OFFSETS}
    assert got == ATTR_OFFSETS
    a = perf.PerfEventAttr()
    a.config1 = 0x1234
    a.config2 = 8
    assert (a.bp_addr, a.bp_len) == (0x1234, 8)     # the header's unions


def test_breakpoint_attrs_are_opened_as_ver7():
    """Breakpoints pass the 128 bytes up to sig_data, as they always have."""
    for attr in (perf.breakpoint_attr(0x1000, 8, perf.HW_BREAKPOINT_W),
                 perf.exec_trap_attr(0x1000)):
        assert attr.size == perf.PERF_ATTR_SIZE_VER7 == 128
        assert not any(bytes(attr)[128:])


@pytest.mark.parametrize("what,offset,length,bp_type,err", [
    ("read-only: x86 has no read-only breakpoint", 0, 8, perf.HW_BREAKPOINT_R, errno.EINVAL),
    ("read-write-execute", 0, 8, perf.HW_BREAKPOINT_RW | perf.HW_BREAKPOINT_X, errno.EINVAL),
    ("write+execute", 0, 8, perf.HW_BREAKPOINT_W | perf.HW_BREAKPOINT_X, errno.EINVAL),
    ("execute with bp_len 1 (Linux wants sizeof(long))", 0, 1, perf.HW_BREAKPOINT_X, errno.EINVAL),
    ("length 3", 0, 3, perf.HW_BREAKPOINT_W, errno.EINVAL),
    ("unaligned 8 bytes", 4, 8, perf.HW_BREAKPOINT_W, errno.EINVAL),
    ("unaligned 2 bytes", 1, 2, perf.HW_BREAKPOINT_W, errno.EINVAL),
])
def test_kernel_refuses(buffer, what, offset, length, bp_type, err):
    _, addr = buffer
    with pytest.raises(OSError) as info:
        _open(addr + offset, length, bp_type)
    assert info.value.errno == err, what


def test_kernel_accepts_write_readwrite_and_execute_with_long_length(buffer):
    _, addr = buffer
    for length, bp_type in [(1, perf.HW_BREAKPOINT_W), (2, perf.HW_BREAKPOINT_RW),
                            (4, perf.HW_BREAKPOINT_W), (8, perf.HW_BREAKPOINT_RW),
                            (8, perf.HW_BREAKPOINT_X)]:
        os.close(_open(addr, length, bp_type))


def test_fifth_breakpoint_on_one_thread_is_enospc(buffer):
    _, addr = buffer
    fds = [_open(addr + 8 * i, 8, perf.HW_BREAKPOINT_W) for i in range(4)]
    try:
        with pytest.raises(OSError) as info:
            _open(addr + 32, 8, perf.HW_BREAKPOINT_W)
        assert info.value.errno == errno.ENOSPC
    finally:
        for fd in fds:
            os.close(fd)


def test_inherited_per_task_events_cannot_be_mmapped_but_per_cpu_ones_can(buffer):
    _, addr = buffer
    fd = _open(addr, 8, perf.HW_BREAKPOINT_W, cpu=-1, inherit=True)
    try:
        with pytest.raises(OSError) as info:
            perf.RingBuffer(fd, 1)
        assert info.value.errno == errno.EINVAL
    finally:
        os.close(fd)
    fd = _open(addr, 8, perf.HW_BREAKPOINT_W, cpu=0, inherit=True)
    try:
        perf.RingBuffer(fd, 1).close()
    finally:
        os.close(fd)


def test_samples_carry_ip_tid_time_addr_regs_and_follow_new_threads(buffer):
    buf, addr = buffer
    cpus = sorted(os.sched_getaffinity(0))
    fds, rings = [], []
    try:
        for cpu in cpus:
            fd = _open(addr, 8, perf.HW_BREAKPOINT_W, cpu=cpu, inherit=True)
            fds.append(fd)
            rings.append(perf.RingBuffer(fd, 4))
        t0 = perf_time_now()
        for k in range(5):
            buf[0] = k
        child_tid = []

        def writer():
            child_tid.append(threading.get_native_id())
            buf[0] = 99

        th = threading.Thread(target=writer)
        th.start()
        th.join()
        records = [r for ring in rings for r in ring.read()]
    finally:
        for fd in fds:
            os.close(fd)
    samples = [r for r in records if isinstance(r, perf.Sample)]
    assert len(samples) == 6
    ids = {s.event_id for s in samples}
    assert len(ids) <= len(cpus)
    by_tid = {}
    for s in samples:
        by_tid[s.tid] = by_tid.get(s.tid, 0) + 1
        assert s.pid == os.getpid()
        assert s.bp_addr == addr
        assert s.regs["rip"] == s.ip   # the trap IP is the user IP of the hit
        assert s.time_ns >= t0
    assert by_tid == {threading.get_native_id(): 5, child_tid[0]: 1}


def perf_time_now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def test_parse_sample_skips_callchain_context_markers():
    user_marker = (1 << 64) - 512
    body = struct.pack("<QQIIQQQ", 7, 0x401000, 10, 11, 123, 0x5000, 3)
    body += struct.pack("<3Q", user_marker, 0x401000, 0x401100)
    body += struct.pack("<Q", 2) + struct.pack(f"<{len(perf.REG_NAMES)}Q", *range(len(perf.REG_NAMES)))
    s = perf.parse_sample(body)
    assert (s.event_id, s.ip, s.pid, s.tid, s.time_ns, s.bp_addr) == (7, 0x401000, 10, 11, 123, 0x5000)
    assert s.callchain == (0x401000, 0x401100)
    assert s.regs["rax"] == 0 and s.regs["rip"] == 8 and s.regs["r15"] == len(perf.REG_NAMES) - 1

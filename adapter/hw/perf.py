"""A thin wrapper over the perf_event_open(2) ABI, mostly for hardware breakpoints.

Role: the one binding of `struct perf_event_attr`, of perf_event_open(2)
and of the perf ioctls in the adapter. It builds the attr of a
PERF_TYPE_BREAKPOINT event, opens events on one thread, issues their
ioctls, and reads the sample records a breakpoint's mmap'd ring buffer
carries. Every constant and layout here is from perf_event_open(2) and
<linux/perf_event.h>, <linux/hw_breakpoint.h>.

Layer: adapter.hw, mechanism only. It does not decide which threads or
registers a watch uses, nor what a hit means (adapter.watchpoints does);
it does not know about ptrace or symbols, nor about Intel PT:
adapter.capture.intel_pt builds its PT, sideband and window events from
this struct and opens them here. x86-64 Linux only.
"""
from __future__ import annotations

import ctypes
import dataclasses
import mmap
import os
import struct

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
SYS_perf_event_open = 298  # x86-64

PERF_TYPE_SOFTWARE = 1
PERF_TYPE_BREAKPOINT = 5
PERF_COUNT_SW_DUMMY = 9  # enum perf_sw_ids: counts nothing, carries sideband records

# <linux/hw_breakpoint.h>: bp_type bits and bp_len values.
HW_BREAKPOINT_R = 1
HW_BREAKPOINT_W = 2
HW_BREAKPOINT_RW = HW_BREAKPOINT_R | HW_BREAKPOINT_W
HW_BREAKPOINT_X = 4

# perf_event_attr.sample_type bits (perf_event_open(2), "sample_type").
SAMPLE_IP = 1 << 0
SAMPLE_TID = 1 << 1
SAMPLE_TIME = 1 << 2
SAMPLE_ADDR = 1 << 3
SAMPLE_CALLCHAIN = 1 << 5
SAMPLE_ID = 1 << 6
SAMPLE_CPU = 1 << 7
SAMPLE_PERIOD = 1 << 8
SAMPLE_REGS_USER = 1 << 12
SAMPLE_IDENTIFIER = 1 << 16

# perf_event_attr flag bits (the bit-field word after read_format, `flags` here).
FLAG_DISABLED = 1 << 0
FLAG_INHERIT = 1 << 1
FLAG_EXCLUDE_KERNEL = 1 << 5
FLAG_EXCLUDE_HV = 1 << 6
FLAG_MMAP = 1 << 8
FLAG_COMM = 1 << 9
FLAG_ENABLE_ON_EXEC = 1 << 12
FLAG_TASK = 1 << 13
FLAG_WATERMARK = 1 << 14
FLAG_SAMPLE_ID_ALL = 1 << 18
FLAG_EXCLUDE_GUEST = 1 << 20
FLAG_EXCLUDE_CALLCHAIN_KERNEL = 1 << 21
FLAG_MMAP2 = 1 << 23
FLAG_COMM_EXEC = 1 << 24
FLAG_USE_CLOCKID = 1 << 25
FLAG_CONTEXT_SWITCH = 1 << 26
FLAG_INHERIT_THREAD = 1 << 35  # Linux 5.13+
FLAG_REMOVE_ON_EXEC = 1 << 36  # Linux 5.13+
FLAG_SIGTRAP = 1 << 37  # Linux 5.13+: a synchronous SIGTRAP (si_code TRAP_PERF) per overflow

# perf_event_attr.aux_action bits (Linux 6.13+; the union with aux_start_paused,
# aux_pause, aux_resume): an AUX event that starts paused, and events in its
# group that pause or resume it when they overflow.
AUX_START_PAUSED = 1 << 0
AUX_PAUSE = 1 << 1
AUX_RESUME = 1 << 2

PERF_FLAG_FD_CLOEXEC = 1 << 3  # the flags argument of perf_event_open

# ioctls (perf_event_open(2), "perf_event related ioctl calls"): _IO('$', n) etc.
IOC_ENABLE = 0x2400
IOC_DISABLE = 0x2401
IOC_SET_OUTPUT = 0x2405
IOC_SET_FILTER = 0x40082406  # _IOW('$', 6, char *)
IOC_ID = 0x80082407  # _IOR('$', 7, __u64 *)
IOC_MODIFY_ATTRIBUTES = 0x4008240B  # _IOW('$', 11, struct perf_event_attr *), Linux 4.17+

TRAP_PERF = 6  # siginfo si_code of a FLAG_SIGTRAP signal (<asm-generic/siginfo.h>)

# Record types in the ring (perf_event_open(2), "MMAP layout").
RECORD_LOST = 2
RECORD_EXIT = 4
RECORD_THROTTLE = 5
RECORD_UNTHROTTLE = 6
RECORD_FORK = 7
RECORD_SAMPLE = 9

# Callchain context markers (enum perf_callchain_context): not addresses.
PERF_CONTEXT_MAX = (1 << 64) - 4095

# x86-64 user register numbers (arch/x86/include/uapi/asm/perf_regs.h). DS,
# ES, FS and GS (12-15) are rejected for 64-bit tasks, so they are left out.
REG_NAMES = {0: "rax", 1: "rbx", 2: "rcx", 3: "rdx", 4: "rsi", 5: "rdi", 6: "rbp", 7: "rsp",
             8: "rip", 9: "eflags", 10: "cs", 11: "ss", 16: "r8", 17: "r9", 18: "r10",
             19: "r11", 20: "r12", 21: "r13", 22: "r14", 23: "r15"}
REGS_USER_MASK = sum(1 << n for n in REG_NAMES)
_REG_ORDER = sorted(REG_NAMES)

CLOCK_MONOTONIC = 1
PAGE_SIZE = mmap.PAGESIZE


# The sizes the kernel knows struct perf_event_attr by (attr.size).
PERF_ATTR_SIZE_VER1 = 72  # add: config2 (bp_len)
PERF_ATTR_SIZE_VER7 = 128  # add: sig_data
PERF_ATTR_SIZE_VER8 = 136  # add: config3 (Linux 6.3)


class _Config1(ctypes.Union):
    _fields_ = [("bp_addr", ctypes.c_uint64), ("config1", ctypes.c_uint64)]


class _Config2(ctypes.Union):
    _fields_ = [("bp_len", ctypes.c_uint64), ("config2", ctypes.c_uint64)]


class PerfEventAttr(ctypes.Structure):
    """`struct perf_event_attr` up to `config3` (PERF_ATTR_SIZE_VER8, 136 bytes).

    The bit-field word after read_format is `flags` (FLAG_* bits), and the
    word at offset 116 is `aux_action` (AUX_* bits; __reserved_3 before
    Linux 6.13). bp_addr/config1 and bp_len/config2 are the anonymous unions
    of the header. A caller sets `size` to the version it fills in: the
    kernel reads that many bytes, and refuses (E2BIG) a size beyond the ones
    it knows only if the bytes past them are not zero.
    """
    _anonymous_ = ("_config1", "_config2")
    _fields_ = [
        ("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
        ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
        ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64),
        ("wakeup_events", ctypes.c_uint32), ("bp_type", ctypes.c_uint32),
        ("_config1", _Config1), ("_config2", _Config2),
        ("branch_sample_type", ctypes.c_uint64), ("sample_regs_user", ctypes.c_uint64),
        ("sample_stack_user", ctypes.c_uint32), ("clockid", ctypes.c_int32),
        ("sample_regs_intr", ctypes.c_uint64), ("aux_watermark", ctypes.c_uint32),
        ("sample_max_stack", ctypes.c_uint16), ("_reserved_2", ctypes.c_uint16),
        ("aux_sample_size", ctypes.c_uint32), ("aux_action", ctypes.c_uint32),
        ("sig_data", ctypes.c_uint64), ("config3", ctypes.c_uint64),
    ]


assert ctypes.sizeof(PerfEventAttr) == PERF_ATTR_SIZE_VER8


SAMPLE_TYPE = (SAMPLE_IDENTIFIER | SAMPLE_IP | SAMPLE_TID | SAMPLE_TIME | SAMPLE_ADDR
               | SAMPLE_CALLCHAIN | SAMPLE_REGS_USER)
"""What every breakpoint sample carries: which event, IP, PID/TID, time,
the breakpoint address, the user call chain and the user registers."""


def breakpoint_attr(address: int, length: int, bp_type: int, *, inherit: bool = True,
                    threads_only: bool = True, disabled: bool = False, max_stack: int = 64,
                    wakeup_bytes: int = 0) -> PerfEventAttr:
    """A sampling breakpoint event that records every hit (sample_period = 1).

    Kernel and hypervisor hits are excluded (a user watch must not fire on
    the kernel's copy_to_user into the buffer, and needs no privilege for
    it); kernel frames are left out of the call chain. Times are
    CLOCK_MONOTONIC (use_clockid) so they compare with the target's own
    clock_gettime. `inherit` makes threads the watched thread creates later
    carry the event too (perf_event_open(2), "inherit"); with `threads_only`
    only threads do (inherit_thread: a fork()ed child is another process, with
    its own copy of the memory) and an exec removes the event (remove_on_exec:
    the address means nothing in the new program). Pollers are woken at
    every sample, or with `wakeup_bytes` only once that much data waits (the
    `watermark` flag): each wakeup costs the hitting thread an irq_work and,
    if a reader sleeps in poll, a cross-CPU wakeup.
    """
    attr = PerfEventAttr()
    attr.type = PERF_TYPE_BREAKPOINT
    attr.size = PERF_ATTR_SIZE_VER7  # no breakpoint field lies past sig_data
    attr.bp_type = bp_type
    attr.bp_addr = address
    attr.bp_len = length
    attr.sample_period = 1
    attr.sample_type = SAMPLE_TYPE
    attr.sample_regs_user = REGS_USER_MASK
    attr.sample_max_stack = max_stack
    attr.wakeup_events = wakeup_bytes or 1  # a union: wakeup_watermark with FLAG_WATERMARK
    attr.clockid = CLOCK_MONOTONIC
    flags = (FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV | FLAG_EXCLUDE_CALLCHAIN_KERNEL
             | FLAG_USE_CLOCKID | FLAG_SAMPLE_ID_ALL)
    if inherit:
        flags |= FLAG_INHERIT
        if threads_only:
            flags |= FLAG_INHERIT_THREAD | FLAG_REMOVE_ON_EXEC
    if wakeup_bytes:
        flags |= FLAG_WATERMARK
    if disabled:
        flags |= FLAG_DISABLED
    attr.flags = flags
    return attr


def exec_trap_attr(address: int) -> PerfEventAttr:
    """An instruction breakpoint that sends its thread a SIGTRAP at every hit
    (sample_period 1, `sigtrap`), before the instruction runs: RIP is on it
    and the kernel has set RFLAGS.RF so that resuming runs it (x86
    hw_breakpoint_handler). Nothing is sampled. The kernel requires
    remove_on_exec with sigtrap; user-space hits only. Its debug-register slot
    is the kernel's until the fd is closed, and no longer."""
    attr = PerfEventAttr()
    attr.type = PERF_TYPE_BREAKPOINT
    attr.size = PERF_ATTR_SIZE_VER7
    attr.bp_type = HW_BREAKPOINT_X
    attr.bp_addr = address
    attr.bp_len = ctypes.sizeof(ctypes.c_long)  # the kernel's only length for X
    attr.sample_period = 1
    attr.flags = FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV | FLAG_REMOVE_ON_EXEC | FLAG_SIGTRAP
    return attr


def write_trap_attr(address: int, length: int = 8) -> PerfEventAttr:
    """A data breakpoint that sends its thread a SIGTRAP after each write to the `length`
    aligned bytes at `address` (a trap: RIP is past the writing instruction, SDM Vol. 3B
    §17.2.5). Nothing is sampled; user-space writes only; its slot is the kernel's until
    the fd is closed (as exec_trap_attr)."""
    attr = exec_trap_attr(address)
    attr.bp_type = HW_BREAKPOINT_W
    attr.bp_len = length
    return attr


def perf_event_open(attr: PerfEventAttr, tid: int, cpu: int = -1, group_fd: int = -1,
                    flags: int = PERF_FLAG_FD_CLOEXEC) -> int:
    """perf_event_open(2) on one thread (`tid` > 0, cpu -1) or process: the new fd.

    Raises OSError with the errno the kernel gave. For a breakpoint: ENOSPC
    when the thread's four debug registers are taken, EINVAL for a
    type/length/alignment the architecture refuses, ESRCH for a thread that
    is gone, EACCES/EPERM when the caller may not inspect the thread (ptrace
    access mode, perf_event_paranoid).
    """
    fd = _libc.syscall(SYS_perf_event_open, ctypes.byref(attr), ctypes.c_int(tid),
                       ctypes.c_int(cpu), ctypes.c_int(group_fd), ctypes.c_ulong(flags))
    if fd < 0:
        err = ctypes.get_errno()
        what = (f"breakpoint {attr.bp_addr:#x}/{attr.bp_len}" if attr.type == PERF_TYPE_BREAKPOINT
                else f"type {attr.type}")
        raise OSError(err, f"perf_event_open({what}, tid {tid}): {os.strerror(err)}")
    return fd


def ioctl(fd: int, request: int, arg) -> int:
    """ioctl(2) on a perf fd (one of IOC_*): its result. Raises OSError with the errno."""
    res = _libc.ioctl(ctypes.c_int(fd), ctypes.c_ulong(request), arg)
    if res < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"ioctl({request:#x}) on perf fd {fd}: {os.strerror(err)}")
    return res


def enable(fd: int) -> None:
    ioctl(fd, IOC_ENABLE, ctypes.c_ulong(0))


def disable(fd: int) -> None:
    ioctl(fd, IOC_DISABLE, ctypes.c_ulong(0))


def set_output(fd: int, target_fd: int) -> None:
    """PERF_EVENT_IOC_SET_OUTPUT: `fd` writes its records into `target_fd`'s ring.

    The kernel allows it only between events of the same task and CPU.
    """
    ioctl(fd, IOC_SET_OUTPUT, ctypes.c_ulong(target_fd))


def modify_attributes(fd: int, attr: PerfEventAttr) -> None:
    """PERF_EVENT_IOC_MODIFY_ATTRIBUTES: move a breakpoint event (only
    breakpoints support it) to attr.bp_addr/bp_type/bp_len; keeps its slot."""
    ioctl(fd, IOC_MODIFY_ATTRIBUTES, ctypes.byref(attr))


def event_id(fd: int) -> int:
    """PERF_EVENT_IOC_ID: the id that PERF_SAMPLE_IDENTIFIER puts in each sample."""
    out = ctypes.c_uint64(0)
    ioctl(fd, IOC_ID, ctypes.byref(out))
    return out.value


def read_count(fd: int) -> int:
    """The event's counter (read_format 0): hits so far, including inherited threads' that exited."""
    return struct.unpack("<Q", os.read(fd, 8))[0]


@dataclasses.dataclass(frozen=True)
class Sample:
    """One PERF_RECORD_SAMPLE of a breakpoint event, in SAMPLE_TYPE's layout."""
    event_id: int
    ip: int
    pid: int
    tid: int
    time_ns: int
    bp_addr: int
    callchain: tuple[int, ...]
    regs: dict[str, int]


@dataclasses.dataclass(frozen=True)
class Lost:
    """PERF_RECORD_LOST (ring full) or a throttled interval: hits not reported."""
    event_id: int
    count: int
    reason: str


def parse_sample(body: bytes) -> Sample:
    """Decode a sample body laid out as SAMPLE_TYPE asks (perf_event_open(2), PERF_RECORD_SAMPLE:
    identifier, ip, pid/tid, time, addr, then callchain nr + ips, then regs abi + regs)."""
    ident, ip, pid, tid, time_ns, addr, nr = struct.unpack_from("<QQIIQQQ", body, 0)
    off = 48
    chain = struct.unpack_from(f"<{nr}Q", body, off)
    off += 8 * nr
    abi = struct.unpack_from("<Q", body, off)[0]
    off += 8
    regs = {}
    if abi:  # PERF_SAMPLE_REGS_ABI_NONE (0) when the hit had no user registers
        values = struct.unpack_from(f"<{len(_REG_ORDER)}Q", body, off)
        regs = {REG_NAMES[n]: v for n, v in zip(_REG_ORDER, values)}
    user_chain = tuple(a for a in chain if a < PERF_CONTEXT_MAX)
    return Sample(ident, ip, pid, tid, time_ns, addr, user_chain, regs)


class RingBuffer:
    """The mmap'd ring of one perf fd: a metadata page then 2^n data pages.

    Reading follows perf_event_open(2) "MMAP layout": load data_head, read the
    records between data_tail and data_head, then store data_tail so the
    kernel may reuse the space. On x86 loads are not reordered with loads
    nor stores with older loads, so plain loads/stores are the barriers the
    man page asks for.
    """

    _HEAD = 1024  # offsetof(struct perf_event_mmap_page, data_head)
    _TAIL = 1032  # data_tail

    def __init__(self, fd: int, data_pages: int = 8):
        if data_pages & (data_pages - 1):
            raise ValueError(f"data_pages must be a power of two, not {data_pages}")
        self.fd = fd
        self.size = data_pages * PAGE_SIZE
        self._map = mmap.mmap(fd, PAGE_SIZE + self.size, mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE)

    def pending(self) -> bool:
        head, tail = struct.unpack_from("<QQ", self._map, self._HEAD)
        return head != tail

    def read(self) -> list[Sample | Lost]:
        """Every complete record now in the ring, oldest first; consumed."""
        head, tail = struct.unpack_from("<QQ", self._map, self._HEAD)
        out: list[Sample | Lost] = []
        base = PAGE_SIZE
        while tail < head:
            start = tail % self.size
            rtype, _misc, rsize = struct.unpack_from("<IHH", self._chunk(base, start, 8))
            record = self._chunk(base, start, rsize)
            tail += rsize
            if rtype == RECORD_SAMPLE:
                out.append(parse_sample(record[8:]))
            elif rtype == RECORD_LOST:
                ident, lost = struct.unpack_from("<QQ", record, 8)
                out.append(Lost(ident, lost, "ring buffer full"))
            elif rtype == RECORD_THROTTLE:
                _time, ident = struct.unpack_from("<QQ", record, 8)
                out.append(Lost(ident, -1, "throttled by kernel.perf_event_max_sample_rate"))
        struct.pack_into("<Q", self._map, self._TAIL, tail)
        return out

    def _chunk(self, base: int, start: int, n: int) -> bytes:
        end = start + n
        if end <= self.size:
            return self._map[base + start: base + end]
        first = self._map[base + start: base + self.size]
        return first + self._map[base: base + end - self.size]

    def close(self) -> None:
        self._map.close()

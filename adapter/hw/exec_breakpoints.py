"""Instruction breakpoints in the four debug-register slots of one traced
thread, armed so that nothing of them stays in the thread once cleared.

Layer: adapter.hw (mechanism only). It arms, moves and clears execute
breakpoints on a thread the caller holds in a ptrace-stop; which addresses,
which slot and what a hit means are the recorder's business
(adapter.capture.stepper, adapter.capture.target). A hit is a SIGTRAP stop
with RIP on the address (an instruction breakpoint is a fault, SDM Vol. 3B
§17.2.4) and RFLAGS.RF set by the kernel so that resuming runs it.

Two ways to arm a slot, the first preferred:
  * perf: one PERF_TYPE_BREAKPOINT event per slot with `sigtrap`
    (hw.perf.exec_trap_attr), moved with PERF_EVENT_IOC_MODIFY_ATTRIBUTES.
    Closing the fd gives the slot back to the kernel, and a ptdebug that dies
    closes it too, so a thread is never left with a breakpoint armed.
  * ptrace: PTRACE_POKEUSER of DRn and DR7, only where perf refuses (a kernel
    before 5.13, perf_event_paranoid 3 without CAP_PERFMON). The kernel backs
    every DRn a tracer ever writes, even with 0, by a breakpoint event of its
    own (arch/x86/kernel/ptrace.c, ptrace_set_breakpoint_addr) that keeps its
    slot until the thread execs or exits; DR7 = 0 only disables it. So after
    a tracer has written DR0-DR3, perf_event_open of any breakpoint on that
    thread fails with ENOSPC (the "taken by another tool" of `ptdebug watch`
    after a `record --pid`, issue 14): this path writes an address only to
    arm it and clears with DR7 alone. DR7 is written 0 before the first
    address: a slot another debugger left as an 8-byte write watch (Delve's
    data breakpoints) refuses an unaligned code address with EINVAL, and DR7
    = 0 makes every slot a disabled 1-byte execute breakpoint first.
"""
from __future__ import annotations

import errno
import os

from adapter.hw import perf
from adapter.hw import ptrace as pt
from adapter.hw.signals import signals_held

SLOTS = 4
DR7_OFFSET = pt.DEBUGREG_OFFSET + 8 * 7


def _dr7_enable_bit(slot: int) -> int:
    """Ln of DR7 for `slot`, with R/Wn = LENn = 00 (instruction breakpoint), SDM Vol. 3B §17.2.4."""
    return 1 << (2 * slot)


# perf_event_open errors that mean "perf cannot do this here", not "the thread is gone"
_PERF_REFUSALS = (errno.EACCES, errno.EPERM, errno.EINVAL, errno.ENOENT, errno.EOPNOTSUPP,
                  errno.ENODEV, errno.ENOSYS, errno.E2BIG, errno.ENOSPC)


class BreakpointError(OSError):
    """No way could arm the slot; the text names the thread, the address and why."""


class ExecBreakpoints:
    """The instruction breakpoints ptdebug has armed on thread `tid`.
    `method` is "perf", "ptrace", or "auto" (perf, falling back to ptrace for
    the whole thread the first time perf refuses)."""

    def __init__(self, tid: int, method: str = "auto"):
        if method not in ("auto", "perf", "ptrace"):
            raise ValueError(f"method must be auto, perf or ptrace, not {method!r}")
        self.tid = tid
        self.requested = method
        self.method = method
        """The way in use: "perf" or "ptrace" once a slot was armed."""
        self.addresses: list[int | None] = [None] * SLOTS
        """The armed address of each slot (None: free)."""
        self._fds: list[int | None] = [None] * SLOTS
        self._attrs: list[perf.PerfEventAttr | None] = [None] * SLOTS
        self._dr7 = 0
        self._dr7_cleared = False

    @property
    def armed(self) -> bool:
        return any(a is not None for a in self.addresses)

    def set(self, slot: int, address: int) -> None:
        """Arm `slot` at `address` (moving it if it was armed elsewhere).
        Raises PtraceError(ESRCH) for a thread that is gone, BreakpointError
        when neither way can arm it."""
        if self.method != "ptrace":
            try:
                self._set_perf(slot, address)
                self.addresses[slot] = address
                self.method = "perf"
                return
            except OSError as exc:
                if exc.errno == errno.ESRCH:
                    raise pt.PtraceError(exc.errno, "perf_event_open", self.tid) from None
                if self.requested == "perf" or exc.errno not in _PERF_REFUSALS:
                    raise self._error(address, exc) from None
                perf_error = exc
                try:
                    self._switch_to_ptrace()
                except pt.PtraceError as ptrace_exc:
                    if ptrace_exc.errno == errno.ESRCH:
                        raise
                    raise self._error(address, perf_error, ptrace_exc) from None
        try:
            self._set_ptrace(slot, address)
        except pt.PtraceError as exc:
            if exc.errno == errno.ESRCH:
                raise
            raise self._error(address, exc) from None
        self.addresses[slot] = address

    def _error(self, address: int, *causes: OSError) -> BreakpointError:
        why = "; ".join(str(c) for c in causes)
        if any(c.errno == errno.ENOSPC for c in causes):
            why += " (the thread's debug registers are taken by another tool)"
        return BreakpointError(causes[-1].errno, f"cannot arm an instruction breakpoint at "
                                                 f"{address:#x} in thread {self.tid}: {why}")

    def clear(self) -> None:
        """Disarm every slot and hand the slots back (perf) or disable them
        (ptrace: DR7 = 0). A thread that is gone is not an error."""
        for slot in range(SLOTS):
            self._close_perf(slot)
        if self._dr7:
            try:
                pt.pokeuser(self.tid, DR7_OFFSET, 0)
            except pt.PtraceError as exc:
                if exc.errno != errno.ESRCH:
                    raise
            self._dr7 = 0
        self.addresses = [None] * SLOTS

    # -- perf ------------------------------------------------------------------------------

    def _set_perf(self, slot: int, address: int) -> None:
        fd = self._fds[slot]
        if fd is None:
            attr = perf.exec_trap_attr(address)
            with signals_held():  # an interrupt must not lose an armed event's descriptor
                self._fds[slot] = perf.perf_event_open(attr, self.tid)
            self._attrs[slot] = attr
        else:
            attr = self._attrs[slot]
            attr.bp_addr = address
            perf.modify_attributes(fd, attr)

    def _close_perf(self, slot: int) -> None:
        fd = self._fds[slot]
        if fd is not None:
            os.close(fd)
            self._fds[slot] = None
            self._attrs[slot] = None

    def _switch_to_ptrace(self) -> None:
        """perf refused a slot: move the slots perf holds to the debug registers."""
        moved = [(s, a) for s, a in enumerate(self.addresses) if a is not None]
        for slot in range(SLOTS):
            self._close_perf(slot)
        self.method = "ptrace"
        for slot, address in moved:
            self._set_ptrace(slot, address)

    # -- ptrace ----------------------------------------------------------------------------

    def _set_ptrace(self, slot: int, address: int) -> None:
        if not self._dr7_cleared:
            pt.pokeuser(self.tid, DR7_OFFSET, 0)
            self._dr7_cleared = True
        # the thread is stopped: an enabled slot can change address in place
        pt.pokeuser(self.tid, pt.DEBUGREG_OFFSET + 8 * slot, address)
        bit = _dr7_enable_bit(slot)
        if not self._dr7 & bit:
            self._dr7 |= bit
            pt.pokeuser(self.tid, DR7_OFFSET, self._dr7)

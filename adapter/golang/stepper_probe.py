"""The goroutine probe of the ptrace stepper: at each stop of the recorded thread it reads the
id of the goroutine the thread runs, which the stepper writes into the trace as a PTWRITE
packet whenever it changes (adapter/capture/stepper.py, `ptw_probe`).

Layer: adapter.golang. Reads the stopped thread's memory through adapter.hw.ptrace; knows the
runtime layout (runtime_layout.py) and nothing of the stepper's internals, traces or DAP.

What is read: g = *(fs_base + tls_g_offset) (the TLS slot, right in any code, unlike R14),
then g.goid. A goid of 0 is the g0 (scheduler / system stack) or gsignal of the thread: the
trace then shows runtime work that belongs to no goroutine, and the index labels it so.
"""
from __future__ import annotations

import os

from adapter.hw import ptrace as pt

from .runtime_layout import RuntimeLayout

G0_GOID = 0
"""goid of an M's g0 and gsignal: runtime code on the system stack."""


class GoidProbe:
    """`probe(regs) -> goid | None` for any thread of process `pid` (the registers say which
    thread: fs_base is per thread, the memory is the process's); None where no g is set up
    yet (a thread being created) or the memory cannot be read."""

    def __init__(self, pid: int, layout: RuntimeLayout, memory: pt.Memory | None = None):
        self.layout = layout
        self.memory = memory or pt.Memory(pid)
        self._own_memory = memory is None
        self._tls = layout.tls_g_offset
        self._goid = layout.goid_offset
        self.reads = 0
        """How many times the probe ran (each is two 8-byte reads of the tracee)."""

    def g_address(self, regs) -> int | None:
        try:
            return self.memory.read_u64((regs.fs_base + self._tls) & 0xFFFFFFFFFFFFFFFF)
        except OSError:
            return None

    def __call__(self, regs) -> int | None:
        self.reads += 1
        g = self.g_address(regs)
        if not g:
            return None
        try:
            return self.memory.read_u64(g + self._goid)
        except OSError:
            return None

    def close(self) -> None:
        if self._own_memory:
            self.memory.close()


def probe_for(pid: int, executable: str | None = None) -> GoidProbe:
    """The probe for a Go process (its executable read from /proc when not given). Raises
    runtime_layout.LayoutError when the binary is not a usable Go binary."""
    path = executable or os.readlink(f"/proc/{pid}/exe")
    return GoidProbe(pid, RuntimeLayout.from_elf(path))

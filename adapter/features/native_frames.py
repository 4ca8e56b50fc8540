"""Native stack frames that ptdebug knows and the Python debugger does not: the instruction
pointer and user-space call chain of a perf sample (a data-breakpoint hit), shown as DAP stack
frames above debugpy's Python frames.

Layer: features. Turns addresses into DAP `StackFrame` objects with `instructionPointerReference`
(so VS Code's disassembly view opens there), a name from the process's symbols
(pt_decoder.image: perf-map entries, then ELF symbols) and, where the module carries DWARF line
information and is small enough to read at once, its source file and line (pt_decoder.lines).
It knows nothing of debugpy, of watchpoints or of how the frames are spliced into a response.

Frame ids come from a range of their own, [NATIVE_FRAME_ID_BASE, NATIVE_FRAME_ID_END): debugpy
numbers its frames from 1 upwards, the replayed frames of features.reverse start at 1 << 27 and
the local variablesReferences of features.record_breakpoints at 1 << 28 (docs/protocol.md).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

NATIVE_FRAME_ID_BASE = 1 << 26
NATIVE_FRAME_ID_END = 1 << 27
MAX_NATIVE_FRAMES = 16
"""The perf call chain is a frame-pointer walk; past this many frames it is mostly libpython."""
LINE_TABLE_MAX_BYTES = 4 << 20
"""Modules larger than this (libpython) or without their own .debug_line (libc, whose lines
are in a separate debug file) are named by symbol only: reading their DWARF takes seconds, and
a source line matters in the user's own native code."""
USER_SPACE_END = 1 << 47
"""x86-64 canonical user addresses are below 2^47 (SDM Vol. 1 §3.3.7.1); the rest is kernel."""


@dataclass
class NativeStack:
    """The native frames of one stopped thread, innermost first, and what they came from."""
    thread_id: int
    frames: list[dict]
    """DAP StackFrame objects (ids in the native range)."""
    registers: dict[str, int] = field(default_factory=dict)
    """User registers of the sample (the innermost frame's), by name."""
    when: str = ""
    """What moment the frames show, e.g. "at the write" (they are not the thread's present)."""

    def owns(self, frame_id: object) -> bool:
        return any(frame["id"] == frame_id for frame in self.frames)

    def is_top(self, frame_id: object) -> bool:
        return bool(self.frames) and self.frames[0]["id"] == frame_id


class NativeFrameMaker:
    """Builds native frames for one process; keeps line tables between stops."""

    def __init__(self):
        self._line_tables: dict[tuple[str, int], object] = {}
        self._next_id = NATIVE_FRAME_ID_BASE

    def frames(self, image, ips: list[int], when: str) -> list[dict]:
        """DAP frames for `ips` (innermost first: the sample IP, then return addresses) in the
        process whose code `image` (pt_decoder.image.Image) maps. The walk ends at the first
        address no module maps (a frame-pointer chain that left the stack)."""
        frames = []
        for depth, ip in enumerate(ips[:MAX_NATIVE_FRAMES]):
            if not 0 < ip < USER_SPACE_END:
                break
            # A return address follows its call: its line is the call's, one byte before.
            where = ip if depth == 0 else ip - 1
            module = image.module_at(where)
            symbol = image.symbolize(where)
            if module is None and symbol is None:
                break
            name = f"{symbol.name}+{symbol.offset + ip - where:#x}" if symbol else f"{ip:#x}"
            library = os.path.basename(module.path) if module else "?"
            frame = {"id": self._frame_id(), "name": f"{name} [{library}, {when}]",
                     "line": 0, "column": 0, "instructionPointerReference": f"{ip:#x}",
                     "presentationHint": "subtle"}
            line = self._line(module, where)
            if line is not None:
                frame.update({"source": {"name": os.path.basename(line[0]), "path": line[0],
                                         "presentationHint": "deemphasize"},
                              "line": line[1], "column": 1})
            frames.append(frame)
        return frames

    def _frame_id(self) -> int:
        self._next_id += 1
        if self._next_id >= NATIVE_FRAME_ID_END:
            self._next_id = NATIVE_FRAME_ID_BASE + 1
        return self._next_id

    def _line(self, module, address: int) -> tuple[str, int] | None:
        from elftools.common.exceptions import ELFError

        from pt_decoder.errors import PtError
        from pt_decoder.lines import LineTable
        if module is None or module.kind != "elf":
            return None
        key = (module.path, module.base)
        table = self._line_tables.get(key)
        if key not in self._line_tables:
            try:
                small = os.path.getsize(module.path) <= LINE_TABLE_MAX_BYTES
                table = (LineTable.for_elf(module.path, module.base, source="dwarf")
                         if small and _has_own_lines(module.path) else None)
            except (OSError, PtError, ELFError):
                table = None  # no file any more, or no line information: symbol names only
            self._line_tables[key] = table
        return table.lookup(address) if table is not None else None


def _has_own_lines(path: str) -> bool:
    """Whether the ELF file itself has a .debug_line section. A system library's lines live in
    a separate debug file (/usr/lib/debug/.build-id) whose DWARF takes seconds to read (libc's:
    about 10 s here): a stop must not wait for that, and the user's own code is built with -g."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(".debug_line") is not None


def call_chain(ip: int, callchain: tuple[int, ...]) -> list[int]:
    """The sample's user-space addresses, innermost first: perf puts the sampled IP first in
    PERF_SAMPLE_CALLCHAIN (perf_event_open(2)); a chain without it gets it added."""
    chain = [a for a in callchain if 0 < a < USER_SPACE_END]
    if not chain or chain[0] != ip:
        chain.insert(0, ip)
    return chain

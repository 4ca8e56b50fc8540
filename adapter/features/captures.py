"""A capture: one finished trace window of the session, with its decoded history, the lines
stepping moves by, and the announcement (`ptdebug/capture`) the client gets.

Layer: features (data the trace features share: record_breakpoints makes captures; reverse,
trace_scope, goroutine_view and python_replay read them). Reads line tables through
pt_decoder and adapter.golang (Go runtime lines are passed over); knows nothing of how a
capture was recorded.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from adapter.features.record_window import RecordWindow
from adapter.golang.user_lines import WithoutRuntime
from adapter.protocol.schema import CaptureGap, CaptureLocation, CaptureNowOut
from pt_decoder.image import is_go_binary

LINE_TABLE_MAX_BYTES = 4 << 20


def where(capture, ip: int) -> str:
    """`function+offset (file:line)` of an address of the capture's history."""
    name, offset = capture.function(ip)
    text = f"{name}+{offset:#x}"
    line = capture.line(ip)
    if line is not None:
        text += f" ({line[0].rsplit('/', 1)[-1]}:{line[1]})"
    return text


@dataclass
class Capture:
    """One finished trace window: its decoded history and what it cost."""
    id: int
    tid: int
    """The recorded OS thread."""
    thread_id: int | None
    """Its DAP (debugpy) thread id."""
    window: RecordWindow
    bundle: str
    trace: Any
    """adapter.recording.recording.Recording."""
    breakpoint_id: int | None = None
    end_reason: str = ""
    partial: str | None = None
    """Why the window closed early, or None (a complete capture)."""
    location: dict | None = None
    """{path, line} of the record breakpoint that opened the window (None: captureNow)."""

    _lines: Any = None
    stream: int = 0
    """Which of the bundle's streams (trace.threads) is this capture's history."""
    replay_from: int | None = None
    """A replayed bundle's thread (backends.replay): the position it starts at, and there is
    no live position after the history. None: a capture of the live program."""
    replay_hits: dict = field(default_factory=dict, repr=False)
    """features.replay_hits.recorded_hits' answer for the client's current breakpoints."""
    preparing: list[str] = field(default_factory=list)
    """What is still being done after its announcement (record_breakpoints.py, _prepare)."""
    recorder: dict | None = None
    """{"name", "why"}: the recorder that recorded it and why (window_recorder.py); None: the
    bundle's own word (a replayed bundle)."""

    @property
    def recorder_choice(self) -> dict:
        if self.recorder is not None:
            return {"name": self.recorder["name"], "why": self.recorder["why"]}
        manifest = self.trace.manifest
        said = manifest.get("recorder") or {}
        return {"name": said.get("name") or manifest.get("backend") or "?",
                "why": said.get("why") or "as the bundle's manifest says"}

    @property
    def history(self):
        return self.trace.threads[self.stream].history

    def window_loaded(self) -> None:
        """Another part of the capture's stream is its history now (Recording.load_window):
        what was built from the part before is built again on first use."""
        self._lines = None
        self.replay_hits = {}
        self.__dict__.pop("_goroutines", None)  # goroutine_view's, kept on the capture

    @property
    def lines(self):
        """pt_decoder LineTable of the modules the capture ran code of that carry their own line information
        and are small enough to read at once (LINE_TABLE_MAX_BYTES) or are Go binaries
        (pclntab): the user's native and Go code.
        The interpreter and system libraries are left out: reading a 20 MB libpython's DWARF
        takes many seconds, and stepping by line is about the user's code."""
        if self._lines is None:
            from pt_decoder.lines import LineTable
            ips = self.history.distinct_ips

            def user_code(module) -> bool:
                if not any_between(ips, module.load_address,
                                    module.load_address + module.size):
                    return False  # no instruction of the capture ran in it
                try:
                    return (os.path.getsize(module.path) <= LINE_TABLE_MAX_BYTES or
                            is_go_binary(module.path))
                except OSError:
                    return False

            # a Go program's runtime lines are passed over by line steps (golang/user_lines.py)
            self._lines = WithoutRuntime.wrap(LineTable.for_image(self.trace.symbols,
                                                                  accept=user_code))
        return self._lines

    def linkage_name(self, ip: int) -> str | None:
        """The symbol table's (mangled) name of the function holding `ip`, or None."""
        symbol = self.trace.symbols.symbolize(ip)
        return symbol.name if symbol is not None else None

    def line(self, ip: int) -> tuple[str, int] | None:
        return self.lines.lookup(ip)

    def function(self, ip: int) -> tuple[str, int]:
        """(function name, offset of `ip` in it); a module label where no symbol covers it.
        The name is as views show it (C++ and Rust demangled: pt_decoder/demangle.py);
        `linkage_name` gives the symbol's own."""
        symbol = self.trace.symbols.symbolize(ip)
        if symbol is not None:
            return symbol.display, symbol.offset
        module = self.trace.symbols.module_at(ip)
        label = module.path.rsplit("/", 1)[-1] if module is not None else "unknown code"
        return f"[{label}]", ip - (module.load_address if module is not None else ip)

    @property
    def instructions(self) -> int:
        return len(self.history)

    @property
    def cycles(self) -> int:
        history = self.history
        return history.cycles(len(history) - 1) - history.cycles(0) if len(history) else 0

    @property
    def duration_ns(self) -> int:
        history = self.history
        if not len(history):
            return 0
        return self.trace.ns(history.time(len(history) - 1)) - self.trace.ns(history.time(0))

    def event_body(self) -> dict:
        """The `ptdebug/capture` event body (schema.CaptureNowOut, the one source of its shape)."""
        location = self.location
        return dataclasses.asdict(CaptureNowOut(
            id=self.id, threadId=self.thread_id, tid=self.tid, window=self.window.describe(),
            instructions=self.instructions, cycles=self.cycles, durationNs=self.duration_ns,
            clock=self.trace.clock, clockLabel=self.trace.clock_label,
            gaps=[CaptureGap(g.position, g.reason) for g in self.history.gaps],
            bundle=self.bundle, endReason=self.end_reason,
            status="partial" if self.partial else "complete",
            partial=self.partial is not None, partialReason=self.partial,
            reason="breakpoint" if location else "command",
            location=CaptureLocation(location["path"], location["line"]) if location else None,
            recorder=self.recorder_choice, preparing=list(self.preparing)))


def any_between(sorted_values, low: int, high: int) -> bool:
    import bisect
    i = bisect.bisect_left(sorted_values, low)
    return i < len(sorted_values) and sorted_values[i] < high

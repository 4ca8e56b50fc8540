"""Latency between two code points of a recording: every interval from a pass through point A
to the next pass through point B, in nanoseconds and in cycles, and its percentiles.

Layer: adapter.export. Reads a Recording (adapter.recording); resolves code points with its
symbols and line table; knows nothing of DAP.

A code point is `0xADDR`, `FILE:LINE` (the addresses where statements of that line begin,
as a breakpoint would be placed; FILE may be a path suffix or a base name) or a function
name (its entry address). In a Python capture (the stepper's Python probe), `FILE:LINE` of a
recorded Python file names that Python line: the positions where a run of it begins. Pairing: B closes the most recent A before it on the same thread
(an A repeated before any B restarts the interval); when A and B are the same point, each
pass to the next is one interval (a loop's period). Times are the instructions' TSC times
(trace.py, never running backwards); with the ptrace stepper they change only at its stops,
so short intervals may read 0 ns while their cycles are counted. Cycles of an interval are the
difference of the cumulative cycle counter between B and A (no per-instruction attribution).
Instructions of an interval are the positions from A to B, exact with every recorder. A stepper
recording's ns and cycles are stepper time, not CPU time (trace.py): the summary says so
(`clock`, `units`) and puts the instruction counts first.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from adapter.recording.recording import STEPPER_TIME, Recording


class CodePointError(ValueError):
    """A code point that names nothing in the bundle; the text says which and why."""


@dataclass
class CodePoint:
    text: str
    addresses: frozenset[int]
    python_line: tuple[str, int] | None = None
    """(file, line) of a Python source line of a Python capture: the point is where a run of
    that line begins in the history (adapter/python/timeline.py's line slices), not an
    address."""

    def describe(self) -> str:
        if self.python_line is not None:
            return f"{self.text} [Python line]"
        shown = ", ".join(f"{a:#x}" for a in sorted(self.addresses)[:3])
        more = f" (+{len(self.addresses) - 3} more)" if len(self.addresses) > 3 else ""
        return f"{self.text} [{shown}{more}]"


@dataclass
class Interval:
    tid: int
    start: int
    """Position of the A instruction in the thread's history."""
    end: int
    """Position of the B instruction."""
    ns: int
    cycles: int

    @property
    def instructions(self) -> int:
        """Instructions from A up to B (A's included, B's not)."""
        return self.end - self.start


@dataclass
class LatencyReport:
    source: CodePoint
    target: CodePoint
    intervals: list[Interval] = field(default_factory=list)
    stepper_note: str | None = None
    """Recording.timing_note of the recording: set when its ns and cycles are stepper
    time, not CPU time."""

    def percentile(self, p: float, what: str = "ns") -> int:
        """Nearest-rank percentile (the smallest value with at least p% of the values at or
        below it). Raises ValueError when there are no intervals."""
        values = sorted(getattr(i, what) for i in self.intervals)
        if not values:
            raise ValueError("no intervals")
        rank = max(1, math.ceil(p / 100 * len(values)))
        return values[rank - 1]

    def summary(self) -> dict:
        stepper = self.stepper_note is not None
        out: dict = {"from": self.source.text, "to": self.target.text,
                     "count": len(self.intervals),
                     "threads": sorted({i.tid for i in self.intervals}),
                     "clock": "stepper" if stepper else "tsc",
                     "units": {"instructions": "instructions executed (exact)",
                               "ns": (f"{STEPPER_TIME}: wall-clock ns of a thread slowed by "
                                      "ptrace, not CPU time") if stepper else "ns of TSC time",
                               "cycles": (f"{STEPPER_TIME}: the stepper's ns, not CPU cycles")
                               if stepper else "CPU cycles (CYC packets)"}}
        if stepper:
            out["note"] = self.stepper_note
        for what in ("instructions", "ns", "cycles"):
            if self.intervals:
                values = [getattr(i, what) for i in self.intervals]
                out[what] = {"min": min(values), "p50": self.percentile(50, what),
                             "p90": self.percentile(90, what), "p99": self.percentile(99, what),
                             "max": max(values), "mean": sum(values) / len(values)}
        return out


def resolve(decoded: Recording, text: str) -> CodePoint:
    """The addresses a code point names. Raises CodePointError when it names none."""
    spec = text.strip()
    if re.fullmatch(r"0[xX][0-9a-fA-F]+", spec):
        return CodePoint(spec, frozenset({int(spec, 16)}))
    match = re.fullmatch(r"(.+):(\d+)", spec)
    if match:
        file, line = match.group(1), int(match.group(2))
        python = _python_file(decoded, file)
        if python is not None:
            return CodePoint(spec, frozenset(), (python, line))
        addresses = decoded.lines.statement_addresses(file, line)
        if not addresses:
            raise CodePointError(f"{spec}: no code of the recorded images is on that line "
                                 "(is the file compiled with -g, the line a statement?)")
        return CodePoint(spec, frozenset(addresses))
    found = decoded.symbols.find_symbol(spec)
    if found is None:
        raise CodePointError(f"{spec}: no function of that name in the bundle's images "
                             "(give FILE:LINE or 0xADDR instead)")
    return CodePoint(spec, frozenset({found[0]}))


def _python_file(decoded: Recording, file: str) -> str | None:
    """The file of a Python capture's code objects that `file` names (the whole path, a path
    suffix or the base name), or None (not a Python capture, or no such Python file)."""
    table = decoded.manifest.get("python")
    if not isinstance(table, dict):
        return None
    names = {str(c.get("filename", "")) for c in (table.get("codes") or {}).values()}
    for name in sorted(names):
        if name == file or name.endswith("/" + file.lstrip("/")):
            return name
    return None


def _python_positions(decoded: Recording, thread, point: CodePoint) -> set[int]:
    """Positions where a run of the point's Python line begins in `thread`."""
    file, line = point.python_line
    frames = decoded.python_frames(thread)
    return {pos for pos, frame in frames.line_sequence()
            if frame.filename == file and frame.line == line}


def measure(decoded: Recording, source: CodePoint, target: CodePoint) -> LatencyReport:
    """Every A -> B interval of every thread of the bundle."""
    report = LatencyReport(source, target, stepper_note=decoded.timing_note())
    for thread in decoded.threads:
        py_source = _python_positions(decoded, thread, source) if source.python_line else None
        py_target = _python_positions(decoded, thread, target) if target.python_line else None
        history = thread.history
        ips = history.ips()
        cycles_column = history.cycles_range()
        times = decoded.times_ns(thread)
        gap_positions = {g.position for g in history.gaps}
        start = None
        for pos in range(len(ips)):
            if pos in gap_positions:
                start = None  # an interval never spans lost trace
            ip = ips[pos]
            at_target = pos in py_target if py_target is not None else ip in target.addresses
            at_source = pos in py_source if py_source is not None else ip in source.addresses
            if at_target and start is not None and pos != start:
                report.intervals.append(Interval(
                    thread.tid, start, pos, times[pos] - times[start],
                    max(0, cycles_column[pos] - cycles_column[start])))
                start = None
            if at_source:
                start = pos
    return report

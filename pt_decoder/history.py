"""The decoded history: every executed instruction (IP, time, cycles, flags) and its gaps,
stored compactly, with the indexes reverse stepping asks of it.

Layer: pt_decoder, above the instruction and timing layers (they produce the
columns) and beside lines.py (a LineTable turns IPs into source lines). Knows
the flag bits of insn_flags.py; knows nothing of traces, images or the adapter.

Storage, per instruction (measured by benchmarks/bench_history.py; see
docs/PERFORMANCE.md):
- IP: a uint32 index into the sorted table of distinct IPs (a program runs
  few distinct instructions; this also makes per-IP facts such as the line
  id a lookup, so no per-instruction line column is ever stored);
- time and cycles: per chunk of 1024 instructions a uint64 base and the
  smallest byte width (0, 1, 2, 4 or 8) that holds every value - base;
- flags: one byte (insn_flags.py).
Indexes, built on first use: the call/return events with their stack depth,
grouped by depth (a few bytes per call or return); the running maximum of
time per chunk (position at a time); the gaps sorted by position.

Build with `History.from_columns` (all at once) or `HistoryBuilder` (block by
block as a decoder runs; the raw columns are never all held). Positions are 0..len-1. A `Gap` sits between position-1 and position (a gap
at len is at the very end). Queries that step (by line, to an address) never
cross a gap: they stop at the first instruction after it and return the gap,
so the caller can tell the user why (STYLE.md, "trace damage is data").
"""
from __future__ import annotations

import bisect
import json
import struct
import sys
import weakref
from array import array
from collections.abc import Iterable
from typing import NamedTuple

from . import insn_flags
from ._history import (
    IpInterner,
    call_return_events,
    gather,
    gather64,
    pack_column,
    renumber,
    scan_line,
    scan_marked,
    unpack_column,
)
from .errors import ErrorCode, PtError, errstr

__all__ = ["FORMAT_VERSION", "Gap", "History", "HistoryBuilder", "Insn", "Step"]

FORMAT_VERSION = 1
MAGIC = b"PTDHIST\0"
CHUNK_SHIFT = 10
MAX_INSTRUCTIONS = 0xFFFFFFFF


class Gap(NamedTuple):
    """Instructions are missing before `position`: the trace at byte `offset` said
    `reason` (error `code`, an ErrorCode) at `ip` (0 if unknown)."""

    position: int
    offset: int
    ip: int
    code: int
    reason: str


class Insn(NamedTuple):
    """One executed instruction."""

    position: int
    ip: int
    time: int
    cycles: int
    flags: int


class Step(NamedTuple):
    """Where a stepping query stopped. `reason`: "found" (the asked-for place),
    "gap" (the history is broken before/after `position`; `gap` says how),
    "start" or "end" (the history's first or last instruction), "undecided"
    (prev_line asked to say so: found, but it may begin before the bound)."""

    position: int
    reason: str
    gap: Gap | None = None


class _Packed:
    """A uint64 column in chunks of 2**shift values: base + a per-chunk byte width."""

    __slots__ = ("bases", "count", "data", "offsets", "prefix_max", "shift", "widths")

    def __init__(self, bases, widths, offsets, data, prefix_max, shift, count):
        self.bases, self.widths, self.offsets, self.data = bases, widths, offsets, data
        self.prefix_max, self.shift, self.count = prefix_max, shift, count

    @classmethod
    def pack(cls, values: array, shift: int) -> _Packed:
        return cls(*pack_column(values, shift), shift, len(values))

    def extend(self, other: _Packed) -> None:
        """Append `other`'s values; this column's count must be a whole number of chunks."""
        if self.count % (1 << self.shift):
            raise PtError(ErrorCode.INTERNAL, detail="a packed column grows by whole chunks only")
        shift_by = len(self.data)
        top = self.prefix_max[-1] if len(self.prefix_max) else 0
        self.bases += other.bases
        self.widths += other.widths
        del self.offsets[-1]
        self.offsets += array("Q", (o + shift_by for o in other.offsets))
        self.data += other.data
        self.prefix_max += array("Q", (max(top, m) for m in other.prefix_max))
        self.count += other.count

    def get(self, i: int) -> int:
        c = i >> self.shift
        w = self.widths[c]
        if not w:
            return self.bases[c]
        off = self.offsets[c] + w * (i - (c << self.shift))
        return self.bases[c] + int.from_bytes(self.data[off: off + w], "little")

    def range(self, start: int, stop: int) -> array:
        return unpack_column(self.bases, self.widths, self.offsets, self.data, self.shift, start, stop)

    def first_above(self, value: int) -> int:
        """The first position holding more than `value`; `count` if none."""
        c = bisect.bisect_right(self.prefix_max, value)
        if c >= len(self.prefix_max):
            return self.count
        lo = c << self.shift
        chunk = self.range(lo, min(self.count, lo + (1 << self.shift)))
        for k, v in enumerate(chunk):
            if v > value:
                return lo + k
        raise AssertionError("prefix maximum disagrees with its chunk")  # unreachable

    def first_at_least(self, value: int) -> int:
        return self.first_above(value - 1) if value > 0 else 0

    @property
    def nbytes(self) -> int:
        return sum(len(b) * b.itemsize for b in (self.bases, self.widths, self.offsets, self.prefix_max)) + len(self.data)

    def buffers(self) -> list:
        return [self.bases, self.widths, self.offsets, self.data, self.prefix_max]


def _as_u64(values, name: str) -> array:
    if isinstance(values, array) and values.typecode == "Q":
        return values
    try:
        return array("Q", values)
    except (TypeError, OverflowError) as e:
        raise PtError(ErrorCode.INVALID, detail=f"history column {name} is not unsigned 64-bit: {e}")


class History:
    """The instructions of one thread's trace, oldest first. Build with
    `from_columns` or `load`; `len(h)` instructions, `h[pos]` an `Insn`."""

    def __init__(self, ip_table: array, ip_ids: array, time: _Packed, cycles: _Packed,
                 flags: array, gaps: list[Gap], meta: dict):
        self._ip_table = ip_table
        self._ip_ids = ip_ids
        self._time = time
        self._cycles = cycles
        self._flags = flags
        self.gaps = gaps
        """Every gap, sorted by position."""
        self._gap_positions = array("Q", (g.position for g in gaps))
        self.meta = meta
        """Free-form JSON-able facts about the history (thread, CPU, source trace), saved with it."""
        self._events = None
        self._lines: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.python = None
        """pt_decoder.python_frames.PythonFrames of a Python capture (attach_python), or None.
        Not saved with the history: it comes from the trace's PTWRITE samples."""

    # -- construction ----------------------------------------------------

    @classmethod
    def from_columns(cls, ip, time, cycles, flags, gaps: Iterable[Gap] = (), meta: dict | None = None) -> History:
        """Build from equal-length columns: `ip`, `time` (TSC-based time of each
        instruction), `cycles` (cumulative) as array('Q'), `flags` as array('B')
        with insn_flags bits. `gaps` in any order; `meta` a JSON-able dict.

        Raises PtError(INVALID) if the lengths differ, a value does not fit,
        a gap lies outside 0..len, or there are 2**32 instructions or more.
        """
        builder = HistoryBuilder(meta)
        builder.append(ip, time, cycles, flags)
        for gap in gaps:
            builder.add_gap(*gap)
        return builder.finish()

    # -- the columns -----------------------------------------------------

    def __len__(self) -> int:
        return len(self._ip_ids)

    def _check(self, pos: int) -> int:
        if not 0 <= pos < len(self._ip_ids):
            raise IndexError(f"position {pos} outside the history (0..{len(self._ip_ids) - 1})")
        return pos

    def __getitem__(self, pos: int) -> Insn:
        """The instruction at `pos` (negative counts from the end). Raises IndexError outside."""
        if pos < 0:
            pos += len(self)
        self._check(pos)
        return Insn(pos, self._ip_table[self._ip_ids[pos]], self._time.get(pos),
                    self._cycles.get(pos), self._flags[pos])

    def ip(self, pos: int) -> int:
        """IP at `pos`. Raises IndexError outside 0..len-1 (as do time, cycles, flags)."""
        return self._ip_table[self._ip_ids[self._check(pos)]]

    def time(self, pos: int) -> int:
        return self._time.get(self._check(pos))

    def cycles(self, pos: int) -> int:
        return self._cycles.get(self._check(pos))

    def flags(self, pos: int) -> int:
        return self._flags[self._check(pos)]

    def _range(self, start: int, stop: int | None) -> tuple[int, int]:
        n = len(self)
        stop = n if stop is None else stop
        if not 0 <= start <= stop <= n:
            raise IndexError(f"range {start}..{stop} outside the history (0..{n})")
        return start, stop

    def ips(self, start: int = 0, stop: int | None = None) -> array:
        """IPs of positions start..stop-1 as array('Q'). Raises IndexError for a bad range."""
        start, stop = self._range(start, stop)
        return gather64(self._ip_table, self._ip_ids[start:stop])

    def times(self, start: int = 0, stop: int | None = None) -> array:
        """Times of positions start..stop-1 as array('Q')."""
        return self._time.range(*self._range(start, stop))

    def cycles_range(self, start: int = 0, stop: int | None = None) -> array:
        """Cumulative cycles of positions start..stop-1 as array('Q')."""
        return self._cycles.range(*self._range(start, stop))

    def flags_range(self, start: int = 0, stop: int | None = None) -> array:
        start, stop = self._range(start, stop)
        return self._flags[start:stop]

    @property
    def distinct_ips(self) -> array:
        """The distinct IPs of the history, ascending (array('Q'))."""
        return self._ip_table

    @property
    def nbytes(self) -> int:
        """Bytes held by the columns and every index built so far."""
        total = len(self._ip_table) * 8 + len(self._ip_ids) * 4 + len(self._flags)
        total += self._time.nbytes + self._cycles.nbytes + len(self._gap_positions) * 8
        if self._events is not None:
            total += sum(len(a) * a.itemsize for a in self._events[:5])
        for by_mode in self._lines.values():
            total += sum(len(a) * a.itemsize for a in by_mode.values())
        return total

    # -- neighbours and gaps -----------------------------------------------

    def prev_position(self, pos: int) -> int | None:
        """pos - 1, or None at the first instruction. It may cross a gap: see `gap_at`."""
        return self._check(pos) - 1 if pos > 0 else None

    def next_position(self, pos: int) -> int | None:
        """pos + 1, or None at the last instruction. It may cross a gap: see `gap_at`."""
        return self._check(pos) + 1 if pos + 1 < len(self) else None

    def gap_at(self, pos: int) -> Gap | None:
        """The gap directly before `pos` (between pos-1 and pos), or None."""
        i = bisect.bisect_left(self._gap_positions, pos)
        return self.gaps[i] if i < len(self.gaps) and self.gaps[i].position == pos else None

    def gap_before(self, pos: int) -> Gap | None:
        """The last gap at or before `pos` (the one that began the run `pos` is in), or None."""
        i = bisect.bisect_right(self._gap_positions, pos) - 1
        return self.gaps[i] if i >= 0 else None

    def gap_after(self, pos: int) -> Gap | None:
        """The first gap after `pos` (the one that ends the run `pos` is in), or None."""
        i = bisect.bisect_right(self._gap_positions, pos)
        return self.gaps[i] if i < len(self.gaps) else None

    def gaps_between(self, start: int, stop: int) -> list[Gap]:
        """The gaps crossed going from `start` to `stop` (either order)."""
        lo, hi = min(start, stop), max(start, stop)
        i = bisect.bisect_right(self._gap_positions, lo)
        j = bisect.bisect_right(self._gap_positions, hi)
        return self.gaps[i:j]

    def _low_bound(self, pos: int) -> tuple[int, Gap | None]:
        gap = self.gap_before(pos)
        return (gap.position, gap) if gap is not None else (0, None)

    def _high_bound(self, pos: int) -> tuple[int, Gap | None]:
        gap = self.gap_after(pos)
        return (min(gap.position, len(self)), gap) if gap is not None else (len(self), None)

    def _bound_step(self, position: int, forward: bool, gap: Gap | None) -> Step:
        if gap is not None:
            return Step(position, "gap", gap)
        return Step(position, "end" if forward else "start")

    # -- time ------------------------------------------------------------

    def position_at_time(self, t: int) -> int | None:
        """The last instruction executed at or before time `t`: the position just
        before the first one whose time is greater. None if every time is greater.
        (Times never decrease in a well-formed trace; where they do, "first greater"
        still holds exactly.)"""
        first = self._time.first_above(t)
        return first - 1 if first > 0 else None

    def first_at_or_after_time(self, t: int) -> int | None:
        """The first instruction whose time is at least `t`, or None if there is none."""
        first = self._time.first_at_least(t)
        return first if first < len(self) else None

    # -- calls and returns -------------------------------------------------

    def _event_index(self):
        if self._events is None:
            self._events = call_return_events(self._flags)
        return self._events

    def depth(self, pos: int) -> int:
        """The stack depth of the instruction at `pos`, counted from 0 at the first
        instruction: +1 after each call, -1 after each return (it goes negative
        when the history returns out of the function it began in). Jumps across
        a gap or a longjmp are not seen, so depths after one are relative."""
        self._check(pos)
        positions, depths, kinds, _, _, _ = self._event_index()
        k = bisect.bisect_left(positions, pos) - 1
        if k < 0:
            return 0
        return depths[k] + (1 if kinds[k] & insn_flags.CALL else 0) - (1 if kinds[k] & insn_flags.RETURN else 0)

    def _find_event(self, pos: int, kind: int, depth: int, forward: bool) -> int | None:
        positions, depths, kinds, by_depth, starts, min_depth = self._event_index()
        d = depth - min_depth
        if not 0 <= d < len(starts) - 1:
            return None
        lo, hi = starts[d], starts[d + 1]
        key = positions.__getitem__
        if forward:
            j = bisect.bisect_right(by_depth, pos, lo, hi, key=key)
            while j < hi:
                if kinds[by_depth[j]] & kind:
                    return positions[by_depth[j]]
                j += 1
        else:
            j = bisect.bisect_left(by_depth, pos, lo, hi, key=key) - 1
            while j >= lo:
                if kinds[by_depth[j]] & kind:
                    return positions[by_depth[j]]
                j -= 1
        return None

    def prev_call(self, pos: int, depth: int | None = None) -> int | None:
        """The last call instruction before `pos` that executed at `depth` (default:
        the depth of `pos`, i.e. the previous call this frame made: what stepping
        back over a call lands on). None if there is none."""
        return self._find_event(pos, insn_flags.CALL, self.depth(pos) if depth is None else depth, False)

    def next_call(self, pos: int, depth: int | None = None) -> int | None:
        """The first call instruction after `pos` at `depth` (default: that of `pos`), or None."""
        return self._find_event(pos, insn_flags.CALL, self.depth(pos) if depth is None else depth, True)

    def prev_return(self, pos: int, depth: int | None = None) -> int | None:
        """The last return instruction before `pos` that executed at `depth` (default:
        one deeper than `pos`: the return of the last callee this frame called), or None."""
        return self._find_event(pos, insn_flags.RETURN, self.depth(pos) + 1 if depth is None else depth, False)

    def next_return(self, pos: int, depth: int | None = None) -> int | None:
        """The first return instruction after `pos` at `depth` (default: that of `pos`:
        the return that leaves this frame), or None."""
        return self._find_event(pos, insn_flags.RETURN, self.depth(pos) if depth is None else depth, True)

    def prev_call_or_return(self, pos: int, depth: int | None = None) -> int | None:
        """The last call or return instruction before `pos` at `depth` (default: that of `pos`)."""
        return self._find_event(pos, insn_flags.CALL | insn_flags.RETURN,
                                self.depth(pos) if depth is None else depth, False)

    def caller(self, pos: int) -> int | None:
        """The call instruction that entered the frame of `pos` (step out backwards), or
        None if the frame began before the history did."""
        return self._find_event(pos, insn_flags.CALL, self.depth(pos) - 1, False)

    def matching_return(self, call_pos: int) -> int | None:
        """The return that ends the call at `call_pos`, or None if it never returned in the history."""
        return self._find_event(call_pos, insn_flags.RETURN, self.depth(call_pos) + 1, True)

    def matching_call(self, return_pos: int) -> int | None:
        """The call that the return at `return_pos` returns from, or None if it came before the history."""
        return self._find_event(return_pos, insn_flags.CALL, self.depth(return_pos) - 1, False)

    # -- source lines ------------------------------------------------------

    def _line_map(self, lines, statements: bool) -> array:
        """Line id per distinct IP for `lines` (a lines.LineTable), built once per table."""
        by_mode = self._lines.get(lines)
        if by_mode is None:
            by_mode = self._lines[lines] = {}
        found = by_mode.get(statements)
        if found is None:
            found = by_mode[statements] = lines.line_ids(self._ip_table, statements=statements)
        return found

    def line_id(self, pos: int, lines, statements: bool = True) -> int:
        """The line id (lines.line_key gives file and line) of the instruction at `pos`."""
        return self._line_map(lines, statements)[self._ip_ids[self._check(pos)]]

    def line_of(self, pos: int, lines, statements: bool = True) -> tuple[str, int] | None:
        """(file, line) of the instruction at `pos`, or None where there is no line."""
        return lines.line_key(self.line_id(pos, lines, statements))

    def line_ids(self, lines, statements: bool = True, start: int = 0, stop: int | None = None) -> array:
        """The line id of every instruction start..stop-1 (array('I')); built on request."""
        start, stop = self._range(start, stop)
        return gather(self._line_map(lines, statements), self._ip_ids[start:stop])

    def prev_line(self, pos: int, lines, over_calls: bool = True, statements: bool = True,
                  low: int = 0, say_undecided: bool = False) -> Step:
        """Step back by source line from `pos`: the first instruction of the previous
        line's run in this frame (calls are skipped with `over_calls`; without it the
        step ends in a callee's last line). Stepping back past the frame's entry ends
        at the caller's line. Instructions without a line are passed over. Returns
        Step(position, "found"), or Step(bound, "gap"|"start") if a gap or the
        history's start (or `low`, the lowest position the caller allows: one
        goroutine's stretch of a Go history) comes first. With `say_undecided`, a
        line found whose run (in its frame) was followed back to that bound, so that
        it may begin before it, is Step(where it was followed to, "undecided"): what
        a reader of a longer history (pt_decoder.chunked) extends its window for.
        Raises IndexError if `pos` is outside."""
        self._check(pos)
        gap_low, gap = self._low_bound(pos)
        if low > gap_low:
            low, gap = min(low, pos), None
        else:
            low = gap_low
        target, hit = scan_line(self._ip_ids, self._flags, self._line_map(lines, statements),
                                pos, low, 0, 1 if over_calls else 0)
        if hit == 1:
            return self._bound_step(target, False, gap)
        return Step(target, "undecided" if hit == 2 and say_undecided else "found")

    def line_start(self, pos: int, lines, statements: bool = True) -> int:
        """The first instruction of the run of `pos`'s line in `pos`'s frame that `pos` is
        in: walking back, the calls this frame made are passed over whole (a return is
        followed to its call), instructions without a line are passed over, and the walk
        stops at another line, at the frame's entry (the instruction before is a call), at a
        gap or at the history's start. Raises IndexError if `pos` is outside."""
        self._check(pos)
        line = self.line_id(pos, lines, statements)
        low, _ = self._low_bound(pos)
        start = here = pos
        while here > low:
            before = here - 1
            flags = self.flags(before)
            if flags & insn_flags.CALL:
                break  # `here` is the frame's entry
            if flags & insn_flags.RETURN:
                before = self.matching_call(before)
                if before is None or before < low:
                    break  # a callee entered before the history: the run is not known further
            found = self.line_id(before, lines, statements)
            if found and found != line:
                break
            if found:
                start = before
            here = before
        return start

    def next_line(self, pos: int, lines, over_calls: bool = True, statements: bool = True) -> Step:
        """Step forward by source line: the first later instruction of another line in
        this frame (or in a callee without `over_calls`, or the caller once this frame
        returns). Returns Step(position, "found") or Step(last reachable, "gap"|"end")."""
        self._check(pos)
        high, gap = self._high_bound(pos)
        target, hit = scan_line(self._ip_ids, self._flags, self._line_map(lines, statements),
                                pos, high, 1, 1 if over_calls else 0)
        return self._bound_step(target, True, gap) if hit else Step(target, "found")

    # -- Python frames (pt_decoder/python_frames.py) ---------------------------

    def attach_python(self, frames) -> None:
        """Give the history its Python attribution (a PythonFrames over the same positions)."""
        if frames is not None and frames.length != len(self):
            raise PtError(ErrorCode.INVALID, None, f"the Python frames cover {frames.length} "
                          f"instructions, the history {len(self)}")
        self.python = frames

    def _python(self):
        if self.python is None:
            raise PtError(ErrorCode.INVALID, None, "this history has no Python attribution "
                          "(the recording wrote no Python frame samples)")
        return self.python

    def python_frame(self, pos: int):
        """The Python frame (PyFrame: qualname, filename, line, code, index, depth) instruction
        `pos` ran under, or None where none is known. Raises IndexError if `pos` is outside,
        PtError(INVALID) without Python attribution."""
        self._check(pos)
        return self._python().frame_at(pos)

    def python_line_change_before(self, pos: int) -> int | None:
        """The last position before `pos` whose Python (code object, line) differs from the
        one at `pos`, or None. Raises as python_frame does."""
        self._check(pos)
        return self._python().prev_line_change(pos)

    def prev_python_line(self, pos: int, low: int = 0, over_calls: bool = False) -> Step:
        """Step back by Python line from `pos`: the first instruction of the previous run of
        one (code object, line, frame depth), runs without a Python frame passed over
        (native code before the interpreter ran). Without `over_calls` the step lands in a
        callee's last line as the recorded flow met it; with it, lines of frames deeper than
        the one at `pos` are passed over (stepping back past the frame's first line goes to
        its caller's line). Returns Step(position, "found"), or Step(bound, "gap"|"start")
        when a gap, the history's start or `low` comes first. Raises as python_frame does."""
        self._check(pos)
        frames = self._python()
        gap_low, gap = self._low_bound(pos)
        if low > gap_low:
            low, gap = min(low, pos), None
        else:
            low = gap_low
        here = frames.frame_at(pos)
        depth = here.depth if here is not None and over_calls else 0
        target = frames.line_start(pos)
        found = None   # over calls: a line's runs before and after a call are one line
        while True:
            if target <= low or frames.line_start(target - 1) < low:
                return Step(found[0], "found") if found else self._bound_step(low, False, gap)
            target = frames.line_start(target - 1)
            frame = frames.frame_at(target)
            if frame is None or (depth and frame.depth > depth):
                continue
            key = (frame.code, frame.line, frame.depth)
            if found is not None:
                if key != found[1]:
                    return Step(found[0], "found")
                found = (target, key)
            elif not over_calls:
                return Step(target, "found")
            else:
                found = (target, key)
                depth = frame.depth

    def next_python_line(self, pos: int, over_calls: bool = False) -> Step:
        """Step forward by Python line: the first later instruction of another (code object,
        line, depth) with a Python frame (with `over_calls`, not deeper than the frame at
        `pos`). Returns Step(position, "found") or Step(last reachable, "gap"|"end"). Raises
        as python_frame does."""
        self._check(pos)
        frames = self._python()
        high, gap = self._high_bound(pos)
        here = frames.frame_at(pos)
        depth = here.depth if here is not None and over_calls else 0
        key = (here.code, here.line, here.depth) if here is not None and over_calls else None
        target = pos
        while True:
            change = frames.next_line_change(target)
            if change is None or change >= high:
                return self._bound_step(high - 1, True, gap)
            target = change
            frame = frames.frame_at(target)
            if frame is None or (depth and frame.depth > depth):
                continue
            if key is not None and (frame.code, frame.line, frame.depth) == key:
                continue  # the same line again after the call it made
            return Step(target, "found")

    def python_stack(self, pos: int) -> list:
        """The Python call stack of instruction `pos` (PyFrame, outermost first; None for a
        frame the recording did not see; [] where no Python frame runs). Raises as
        python_frame does."""
        self._check(pos)
        return self._python().stack_at(pos)

    # -- addresses ---------------------------------------------------------

    def _marks(self, addresses: Iterable[int]) -> bytearray:
        marks = bytearray(len(self._ip_table))
        for a in addresses:
            i = bisect.bisect_left(self._ip_table, a)
            if i < len(self._ip_table) and self._ip_table[i] == a:
                marks[i] = 1
        return marks

    def positions_at(self, addresses: Iterable[int]) -> list[int]:
        """Every position whose instruction is at one of `addresses`, in order, across gaps
        (counting a breakpoint's hits over the whole history)."""
        marks = self._marks(addresses)
        out: list[int] = []
        if not any(marks):
            return out
        pos, end = -1, len(self)
        while True:
            pos = scan_marked(self._ip_ids, marks, pos, end, 1)
            if pos < 0:
                return out
            out.append(pos)

    def prev_at(self, pos: int, addresses: Iterable[int]) -> Step:
        """The last instruction before `pos` at one of `addresses` (reverse-continue to
        a breakpoint). Returns Step(position, "found") or Step(bound, "gap"|"start")."""
        self._check(pos)
        low, gap = self._low_bound(pos)
        found = scan_marked(self._ip_ids, self._marks(addresses), pos, low, 0)
        return Step(found, "found") if found >= 0 else self._bound_step(low, False, gap)

    def next_at(self, pos: int, addresses: Iterable[int]) -> Step:
        """The first instruction after `pos` at one of `addresses`. Returns
        Step(position, "found") or Step(last reachable, "gap"|"end")."""
        self._check(pos)
        high, gap = self._high_bound(pos)
        found = scan_marked(self._ip_ids, self._marks(addresses), pos, high, 1)
        return Step(found, "found") if found >= 0 else self._bound_step(high - 1, True, gap)

    # -- files -------------------------------------------------------------

    def _buffers(self) -> list[tuple[str, object]]:
        names = ("bases", "widths", "offsets", "data", "prefix_max")
        out = [("ip_table", self._ip_table), ("ip_ids", self._ip_ids), ("flags", self._flags)]
        out += [(f"time.{n}", b) for n, b in zip(names, self._time.buffers())]
        out += [(f"cycles.{n}", b) for n, b in zip(names, self._cycles.buffers())]
        return out

    def save(self, path: str) -> None:
        """Write the history to `path` (format FORMAT_VERSION: magic, version, a JSON
        header with the counts, gaps and meta, then the little-endian column buffers).
        Raises PtError(BAD_FILE) if it cannot be written."""
        buffers = self._buffers()
        header = {
            "count": len(self), "chunk_shift": CHUNK_SHIFT, "meta": self.meta,
            "gaps": [list(g) for g in self.gaps],
            "buffers": [[name, getattr(b, "typecode", "bytes"), len(b) * getattr(b, "itemsize", 1)]
                        for name, b in buffers],
        }
        blob = json.dumps(header).encode()
        try:
            with open(path, "wb") as f:
                f.write(MAGIC + struct.pack("<II", FORMAT_VERSION, len(blob)) + blob)
                f.writelines(_little_endian(b) if sys.byteorder == "big" else b for _, b in buffers)
        except OSError as e:
            raise PtError(ErrorCode.BAD_FILE, detail=f"cannot write history {path}: {e.strerror}")

    @classmethod
    def load(cls, path: str) -> History:
        """Read a history written by `save`. Raises PtError(BAD_FILE) if the file cannot
        be read, is not a history, has another format version, or is truncated."""
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except OSError as e:
            raise PtError(ErrorCode.BAD_FILE, detail=f"cannot read history {path}: {e.strerror}")
        if raw[:8] != MAGIC or len(raw) < 16:
            raise PtError(ErrorCode.BAD_FILE, detail=f"{path} is not a ptdebug history file")
        version, size = struct.unpack_from("<II", raw, 8)
        if version != FORMAT_VERSION:
            raise PtError(ErrorCode.BAD_FILE, detail=(
                f"{path} is history format {version}; this ptdebug reads format {FORMAT_VERSION}"))
        try:
            header = json.loads(raw[16: 16 + size])
            at = 16 + size
            parts = {}
            for name, typecode, nbytes in header["buffers"]:
                chunk = raw[at: at + nbytes]
                if len(chunk) != nbytes:
                    raise ValueError(f"buffer {name} is truncated")
                parts[name] = bytearray(chunk) if typecode == "bytes" else _from_little_endian(typecode, chunk)
                at += nbytes
            n, shift = header["count"], header["chunk_shift"]
            names = ("bases", "widths", "offsets", "data", "prefix_max")
            time = _Packed(*(parts[f"time.{k}"] for k in names), shift, n)
            cycles = _Packed(*(parts[f"cycles.{k}"] for k in names), shift, n)
            gaps = [Gap(*g) for g in header["gaps"]]
            if not len(parts["ip_ids"]) == len(parts["flags"]) == n:
                raise ValueError("column lengths disagree with the header")
        except (ValueError, KeyError, TypeError) as e:
            raise PtError(ErrorCode.BAD_FILE, detail=f"{path} is a damaged history file: {e}")
        return cls(parts["ip_table"], parts["ip_ids"], time, cycles, parts["flags"], gaps, header["meta"])


class HistoryBuilder:
    """Builds a History block by block as a decoder produces instructions, so the raw
    columns (25 bytes an instruction) of a long decode are never all held at once:
    every BLOCK instructions are interned and packed as they arrive.

    `append` columns, `add_gap` where the flow broke, then `finish` once.
    """

    BLOCK = 1 << 20  # a whole number of packing chunks

    def __init__(self, meta: dict | None = None):
        try:
            json.dumps(meta or {})
        except (TypeError, ValueError) as e:
            raise PtError(ErrorCode.INVALID, detail=f"history meta must be JSON-able: {e}")
        self._meta = dict(meta or {})
        self._interner = IpInterner()
        self._ids = array("I")
        self._flags = array("B")
        self._time: _Packed | None = None
        self._cycles: _Packed | None = None
        self._pending = (array("Q"), array("Q"), array("Q"))
        self._gaps: list[Gap] = []
        self._finished = False

    def __len__(self) -> int:
        return len(self._flags)

    def append(self, ip, time, cycles, flags) -> None:
        """Append equal-length columns: ip, time (TSC-based, per instruction) and
        cycles (cumulative) as unsigned 64-bit (array('Q') is taken as is, other
        iterables are converted), flags as array('B') or bytes (insn_flags bits).
        Raises PtError(INVALID) if the lengths differ, a value does not fit, the
        history would reach 2**32 instructions, or `finish` was already called."""
        self._check_open()
        ip, time, cycles = _as_u64(ip, "ip"), _as_u64(time, "time"), _as_u64(cycles, "cycles")
        if not (isinstance(flags, array) and flags.typecode == "B"):
            try:
                flags = array("B", flags)
            except (TypeError, OverflowError) as e:
                raise PtError(ErrorCode.INVALID, detail=f"history column flags is not bytes: {e}")
        n = len(ip)
        if not len(time) == len(cycles) == len(flags) == n:
            raise PtError(ErrorCode.INVALID, detail=(
                f"history columns differ in length: ip {n}, time {len(time)}, "
                f"cycles {len(cycles)}, flags {len(flags)}"))
        if len(self) + n > MAX_INSTRUCTIONS:
            raise PtError(ErrorCode.INVALID, detail=f"{len(self) + n} instructions: a history holds fewer than 2**32")
        self._flags += flags
        pending = self._pending
        sources = (ip, time, cycles)
        if not len(pending[0]):
            # Whole blocks straight from the caller's arrays; keep only the rest.
            done = n - n % self.BLOCK
            for start in range(0, done, self.BLOCK):
                self._flush(*(memoryview(c)[start: start + self.BLOCK] for c in sources))
            for column, values in zip(pending, sources):
                column += values[done:] if done else values
            return
        for column, values in zip(pending, sources):
            column += values
        done = len(pending[0]) - len(pending[0]) % self.BLOCK
        for start in range(0, done, self.BLOCK):
            self._flush(*(memoryview(c)[start: start + self.BLOCK] for c in pending))
        if done:
            for column in pending:
                del column[:done]

    def add_gap(self, position: int | None = None, offset: int = 0, ip: int = 0,
                code: int = ErrorCode.INTERNAL, reason: str = "") -> Gap:
        """Record a gap before `position` (default: before the next instruction to be
        appended); `reason` defaults to the error code's text. Returns the Gap."""
        self._check_open()
        gap = Gap(len(self) if position is None else position, offset, ip, int(code),
                  reason or errstr(code))
        self._gaps.append(gap)
        return gap

    def _check_open(self) -> None:
        if self._finished:
            raise PtError(ErrorCode.INVALID, detail="this history builder has already finished")

    def _flush(self, ip, time, cycles) -> None:
        self._ids += self._interner.add(ip)
        packed_time, packed_cycles = _Packed.pack(time, CHUNK_SHIFT), _Packed.pack(cycles, CHUNK_SHIFT)
        if self._time is None:
            self._time, self._cycles = packed_time, packed_cycles
        else:
            self._time.extend(packed_time)
            self._cycles.extend(packed_cycles)

    def finish(self) -> History:
        """The History of everything appended. Raises PtError(INVALID) if a gap lies
        outside 0..len or `finish` was already called."""
        self._check_open()
        n = len(self)
        gaps = sorted(self._gaps, key=lambda g: g.position)
        for g in gaps:
            if not 0 <= g.position <= n:
                raise PtError(ErrorCode.INVALID, detail=f"gap at position {g.position} outside 0..{n}")
        self._finished = True
        if len(self._pending[0]) or self._time is None:
            self._flush(*self._pending)
        table, rank = self._interner.sorted_table()
        renumber(self._ids, rank)
        return History(table, self._ids, self._time, self._cycles, self._flags, gaps, self._meta)


def _little_endian(buffer) -> bytes:
    if isinstance(buffer, array) and sys.byteorder == "big" and buffer.itemsize > 1:
        swapped = array(buffer.typecode, buffer)
        swapped.byteswap()
        return swapped.tobytes()
    return bytes(buffer)


def _from_little_endian(typecode: str, data: bytes) -> array:
    out = array(typecode)
    out.frombytes(data)
    if sys.byteorder == "big" and out.itemsize > 1:
        out.byteswap()
    return out

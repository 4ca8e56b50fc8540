"""The goroutine <-> branch index of one recorded thread: goroutine id -> its ranges of
instructions, and position -> goroutine id, each label with how sure it is.

Layer: adapter.golang (Go correlation). Input: the decoded history's instruction addresses,
the goroutine ids the recorder observed (PTWRITE packets: position, goid) and the addresses
of the instructions that switch goroutines (runtime_layout.RuntimeLayout.g_stores). Knows
nothing of DAP, of processes, or of how the trace was recorded.

How a label is found. The g of a thread changes only where the runtime writes it into the
thread's TLS slot (runtime.gogo before jumping into the resumed goroutine; runtime.mcall and
runtime.systemstack moving to g0 and back; the signal handler). Those instructions are the
switch points, read from the flow itself. Identity comes from the observations: the stepper
writes the goid at a stop whenever it changed, so a PTWRITE at position p says "goid X from p
on". A segment that starts after a switch instruction takes the goid of the first observation
after it, provided no other switch comes first; otherwise the goid is assumed unchanged.

Confidence of a label (`Confidence`):
  OBSERVED  the goid was read at the segment's first instruction;
  FLOW      the segment starts right after a switch instruction; its goid was read at the
            next observation, with no switch in between (the flow proves it is the same g);
  ASSUMED   a switch instruction ran but no observation followed before the next switch
            (the stepper writes only changes, so "no observation" is read as "no change");
  UNKNOWN   before the first observation.

Built with numpy over whole columns (benchmarks/bench_goroutines.py: under a second for 5
million instructions).
"""
from __future__ import annotations

import bisect
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

NO_GOID = -1
"""goid of an UNKNOWN segment."""


class Confidence(IntEnum):
    UNKNOWN = 0
    ASSUMED = 1
    FLOW = 2
    OBSERVED = 3


@dataclass
class GoroutineSummary:
    """One goroutine's share of the history."""

    goid: int
    ranges: list[tuple[int, int]]
    """[start, stop) positions, in order, adjacent segments merged."""
    instructions: int
    time: int
    """Sum over its ranges of (time at the next range's start - time at its start), in the
    history's time unit (TSC ticks; ns for the stepper)."""
    cycles: int
    """Same with the cycle counter."""
    confidence: Confidence
    """The weakest confidence among its segments."""


class GoroutineIndex:
    """Segments [starts[i], starts[i+1]) with goids[i] and confidence[i]; starts[0] == 0."""

    def __init__(self, length: int, starts: np.ndarray, goids: np.ndarray,
                 confidence: np.ndarray):
        self.length = length
        """Instructions in the history."""
        self.starts = starts
        self.goids = goids
        self.confidence = confidence
        self._starts_list = starts.tolist()
        self._ranges: dict[int, list[tuple[int, int]]] | None = None

    # --- building -------------------------------------------------------------------------
    @classmethod
    def build(cls, ips, samples: list[tuple[int, int]], switch_addresses) -> GoroutineIndex:
        """`ips`: the instruction addresses in order (array('Q'), numpy array or bytes-like);
        `samples`: (position, goid) observations in position order; `switch_addresses`: the
        addresses of the instructions that write the current g."""
        ip = np.frombuffer(ips, dtype=np.uint64) if not isinstance(ips, np.ndarray) else ips
        n = int(ip.shape[0])
        sample_pos = np.fromiter((p for p, _ in samples), dtype=np.int64, count=len(samples))
        sample_val = np.fromiter((v for _, v in samples), dtype=np.int64, count=len(samples))
        keep = (sample_pos >= 0) & (sample_pos < n)
        sample_pos, sample_val = sample_pos[keep], sample_val[keep]
        switches = np.asarray(sorted(switch_addresses), dtype=np.uint64)
        if switches.size and n:
            store_pos = np.flatnonzero(np.isin(ip, switches))
        else:
            store_pos = np.empty(0, dtype=np.int64)
        # a segment starts after each switch instruction ...
        after = store_pos + 1
        next_store = np.append(store_pos[1:], n)
        in_range = after < n
        after, next_store = after[in_range], next_store[in_range]
        nxt = np.searchsorted(sample_pos, after, side="left")
        has_next = nxt < sample_pos.size
        nxt_clipped = np.minimum(nxt, max(sample_pos.size - 1, 0))
        flow_ok = has_next & (sample_pos[nxt_clipped] <= next_store) if sample_pos.size \
            else np.zeros(after.size, dtype=bool)
        flow_val = np.where(flow_ok, sample_val[nxt_clipped] if sample_pos.size else 0,
                            NO_GOID)
        flow_conf = np.where(flow_ok, Confidence.FLOW, Confidence.ASSUMED).astype(np.int8)
        # ... and at each observation (which wins where both start at one position)
        starts = np.concatenate([sample_pos, after, [0]])
        values = np.concatenate([sample_val, flow_val, [NO_GOID]])
        conf = np.concatenate([np.full(sample_pos.size, Confidence.OBSERVED, np.int8),
                               flow_conf, [Confidence.UNKNOWN]])
        order = np.lexsort((-conf, starts))  # by position, strongest first
        starts, values, conf = starts[order], values[order], conf[order]
        first = np.ones(starts.size, dtype=bool)
        first[1:] = starts[1:] != starts[:-1]
        starts, values, conf = starts[first], values[first], conf[first]
        # ASSUMED: the goid before the switch goes on (forward fill of known values)
        known = values != NO_GOID
        fill = np.where(known, np.arange(values.size), 0)
        np.maximum.accumulate(fill, out=fill)
        values = np.where(known, values, values[fill])
        conf[(values == NO_GOID)] = Confidence.UNKNOWN
        # merge neighbours with the same goid and confidence
        change = np.ones(starts.size, dtype=bool)
        change[1:] = (values[1:] != values[:-1]) | (conf[1:] != conf[:-1])
        return cls(n, starts[change].astype(np.int64), values[change].astype(np.int64),
                   conf[change].astype(np.int8))

    # --- queries --------------------------------------------------------------------------
    def segment_of(self, position: int) -> int:
        if not 0 <= position < self.length:
            raise IndexError(f"position {position} is outside the history (0..{self.length - 1})")
        return bisect.bisect_right(self._starts_list, position) - 1

    def goid_at(self, position: int) -> tuple[int, Confidence]:
        """(goid, confidence) of the instruction at `position`; goid 0 is g0 (runtime work on
        the system stack), NO_GOID when unknown."""
        i = self.segment_of(position)
        return int(self.goids[i]), Confidence(int(self.confidence[i]))

    def labels(self) -> np.ndarray:
        """The goid of every instruction (int64, one per position)."""
        lengths = np.diff(np.append(self.starts, self.length))
        return np.repeat(self.goids, lengths)

    def segments(self) -> list[tuple[int, int, int, Confidence]]:
        """(start, stop, goid, confidence) of every segment."""
        stops = np.append(self.starts[1:], self.length)
        return [(int(a), int(b), int(g), Confidence(int(c)))
                for a, b, g, c in zip(self.starts, stops, self.goids, self.confidence)]

    def goroutines(self) -> list[int]:
        return sorted({int(g) for g in np.unique(self.goids)})

    def ranges(self, goid: int) -> list[tuple[int, int]]:
        """[start, stop) ranges of `goid`, adjacent segments merged."""
        return self._ranges_by_goid().get(goid, [])

    def _ranges_by_goid(self) -> dict[int, list[tuple[int, int]]]:
        """goid -> its merged ranges, for every goroutine in one pass over the segments (a
        pass per goroutine would be quadratic in a window where hundreds ran)."""
        if self._ranges is None:
            stops = np.append(self.starts[1:], self.length).tolist()
            out: dict[int, list[tuple[int, int]]] = {}
            for start, stop, goid in zip(self._starts_list, stops, self.goids.tolist()):
                mine = out.setdefault(goid, [])
                if mine and mine[-1][1] == start:
                    mine[-1] = (mine[-1][0], stop)
                else:
                    mine.append((start, stop))
            self._ranges = out
        return self._ranges

    def switches(self) -> list[int]:
        """Positions where the goroutine changes."""
        return [int(s) for s, g0, g1 in zip(self.starts[1:], self.goids[:-1], self.goids[1:])
                if g0 != g1]

    def summaries(self, times=None, cycles=None) -> list[GoroutineSummary]:
        """Per goroutine: ranges, instructions, time and cycles (from the history's `times`
        and cumulative `cycles` columns when given)."""
        stops = np.append(self.starts[1:], self.length)
        t = None if times is None else _column(times)
        c = None if cycles is None else _column(cycles)
        last = self.length - 1

        def span(column, a, b):
            if column is None or self.length == 0:
                return np.zeros(a.size, dtype=np.int64)
            return column[np.minimum(b, last)].astype(np.int64) - column[a].astype(np.int64)
        seg_time = span(t, self.starts, stops)
        seg_cycles = span(c, self.starts, stops)
        # one grouped reduction over the segments (np.unique's inverse), not a mask a goroutine
        goids, group = np.unique(self.goids, return_inverse=True)
        count = goids.size
        instructions = np.zeros(count, dtype=np.int64)
        np.add.at(instructions, group, stops - self.starts)
        times = np.zeros(count, dtype=np.int64)
        np.add.at(times, group, seg_time)
        spent = np.zeros(count, dtype=np.int64)
        np.add.at(spent, group, seg_cycles)
        weakest = np.full(count, Confidence.OBSERVED, dtype=np.int8)
        np.minimum.at(weakest, group, self.confidence)
        ranges = self._ranges_by_goid()
        return [GoroutineSummary(int(g), ranges[int(g)], int(instructions[k]), int(times[k]),
                                 int(spent[k]), Confidence(int(weakest[k])))
                for k, g in enumerate(goids.tolist())]


def _column(values) -> np.ndarray:
    return values if isinstance(values, np.ndarray) else np.frombuffer(values, dtype=np.uint64)

"""Which recorded positions are hits of the user's breakpoints, for reverseContinue and a
replay's continue: every hit of every source breakpoint in a capture's history, numbered per
breakpoint, with its hit condition applied where recorded data can decide it.

Layer: features, beside reverse.py (which moves the cursor) and python_replay.py (which finds
the runs of Python lines). A native breakpoint is hit where its line's first statement address
runs (one address a line, as a debugger plants one breakpoint there); a breakpoint on a .py
file where a run of its line begins (python_replay.breakpoint_hits).

What a recording can and cannot decide:
- A hit condition (`hitCondition`: "5", "== 5", "> 2", ">= 2", "< 4", "<= 4", "!= 3", "% 3",
  the forms debugpy and Delve take) is about how often the line ran, which the history holds:
  hits are counted from the start of the recorded history (runs before the recording began
  are not in it, and the stop says so).
- A `condition` is about values, which the trace does not hold: such a breakpoint stops at
  every recorded hit, and the stop says the condition was not evaluated.
- In a recording loaded in part (a stream too long to decode whole: Recording.load_window) the
  hits before the loaded part are not known, so hit conditions are not evaluated either: every
  hit stops, numbered in the loaded part, and the stop says so.
"""
from __future__ import annotations

import bisect
import operator
import re
from dataclasses import dataclass

from adapter.features import python_replay


@dataclass(frozen=True)
class ReplayBreakpoint:
    """A source breakpoint the client set, as a replay needs it."""

    id: int | None
    path: str
    line: int
    condition: str = ""
    hit_condition: str = ""


@dataclass(frozen=True)
class Hit:
    position: int
    breakpoint: ReplayBreakpoint
    number: int
    """1 for the breakpoint's first hit in the recorded history (in its loaded part, when not
    `counted`)."""
    counted: bool = True
    """Whether `number` counts from the start of the recording: False in a recording loaded
    in part (a stream too long to decode whole), where hits before the part are not known."""


_COMPARISONS = {"==": operator.eq, "!=": operator.ne, ">=": operator.ge, "<=": operator.le,
                ">": operator.gt, "<": operator.lt}
_HIT_CONDITION = re.compile(r"^\s*(==|!=|>=|<=|>|<|%)?\s*(\d+)\s*$")


def hit_condition_test(text: str):
    """A function of the hit number for a hit condition, or None where `text` is none of the
    forms debugpy and Delve accept (the replay then stops at every hit and says why)."""
    match = _HIT_CONDITION.match(text or "")
    if match is None:
        return None
    op, value = match.group(1) or "==", int(match.group(2))
    if op == "%":
        return (lambda n: False) if value == 0 else (lambda n: n % value == 0)
    compare = _COMPARISONS[op]
    return lambda n: compare(n, value)


def recorded_hits(capture, breakpoints: list[ReplayBreakpoint]) -> dict[ReplayBreakpoint, list[int]]:
    """The positions of every recorded hit of each of `breakpoints`, in order. Cached on the
    capture for the client's current breakpoint set (a hot line of a long capture has a
    million hits: found once, then searched by bisection)."""
    key = tuple(breakpoints)
    cache = capture.replay_hits
    if key not in cache:
        history, lines = capture.history, capture.lines
        found: dict[ReplayBreakpoint, list[int]] = {}
        for bp in breakpoints:
            if bp.path.endswith(".py"):
                found[bp] = python_replay.breakpoint_hits(capture, {bp.path: [bp.line]})
            else:
                addresses = lines.statement_addresses(bp.path, bp.line)
                found[bp] = history.positions_at([min(addresses)]) if addresses else []
        cache.clear()  # one breakpoint set at a time: the client's current one
        cache[key] = found
    return cache[key]


def nearest(capture, breakpoints: list[ReplayBreakpoint], position: int, forward: bool,
            limit: int) -> tuple[int, list[Hit]] | None:
    """The nearest position after (`forward`) or before `position`, not past `limit`, where a
    breakpoint stops: a hit whose hit condition holds or cannot be decided. Returns
    (position, the hits that stop there) or None."""
    best: int | None = None
    hits_there: list[Hit] = []
    # hit numbers count from the recording's start where the loaded history begins there
    counted = capture.trace.threads[capture.stream].loaded_from == 0
    for bp, positions in recorded_hits(capture, breakpoints).items():
        test = hit_condition_test(bp.hit_condition) if bp.hit_condition and counted else None
        if forward:
            indexes = range(bisect.bisect_right(positions, position), len(positions))
        else:
            indexes = range(bisect.bisect_left(positions, position) - 1, -1, -1)
        for k in indexes:
            at = positions[k]
            if (at > limit if forward else at < limit) or \
                    (best is not None and (at > best if forward else at < best)):
                break
            if test is None or test(k + 1):
                if at != best:
                    best, hits_there = at, []
                hits_there.append(Hit(at, bp, k + 1, counted))
                break
    return None if best is None else (best, hits_there)


def describe(hits_there: list[Hit]) -> str:
    """What the stop's text adds about the breakpoints hit: their hit numbers, and what the
    recording could not decide."""
    notes = []
    for hit in hits_there:
        bp = hit.breakpoint
        where = f"line {bp.line}"
        if not hit.counted:
            note = f"{where}: hit {hit.number} in the loaded part of the recording"
        else:
            note = f"{where}: hit {hit.number} in the recorded history"
        if bp.hit_condition:
            if not hit.counted:
                note += (f"; hit condition {bp.hit_condition!r} not evaluated: the recording "
                         "is loaded in part and its hits before that part are not counted, "
                         "so every hit stops")
            elif hit_condition_test(bp.hit_condition) is None:
                note += (f"; hit condition {bp.hit_condition!r} is not a form ptdebug knows "
                         "(N, == N, != N, > N, >= N, < N, <= N, % N): stopped at every hit")
            else:
                note += (f", hit condition {bp.hit_condition!r} holds (counted from the "
                         "start of the recording)")
        if bp.condition:
            note += (f"; condition {bp.condition!r} not evaluated: the recording holds no "
                     "values, so every recorded hit stops")
        notes.append(note)
    return "; ".join(notes)

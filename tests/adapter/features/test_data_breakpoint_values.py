"""features.data_breakpoints: the old and new value shown for every hit (or that the write
left the value unchanged). perf reports the
watched bytes before the first and after the last write of a batch only (watchpoints.Hit), so
a hit in between takes the value last shown as its old one and the bytes read now as its new
one; `?` is never shown while the bytes can be read. The engine is a stand-in here (its
reads are tested on real processes in tests/adapter/hw and tests/e2e)."""
from __future__ import annotations

import struct
from types import SimpleNamespace

from adapter.features.data_breakpoints import Armed, DataBreakpoints, Target
from adapter.watchpoints import Access


def int64(value: int) -> bytes:
    return struct.pack("<q", value)


class ReadNow:
    """The engine's `read_now`: the watched bytes as they are now."""

    def __init__(self, now: bytes | None):
        self.now = now

    def read_now(self, watch) -> bytes | None:
        return self.now


def feature(now: bytes | None) -> SimpleNamespace:
    return SimpleNamespace(watcher=ReadNow(now), _shown={})


ARMED = Armed(1, Target(0x1000, 8, "kv[2, 0]", "np:<i8"), Access.WRITE, watch=object())


def hit(old: bytes | None, new: bytes | None) -> SimpleNamespace:
    return SimpleNamespace(old=old, new=new)


CHANGED, UNCHANGED = ": written by", " by"


def test_a_batch_of_hits_shows_a_value_before_and_after_each():
    this = feature(now=int64(30))
    change = DataBreakpoints._change
    assert change(this, hit(int64(0), None), ARMED) == (  # first of a batch
        "kv[2, 0] changed from 0 to 30", CHANGED)
    # in between: the value last shown and the bytes now, equal; what this write stored is
    # not known, so it is not said to be unchanged (nor "changed from 30 to 30")
    assert change(this, hit(None, None), ARMED) == ("kv[2, 0] written (now 30)", UNCHANGED)
    this.watcher.now = int64(40)
    assert change(this, hit(None, int64(40)), ARMED) == (  # last of the batch
        "kv[2, 0] changed from 30 to 40", CHANGED)


def test_the_value_read_at_the_hit_wins_and_unknowns_are_said():
    this = feature(now=None)
    change = DataBreakpoints._change
    assert change(this, hit(int64(1), int64(2)), ARMED, int64(3)) == (
        "kv[2, 0] changed from 1 to 3", CHANGED)
    fresh = feature(now=None)
    assert change(fresh, hit(None, None), ARMED) == (
        "kv[2, 0] changed from (not read) to (unreadable now)", CHANGED)


def test_a_write_of_the_bytes_already_there_says_so():
    """Issue 35: the stop is right (the hardware sees the write), "changed from 5 to 5" was not."""
    this = feature(now=None)
    assert DataBreakpoints._change(this, hit(int64(5), int64(5)), ARMED) == (
        "kv[2, 0] written (value unchanged: 5)", UNCHANGED)
    # the first hit of a batch, its writer held at the write: the read there is its result
    assert DataBreakpoints._change(this, hit(int64(5), None), ARMED, int64(5)) == (
        "kv[2, 0] written (value unchanged: 5)", UNCHANGED)

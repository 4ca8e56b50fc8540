"""features.data_breakpoints: the old and new value shown for every hit. perf reports the
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


def test_a_batch_of_hits_shows_a_value_before_and_after_each():
    this = feature(now=int64(30))
    values = DataBreakpoints._values
    assert values(this, hit(int64(0), None), ARMED) == ("0", "30")      # first of a batch
    assert values(this, hit(None, None), ARMED) == ("30", "30")         # in between
    this.watcher.now = int64(40)
    assert values(this, hit(None, int64(40)), ARMED) == ("30", "40")    # last of the batch


def test_the_value_read_at_the_hit_wins_and_unknowns_are_said():
    this = feature(now=None)
    values = DataBreakpoints._values
    assert values(this, hit(int64(1), int64(2)), ARMED, int64(3)) == ("1", "3")
    fresh = feature(now=None)
    assert values(fresh, hit(None, None), ARMED) == ("(not read)", "(unreadable now)")

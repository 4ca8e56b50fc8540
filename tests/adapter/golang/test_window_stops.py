"""window_stops: which of Delve's breakpoints close a Go record window (adapter/golang/
window_stops.py), on breakpoint lists shaped as Delve 1.27's ListBreakpoints returns them."""
from __future__ import annotations

from adapter.golang.window_stops import window_stops

LISTED = [
    {"id": -1, "name": "unrecovered-panic", "addr": 0x455844, "addrs": [0x455844],
     "file": "/usr/local/go/src/runtime/panic.go", "line": 1456, "Cond": ""},
    {"id": 1, "addr": 0x768128, "addrs": [0x768128], "file": "/src/main.go", "line": 56,
     "Cond": 'j.tag == "rec"'},                                  # the record breakpoint
    {"id": 2, "addr": 0x7681c5, "addrs": [0x7681c5], "file": "/src/main.go", "line": 59,
     "Cond": 'j.tag == "rec"'},
    {"id": 3, "addr": 0x7681fb, "addrs": [0x7681fb], "file": "/src/main.go", "line": 61,
     "Cond": "served == 100"},
    {"id": 4, "addr": 0x768300, "addrs": [0x768300], "file": "/src/main.go", "line": 63,
     "Cond": "", "continue": True},                              # a logpoint: never stops
    {"id": 5, "addr": 0x768400, "addrs": [0x768400, 0x768500], "file": "/src/main.go",
     "line": 70, "Cond": "", "disabled": True},
    {"id": 6, "addr": 0, "WatchExpr": "main.served", "Cond": ""},
]


def test_watched_and_unwatched_by_the_condition_now():
    verdicts = {'j.tag == "rec"': True, "served == 100": False}
    watched, unwatched = window_stops(LISTED, 0x768128, {("/src/main.go", 56)},
                                      verdicts.get)
    assert sorted(watched) == [0x455844, 0x7681c5]
    assert watched[0x7681c5].where == "main.go:59" and watched[0x7681c5].breakpoint_id == 2
    assert watched[0x455844].where == "panic.go:1456"
    assert list(unwatched) == [0x7681fb] and unwatched[0x7681fb].condition == "served == 100"


def test_a_condition_that_cannot_be_evaluated_closes_the_window():
    watched, unwatched = window_stops(LISTED, 0x768128, set(), lambda condition: None)
    # the record breakpoint's pc is where the window starts: never a stop
    assert sorted(watched) == [0x455844, 0x7681c5, 0x7681fb] and unwatched == {}

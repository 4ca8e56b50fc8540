"""BreakpointIds (adapter/golang/breakpoint_ids.py): the ids the client sees stay the same
while Delve is replaced under it. The bodies are shaped as Delve's DAP server answers
(setBreakpoints / setFunctionBreakpoints responses, `stopped` and `breakpoint` events); the
sequence is the one DelveBackend follows: forward (sent, answered), hand over, new_delve,
replay every remembered request (answered with replay=True), then the session goes on.
"""
from __future__ import annotations

import copy

import pytest

from adapter.golang.breakpoint_ids import BreakpointIds, request_key

MAIN = {"source": {"path": "/src/app/main.go"}}
WORKER = {"source": {"path": "/src/app/worker.go"}}


def _lines(source: dict, *lines: int) -> dict:
    return {**source, "breakpoints": [{"line": line} for line in lines]}


def _answer(*ids: int | None) -> dict:
    return {"breakpoints": [{"verified": True, **({} if i is None else {"id": i})}
                            for i in ids]}


def _forward(ids: BreakpointIds, command: str, arguments: dict, delve_ids: tuple) -> list:
    """One request forwarded and answered by Delve with `delve_ids`; the ids the client gets."""
    ids.sent(command, arguments)
    body = _answer(*delve_ids)
    ids.answered(command, arguments, body)
    return [bp.get("id") for bp in body["breakpoints"]]


def _handover(ids: BreakpointIds, answers: dict) -> dict:
    """A new Delve: every remembered request replayed, answered with answers[key]; the ids the
    replayed answers carry afterwards, by key."""
    ids.new_delve()
    out = {}
    for key, (command, arguments) in list(ids.requests.items()):
        body = _answer(*answers[key])
        ids.answered(command, arguments, body, replay=True)
        out[key] = [bp.get("id") for bp in body["breakpoints"]]
    return out


def _stopped(ids: BreakpointIds, *hit: int) -> list:
    raw = {"type": "event", "event": "stopped",
           "body": {"reason": "breakpoint", "threadId": 1, "hitBreakpointIds": list(hit)}}
    ids.event(raw)
    return raw["body"]["hitBreakpointIds"]


def test_before_any_handover_delves_ids_pass_unchanged():
    ids = BreakpointIds()
    assert _forward(ids, "setBreakpoints", _lines(MAIN, 10, 20), (1, 2)) == [1, 2]
    assert _forward(ids, "setFunctionBreakpoints", {"breakpoints": [{"name": "main.work"}]},
                    (3,)) == [3]
    assert _stopped(ids, 2) == [2]
    event = {"event": "breakpoint", "body": {"reason": "changed",
                                             "breakpoint": {"id": 7, "verified": True}}}
    ids.event(event)
    assert event["body"]["breakpoint"]["id"] == 7


def test_replayed_answers_map_back_to_the_client_ids_by_position():
    ids = BreakpointIds()
    _forward(ids, "setBreakpoints", _lines(MAIN, 10, 20, 30), (1, 2, 3))
    _forward(ids, "setBreakpoints", _lines(WORKER, 5), (4,))
    _forward(ids, "setFunctionBreakpoints", {"breakpoints": [{"name": "main.work"}]}, (5,))
    main, worker, functions = (request_key("setBreakpoints", _lines(MAIN)),
                               request_key("setBreakpoints", _lines(WORKER)),
                               request_key("setFunctionBreakpoints", {}))
    # the new Delve numbers from 1 again, in the order the requests are replayed
    replayed = _handover(ids, {main: (1, 2, 3), worker: (4,), functions: (5,)})
    assert replayed == {main: [1, 2, 3], worker: [4], functions: [5]}
    # a second handover in which the new Delve numbers differently
    replayed = _handover(ids, {main: (11, 12, 13), worker: (9,), functions: (10,)})
    assert replayed == {main: [1, 2, 3], worker: [4], functions: [5]}
    assert _stopped(ids, 12) == [2]
    assert _stopped(ids, 9, 10) == [4, 5]


def test_replay_in_a_different_order_keeps_each_sources_ids():
    ids = BreakpointIds()
    _forward(ids, "setBreakpoints", _lines(MAIN, 10, 20), (1, 2))
    _forward(ids, "setBreakpoints", _lines(WORKER, 5, 6), (3, 4))
    ids.new_delve()
    worker_args, main_args = _lines(WORKER, 5, 6), _lines(MAIN, 10, 20)
    for arguments, delve_ids, client_ids in ((worker_args, (1, 2), [3, 4]),
                                            (main_args, (3, 4), [1, 2])):
        body = _answer(*delve_ids)
        ids.answered("setBreakpoints", arguments, body, replay=True)
        assert [bp["id"] for bp in body["breakpoints"]] == client_ids
    assert _stopped(ids, 1) == [3]  # the new Delve's 1 is worker.go:5, the client's 3


def test_breakpoints_added_after_a_handover_get_fresh_ids_above_all_handed_out():
    ids = BreakpointIds()
    _forward(ids, "setBreakpoints", _lines(MAIN, 10, 20), (1, 2))
    _forward(ids, "setBreakpoints", _lines(WORKER, 5), (3,))
    main = request_key("setBreakpoints", _lines(MAIN))
    worker = request_key("setBreakpoints", _lines(WORKER))
    _handover(ids, {main: (1, 2), worker: (3,)})
    # the client adds line 30 to main.go: Delve keeps 1 and 2 and numbers the new one 4
    assert _forward(ids, "setBreakpoints", _lines(MAIN, 10, 20, 30), (1, 2, 4)) == [1, 2, 4]
    # after another handover the new Delve's 4 is not the client's old 4
    _handover(ids, {main: (1, 2, 3), worker: (4,)})
    assert _stopped(ids, 3, 4) == [4, 3]
    # one more, in a source never seen: a number no client id has
    assert _forward(ids, "setBreakpoints", _lines(_source("/src/app/other.go"), 1), (5,)) == [5]
    # Delve's 6 after another new one: above every id handed out (5), whatever Delve says
    _handover(ids, {main: (1, 2, 3), worker: (4,),
                    request_key("setBreakpoints", _lines(_source("/src/app/other.go"))): (5,)})
    assert _forward(ids, "setFunctionBreakpoints", {"breakpoints": [{"name": "main.f"}]},
                    (6,)) == [6]


def _source(path: str) -> dict:
    return {"source": {"path": path}}


def test_a_fresh_id_never_collides_with_an_old_client_id():
    ids = BreakpointIds()
    # the first Delve numbered up to 9 (breakpoints set and cleared before)
    _forward(ids, "setBreakpoints", _lines(MAIN, 10), (9,))
    _forward(ids, "setBreakpoints", _lines(WORKER, 5), (8,))
    main = request_key("setBreakpoints", _lines(MAIN))
    worker = request_key("setBreakpoints", _lines(WORKER))
    _handover(ids, {main: (1,), worker: (2,)})
    assert _stopped(ids, 1, 2) == [9, 8]
    given = _forward(ids, "setFunctionBreakpoints", {"breakpoints": [{"name": "main.a"},
                                                                      {"name": "main.b"}]},
                     (3, 4))
    assert min(given) > 9 and len(set(given)) == 2
    # a breakpoint Delve announces by itself (event), also fresh and distinct
    event = {"event": "breakpoint", "body": {"reason": "new", "breakpoint": {"id": 5}}}
    ids.event(event)
    assert event["body"]["breakpoint"]["id"] not in {9, 8, *given}
    assert event["body"]["breakpoint"]["id"] > 9


def test_ids_announced_only_in_events_before_a_handover_are_never_given_again():
    ids = BreakpointIds()
    _forward(ids, "setBreakpoints", _lines(MAIN, 10), (1,))
    ids.event({"event": "breakpoint", "body": {"reason": "new", "breakpoint": {"id": 2}}})
    _handover(ids, {request_key("setBreakpoints", _lines(MAIN)): (1,)})
    assert _forward(ids, "setBreakpoints", _lines(WORKER, 5), (2,)) == [3]


def test_breakpoint_events_after_a_handover_carry_client_ids():
    ids = BreakpointIds()
    _forward(ids, "setBreakpoints", _lines(MAIN, 10, 20), (1, 2))
    _handover(ids, {request_key("setBreakpoints", _lines(MAIN)): (7, 8)})
    event = {"type": "event", "event": "breakpoint",
             "body": {"reason": "changed", "breakpoint": {"id": 8, "verified": True,
                                                          "message": "hit 3 times"}}}
    ids.event(event)
    assert event["body"]["breakpoint"] == {"id": 2, "verified": True, "message": "hit 3 times"}
    assert _stopped(ids, 7, 8) == [1, 2]


def test_unverified_breakpoints_keep_their_place_in_a_replay():
    ids = BreakpointIds()
    _forward(ids, "setBreakpoints", _lines(MAIN, 10, 11, 12), (1, None, 2))
    _handover(ids, {request_key("setBreakpoints", _lines(MAIN)): (1, None, 2)})
    assert _stopped(ids, 2) == [2]


def test_the_last_arguments_of_each_request_are_kept_for_the_replay():
    ids = BreakpointIds()
    ids.sent("setBreakpoints", _lines(MAIN, 10))
    ids.sent("setExceptionBreakpoints", {"filters": ["panic"]})
    ids.sent("setBreakpoints", _lines(MAIN, 10, 20))  # replaces the first
    ids.sent("setBreakpoints", _lines(WORKER, 5))
    assert list(ids.requests.values()) == [
        ("setBreakpoints", _lines(MAIN, 10, 20)),
        ("setExceptionBreakpoints", {"filters": ["panic"]}),
        ("setBreakpoints", _lines(WORKER, 5))]
    # a source known only by name (no path) is its own key
    assert request_key("setBreakpoints", {"source": {"name": "gen.go"}}) != \
        request_key("setBreakpoints", _lines(MAIN))


MALFORMED_BODIES = [None, {}, [], "text", 5, {"breakpoints": None}, {"breakpoints": "ab"},
                    {"breakpoints": 7}, {"breakpoints": [None, 3, "x", {"id": "1"}, {}]},
                    {"breakpoints": {"id": 1}}]
MALFORMED_ARGUMENTS = [None, {}, [], "text", {"source": None}, {"source": "main.go"},
                       {"source": {"path": 5}}, {"source": []}]


@pytest.mark.parametrize("translating", [False, True])
def test_malformed_bodies_and_arguments_do_not_raise(translating):
    ids = BreakpointIds()
    _forward(ids, "setBreakpoints", _lines(MAIN, 10), (1,))
    if translating:
        _handover(ids, {request_key("setBreakpoints", _lines(MAIN)): (4,)})
    for arguments in MALFORMED_ARGUMENTS:
        request_key("setBreakpoints", arguments)
        ids.sent("setBreakpoints", arguments)
        for body in MALFORMED_BODIES:
            for replay in (False, True):
                ids.answered("setBreakpoints", arguments, copy.deepcopy(body), replay=replay)
    events = [{}, {"event": "stopped"}, {"event": "stopped", "body": None},
              {"event": "stopped", "body": []}, {"event": "stopped", "body": {}},
              {"event": "stopped", "body": {"hitBreakpointIds": None}},
              {"event": "stopped", "body": {"hitBreakpointIds": ["a", None, 4.5, 4]}},
              {"event": "breakpoint", "body": {"breakpoint": None}},
              {"event": "breakpoint", "body": {"breakpoint": {"id": "x"}}},
              {"event": "breakpoint", "body": {"breakpoint": []}}]
    for event in events:
        ids.event(copy.deepcopy(event))
    # the good one still maps as before
    assert _stopped(ids, 4 if translating else 1) == [1]

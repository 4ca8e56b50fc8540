"""features.python_replay over a synthetic Python history (a unit test of that one layer: the
capture is a small stand-in holding a real History, real PythonFrames samples and a real
ThreadTrace; tests/e2e/test_replay_python.py checks the same on a real recording through
`ptdebug dap`): breakpoint hits leave out a line resumed after a call, stepOut goes to the
caller's next line, stops at a gap and answers None when the frame never returns, per-line
costs count executions, and the merged stack puts the Python frames in place of the
interpreter's."""
from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass, field

import pytest

from adapter.features import python_replay
from adapter.recording.recording import Recording, ThreadTrace
from pt_decoder.history import Gap, History
from pt_decoder.image import Image
from pt_decoder.python_frames import CodeInfo, encode_sample

pytestmark = pytest.mark.skipif(sys.version_info[:2] < (3, 11),
                                reason="builds 3.11-format line tables")


def _helper(x):
    y = x + 1  # @helper_first
    return y * 2  # @helper_second


def _score(n):
    total = _helper(n)  # @score_call
    return total  # @score_ret


def _line(func, marker: str) -> int:
    lines = open(__file__).read().splitlines()
    return next(n for n, text in enumerate(lines, 1) if text.endswith(f"# @{marker}"))


def _unit(func, line: int) -> int:
    return next(s // 2 for s, e, ln in func.__code__.co_lines() if ln == line and e > s)


def _info(func) -> CodeInfo:
    code = func.__code__
    return CodeInfo(code.co_qualname, __file__, code.co_firstlineno, code.co_linetable, "3.11")


SCORE, HELPER = 1, 2
CALL, RET = _line(_score, "score_call"), _line(_score, "score_ret")
FIRST, SECOND = _line(_helper, "helper_first"), _line(_helper, "helper_second")


@dataclass
class _Capture:
    history: History
    trace: Recording
    stream: int = 0
    names: dict = field(default_factory=dict)

    def function(self, ip: int) -> tuple[str, int]:
        return self.names.get(ip, python_replay.INTERPRETER_LOOP), 0


def _capture(gaps=(), names=None) -> _Capture:
    # 0-1 score@call (depth 1) | 2-3 helper@first | 4-5 helper@second (depth 2)
    # | 6-7 score@call resumed after the call returned | 8-9 score@ret
    samples = [(0, encode_sample(SCORE, _unit(_score, CALL), 1)),
               (2, encode_sample(HELPER, _unit(_helper, FIRST), 2)),
               (4, encode_sample(HELPER, _unit(_helper, SECOND), 2)),
               (6, encode_sample(SCORE, _unit(_score, CALL) + 1, 1)),
               (8, encode_sample(SCORE, _unit(_score, RET), 1))]
    n = 10
    history = History.from_columns(array("Q", range(0x1000, 0x1000 + n)),
                                   array("Q", range(0, 10 * n, 10)), array("Q", range(n)),
                                   array("B", bytes(n)), gaps)
    table = {"codes": {str(SCORE): _info(_score).to_json(), str(HELPER): _info(_helper).to_json()},
             "interpreter": "libpython3.11.so.1.0"}
    trace = Recording("(made here)", {"python": table, "backend": "stepper"},
                      [ThreadTrace(1, history, ptwrites=samples)], Image(), Image())
    return _Capture(history, trace, names=names or {})


def test_breakpoint_hits_leave_out_the_line_resumed_after_a_call():
    capture = _capture()
    # CALL's run at 0 was in progress when the recording began, its run at 6 resumes it
    # after the call returned: neither is a hit
    assert python_replay.breakpoint_hits(capture, {__file__: [CALL]}) == []
    assert python_replay.breakpoint_hits(capture, {__file__: [SECOND, RET]}) == [4, 8]
    assert python_replay.breakpoint_hits(capture, {"/elsewhere.py": [CALL]}) == []
    assert python_replay.breakpoint_hits(capture, {"x.c": [CALL]}) == []


def test_step_out_goes_to_the_callers_next_line():
    capture = _capture()
    assert python_replay.step_out(capture, 3) == (8, "found", None)
    assert python_replay.step_out(capture, 9) is None  # the outermost frame never returns
    # a gap stops the step at the last instruction before it: in the caller after the return
    # (gap before 7) or still in the callee (gap before 5, the return lies beyond it)
    for gap, last in ((7, 6), (5, 4)):
        gapped = _capture(gaps=[Gap(gap, 0, 0x1000 + gap, 0, "overflow")])
        step = python_replay.step_out(gapped, 3)
        assert (step.position, step.reason, step.gap.position) == (last, "gap", gap)


def test_line_costs_and_the_run_at_a_position():
    capture = _capture()
    costs = {line: rest for line, *rest in python_replay.line_costs(capture, SCORE)}
    # score@call ran 0-1 and, resumed, 6-7: 4 instructions, one execution; ns from the times
    assert costs[CALL] == [4, 10 + 10, 1 + 1, 1]
    assert costs[RET] == [2, 10, 1, 1]
    assert python_replay.run_at(capture, 5) == (4, 6, (2, 10, 1))


def test_merged_stack_puts_python_frames_in_place_of_the_interpreter():
    capture = _capture(names={0x1003: "getppid"})
    inside = python_replay.merged_stack(capture, 2, 64)
    assert [(e.position, e.python.qualname) for e in inside] == [(2, "_helper"), (2, "_score")]
    # native code the line called into stays above the Python frames
    native = python_replay.merged_stack(capture, 3, 64)
    assert [e.python.qualname if e.python else e.position for e in native] == [
        3, "_helper", "_score"]
    assert python_replay.merged_stack(capture, 3, 1)[0].python is None


def test_a_live_captures_stack_shows_the_innermost_frame_of_the_whole_window_live():
    """score (depth 1) was on the stack for the whole window, helper (depth 2) was entered in
    it: with the live stack shown below, helper is a recorded frame and score is shown as its
    live twin (evaluable), at the line it was on at the position; the live frames above the
    twin ran later and go, those under it stay. Without a twin (the thread left that frame
    since) the recorded frame stays, over all of the live frames."""
    capture = _capture()
    full = python_replay.merged_stack(capture, 3, 20)
    live = python_replay.merged_stack(capture, 3, 20, live_below=True)
    assert [e.python.qualname for e in full if e.python] == ["_helper", "_score"]
    assert [e.python.qualname for e in live if e.python] == ["_helper", "_score"]
    here = {"path": __file__}
    stack = [{"id": 7, "name": "later", "source": here},
             {"id": 8, "name": "_score", "source": here, "line": RET},
             {"id": 9, "name": "main", "source": here}]
    joined = python_replay.join_live(live, stack)
    assert [e.python.qualname for e in live if e.python] == ["_helper"]
    assert joined[0]["id"] == 8 and joined[0]["line"] == CALL
    assert joined[0]["name"] == f"_score [line {CALL} at the replay position; values of now]"
    assert joined[1:] == [stack[2]]
    same_line = [{"id": 8, "name": "_score", "source": here, "line": CALL}]
    assert python_replay.join_live(python_replay.merged_stack(capture, 3, 20, live_below=True),
                                   same_line) == same_line
    elsewhere = [{"name": "_score", "source": {"path": "/elsewhere.py"}},
                 {"name": "main", "source": here}]
    again = python_replay.merged_stack(capture, 3, 20, live_below=True)
    assert python_replay.join_live(again, elsewhere) == elsewhere
    assert [e.python.qualname for e in again if e.python] == ["_helper", "_score"]

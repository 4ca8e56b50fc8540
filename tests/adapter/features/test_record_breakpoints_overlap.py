"""Two captures of record_breakpoints that overlap (adapter/features/record_breakpoints.py,
LiveWindow): the one before is still in its recorder (encoding the window it recorded) when
the next record breakpoint's window waits for its Python line and the user holds the
program. A unit test of that bookkeeping: the recorder workers are stand-ins that note what
they are told; the real flow is tests/e2e/test_dap_record_while_held.py.

What was seen (issue 13, under load, 1 run in 5-8 of that e2e test): the first capture's end
cleared the state of the second (its recorder, its watchdog, "waiting for the line"), and
let its wait's clock run while the user looked at the program: 5 s later the second hit was
"not recorded: the thread did not come to infer ... within 5 s"."""
from __future__ import annotations

from adapter.features.record_breakpoints import LiveWindow, RecordBreakpoints
from adapter.features.recorder_worker import RecorderWatchdog
from adapter.routes import Router


class _Worker:
    """Notes what the adapter tells the recorder process."""

    def __init__(self):
        self.told: list = []

    def wait_held(self, held: bool) -> None:
        self.told.append("held" if held else "resumed")

    def end_window(self, why: str) -> None:
        self.told.append(f"end: {why}")


class _Client:
    def __init__(self):
        self.output: list[str] = []

    def send_event(self, name: str, body: dict) -> None:
        if name == "output":
            self.output.append(body["output"])


class _Session:
    def __init__(self):
        self.routes = Router()
        self.client = _Client()
        self.backend = None


def _window(thread_id: int, expired: list) -> LiveWindow:
    watchdog = RecorderWatchdog(3600, lambda: expired.append(thread_id))
    return LiveWindow(_Worker(), thread_id, 100 + thread_id, watchdog, "service.py:23")


def _user_stop() -> dict:
    """Another thread's breakpoint, stopping every thread (debugpy's all-stop mode)."""
    return {"event": "stopped", "body": {"reason": "breakpoint", "threadId": 1,
                                          "allThreadsStopped": True, "hitBreakpointIds": [7]}}


def test_the_capture_before_ending_leaves_the_waiting_window_held():
    expired: list = []
    session = _Session()
    recording = RecordBreakpoints(session)
    before, waiting = _window(2, expired), _window(2, expired)
    # the capture before let its thread go and is encoding; the next one's recorder holds
    # thread 2 again and waits for it to run its line
    recording._live[2] = waiting
    waiting.opening = True
    recording._recording.add(2)

    assert recording._filter_event(_user_stop()) is False  # the user's: shown
    assert waiting.held and waiting.worker.told == ["held"]
    assert session.client.output == [
        "ptdebug: record breakpoint at service.py:23: the program stopped before thread 2 "
        "ran the line; its window opens when the thread runs it, once you continue\n"]

    recording._window_over(before)  # the capture before is done, the user still looking
    assert recording._live == {2: waiting}
    assert waiting.held and waiting.opening
    assert waiting.worker.told == ["held"], "the waiting window's clock was let run"
    assert before.worker.told == []

    recording.program_resumed()  # the user continued
    assert not waiting.held and waiting.worker.told == ["held", "resumed"]
    recording._window_over(waiting)
    assert recording._live == {}
    for window in (before, waiting):
        window.watchdog.cancel()
    assert expired == []


def test_a_second_stop_while_held_tells_once_and_a_pause_does_not_close_the_wait():
    session = _Session()
    recording = RecordBreakpoints(session)
    waiting = _window(2, [])
    recording._live[2] = waiting
    waiting.opening = True
    recording._recording.add(2)
    recording._filter_event(_user_stop())
    recording._filter_event(_user_stop())
    assert waiting.worker.told == ["held"]
    assert len(session.client.output) == 1
    assert recording._pause(None) is None  # forwarded, the window not ended
    assert waiting.worker.told == ["held"]
    waiting.watchdog.cancel()

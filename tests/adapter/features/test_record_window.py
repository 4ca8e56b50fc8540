"""RecordWindow (adapter/features/record_breakpoints.py): how a launch configuration's
`recordWindow` and a breakpoint's own combine into the stepper's end condition, and which
settings are refused (by name, before anything is recorded)."""
from __future__ import annotations

import pytest

from adapter.features.record_window import DEFAULT_INSTRUCTIONS, RecordWindow
from adapter.protocol.errors import InvalidLaunchConfig


def test_breakpoint_overrides_the_launch_window_key_by_key():
    window = RecordWindow.from_dicts({"function": "kv_update", "timeout": 3},
                                     {"instructions": 500})
    assert (window.function, window.timeout, window.instructions) == ("kv_update", 3, 500)
    end = window.end_condition()
    assert end.until_return and end.count == 500 and end.duration_ms is None
    assert window.describe() == ("from kv_update(), until kv_update returns, at most 500 "
                                 "instructions")


def test_a_window_with_no_end_gets_the_default_count():
    end = RecordWindow.from_dicts(None, None).end_condition()
    assert end.count == DEFAULT_INSTRUCTIONS and not end.until_return
    timed = RecordWindow.from_dicts({"milliseconds": 2.5}).end_condition()
    assert timed.count is None and timed.duration_ms == 2.5
    no_return = RecordWindow.from_dicts({"function": "f", "untilReturn": False})
    assert no_return.end_condition().count == DEFAULT_INSTRUCTIONS


@pytest.mark.parametrize("window, words", [
    ({"cycles": 5}, "recordWindow.cycles is not a window setting"),
    ({"instructions": "many"}, "recordWindow.instructions has the wrong type"),
    ({"instructions": True}, "recordWindow.instructions has the wrong type"),
    ({"untilReturn": 1}, "recordWindow.untilReturn has the wrong type"),
    ({"instructions": 0}, "recordWindow.instructions must be positive"),
    ([1, 2], "recordWindow must be an object"),
])
def test_bad_settings_are_refused_by_name(window, words):
    with pytest.raises(InvalidLaunchConfig) as caught:
        RecordWindow.from_dicts(window)
    assert words in caught.value.message

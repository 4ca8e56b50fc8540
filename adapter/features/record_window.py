"""Record windows: when the trace window of a record breakpoint opens and closes (the
`recordWindow` settings of the launch configuration and of each breakpoint, merged and
checked), the breakpoint modes ptdebug adds to DAP, and the recorder's end condition they
make.

Layer: features (data only; record_breakpoints.py, recorder_worker.py and the views read
it). Knows the DAP schema's RecordWindowSettings and the stepper's EndCondition.
"""
from __future__ import annotations

from dataclasses import dataclass

from adapter.protocol.errors import InvalidLaunchConfig
from adapter.protocol.schema import RecordWindowSettings

RECORD_MODE = "record"
BREAKPOINT_MODES = [
    {"mode": "normal", "label": "Stop", "description": "Pause the program here",
     "appliesTo": ["source"]},
    {"mode": RECORD_MODE, "label": "Record",
     "description": "Do not stop: record the thread's instructions (Intel PT, or the ptrace "
                    "stepper) in a trace window that opens here", "appliesTo": ["source"]},
]
DEFAULT_INSTRUCTIONS = 2000
"""A window with no end named closes after this many instructions (small: the stepper in a VM
records some 10-50 thousand instructions a second)."""


@dataclass
class RecordWindow(RecordWindowSettings):
    """When a window opens and closes; the fields are the schema's (one source), merged from
    the launch configuration's `recordWindow` and a breakpoint's own."""

    @classmethod
    def from_dicts(cls, *configs: dict | None) -> RecordWindow:
        merged: dict = {}
        for config in configs:
            if config is None:
                continue
            if not isinstance(config, dict):
                raise InvalidLaunchConfig(f"recordWindow must be an object, got {config!r:.60}")
            merged.update(config)
        window = cls()
        for key, value in merged.items():
            if not hasattr(window, key):
                raise InvalidLaunchConfig(f"recordWindow.{key} is not a window setting (known: "
                                          "function, untilReturn, instructions, milliseconds, "
                                          "until, timeout)")
            expected = {"function": str, "until": str, "untilReturn": bool,
                        "instructions": int, "milliseconds": (int, float),
                        "timeout": (int, float)}[key]
            if value is not None and (not isinstance(value, expected) or
                                      (expected is not bool and isinstance(value, bool))):
                raise InvalidLaunchConfig(f"recordWindow.{key} has the wrong type: {value!r:.60}")
            setattr(window, key, value)
        if window.instructions is not None and window.instructions <= 0:
            raise InvalidLaunchConfig("recordWindow.instructions must be positive")
        return window

    def end_condition(self):
        from adapter.capture.stepper import EndCondition
        count = self.instructions
        if count is None and self.milliseconds is None and not (self.function and
                                                                  self.untilReturn):
            count = DEFAULT_INSTRUCTIONS
        return EndCondition(count=count, until_spec=self.until,
                            until_return=bool(self.function and self.untilReturn),
                            duration_ms=self.milliseconds)

    def describe(self) -> str:
        start = f"from {self.function}()" if self.function else "from the breakpoint"
        ends = []
        if self.function and self.untilReturn:
            ends.append(f"until {self.function} returns")
        end = self.end_condition()
        if end.count:
            ends.append(f"at most {end.count} instructions")
        if self.milliseconds:
            ends.append(f"at most {self.milliseconds:g} ms")
        if self.until:
            ends.append(f"until {self.until}")
        return f"{start}, {', '.join(ends)}"


@dataclass
class ReplayedWindow(RecordWindow):
    """The "window" of a replayed bundle's capture: the whole recording, described as such."""

    text: str = ""

    def describe(self) -> str:
        return self.text

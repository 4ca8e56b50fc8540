"""Record windows: when the trace window of a record breakpoint opens and closes (the
`recordWindow` settings of the launch configuration and of each breakpoint, merged and
checked), the breakpoint modes ptdebug adds to DAP, and the recorder's end condition they
make.

Layer: features (data only; record_breakpoints.py, recorder_worker.py and the views read
it). Knows the DAP schema's RecordWindowSettings and the stepper's EndCondition.
"""
from __future__ import annotations

import dataclasses
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
PYTHON_INSTRUCTION_CAP = 200_000
"""A window on a Python line that closes when its function returns (or after N lines) and
names no `instructions`: the safety limit (some 4-20 s of stepping in a VM)."""
GO_TIME_BOUND_S = 5.0
"""A Go window's time bound when its `recordWindow` names none: Delve is away for the whole
window, so no breakpoint of the program works meanwhile (docs/go.md); a few seconds hold some
10^5 stepped instructions here."""
PYTHON_TIME_BOUND_S = 120.0
"""A debugpy window's time bound when its `recordWindow` names none: debugpy serves the other
threads meanwhile, and a window on a Python line runs to PYTHON_INSTRUCTION_CAP (20 s and more
of stepping in a VM)."""
DBI_INSTRUCTION_CAP = 100_000_000
"""The cap of a DBI window that names no `instructions` (the DBI recorder records some 10^7
instructions a second of a Python thread here: a whole request; the time bound ends it too)."""
RECORDER_REQUESTS = ("auto", "stepper", "dbi")
"""`recorder` of the launch configuration and of `recordWindow` (window_recorder.py decides)."""
SETTINGS = {"function": str, "until": str, "untilReturn": bool, "instructions": int,
            "milliseconds": (int, float), "timeout": (int, float), "lines": int,
            "timeBound": (int, float), "untilPark": bool, "recorder": str}
"""The `recordWindow` keys (RecordWindowSettings) and their types."""


@dataclass
class RecordWindow(RecordWindowSettings):
    """When a window opens and closes; the fields are the schema's (one source), merged from
    the launch configuration's `recordWindow` and a breakpoint's own."""

    python_line: bool = False
    """Set by ptdebug (not a setting): the window is on a Python line of a debugpy session,
    opens when the thread runs that line's code, and is sized in Python terms
    (adapter/python/line_window.py)."""
    dbi: bool = False
    """Set by ptdebug (not a setting): the DBI recorder records this window
    (window_recorder.py), so a window on a Python line is capped at DBI_INSTRUCTION_CAP."""

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
            if key not in SETTINGS:
                raise InvalidLaunchConfig(f"recordWindow.{key} is not a window setting (known: "
                                          f"{', '.join(SETTINGS)})")
            expected = SETTINGS[key]
            if value is not None and (not isinstance(value, expected) or
                                      (expected is not bool and isinstance(value, bool))):
                raise InvalidLaunchConfig(f"recordWindow.{key} has the wrong type: {value!r:.60}")
            setattr(window, key, value)
        if window.recorder not in (None, *RECORDER_REQUESTS):
            raise InvalidLaunchConfig(f"recordWindow.recorder must be one of "
                                      f"{', '.join(RECORDER_REQUESTS)}, not {window.recorder!r:.60}")
        for key in ("instructions", "lines", "timeBound"):
            if getattr(window, key) is not None and getattr(window, key) <= 0:
                raise InvalidLaunchConfig(f"recordWindow.{key} must be positive")
        return window

    def bounded(self, go: bool) -> RecordWindow:
        """This window with its time bound: its own `timeBound`, else the debugger's default
        (every window ends, whatever it waits for: issue 34)."""
        if self.timeBound is not None:
            return self
        return dataclasses.replace(self, timeBound=GO_TIME_BOUND_S if go
                                   else PYTHON_TIME_BOUND_S)

    @property
    def python_ends(self) -> dict:
        """On a Python line: {"return": close when its function returns, "lines": N}."""
        return {"return": bool(self.untilReturn and not self.function), "lines": self.lines}

    def end_condition(self):
        from adapter.capture.stepper import EndCondition
        count = self.instructions
        if self.python_line and not self.function:
            if count is None and self.milliseconds is None:
                ends = self.python_ends
                cap = DBI_INSTRUCTION_CAP if self.dbi else PYTHON_INSTRUCTION_CAP
                count = cap if ends["return"] or ends["lines"] else DEFAULT_INSTRUCTIONS
            return EndCondition(count=count, until_spec=self.until,
                                duration_ms=self.milliseconds, time_bound_s=self.timeBound)
        if count is None and self.milliseconds is None and not (self.function and
                                                                  self.untilReturn):
            count = DEFAULT_INSTRUCTIONS
        return EndCondition(count=count, until_spec=self.until,
                            until_return=bool(self.function and self.untilReturn),
                            duration_ms=self.milliseconds, time_bound_s=self.timeBound)

    def describe(self) -> str:
        start = f"from {self.function}()" if self.function else "from the breakpoint"
        ends = []
        if self.function and self.untilReturn:
            ends.append(f"until {self.function} returns")
        if self.python_line and not self.function:
            start = "from the breakpoint's Python line"
            if self.untilReturn:
                ends.append("until its function returns")
            if self.lines:
                ends.append(f"{self.lines} Python line{'s' * (self.lines != 1)}")
        end = self.end_condition()
        if end.count:
            ends.append(f"at most {end.count} instructions")
        if self.milliseconds:
            ends.append(f"at most {self.milliseconds:g} ms")
        if self.until:
            ends.append(f"until {self.until}")
        if self.timeBound:
            ends.append(f"at most {self.timeBound:g} s")
        return f"{start}, {', '.join(ends)}"


@dataclass
class ReplayedWindow(RecordWindow):
    """The "window" of a replayed bundle's capture: the whole recording, described as such."""

    text: str = ""

    def describe(self) -> str:
        return self.text

"""Which recorder records a record breakpoint's window (or a captureNow) in a debug session,
and why: the session's side of the recorder seam (adapter/capture/recorders.py).

Layer: features (policy, data in and out). Reads the configuration's `recorder` and the
window's `recordWindow.recorder`, asks recorders.dbi_refusal what DBI cannot record, and
returns the choice with its reason in words; record_breakpoints.py sends the recorder
process (recorder_worker.py) the choice and tells the user of a fallback. What is found only
when the recorder attaches (the main thread never at rest, the AVX-512 repair) falls back
there, in the recorder process, and comes back in its result.

What `auto` means for record breakpoints: the stepper. DBI stays opt-in (`"recorder": "dbi"`)
because Frida's injection runs its bootstrap on the process's main thread and restores only
its general registers (recorders.DBI_CAVEAT): the recorder attaches only once it has seen the
main thread wait in a system call, but a main thread that wakes between that check and the
injection is still exposed, and a debugger that changes what the program computes, even
rarely, is worse than a slow one. The stepper never touches a thread it does not record.
"""
from __future__ import annotations

from dataclasses import dataclass

from adapter.features.record_window import RecordWindow

AUTO_WHY = ("auto picks the stepper for record breakpoints: DBI (Frida, 1000x faster) is used "
            "only when asked for (\"recorder\": \"dbi\"), since Frida's injection runs on the "
            "program's main thread (docs/recording.md)")


@dataclass(frozen=True)
class WindowRecorder:
    name: str                   # "stepper" | "dbi"
    why: str                    # in words: the capture event and the trace scope show it
    fallback: str | None = None
    """Set when DBI was asked for and the stepper records instead: why (an output event)."""

    def as_dict(self) -> dict:
        return {"name": self.name, "why": self.why}


def requested(launch_arguments: dict, window: RecordWindow) -> str:
    """The recorder asked for: the window's `recorder`, else the configuration's, else auto."""
    return window.recorder or launch_arguments.get("recorder") or "auto"


def choose(asked: str, window: RecordWindow, *, pid: int | None, go: bool) -> WindowRecorder:
    """The recorder of `window` in a session whose program is `pid` (`go`: Delve's)."""
    if asked == "stepper":
        return WindowRecorder("stepper", "\"recorder\": \"stepper\" in the configuration")
    if asked != "dbi":
        return WindowRecorder("stepper", AUTO_WHY)
    refusal = _dbi_refusal(window, pid=pid, go=go)
    if refusal is None:
        return WindowRecorder("dbi", "\"recorder\": \"dbi\" in the configuration (Frida's "
                                     "Stalker: the whole request, some 10-40x slower than "
                                     "native)")
    return WindowRecorder("stepper", f"DBI was asked for, but {refusal}: the ptrace stepper "
                                     "records instead", fallback=refusal)


def _dbi_refusal(window: RecordWindow, *, pid: int | None, go: bool) -> str | None:
    if go:
        return ("this is a Go program: Frida's Stalker cannot follow Go's runtime (Delve's "
                "windows record with the stepper)")
    if window.until:
        return "DBI cannot close a window at an address (recordWindow.until)"
    if window.lines:
        return "DBI does not count Python lines (recordWindow.lines)"
    from adapter.capture import recorders
    return recorders.dbi_refusal(pid=pid)

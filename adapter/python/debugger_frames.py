"""The debugger's own Python frames in a capture of a program run under debugpy: folded into
the program's frame under them in every view of the recording.

Layer: adapter.python (data only: sample lists and the manifest's code table; pt_decoder's
sample encoding). Used by adapter/recording/recording.py (Recording.python_frames).

Why: debugpy traces every line of a function with a breakpoint in it, and its trace
function (pydevd's, compiled with Cython) calls Python code of its own now and then
(`is_thread_alive` at each call event). A window on a Python line records that too, and
stepping back by line then stopped in pydevd's frames, and twice on each line they
interrupted. The instructions stay in the history (they ran, and they cost time); only the
Python frames replay steps and stacks show are the program's: a sample in a debugger frame
reads as the sample of the program's frame it interrupted.
"""
from __future__ import annotations

import re

from pt_decoder.python_frames import NO_FRAME, decode_sample

DEBUGGER_FILES = re.compile(r"[/\\](debugpy|pydevd|_pydevd_bundle|_pydev_bundle|_pydev_runfiles|"
                            r"_pydevd_frame_eval|pydev_ipython)[/\\]")
"""Where debugpy's and pydevd's Python code lives (debugpy vendors pydevd under
debugpy/_vendored/pydevd/)."""


def debugger_codes(table: dict) -> set[int]:
    """The code ids of the manifest's "python" table that are the debugger's code."""
    return {int(ident) for ident, info in (table.get("codes") or {}).items()
            if isinstance(info, dict) and DEBUGGER_FILES.search(str(info.get("filename", "")))}


def fold_debugger_frames(samples, hidden: set[int]) -> list:
    """`samples` ((position, value), in order) with each Python sample of a code in `hidden`
    replaced by the last sample of a shallower frame that is not (NO_FRAME where there is
    none); other values unchanged. A list is returned as given when nothing is hidden."""
    if not hidden:
        return samples
    out = []
    shown: list[tuple[int, int]] = []  # (depth, value) of the program's frames, outermost first
    for position, value in samples:
        decoded = decode_sample(value)
        if decoded is None or decoded[0] == 0:
            if decoded is not None:
                shown.clear()
            out.append((position, value))
            continue
        code, _, depth = decoded
        while shown and shown[-1][0] >= depth:
            shown.pop()
        if code in hidden:
            value = shown[-1][1] if shown else NO_FRAME
        else:
            shown.append((depth, value))
        out.append((position, value))
    return out

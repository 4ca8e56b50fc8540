"""The Python timeline of one recorded thread: a slice per Python function activation and,
inside the innermost, a slice per run of one source line, as begin/end marks in execution
order (the Perfetto export draws them on a "Python" track beside the native call slices).

Layer: adapter.python. Input: a recorded thread's PythonFrames (pt_decoder.python_frames,
as adapter.recording.Recording.python_frames builds them). Knows nothing of the output
format.

A function slice opens where a frame first appears at its depth and closes where the stack
no longer holds it (returned, or left across a stretch without Python); activations are told
apart by depth and code object (a caller always runs a bytecode between two calls it makes,
so two activations of one function at one depth never touch). Frames below the window's first
sample (the recorder's initial stack) open at that sample.
"""
from __future__ import annotations

import os

UNKNOWN = "[python frame not recorded]"


def python_marks(frames, length: int) -> list[tuple[str, int, str, str]]:
    """[("B", position, name, category) | ("E", position, "", "")] of a thread of `length`
    instructions; category "python" (a function: its qualified name) or "python.line"
    ("file.py:LINE"). Every B has its E (the last at `length`)."""
    codes = frames.codes
    marks: list[tuple[str, int, str, str]] = []
    open_functions: list[int] = []
    open_line: tuple[int, int] | None = None
    for start, stack in frames.stacks():
        functions = [code for code, _ in stack]
        keep = 0
        while keep < min(len(functions), len(open_functions)) and \
                functions[keep] == open_functions[keep]:
            keep += 1
        line = None
        if stack:
            code, index = stack[-1]
            info = codes.get(code)
            line = (code, info.line(index) if info else 0)
        if open_line is not None and (line != open_line or keep < len(open_functions)
                                      or len(functions) > keep):
            marks.append(("E", start, "", ""))
            open_line = None
        for _ in range(len(open_functions) - keep):
            marks.append(("E", start, "", ""))
        del open_functions[keep:]
        for code in functions[keep:]:
            info = codes.get(code)
            marks.append(("B", start, info.qualname if info else UNKNOWN, "python"))
            open_functions.append(code)
        if line is not None and open_line is None:
            info = codes.get(line[0])
            where = f"{os.path.basename(info.filename)}:{line[1]}" if info else f"line {line[1]}"
            marks.append(("B", start, where, "python.line"))
            open_line = line
    if open_line is not None:
        marks.append(("E", length, "", ""))
    marks.extend(("E", length, "", "") for _ in open_functions)
    return marks

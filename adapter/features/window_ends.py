"""Where a record window closes before its end, and what the user is told of it: the user's
breakpoints the recorded thread may reach in the window (Python lines for debugpy; Go's are
golang/window_stops.py's), the conditional ones it passed without a stop, and a native
`recordWindow.until` line turned into the address the recorder stops before.

Layer: features (record_breakpoints.py's helpers; functions of what they are given: the
backend, the client's breakpoints, the `output` sender). docs/python.md, "Breakpoints inside a
record window"; docs/go.md, "What the window does not observe".
"""
from __future__ import annotations

import os

from adapter.features.captures import any_between
from adapter.protocol.errors import AdapterError


def python_window_lines(backend, sources: dict, thread_id: int) -> dict:
    """debugpy: the lines of the user's breakpoints that close the window when the
    recorded thread reaches them (debugpy then evaluates the breakpoint at full speed and
    stops), and those it only watches: a condition is evaluated by debugpy in the stopped
    thread's top frame as the window opens; false there, its line is watched, and passing
    it is told after the capture (nobody can evaluate it while the thread is recorded);
    true or not evaluable there, it closes the window (debugpy decides at the line)."""
    close, watch, conditions = set(), set(), {}
    conditional = []
    for path, entry in sources.items():
        real = os.path.realpath(path)
        for line, condition in entry.stops:
            if condition:
                conditional.append(((real, line), condition))
            else:
                close.add((real, line))
    frame_id = None
    if conditional:
        frames = backend.request("stackTrace", {"threadId": thread_id, "levels": 1},
                                 timeout=10)
        stack = (frames.raw.get("body") or {}).get("stackFrames") or []
        frame_id = stack[0]["id"] if frames.success and stack else None
    for where, condition in conditional:
        value = None
        if frame_id is not None:
            answer = backend.request("evaluate", {
                "expression": f"bool(({condition}\n))", "frameId": frame_id,
                "context": "watch"}, timeout=10)
            if answer.success:
                value = (answer.raw.get("body") or {}).get("result")
        if value == "False":
            watch.add(where)
            conditions[f"{where[0]}:{where[1]}"] = condition
        else:
            close.add(where)
    return {"close": sorted(close), "watch": sorted(watch - close),
            "conditions": conditions}

def tell_python_window(say, number: int, result: dict, python_lines: dict) -> str | None:
    """After a debugpy capture: say where the window closed early, and which conditional
    breakpoints the thread passed unobserved. Returns the capture's end reason when a
    breakpoint or a debugger stop closed it."""
    for path, line in result.get("python_passed") or ():
        condition = python_lines["conditions"].get(f"{path}:{line}", "")
        say("output", {"category": "important", "output":
            f"ptdebug: in capture {number} the recorded thread passed the breakpoint at "
            f"{path}:{line} without stopping: its condition `{condition}` was false when "
            "the window opened, and debugpy cannot evaluate it while the thread is "
            "recorded\n"})
    if result.get("python_stop"):
        where = result["python_stop"]
        say("output", {"category": "console", "output":
            f"ptdebug: capture {number} closed early at the breakpoint at {where}, which "
            "the recorded thread reached in the window; debugpy stops there if its "
            "condition holds\n"})
        return f"the thread reached the breakpoint at {where}"
    return None

def tell_unwatched(say, capture, unwatched: dict) -> None:
    """Go: say which conditional breakpoints the recorded thread passed in the window
    without a stop (their condition was false when it opened; nobody could evaluate it
    while Delve was away)."""
    ips = capture.history.distinct_ips if unwatched else ()
    for address, stop in sorted(unwatched.items()):
        if any_between(ips, address, address + 1):
            say("output", {"category": "important", "output":
                f"ptdebug: in capture {capture.id} the recorded thread passed the "
                f"breakpoint at {stop.where} without stopping: its condition "
                f"`{stop.condition}` was false when the window opened, and no debugger "
                "can evaluate it while Delve is away\n"})

def native_position(pid: int, window) -> str | None:
    """`window.until` as the recorder takes it: FILE:LINE of native code (a second
    breakpoint closing the window) becomes the address of that line's first statement, in
    the library of the window's function; a symbol or an address is passed on as is."""
    spec = window.until
    file, _, line = (spec or "").rpartition(":")
    if not file or not line.isdigit():
        return spec
    if not window.function:
        raise AdapterError(f"recordWindow.until {spec!r}: a source line closes a window "
                           "that opens at a native function (recordWindow.function) of the "
                           "same library")
    from pt_decoder.errors import PtError
    from pt_decoder.image import Image
    from pt_decoder.lines import LineTable
    try:
        image = Image.from_process(pid, perf_map=False)
        found = image.find_symbol(window.function)
        module = image.module_at(found[0]) if found is not None else None
        if module is None:
            raise AdapterError(f"no function {window.function!r} in process "
                               f"{pid}")
        addresses = LineTable.for_elf(module.path, module.base).statement_addresses(
            file, int(line))
    except (PtError, OSError) as exc:
        raise AdapterError(f"recordWindow.until {spec!r}: {exc}") from None
    if not addresses:
        raise AdapterError(f"recordWindow.until {spec!r}: no code at that line in "
                           f"{module.path} (built with -g?)")
    return hex(min(addresses))

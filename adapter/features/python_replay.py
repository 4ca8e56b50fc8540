"""Replay in Python terms (issue 13 item 3): the recorded Python frames of a capture whose
recorder wrote Python frame samples, for reverse stepping and the Processor Trace scope.

Layer: features, beside reverse.py (its only user besides trace_scope.py). Reads a capture's
History with its PythonFrames attached (pt_decoder/python_frames.py; attached here, once, from
the bundle manifest's "python" table and the stream's PTWRITE samples) and the capture's
symbols; knows nothing of DAP messages beyond the frame dictionaries it builds.

What it decides (docs/python.md, "Replaying a Python capture"):
- The stack at a position, as `py-spy --native` merges them, innermost first: the native
  frames above the interpreter's innermost `_PyEval_EvalFrameDefault` activation (the C code
  the running Python line called into: libc, numpy, a C extension), then the recorded Python
  stack in place of the interpreter's frames. The interpreter's own frames under it (the eval
  loop's activations and the C glue between them) are not shown: the Python frames say what
  they ran.
- The debugger's own Python frames (debugpy's trace function calls some) are folded into the
  program's frame they interrupted (adapter/python/debugger_frames.py).
- Line steps in a Python frame move by Python line: `stepBack` to the first instruction of the
  previous line run (into a callee's last line: the exact reverse of what `sys.settrace`
  reports), `stepIn` to the next line run (into a callee's first line), `next` over calls,
  `stepOut` to the caller's next line after the frame returns.
- Breakpoints on a .py file are hit where a run of the line begins in a frame of that file
  (each iteration of a loop is a hit; the caller's line resumed after a call returns is not).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

INTERPRETER_LOOP = "_PyEval_EvalFrameDefault"
"""The function whose activations the Python frames stand in for (and its .cold part)."""


def python_history(capture):
    """The capture's History when it has Python attribution (attached on first use from the
    manifest's "python" table and the stream's PTWRITE samples), else None."""
    history = capture.history
    if history.python is not None:
        return history
    if getattr(history, "_python_checked", False):
        return None
    history._python_checked = True
    from adapter.recording.recording import TraceError
    try:  # debugpy's own frames are folded there: steps and stacks show the program's lines
        frames = capture.trace.python_frames(capture.trace.threads[capture.stream])
    except TraceError:
        return None  # a damaged table: the capture replays in native terms
    if frames is None or not len(frames):
        return None
    history.attach_python(frames)
    return history


def native_lines(capture):
    """The LineTable a Python capture's native frames and stop texts use: the modules that ran
    in the capture and carry their own line information (a C extension built with -g), not the
    interpreter (its frames are shown as Python frames) nor system libraries whose lines live
    in separate debug packages (reading libc's and libpython's took some 40 s here, for lines
    a Python developer does not step through)."""
    from adapter.recording.recording import has_own_lines
    from pt_decoder.lines import LineTable
    table = capture.trace.manifest.get("python") or {}
    interpreter = os.path.basename(str(table.get("interpreter") or "")) or None
    ips = capture.history.distinct_ips

    def accept(module) -> bool:
        name = os.path.basename(module.path)
        if interpreter and name.startswith(interpreter):
            return False
        lo, hi = module.load_address, module.load_address + module.size
        import bisect
        i = bisect.bisect_left(ips, lo)
        return i < len(ips) and ips[i] < hi and has_own_lines(module.path)

    return LineTable.for_image(capture.trace.symbols, accept=accept)


def frame_at(capture, position: int):
    """The recorded Python frame (PyFrame) at `position`, or None (no Python attribution, or
    no Python frame ran there)."""
    history = python_history(capture)
    return history.python_frame(position) if history is not None else None


def is_interpreter(name: str) -> bool:
    return name.startswith(INTERPRETER_LOOP)


@dataclass
class StackEntry:
    """One frame of the merged stack: native (position, python None) or Python."""

    position: int
    python: object = None
    """PyFrame for a Python frame."""


def merged_stack(capture, position: int, limit: int,
                 live_below: bool = False) -> list[StackEntry] | None:
    """The merged stack at `position`, innermost first (module docstring); None where no
    Python frame ran (the caller shows the native stack). `live_below`: the capture is of a
    live program whose stack the caller shows below this one, so the Python frames that stayed
    on the stack for the whole window under the innermost of them (lowest_depth) are left to
    the live stack: shown twice they were, recorded frames a user cannot evaluate in, with
    debugpy's own runner frames among them that its live stack hides. The innermost of them
    stays last, for `join_live` to show as its live twin at its recorded line (it moved in
    the window)."""
    history = python_history(capture)
    if history is None:
        return None
    stack = history.python_stack(position)
    if not stack or stack[-1] is None:
        return None
    if live_below:
        lowest = history.python.lowest_depth()
        if lowest is not None:
            stack = [f for f in stack if f is not None and f.depth >= lowest]
    out: list[StackEntry] = []
    native = position
    while native is not None and len(out) < limit:
        name, _ = capture.function(history.ip(native))
        if is_interpreter(name):
            break
        out.append(StackEntry(native))
        native = history.caller(native)
    for frame in reversed(stack):
        if len(out) >= limit:
            break
        out.append(StackEntry(position, frame))
    return out


def join_live(merged: list[StackEntry], live: list[dict]) -> list[dict]:
    """The live DAP frames to show under merged_stack(live_below=True), which ends with the
    innermost frame that stayed on the stack (taken off `merged` here). Its live twin (the
    same function in the same file, the first from the top) stands for it, so that the user
    can evaluate in it, at the line it was on at the replay position, its name saying when
    that is not the live line (its values are those of now); the live frames above the twin
    ran after the position and are not shown. When no twin is found (the thread has left
    that frame since: a window that closed before its function returned, a stop after it),
    the recorded frame stays in `merged`, and all of the live frames go under it."""
    stayed = merged[-1].python if merged else None
    if stayed is None:
        return live
    if stayed.filename:
        path = os.path.realpath(stayed.filename)
        short = stayed.qualname.rsplit(".", 1)[-1]
        for k, frame in enumerate(live):
            source = (frame.get("source") or {}).get("path") or ""
            if frame.get("name") in (stayed.qualname, short) and source and \
                    os.path.realpath(source) == path:
                twin = dict(frame)
                if twin.get("line") != stayed.line:
                    twin["line"] = stayed.line
                    twin["name"] = (f"{frame.get('name')} [line {stayed.line} at the replay "
                                    f"position; values of now]")
                merged.pop()
                return [twin] + live[k + 1:]
    return live


def frame_name(frame) -> str:
    if frame is None:
        return "[python frame not recorded]"
    return frame.qualname


# --- steps ----------------------------------------------------------------------------------
LANDING_SCAN = 4096
"""Instructions a line step looks through for the interpreter loop (_landing)."""


def step_back(capture, position: int):
    """History.Step: back by Python line, into callees (module docstring)."""
    return _landing(capture, python_history(capture).prev_python_line(position))


def _landing(capture, step):
    """`step` moved to the first instruction of its line run that the interpreter loop runs,
    within LANDING_SCAN instructions: a run that begins in the C returning from a callee (the
    callee's frame being cleared) then shows its Python line on top, not that C."""
    if step is None or step.reason != "found":
        return step
    history = python_history(capture)
    end = history.python.next_line_change(step.position) or len(history)
    for position in range(step.position, min(end, step.position + LANDING_SCAN)):
        if is_interpreter(capture.function(history.ip(position))[0]):
            return step._replace(position=position)
    return step


def step_forward(capture, position: int, over_calls: bool):
    """History.Step: on by Python line (`next`: over calls; `stepIn`: into them)."""
    return python_history(capture).next_python_line(position, over_calls=over_calls)


def step_out(capture, position: int):
    """(Step to the caller's next line once the frame at `position` returned, or None when it
    does not return in the history)."""
    history = python_history(capture)
    frames = history.python
    here = frames.frame_at(position)
    if here is None:
        return None
    target = position
    while True:
        change = frames.next_line_change(target)
        if change is None:
            return None
        target = change
        frame = frames.frame_at(target)
        if frame is not None and frame.depth < here.depth:
            break
    gap = history.gaps_between(position, target)
    if gap:
        from pt_decoder.history import Step
        # the last instruction before the gap, as History.next_line stops at one
        return Step(max(position, gap[0].position - 1), "gap", gap[0])
    return history.next_python_line(target, over_calls=True)


# --- breakpoints ----------------------------------------------------------------------------
def _same_file(a: str, b: str) -> bool:
    if a == b:
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def breakpoint_hits(capture, breakpoint_lines: dict[str, list[int]]) -> list[int]:
    """Positions, in order, where a run of a breakpoint line of a .py file begins in a frame of
    that file; a run that resumes the caller's line after a call returned is no hit, nor is
    the run in progress when the recording began."""
    history = python_history(capture)
    if history is None:
        return []
    wanted = {(path, line) for path, lines in breakpoint_lines.items()
              if path.endswith(".py") for line in lines}
    if not wanted:
        return []
    files = {path for path, _ in wanted}
    hits = []
    previous = None
    known: dict[str, str | None] = {}
    for position, frame in history.python.line_sequence():
        # the first run is the line in progress when the recording began (a record
        # breakpoint's own line, say), which began before the recorded history: no hit
        resumed = previous is None or previous.depth > frame.depth
        previous = frame
        if resumed:
            continue
        path = known.get(frame.filename, "")
        if path == "":
            path = known[frame.filename] = next(
                (p for p in files if _same_file(p, frame.filename)), None)
        if path is not None and (path, frame.line) in wanted:
            hits.append(position)
    return hits


# --- the Processor Trace scope --------------------------------------------------------------
def _runs(capture) -> list[tuple[int, int, object, bool]]:
    """(start, stop, frame, resumed) of every run of one Python line (line_sequence), its stop
    where the next Python run or a stretch without a Python frame begins; `resumed`: the run
    continues the line's execution after a call it made returned."""
    history = python_history(capture)
    frames = history.python
    runs = frames.line_sequence()
    out = []
    for k, (start, frame) in enumerate(runs):
        stop = runs[k + 1][0] if k + 1 < len(runs) else len(history)
        change = frames.next_line_change(start)
        if change is not None and change < stop:
            stop = change
        resumed = k > 0 and runs[k - 1][1].depth > frame.depth
        out.append((start, stop, frame, resumed))
    return out


def _cost(capture, start: int, stop: int) -> tuple[int, int, int]:
    """(instructions, ns, cycles) of positions start..stop-1."""
    history = capture.history
    thread = capture.trace.threads[capture.stream]
    times = thread.times_ns(capture.trace.tsc_hz)
    return (stop - start, times[stop - 1] - times[start],
            history.cycles(stop - 1) - history.cycles(start))


def run_at(capture, position: int) -> tuple[int, int, tuple[int, int, int]] | None:
    """(start, stop, cost) of the Python line run holding `position`, or None."""
    for start, stop, _, _ in _runs(capture):
        if start <= position < stop:
            return start, stop, _cost(capture, start, stop)
    return None


def line_costs(capture, code: int) -> list[tuple[int, int, int, int, int]]:
    """(line, instructions, ns, cycles, executions) of each line of code object `code` in the
    capture, in line order: what ran while it was the running Python line, native code under
    it included, its callees' lines not (adapter/lsp/hotlines.py counts the same way); a
    call's return continues the calling line's execution."""
    table: dict[int, list[int]] = {}
    for start, stop, frame, resumed in _runs(capture):
        if frame.code != code:
            continue
        entry = table.setdefault(frame.line, [0, 0, 0, 0])
        for k, value in enumerate(_cost(capture, start, stop)):
            entry[k] += value
        entry[3] += 0 if resumed else 1
    return [(line, n, ns, cycles, runs) for line, (n, ns, cycles, runs) in sorted(table.items())]

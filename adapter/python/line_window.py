"""A record window on a Python line, in Python terms: where it opens (when the thread next
runs the user's code at that line, after the debugger's trace function and the wait it
suspended the thread in are done) and where it closes (when that Python function returns,
or after N Python lines).

Layer: adapter.python. Reads the stopped thread through a PythonFrameProbe (frame_probe.py)
and the offsets of cpython_layout.py; lets the thread run through
adapter.capture.target.Target.run_thread_to. Knows nothing of DAP or debugpy: the caller
names the file and line.

Why a data breakpoint and not stepping: debugpy suspends a thread inside its trace
function, which the interpreter called at the start of the line (3.11: DO_TRACING in
Python/ceval.c sets the frame's instruction pointer to the line's first bytecode, then calls
it). Once released, the thread wakes from its wait, takes the GIL back and returns through
pydevd's Python code: hundreds of thousands of instructions that the stepper would crawl
through while the thread holds the GIL (issue 13: a 2,000-instruction window held nothing
but `take_gil` and `futex`). The interpreter writes the frame's instruction pointer as each
bytecode of that frame begins (3.11/3.12 `prev_instr` and 3.13 `instr_ptr` in
INSTRUCTION_START, 3.10 `f_lasti`), and nothing else writes it while the frame waits for
the trace function. So the thread runs at full speed with a data breakpoint on that word,
and its first write is the line's first bytecode starting: the window opens right after it.
(A first version watched the thread state's `_PyCFrame` pointer, written at every C to Python
call of pydevd's suspend loop: 2,500 stops a second, each holding the GIL, and debugpy's own
answer to `continue` took 300-700 ms.)
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

from .debugger_frames import DEBUGGER_FILES
from .frame_probe import PythonFrameProbe


@dataclass
class PythonEntry:
    """The user's frame at the breakpoint's line, found in the stopped thread."""

    frame: int
    depth: int
    """Python frames from it down, it included (the probe's depth of that frame)."""
    word: int
    """The frame's instruction pointer (or f_lasti): written as its next bytecode begins."""
    size: int
    value: int
    """What `word` holds while the frame waits for the trace function."""
    where: str
    """"score (service.py:42)"."""


def find_entry(probe: PythonFrameProbe, thread_id: int, path: str,
               line: int) -> PythonEntry | None:
    """The innermost frame of the thread whose pthread_self() is `thread_id` that runs `line`
    of `path` (compared as real paths); None when the thread has no such frame."""
    lay = probe.layout
    tstate = probe.tstate_of(thread_id)
    if tstate is None:
        return None
    wanted = os.path.realpath(path)
    chain = []
    frame = probe.current_frame(tstate)
    while frame and len(chain) < 10_000:
        frame, data = probe._python_frame(frame)
        if not frame:
            break
        code, index, previous = probe._parse(data)
        chain.append((frame, code, index))
        frame = previous
    for position, (frame, code, index) in enumerate(chain):
        info = probe.codes.get(probe.code_id(code))
        if info is None or probe.real_path(info.filename) != wanted or info.line(index) != line:
            continue
        size = 4 if lay.instr_kind == "lasti" else 8
        word = frame + lay.frame_instr
        value = int.from_bytes(probe.memory.read(word, size), "little")
        return PythonEntry(frame, len(chain) - position, word, size, value,
                           f"{info.qualname} ({os.path.basename(info.filename)}:{line})")
    return None


def run_to_entry(target, tid: int, probe: PythonFrameProbe, entry: PythonEntry, *,
                 timeout: float, stop_asked, clock=time.monotonic) -> None:
    """Let `tid` run until the entry's frame begins its next bytecode (see the module
    docstring), leaving it stopped right after that write. Raises TargetError (the thread
    ended, `timeout` on `clock`, `stop_asked()`) or OSError (no debug register free)."""

    def arrived(regs) -> bool:
        return int.from_bytes(probe.memory.read(entry.word, entry.size), "little") != entry.value

    target.run_thread_to(tid, entry.word, arrived, what=entry.where, timeout=timeout,
                         stop_asked=stop_asked, size=entry.size, clock=clock)


@dataclass
class PythonWindowEnd:
    """When a Python window closes, checked at each of the probe's reads: `depth` set, when
    the entry's function has returned (the thread runs a frame under it, or none); `lines`
    set, once that many Python lines have begun (line events as sys.settrace counts them:
    the breakpoint's line is the first). `request`: adapter.capture.stepper.EndRequest."""

    request: object
    where: str
    depth: int | None = None
    lines: int | None = None
    entry_depth: int | None = None
    """The entry frame's depth: lines are counted from the first read in it. A window opened
    where the thread stands (data breakpoints hold every debug register) begins in the
    debugger's suspend code, whose standard-library frames (threading, queue) run over the
    entry's frame and are not the program's lines."""
    _last: tuple = ()
    _count: int = 0
    _counting: bool = False

    def check(self, probe: PythonFrameProbe, frame: int, code: int, index: int,
              depth: int) -> None:
        if self.depth is not None and (not frame or depth < self.depth):
            self.request.end(f"{self.where} returned")
            return
        if not self._counting:
            self._counting = self.entry_depth is None or (bool(frame) and
                                                          depth <= self.entry_depth)
        if self.lines is not None and frame and self._counting:
            info = probe.codes.get(probe.code_id(code))
            if info is not None and DEBUGGER_FILES.search(info.filename):
                return  # the debugger's trace function runs no line of the program
            at = (frame, info.line(index) if info is not None else index)
            if at != self._last:
                self._last = at
                self._count += 1
                if self._count > self.lines:
                    self.request.end(f"{self.lines} Python line{'s' * (self.lines != 1)} ran "
                                     f"from {self.where}")


def thread_pointer(tid: int) -> int:
    """The fs_base (pthread_self) of thread `tid`, read by seizing it for a moment (a recorder
    that never stops the thread, DBI, has no registers of it otherwise). Raises OSError."""
    from adapter.hw import ptrace as pt
    pt.seize(tid)
    try:
        pt.interrupt(tid)
        pt.waitpid(tid, pt.WALL)
        return pt.getregs(tid).fs_base
    finally:
        pt.detach(tid)


@dataclass
class ReturnWatch:
    """When a window recorded at full speed (the DBI recorder, which reads no Python frame)
    closes on its Python function's return: called after each drain of the recorder (every
    few ms), it reads the thread's frame chain from the process's memory while the thread
    runs, and closes the window through `request` once the entry's frame (its address and
    code object) has been off the chain at two reads in a row (one read may meet a chain
    being pushed or popped). So the window ends within a drain or two after the return,
    not at its instruction: docs/recording.md says so."""

    probe: PythonFrameProbe
    tstate: int
    frame: int
    code: int
    where: str
    request: object
    """adapter.capture.stepper.EndRequest."""
    _off: int = 0

    @classmethod
    def of(cls, pid: int, tid: int, path: str, line: int, request) -> ReturnWatch | None:
        """The watch of the frame of thread `tid` (stopped by the debugger at `path`:`line`),
        None when the thread has no such frame. Raises OSError, cpython_layout.LayoutError."""
        from .cpython_layout import find_python
        probe = PythonFrameProbe(pid, find_python(pid))
        pointer = thread_pointer(tid)
        entry = find_entry(probe, pointer, path, line)
        tstate = probe.tstate_of(pointer)
        if entry is None or tstate is None:
            probe.close()
            return None
        _frame, data = probe._python_frame(entry.frame)
        code = probe._parse(data)[0] if data is not None else 0
        return cls(probe, tstate, entry.frame, code, entry.where, request)

    def __call__(self) -> None:
        if self.request.reason is not None:
            return
        try:
            on = self._on_chain()
        except OSError:
            return                      # a read in a chain that moved: the next one decides
        self._off = 0 if on else self._off + 1
        if self._off >= 2:
            self.request.end(f"{self.where} returned")

    def _on_chain(self) -> bool:
        probe = self.probe
        frame = probe.current_frame(self.tstate)
        for _ in range(10_000):
            frame, data = probe._python_frame(frame)
            if not frame or data is None:
                return False
            code, _index, previous = probe._parse(data)
            if frame == self.frame and code == self.code:
                return True
            frame = previous
        return False

    def close(self) -> None:
        self.probe.close()

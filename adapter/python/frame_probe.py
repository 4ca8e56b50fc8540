"""The Python probe of the ptrace stepper: at each stop of the recorded thread it reads which
Python frame the thread runs (code object, instruction), which the stepper writes into the
trace as a PTWRITE packet whenever it changes (adapter/capture/stepper.py, `ptw_probe`), and
it keeps the table of the code objects it met (name, file, first line, line table) for the
bundle's manifest.

Layer: adapter.python. Reads the stopped thread's memory through adapter.hw.ptrace with the
offsets of cpython_layout.py; the sample encoding and line tables are pt_decoder's
(python_frames.py). Knows nothing of the stepper's internals, traces or DAP.

Where it reads: only the interpreter loop (_PyEval_EvalFrameDefault and its cold part) sets
the current frame and its instruction pointer, and it moves to the next bytecode through an
indirect jump (DISPATCH, `goto *opcode_targets[opcode]`), at which the stepper always stops.
So the state is read at the first stop after each such jump (in the next bytecode's body, or
at its own dispatch: either way the bytecode the jump went to), and at the first stop of the
window; at other stops nothing is read. One read per executed bytecode: a frame pushed or
popped is followed by a dispatch into it, a line changes with a bytecode. (3.10: at every
stop in the loop, see `_every_loop_stop`.) One more: when an invocation of the loop returns
into C (a C function that called Python: numpy's __array_function__ dispatch, map, sorted),
no dispatch follows; the first stop outside the loop whose RSP is above the loop's stack
frame reads the caller's frame.

Cost per read (3.11): the thread state is found once per thread (a walk of the interpreter's
thread list); then three preads of /proc/PID/mem: tstate->cframe, cframe->current_frame, and
the frame's first bytes (code object, instruction pointer). A code object is read once, the
first time it is met (a few more reads). Reading the three in one process_vm_readv at the
addresses of the last read was tried and measured slower here (25 us against 15 us a read:
the kernel pins each remote page either way). docs/PERFORMANCE.md has the measured cost.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from adapter.hw import ptrace as pt
from pt_decoder.python_frames import MAX_CODE_ID, NO_FRAME, CodeInfo, encode_sample

from .cpython_layout import FRAME_OWNED_BY_CSTACK, CPythonLayout, PythonImage, find_python

MAX_STRING = 4096
MAX_LINETABLE = 1 << 20
MAX_DEPTH = 20_000
RELOOK_EVERY = 64
OUTSIDE, IN_LOOP, DISPATCH = 0, 1, 2
"""Stops between two walks of the thread list while the thread has no thread state yet."""


@dataclass
class LineStops:
    """The Python lines a window watches for the DAP session (debugpy's breakpoints inside a
    record window, adapter/features/record_breakpoints.py): reaching a line of `close` asks
    `request` to close the window there, so that debugpy, at full speed again, evaluates the
    breakpoint and stops; the lines of `watch` the thread ran are collected in `passed` (a
    conditional breakpoint whose condition was false when the window opened: the user is
    told that it was passed unobserved). Paths as debugpy's `source.path`."""

    close: frozenset
    watch: frozenset
    request: object
    """adapter.capture.stepper.EndRequest."""
    passed: set = field(default_factory=set)
    reached: str | None = None
    """FILE:LINE of the `close` line that closed the window."""


class PythonFrameProbe:
    """`probe(regs) -> sample | None` for the threads of process `pid` (the registers say which
    thread: fs_base is its pthread_self); None where the thread has no Python thread state (yet)
    or the memory cannot be read. `codes` collects what was read of each code object met."""

    def __init__(self, pid: int, image: PythonImage, memory: pt.Memory | None = None):
        self.pid = pid
        self.image = image
        self.layout: CPythonLayout = image.layout
        self.memory = memory or pt.Memory(pid)
        self._own_memory = memory is None
        self._tstates: dict[int, int] = {}
        self._misses: dict[int, int] = {}
        self.codes: dict[int, CodeInfo] = {}
        """Table id -> what was read of the code object."""
        self._ids: dict[int, int] = {}
        self.unreadable_codes: set[int] = set()
        self.initial_stack: list[tuple[int, int]] | None = None
        """(code id, index) of the frames under the first one read, outermost first."""
        self._last_frame = self._last_previous = self._depth = 0
        self.walks = 0
        """How many times the frame chain was walked to know the depth."""
        self.reads = 0
        """How many times the probe ran."""
        lay = self.layout
        self._frame_size = lay.frame_read_size
        self._owner = lay.frame_owner
        self._shims = self._owner is not None and lay.version[:2] >= (3, 12)
        """Entry shims exist (3.12+; 3.11's frames have an owner but none is the C stack's)."""
        self._shim_of = self._past_shim_frame = 0
        """_past_shim's last question and answer."""
        self._eval = [(lo, hi, code) for (lo, hi), code in
                      zip(image.eval_ranges, image.eval_code, strict=True)]
        self._where: dict[int, int] = {}
        self._every_loop_stop = lay.instr_kind == "lasti"
        """3.10: a frame's f_lasti is -1 (its first line) until its first bytecode's dispatch;
        reading at every stop in the loop sees that state as 3.11+'s RESUME shows it."""
        self._pending = True
        """Read at the next stop (the window's first, or one after a dispatch)."""
        self._loop_rsp: int | None = None
        """RSP at the last stop in the loop: a stop outside it with a higher RSP is in C the
        loop returned to."""
        self.skipped = 0
        """Stops where nothing was read."""
        self.stops: LineStops | None = None
        self._stop_files: set[str] = set()
        self._file_of: dict[int, str | None] = {}
        """Code id -> its file as a `stops` path, None when no watched line is in it."""
        self.window_end = None
        """line_window.PythonWindowEnd: closes the window when its function returns, or
        after N Python lines."""

    def watch_lines(self, stops: LineStops) -> None:
        """Watch `stops` from the next read on (see LineStops)."""
        self.stops = stops
        self._stop_files = {path for path, _ in stops.close | stops.watch}
        self._file_of.clear()

    # -- thread state -----------------------------------------------------------------------

    def _find_tstate(self, thread_id: int) -> int | None:
        lay = self.layout
        read = self.memory.read_u64
        interp = read(self.image.runtime + lay.runtime_interpreters_head)
        seen = 0
        while interp and seen < 64:
            tstate = read(interp + lay.interp_threads_head)
            count = 0
            while tstate and count < 10_000:
                if read(tstate + lay.tstate_thread_id) == thread_id:
                    return tstate
                tstate = read(tstate + lay.tstate_next)
                count += 1
            interp = read(interp)  # PyInterpreterState.next is its first field (3.10-3.13)
            seen += 1
        return None

    def tstate_of(self, thread_id: int) -> int | None:
        """The PyThreadState* of the thread whose pthread_self() is `thread_id`, or None."""
        tstate = self._tstates.get(thread_id)
        if tstate is not None:
            return tstate
        misses = self._misses.get(thread_id, 0)
        self._misses[thread_id] = misses + 1
        if misses % RELOOK_EVERY:
            return None
        try:
            tstate = self._find_tstate(thread_id)
        except OSError:
            return None
        if tstate is not None:
            self._tstates[thread_id] = tstate
        return tstate

    # -- the frame --------------------------------------------------------------------------

    def current_frame(self, tstate: int) -> int:
        """The thread's current frame (0: none)."""
        lay = self.layout
        read = self.memory.read_u64
        if lay.tstate_cframe is not None:
            cframe = read(tstate + lay.tstate_cframe)
            return read(cframe + lay.cframe_current_frame) if cframe else 0
        return read(tstate + lay.tstate_frame)

    def where(self, rip: int) -> int:
        """OUTSIDE the interpreter loop, IN_LOOP, or at a DISPATCH: an indirect JMP (FF /4,
        SDM Vol. 2A "JMP") of the loop, a move to the next bytecode."""
        found = self._where.get(rip)
        if found is None:
            found = OUTSIDE
            for lo, hi, code in self._eval:
                if lo <= rip < hi:
                    i = rip - lo
                    while i < len(code) - 1 and (code[i] in (0x2E, 0x3E) or
                                                 0x40 <= code[i] <= 0x4F):
                        i += 1   # segment/notrack and REX prefixes
                    jmp = i < len(code) - 1 and code[i] == 0xFF and (code[i + 1] >> 3) & 7 == 4
                    found = DISPATCH if jmp else IN_LOOP
                    break
            self._where[rip] = found
        return found

    def __call__(self, regs) -> int | None:
        where = self.where(regs.rip) if self._eval else DISPATCH
        if where != OUTSIDE:
            self._loop_rsp = regs.rsp
        elif self._loop_rsp is not None and regs.rsp > self._loop_rsp:
            # above the loop's stack frame: that invocation of the loop returned into C (a
            # C function that called Python): the current frame is its caller's again
            self._pending = True
            self._loop_rsp = None
        if not self._pending and not (where == IN_LOOP and self._every_loop_stop):
            self._pending = where == DISPATCH
            self.skipped += 1
            return None  # the stepper writes nothing: the frame read last still holds
        self.reads += 1
        tstate = self.tstate_of(regs.fs_base)
        if tstate is None:
            return None
        self._pending = where == DISPATCH
        try:
            frame = self.current_frame(tstate)
            frame, data = self._python_frame(frame)
            if not frame:
                self._last_frame = self._last_previous = self._depth = 0
                if self.window_end is not None:
                    self.window_end.check(self, 0, 0, 0, 0)
                return NO_FRAME
            code, index, previous = self._parse(data)
            if previous and self._shims and previous != self._last_frame:
                previous = self._past_shim(previous)
            if self.stops is not None:
                closing = self._watch(frame, code, index, previous)
                if closing is not None:
                    # the window closes here: what stands is the caller at the breakpoint's
                    # line (the stepper puts it on the last instruction recorded)
                    return encode_sample(self.code_id(closing[0]), closing[1], self._depth)
            depth = self._depth_of(frame, previous)
            if self.window_end is not None:
                self.window_end.check(self, frame, code, index, depth)
        except (OSError, IndexError, ValueError):
            return None  # a short read, a pointer into nothing: no sample (never a failure)
        self._last_frame, self._last_previous, self._depth = frame, previous, depth
        return encode_sample(self.code_id(code), index, depth)

    def _watch(self, frame: int, code: int, index: int,
               previous: int) -> tuple[int, int] | None:
        """The `stops` checks of one read. A line of `close` is caught when its frame pushes
        the first frame over it: the debugger's trace function runs at the start of each line
        (3.11: DO_TRACING sets the frame's instruction pointer, then calls it) and pushes a
        frame as soon as it evaluates a condition or suspends the thread, before either
        happened; the caller's instruction pointer is read again then, being set after the
        dispatch at which the probe last read it. A frame that stays on the line is caught
        at its next bytecode (`watch`: passed, whatever the debugger did). Returns the
        caller's (code object, code unit index) when it closes the window."""
        stops = self.stops
        if previous and previous == self._last_frame and stops.close and stops.reached is None:
            try:
                _, caller = self._python_frame(previous)
                if caller is not None:
                    caller_code, caller_index, _ = self._parse(caller)
                    where = self._line_of(caller_code, caller_index)
                    if where is not None and where in stops.close:
                        stops.reached = f"{where[0]}:{where[1]}"
                        stops.request.end(f"the thread reached the breakpoint at "
                                          f"{stops.reached}")
                        return caller_code, caller_index
            except (OSError, ValueError):
                pass  # unreadable: the debugger's own stop still closes the window
        if stops.watch:
            where = self._line_of(code, index)
            if where is not None and where in stops.watch:
                stops.passed.add(where)
        return None

    def at_close_line(self, regs) -> bool:
        """Whether the thread stands on a line of `stops.close` now (read afresh): the
        debugger's tracer, called there, may evaluate the breakpoint or suspend the thread,
        which the window must see (adapter/python/debugger_code.py). True when unreadable."""
        stops = self.stops
        if stops is None or not stops.close:
            return False
        try:
            tstate = self.tstate_of(regs.fs_base)
            if tstate is None:
                return True
            frame, data = self._python_frame(self.current_frame(tstate))
            if not frame:
                return False
            code, index, _ = self._parse(data)
            return self._line_of(code, index) in stops.close
        except (OSError, IndexError, ValueError):
            return True

    def _line_of(self, code: int, index: int) -> tuple[str, int] | None:
        """(path, line) of code unit `index` of code object `code`, None when its file has
        no watched line."""
        ident = self.code_id(code)
        if ident not in self._file_of:
            info = self.codes.get(ident)
            path = None
            if info is not None:
                path = self.real_path(info.filename)
            self._file_of[ident] = path if path in self._stop_files else None
        path = self._file_of[ident]
        if path is None:
            return None
        return path, self.codes[ident].line(index)

    def real_path(self, filename: str) -> str:
        """A code object's co_filename as a real path (a relative one is the process's
        working directory's)."""
        if not os.path.isabs(filename):
            filename = os.path.join(f"/proc/{self.pid}/cwd", filename)
        return os.path.realpath(filename)

    def _python_frame(self, frame: int) -> tuple[int, bytes | None]:
        """(frame, its first bytes), an entry shim (3.12+, owned by the C stack) replaced by
        the Python frame it was pushed over; (0, None) where there is none."""
        lay = self.layout
        while frame:
            data = self.memory.read(frame, self._frame_size)
            if self._owner is None or data[self._owner] != FRAME_OWNED_BY_CSTACK:
                return frame, data
            frame = int.from_bytes(data[lay.frame_previous:lay.frame_previous + 8], "little")
        return 0, None

    def _past_shim(self, previous: int) -> int:
        """The Python frame under `previous` (itself, unless it is an entry shim owned by the
        C stack: 3.12+ pushes one under every Python function called from C, a debugger's
        sys.monitoring callback among them). Every check of a push or a pop compares Python
        frames; with the shim in between, a frame that C pushed over the last one read was
        not seen as pushed over it (the close lines' check missed every line on 3.12+, and
        the depth was walked again). The last answer is kept: a frame read again and again
        (the same caller each time) costs one read of it in all."""
        if previous != self._shim_of:
            self._shim_of = previous
            self._past_shim_frame = self._python_frame(previous)[0]
        return self._past_shim_frame

    def _parse(self, data: bytes) -> tuple[int, int, int]:
        """(code object, code unit index, previous frame) of a frame's first bytes."""
        lay = self.layout
        code = int.from_bytes(data[lay.frame_code:lay.frame_code + 8], "little")
        if lay.instr_kind == "lasti":
            index = int.from_bytes(data[lay.frame_instr:lay.frame_instr + 4], "little",
                                   signed=True)
        else:
            instr = int.from_bytes(data[lay.frame_instr:lay.frame_instr + 8], "little")
            index = (instr - (code + lay.code_adaptive)) // 2
        previous = int.from_bytes(data[lay.frame_previous:lay.frame_previous + 8], "little")
        return code, index, previous

    def _depth_of(self, frame: int, previous: int) -> int:
        """How many Python frames the chain holds from `frame` down: from the last read when
        the frame is the same, one pushed over it, or the one under it (no read); else by
        walking the chain (a C function calling Python, the first read), which also records
        the window's initial stack."""
        if frame == self._last_frame and self._depth:
            return self._depth
        if previous and previous == self._last_frame and self._depth:
            return self._depth + 1
        if frame == self._last_previous and self._depth > 1:
            return self._depth - 1
        self.walks += 1
        chain = []
        below = previous
        while below and len(chain) < MAX_DEPTH:
            below, data = self._python_frame(below)
            if not below:
                break
            code, index, below = self._parse(data)
            chain.append((code, index))
        if self.initial_stack is None:
            self.initial_stack = [(self.code_id(code), index) for code, index in reversed(chain)]
        return len(chain) + 1

    # -- code objects -----------------------------------------------------------------------

    def code_id(self, code: int) -> int:
        """The table id of the code object at `code` (read the first time it is met)."""
        ident = self._ids.get(code)
        if ident is None:
            ident = self._ids[code] = min(len(self._ids) + 1, MAX_CODE_ID)
            self._read_code(code, ident)
        return ident

    def _read_code(self, code: int, ident: int) -> None:
        lay = self.layout
        read = self.memory.read_u64
        try:
            qualname = self.read_str(read(code + lay.code_qualname))
            filename = self.read_str(read(code + lay.code_filename))
            first = int.from_bytes(self.memory.read(code + lay.code_firstlineno, 4), "little",
                                   signed=True)
            linetable = self.read_bytes(read(code + lay.code_linetable))
        except (OSError, ValueError):
            self.unreadable_codes.add(code)
            return
        self.codes[ident] = CodeInfo(qualname, filename, first, linetable,
                                     lay.linetable_format, code)

    def read_str(self, obj: int) -> str:
        """A compact str object's text. Raises ValueError for what is not one."""
        lay = self.layout
        if not obj:
            raise ValueError("NULL str")
        length = self.memory.read_u64(obj + lay.unicode_length)
        state = int.from_bytes(self.memory.read(obj + lay.unicode_state, 4), "little")
        kind = (state >> 2) & 7       # interned:2, kind:3, compact:1, ascii:1 (Include/cpython/
        compact = (state >> 5) & 1    # unicodeobject.h, PyASCIIObject.state, 3.10-3.13)
        ascii_ = (state >> 6) & 1
        if not compact or kind not in (1, 2, 4) or length > MAX_STRING:
            raise ValueError("not a compact str")
        start = obj + (lay.unicode_ascii_header if ascii_ else lay.unicode_compact_header)
        raw = self.memory.read(start, length * kind)
        codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
        return raw.decode(codec)

    def read_bytes(self, obj: int) -> bytes:
        lay = self.layout
        if not obj:
            raise ValueError("NULL bytes")
        size = self.memory.read_u64(obj + lay.bytes_size)
        if size > MAX_LINETABLE:
            raise ValueError("bytes object too large")
        return self.memory.read(obj + lay.bytes_data, size)

    def manifest_entry(self) -> dict:
        """The bundle manifest's "python" entry: what decoding needs to name the samples."""
        lay = self.layout
        return {"version": ".".join(map(str, lay.version)), "layout": lay.source,
                "interpreter": self.image.path, "linetable_format": lay.linetable_format,
                "sample_encoding": "pt_decoder/python_frames.py",
                "codes": {str(ident): info.to_json() for ident, info in self.codes.items()},
                "initial_stack": [list(f) for f in self.initial_stack or ()],
                "unreadable_codes": [f"{a:#x}" for a in sorted(self.unreadable_codes)]}

    def close(self) -> None:
        if self._own_memory:
            self.memory.close()


def probe_for(pid: int) -> PythonFrameProbe:
    """The probe for a process that runs CPython. Raises cpython_layout.LayoutError."""
    return PythonFrameProbe(pid, find_python(pid))

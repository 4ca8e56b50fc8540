"""Python attribution of a decoded history: which Python frame (code object, line) was running
at each recorded instruction, from the PTWRITE samples the recorder wrote into the trace.

Layer: pt_decoder, beside history.py and lines.py. Input: the (position, value) samples of a
decoded stream's PTWRITE packets and the bundle's table of code objects (what the recorder
read of each: qualified name, file, first line, line table). Knows CPython's line-table
formats (a file format, like DWARF's line program in lines.py) and nothing of processes,
structure layouts or the adapter; adapter/python/frame_probe.py writes the samples.

The sample (one 64-bit PTWRITE payload, so that the stepper, the bundles, the exports and an
Intel PT capture whose program writes PTWRITEs share one path):

    bit 63       1: a Python sample (a goroutine id never sets it)
    bits 44..62  index + 1 of the code unit the frame is executing (0: before its first
                 instruction; 19 bits: code objects of up to 512 Ki code units)
    bits 24..43  depth of the frame: how many frames its thread's chain holds, itself
                 included (20 bits)
    bits 0..23   id of the code object in the bundle's table (1..16 M; 0: no frame)

A value with the code id 0 says "no Python frame" (the thread runs no Python code: before
the interpreter starts, or a thread that only runs C). A sample at position p holds from p to
the next sample: the recorder writes one whenever the value read at a stop changed, so the
change happened at p or in the few instructions before it (docs/python.md). The depth gives
the Python call stack: a sample at depth d keeps the d-1 frames below it as the last samples
at those depths left them (a caller's last sample is at its call), and the table's
"initial_stack" gives the frames below the window's first sample.

Line tables (CPython sources cited per format):
  "3.11"  Objects/locations.md of CPython 3.11-3.13 (co_linetable: entries of 1-8 code units,
          a first byte 1cccclll, then varint/svarint fields per code);
  "3.10"  Objects/lnotab_notes.txt of CPython 3.10 (co_linetable: (byte delta, signed line
          delta) pairs, line delta -128 = no line).
"""
from __future__ import annotations

import base64
import bisect
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = ["PYTHON_SAMPLE", "CodeInfo", "PyFrame", "PythonFrames", "decode_sample",
           "encode_sample", "line_ranges", "python_samples"]

PYTHON_SAMPLE = 1 << 63
_INDEX_SHIFT, _INDEX_BITS = 44, 19
_DEPTH_SHIFT, _DEPTH_BITS = 24, 20
_CODE_BITS = 24
MAX_CODE_ID = (1 << _CODE_BITS) - 1
NO_FRAME = PYTHON_SAMPLE
"""The sample of a thread that runs no Python frame."""


def encode_sample(code_id: int, index: int, depth: int = 1) -> int:
    """The PTWRITE payload for "code object `code_id` of the table, executing code unit
    `index` (-1: before its first instruction), `depth` frames deep" (index and depth
    clamped to their fields). code_id 0: no frame."""
    if code_id == 0:
        return NO_FRAME
    if not 0 < code_id <= MAX_CODE_ID:
        raise ValueError(f"code id {code_id} does not fit the sample (1..{MAX_CODE_ID})")
    slot = max(0, min(index + 1, (1 << _INDEX_BITS) - 1))
    depth = max(1, min(depth, (1 << _DEPTH_BITS) - 1))
    return PYTHON_SAMPLE | (slot << _INDEX_SHIFT) | (depth << _DEPTH_SHIFT) | code_id


def decode_sample(value: int) -> tuple[int, int, int] | None:
    """(code id, code unit index, depth) of a Python sample; (0, -1, 0) for "no Python
    frame"; None for a value that is no Python sample (a goroutine id, a program's own
    PTWRITE)."""
    if not value & PYTHON_SAMPLE:
        return None
    code = value & MAX_CODE_ID
    if code == 0:
        return 0, -1, 0
    return (code, ((value >> _INDEX_SHIFT) & ((1 << _INDEX_BITS) - 1)) - 1,
            (value >> _DEPTH_SHIFT) & ((1 << _DEPTH_BITS) - 1))


def python_samples(ptwrites) -> list[tuple[int, int]]:
    """The Python samples among a flow's PTWRITE values (FlowResult.ptwrites(): (position,
    value), each on the instruction the recorder meant); a goroutine id or a program's own
    PTWRITE is left out."""
    return [(pos, value) for pos, value in ptwrites if decode_sample(value) is not None]


def _varint(data: bytes, i: int) -> tuple[int, int]:
    b = data[i]
    i += 1
    value = b & 63
    shift = 6
    while b & 64:
        b = data[i]
        i += 1
        value |= (b & 63) << shift
        shift += 6
    return value, i


def _svarint(data: bytes, i: int) -> tuple[int, int]:
    value, i = _varint(data, i)
    return (-(value >> 1) if value & 1 else value >> 1), i


def line_ranges(linetable: bytes, firstlineno: int, fmt: str) -> list[tuple[int, int, int | None]]:
    """[(first code unit, end code unit, line or None)] of a code object's line table, in order.
    Raises ValueError for an unknown format or a table that ends mid-entry."""
    out: list[tuple[int, int, int | None]] = []
    line = firstlineno
    unit = 0
    try:
        if fmt == "3.11":
            i = 0
            while i < len(linetable):
                first = linetable[i]
                i += 1
                code = (first >> 3) & 15
                length = (first & 7) + 1
                if code == 15:      # no location
                    where = None
                elif code == 14:    # long form: line delta, end line delta, column, end column
                    delta, i = _svarint(linetable, i)
                    line += delta
                    for _ in range(3):
                        _, i = _varint(linetable, i)
                    where = line
                elif code == 13:    # no column: line delta
                    delta, i = _svarint(linetable, i)
                    line += delta
                    where = line
                elif code >= 10:    # one-line form: line delta code-10, column, end column
                    line += code - 10
                    i += 2
                    where = line
                else:               # short form: same line, one column byte
                    i += 1
                    where = line
                out.append((unit, unit + length, where))
                unit += length
        elif fmt == "3.10":
            for i in range(0, len(linetable) - 1, 2):
                byte_delta = linetable[i]
                line_delta = linetable[i + 1] - 256 if linetable[i + 1] >= 128 else linetable[i + 1]
                if line_delta != -128:
                    line += line_delta
                end = unit + byte_delta // 2
                if end > unit:
                    out.append((unit, end, None if line_delta == -128 else line))
                unit = end
        else:
            raise ValueError(f"unknown line table format {fmt!r} (known: 3.10, 3.11)")
    except IndexError:
        raise ValueError(f"the line table ends inside an entry (after code unit {unit})") from None
    return out


@dataclass
class CodeInfo:
    """What the recorder read of one code object."""

    qualname: str
    filename: str
    firstlineno: int
    linetable: bytes
    fmt: str
    """Line table format: "3.11" (3.11-3.13) or "3.10"."""
    address: int = 0
    """Where the code object was in the recorded process."""
    _starts: list = field(default_factory=list, repr=False)
    _ranges: list = field(default_factory=list, repr=False)

    def line(self, index: int) -> int:
        """The source line of code unit `index` (-1, before the first instruction: the first
        line; a unit without a location: the line of the nearest one before it)."""
        if index < 0:
            return self.firstlineno
        if not self._ranges:
            try:
                self._ranges = line_ranges(self.linetable, self.firstlineno, self.fmt)
            except ValueError:
                self._ranges = [(0, 1 << 30, self.firstlineno)]
            self._starts = [r[0] for r in self._ranges]
        k = bisect.bisect_right(self._starts, index) - 1
        while k >= 0 and self._ranges[k][2] is None:
            k -= 1
        return self.firstlineno if k < 0 else self._ranges[k][2]

    def to_json(self) -> dict:
        return {"qualname": self.qualname, "filename": self.filename,
                "firstlineno": self.firstlineno, "fmt": self.fmt,
                "address": f"{self.address:#x}",
                "linetable": base64.b64encode(self.linetable).decode("ascii")}

    @classmethod
    def from_json(cls, obj: dict) -> CodeInfo:
        return cls(str(obj["qualname"]), str(obj["filename"]), int(obj["firstlineno"]),
                   base64.b64decode(obj["linetable"]), str(obj.get("fmt", "3.11")),
                   int(str(obj.get("address", "0")), 0))


class PyFrame(NamedTuple):
    """The Python frame an instruction ran under."""

    qualname: str
    filename: str
    line: int
    code: int
    """Id of the code object in the bundle's table (0 when the table lacks it)."""
    index: int
    """Code unit being executed (-1: before the first)."""
    depth: int
    """Frames in the thread's chain, this one included (0: unknown)."""


class PythonFrames:
    """Position -> Python frame (and call stack) over one recorded thread of `length`
    instructions.

    Built from the samples in position order; positions before the first sample and those
    under a "no Python frame" sample have no frame (None). `initial_stack`: [(code id,
    index)] of the frames below the first sample's, outermost first (the recorder read them
    when the window opened)."""

    def __init__(self, samples, codes: dict[int, CodeInfo], length: int,
                 initial_stack=()):
        self.codes = codes
        self.length = length
        self.initial_stack = [(int(c), int(i)) for c, i in initial_stack]
        self._pos: list[int] = []
        self._key: list[tuple[int, int, int]] = []   # (code id, index, depth)
        for pos, value in sorted(samples, key=lambda s: s[0]):
            decoded = decode_sample(value)
            if decoded is None or not 0 <= pos < max(length, 1):
                continue
            if self._pos and self._pos[-1] == pos:
                self._key[-1] = decoded
                continue
            self._pos.append(pos)
            self._key.append(decoded)
        self._lines: list[tuple[int, int, int] | None] | None = None
        self._lowest_depth: int | bool | None = False  # False: not worked out yet

    @classmethod
    def from_manifest(cls, table: dict, samples, length: int) -> PythonFrames:
        """From the bundle manifest's "python" entry ({"codes": {id: CodeInfo json},
        "initial_stack": [[id, index], ...]})."""
        codes = {int(ident): CodeInfo.from_json(info)
                 for ident, info in (table.get("codes") or {}).items()}
        return cls(samples, codes, length, table.get("initial_stack") or ())

    def lowest_depth(self) -> int | None:
        """The smallest depth any sample has (the outermost frame the thread was in at some
        point of the window), None without samples: the frames at or below it stayed
        on the stack for the whole window."""
        if self._lowest_depth is False:  # asked on every stackTrace of a replaying thread
            self._lowest_depth = min((key[2] for key in self._key if key[2] > 0), default=None)
        return self._lowest_depth

    def __len__(self) -> int:
        return len(self._pos)

    def _segment(self, pos: int) -> int:
        return bisect.bisect_right(self._pos, pos) - 1

    def _frame(self, code: int, index: int, depth: int) -> PyFrame:
        info = self.codes.get(code)
        if info is None:
            return PyFrame(f"<code object {code}>", "", 0, code, index, depth)
        return PyFrame(info.qualname, info.filename, info.line(index), code, index, depth)

    def _frame_of(self, k: int) -> PyFrame | None:
        code, index, depth = self._key[k]
        return None if code == 0 else self._frame(code, index, depth)

    def frame_at(self, pos: int) -> PyFrame | None:
        """The Python frame instruction `pos` ran under, or None (no frame known there).
        Raises IndexError for a position outside the history."""
        if not 0 <= pos < self.length:
            raise IndexError(f"position {pos} is outside the history (0..{self.length - 1})")
        k = self._segment(pos)
        return None if k < 0 else self._frame_of(k)

    def stacks(self):
        """(first position, stack) of every segment in order; a stack is a tuple of
        (code id, index) pairs, outermost first, (0, -1) where a frame is unknown; () where
        no Python frame runs."""
        stack = list(self.initial_stack)
        for k, pos in enumerate(self._pos):
            code, index, depth = self._key[k]
            if code == 0:
                yield pos, ()
                continue
            if k == 0 and len(stack) != depth - 1:
                stack = stack[-(depth - 1):] if depth > 1 else []
                stack = [(0, -1)] * (depth - 1 - len(stack)) + stack
            del stack[depth - 1:]
            while len(stack) < depth - 1:
                stack.append((0, -1))
            stack.append((code, index))
            yield pos, tuple(stack)

    def stack_at(self, pos: int) -> list[PyFrame | None]:
        """The Python call stack of instruction `pos`, outermost first (None for a frame the
        recording did not see); [] where no Python frame runs. Raises IndexError outside."""
        if not 0 <= pos < self.length:
            raise IndexError(f"position {pos} is outside the history (0..{self.length - 1})")
        found: tuple = ()
        for start, stack in self.stacks():
            if start > pos:
                break
            found = stack
        depth = len(found)
        return [None if code == 0 else self._frame(code, index, d)
                for d, (code, index) in enumerate(found, depth and 1)]

    def _segment_lines(self) -> list[tuple[int, int, int] | None]:
        """(code id, line, depth) of every segment: what "the Python line changed" compares."""
        if self._lines is None:
            out: list[tuple[int, int, int] | None] = []
            for k in range(len(self._pos)):
                frame = self._frame_of(k)
                out.append(None if frame is None else (frame.code, frame.line, frame.depth))
            self._lines = out
        return self._lines

    def prev_line_change(self, pos: int) -> int | None:
        """The last position before `pos` whose (code object, line, depth) differs from that
        at `pos`, or None when there is none in the history."""
        lines = self._segment_lines()
        k = self._segment(pos)
        here = lines[k] if k >= 0 else None
        while k >= 0:
            start = self._pos[k]
            if k == 0:
                return start - 1 if start > 0 and here is not None else None
            if lines[k - 1] != here:
                return start - 1
            k -= 1
        return None

    def next_line_change(self, pos: int) -> int | None:
        """The first position after `pos` whose (code object, line, depth) differs, or None."""
        lines = self._segment_lines()
        k = self._segment(pos)
        here = lines[k] if k >= 0 else None
        for j in range(k + 1, len(self._pos)):
            if lines[j] != here:
                return self._pos[j]
        return None

    def line_start(self, pos: int) -> int:
        """The first position of the run of positions with the same (code object, line,
        depth) as `pos` that contains it."""
        change = self.prev_line_change(pos)
        return 0 if change is None else change + 1

    def line_sequence(self, start: int = 0, stop: int | None = None) -> list[tuple[int, PyFrame]]:
        """(first position, frame) of each run of one (code object, line, depth) in
        [start, stop), in order; runs without a Python frame are left out (their
        neighbours stay apart)."""
        stop = self.length if stop is None else stop
        out: list[tuple[int, PyFrame]] = []
        lines = self._segment_lines()
        last = None
        for k in range(max(self._segment(start), 0), len(self._pos)):
            pos = max(self._pos[k], start)
            if pos >= stop:
                break
            if lines[k] == last:
                continue
            last = lines[k]
            if lines[k] is not None:
                out.append((pos, self._frame_of(k)))
        return out

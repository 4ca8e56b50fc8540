"""pt_decoder.python_frames: the Python sample encoding, CPython's line tables (checked against
each interpreter's own co_lines()), position -> frame and the Python line steps of History,
and the Intel PT path: PTWRITE instructions in code, their PTW+FUP packets written with the
project's encoder, decoded by InsnDecoder and attributed."""
from __future__ import annotations

import json
import subprocess
import sys
from array import array

import pytest
from python_interpreters import VERSIONS, interpreter

from pt_decoder.encoder import Encoder
from pt_decoder.errors import PtError
from pt_decoder.history import History
from pt_decoder.image import Image
from pt_decoder.insn import InsnDecoder
from pt_decoder.python_frames import (
    MAX_CODE_ID,
    NO_FRAME,
    CodeInfo,
    PythonFrames,
    decode_sample,
    encode_sample,
    line_ranges,
    python_samples,
)


def test_sample_encoding_round_trips():
    for code, index, depth in [(1, -1, 1), (77, 0, 3), (MAX_CODE_ID, 123456, (1 << 20) - 1)]:
        assert decode_sample(encode_sample(code, index, depth)) == (code, index, depth)
    assert decode_sample(encode_sample(0, 7)) == (0, -1, 0) and encode_sample(0, 7) == NO_FRAME
    assert decode_sample(42) is None          # a goroutine id is no Python sample
    assert decode_sample(encode_sample(5, 1 << 30, 1 << 30)) == (5, (1 << 19) - 2, (1 << 20) - 1)
    with pytest.raises(ValueError, match="code id 16777216 does not fit"):
        encode_sample(MAX_CODE_ID + 1, 0)


# Dumps (linetable, firstlineno, co_lines() in code units) of every code object of a few
# stdlib modules, in the interpreter that runs it.
DUMP = r"""
import json, sys, types, json.decoder, argparse, dataclasses
out = []
def walk(co):
    lines = [[s // 2, e // 2, l] for s, e, l in co.co_lines()]
    out.append([co.co_linetable.hex(), co.co_firstlineno, lines])
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            walk(c)
for mod in (json.decoder, argparse, dataclasses):
    src = open(mod.__file__).read()
    walk(compile(src, mod.__file__, "exec"))
print(json.dumps(out))
"""


def _unit_lines(ranges) -> dict[int, int | None]:
    return {u: line for start, end, line in ranges for u in range(start, end)}


@pytest.mark.parametrize("version", VERSIONS)
def test_line_table_equals_the_interpreters_co_lines(version):
    exe = interpreter(version)
    if exe is None:
        pytest.skip(f"no CPython {version} on this machine")
    out = subprocess.run([exe, "-c", DUMP], capture_output=True, text=True, timeout=120,
                         check=True).stdout
    codes = json.loads(out)
    assert len(codes) > 200
    fmt = "3.10" if version == "3.10" else "3.11"
    for table, first, expected in codes:
        ours = _unit_lines(line_ranges(bytes.fromhex(table), first, fmt))
        assert ours == _unit_lines(expected)


def test_line_table_errors_are_named():
    with pytest.raises(ValueError, match="unknown line table format '3.9'"):
        line_ranges(b"", 1, "3.9")
    with pytest.raises(ValueError, match="ends inside an entry"):
        line_ranges(bytes([0x80 | (14 << 3)]), 1, "3.11")  # long form without its fields


def _code_info(func) -> CodeInfo:
    co = func.__code__
    return CodeInfo(co.co_qualname, co.co_filename, co.co_firstlineno, co.co_linetable, "3.11")


def _outer(x):
    y = x + 1
    return _inner(y) * 2


def _inner(v):
    return v - 3


def _line_index(func, line: int) -> int:
    """A code unit of `func` on source `line` (from the interpreter's own table)."""
    return next(s // 2 for s, e, ln in func.__code__.co_lines() if ln == line and e > s)


@pytest.mark.skipif(sys.version_info[:2] < (3, 11), reason="builds 3.11-format tables")
def test_frames_stacks_and_python_line_steps_over_a_history():
    outer, inner, module = 1, 2, 3
    first = _outer.__code__.co_firstlineno
    inner_line = _inner.__code__.co_firstlineno + 1
    codes = {outer: _code_info(_outer), inner: _code_info(_inner), module: _code_info(_module)}
    # positions:  0-1 native (no frame) | 2-4 outer line+1 | 5-7 inner line (depth 3)
    #             | 8-9 outer line+2; the window opened with <module> at depth 1 below outer
    samples = [(0, NO_FRAME),
               (2, encode_sample(outer, _line_index(_outer, first + 1), 2)),
               (3, encode_sample(outer, _line_index(_outer, first + 1), 2)),   # same line
               (5, encode_sample(inner, _line_index(_inner, inner_line), 3)),
               (8, encode_sample(outer, _line_index(_outer, first + 2), 2))]
    n = 10
    hist = History.from_columns(array("Q", range(0x1000, 0x1000 + n)), array("Q", range(n)),
                                array("Q", range(n)), array("B", bytes(n)))
    with pytest.raises(PtError, match="no Python attribution"):
        hist.python_frame(0)
    hist.attach_python(PythonFrames(samples, codes, n, [(module, 4)]))
    assert hist.python_frame(1) is None and hist.python_stack(1) == []
    f = hist.python_frame(4)
    assert (f.qualname, f.line, f.filename, f.depth) == ("_outer", first + 1, __file__, 2)
    assert hist.python_frame(6).qualname == "_inner"
    assert hist.python_frame(9).line == first + 2
    # the stack: the caller's line is where it called (its last sample)
    assert [(x.qualname, x.line) for x in hist.python_stack(6)] == [
        ("_module", codes[module].line(4)), ("_outer", first + 1), ("_inner", inner_line)]
    assert [x.qualname for x in hist.python_stack(9)] == ["_module", "_outer"]
    assert hist.python_line_change_before(9) == 7
    assert hist.python_line_change_before(4) == 1
    assert hist.python_line_change_before(1) is None
    # stepping back by Python line: 9 -> 5 -> 2 -> the start (native before the first frame)
    assert hist.prev_python_line(9) == (5, "found", None)
    assert hist.prev_python_line(5) == (2, "found", None)
    assert hist.prev_python_line(2).reason == "start"
    # over calls: inner's line (deeper) is passed over
    assert hist.prev_python_line(9, over_calls=True) == (2, "found", None)
    assert hist.next_python_line(2, over_calls=True) == (8, "found", None)
    assert hist.next_python_line(0) == (2, "found", None)
    assert hist.next_python_line(2) == (5, "found", None)
    assert hist.next_python_line(8).reason == "end"
    seq = [(f.qualname, f.line) for _, f in hist.python.line_sequence()]
    assert seq == [("_outer", first + 1), ("_inner", inner_line), ("_outer", first + 2)]
    with pytest.raises(PtError, match="cover 3 instructions, the history 10"):
        hist.attach_python(PythonFrames(samples, codes, 3))


def _module():
    return _outer(1)


# The Intel PT path: code that executes PTWRITE (F3 REX.W 0F AE /4, SDM Vol. 2B) and the
# packets a PT-enabled CPU writes for it (PTW with IP=1, then FUP of the PTWRITE's address).
PTWRITE_RAX = bytes.fromhex("f3480faee0")
CODE = 0x40_1000


def test_attribution_from_ptwrite_packets_of_an_intel_pt_stream():
    code_a, code_b = 1, 2
    info_a = CodeInfo("handler", "/srv/app.py", 10, bytes([0x80 | (13 << 3) | 7, 2]), "3.11")
    info_b = CodeInfo("helper", "/srv/util.py", 40, bytes([0x80 | (13 << 3) | 7, 6]), "3.11")
    # ptwrite; nop; nop; ptwrite; nop; ret-less end (tracing is disabled after the last nop)
    body = PTWRITE_RAX + b"\x90\x90" + PTWRITE_RAX + b"\x90"
    image = Image()
    image.add_raw(body + b"\x90" * 16, CODE)
    enc = Encoder()
    enc.psb()
    enc.mode_exec(64)
    enc.psbend()
    enc.tip_pge(CODE)
    enc.ptw(encode_sample(code_a, 0, 1), 8, ip=True)
    enc.fup(CODE)
    enc.ptw(encode_sample(code_b, 2, 2), 8, ip=True)
    enc.fup(CODE + 7)
    enc.tip_pgd(None)
    data = enc.getvalue()
    # the PGD without an IP ends tracing after the next instruction that can branch: here
    # the decoder stops where the packets end; what matters is the ptwrite attribution
    flow = InsnDecoder(data, image).decode()
    samples = python_samples(flow.ptwrites())
    assert [decode_sample(v) for _, v in samples] == [(code_a, 0, 1), (code_b, 2, 2)]
    frames = PythonFrames(samples, {code_a: info_a, code_b: info_b}, len(flow.ip))
    ips = list(flow.ip)
    assert ips[:4] == [CODE, CODE + 5, CODE + 6, CODE + 7]
    assert frames.frame_at(0)[:3] == ("handler", "/srv/app.py", 11)
    assert frames.frame_at(2)[:3] == ("handler", "/srv/app.py", 11)
    assert frames.frame_at(3)[:3] == ("helper", "/srv/util.py", 43)
    assert [f.qualname for f in frames.stack_at(3)] == ["handler", "helper"]

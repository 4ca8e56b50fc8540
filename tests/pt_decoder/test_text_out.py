"""The compiled writer (pt_decoder/tools/text_out.pyx) prints exactly what the
plain-Python formatters (ptxed_format.ptxed_lines / ips_lines / jsonl_lines) print.

Layer: tests of pt_decoder.tools.text_out. Flows are built by hand (a unit test
of one layer): extreme IPs and times, speculative flags, items before the first
instruction, between instructions, after the last one, and items that print
nothing; a tiny buffer forces a hand-over every few lines. Real decodes are
compared in test_decode_output.py and the ptxed golden tests.
"""
from __future__ import annotations

import io
import random
from array import array

import pytest

from pt_decoder.flow_result import FlowResult
from pt_decoder.insn_flags import SPECULATIVE, TAKEN
from pt_decoder.tools import ptxed_format as fmt
from pt_decoder.tools.text_out import TextSink

U64 = (1 << 64) - 1


def _event(kind: str, ip, status_update=False, **fields) -> dict:
    ev = {"type": kind, "ip": ip, "at": 0, "payload": 0, "aux": 0, "a": 0, "b": 0, "c": 0,
          "tsc": 0x1234, "status_update": status_update}
    ev.update(fields)
    return ev


def _flow(n: int, seed: int) -> FlowResult:
    rng = random.Random(seed)
    ips = [0, U64, 1, 0xF, 0x10, 0x7FFFFFFFFFFF] + [rng.getrandbits(rng.choice((12, 32, 48, 64)))
                                                    for _ in range(n)]
    ips = ips[:n]
    flow = FlowResult(array("Q", ips), array("Q", [rng.choice((0, U64, rng.getrandbits(64))) for _ in ips]),
                      array("Q", [rng.getrandbits(40) for _ in ips]),
                      array("B", [rng.choice((0, SPECULATIVE, TAKEN | SPECULATIVE, 0xFF, TAKEN)) for _ in ips]))
    items = [("event", 0, 0, 0, 0, _event("enabled", 0x401000)),
             ("event", 0, 8, 0, 0, _event("exec_mode", 0x401000, a=3)),
             ("event", 0, 8, 0, 0, _event("cbr", None, status_update=True, payload=0x24))]
    for pos in sorted(rng.sample(range(n + 1), min(n + 1, 12))):
        items.append(rng.choice([
            ("event", pos, 64, 0, 0, _event("tsx", 0x4000 + pos, a=1)),
            ("error", pos, 80, 0x402000, 7, None),
            ("sync_error", pos, 96, 0, 3, None),
            ("event", pos, 100, 0, 0, _event("tick", None, status_update=True)),
        ]))
    items.append(("eos", n, 200, 0, 0, None))
    flow.items = items
    return flow


def _python_text(flow, name: str, event_ip: bool, event_time: bool, insn_time: bool) -> str:
    if name == "ips":
        lines = fmt.ips_lines(flow)
    elif name == "jsonl":
        lines = fmt.jsonl_lines(flow)
    else:
        lines = fmt.ptxed_lines(flow, event_ip=event_ip, event_time=event_time, insn_time=insn_time)
    return "".join(line + "\n" for line in lines)


@pytest.mark.parametrize("name,event_ip,event_time,insn_time", [
    ("ips", False, False, False), ("jsonl", False, False, False),
    ("ptxed", False, False, False), ("ptxed", True, True, False), ("ptxed", False, False, True),
    ("ptxed", True, True, True)])
@pytest.mark.parametrize("n", [0, 1, 7, 3000])
def test_compiled_lines_equal_the_python_formatters(name, event_ip, event_time, insn_time, n):
    flow = _flow(n, seed=n * 7 + len(name))
    want = _python_text(flow, name, event_ip, event_time, insn_time)
    for size in (1 << 20, 600):                  # 600: hand-overs every few lines
        out = io.StringIO()
        sink = TextSink(out, size)
        sink.write_flow(flow, name, fmt.item_text(name, event_ip, event_time), insn_time=insn_time)
        sink.flush()
        assert out.getvalue() == want
        assert sink.written == len(want)


def test_binary_stream_gets_bytes_and_text_before_the_sink_keeps_its_place(tmp_path):
    flow = _flow(500, seed=3)
    want = _python_text(flow, "ips", False, False, False)
    with open(tmp_path / "raw", "wb") as raw:
        sink = TextSink(raw)
        sink.write("header\n")
        sink.write_flow(flow, "ips", fmt.item_text("ips"))
        sink.flush()
    assert (tmp_path / "raw").read_text() == "header\n" + want
    with open(tmp_path / "text", "w") as text:        # a real text file: written through .buffer
        text.write("first\n")
        sink = TextSink(text)
        sink.write_flow(flow, "ips", fmt.item_text("ips"))
        sink.flush()
    assert (tmp_path / "text").read_text() == "first\n" + want


def test_unknown_format_is_refused():
    with pytest.raises(KeyError):
        TextSink(io.StringIO()).write_flow(_flow(3, 1), "xml", fmt.item_text("ptxed"))

"""BlockEncoder (the DBI recorder's PT writer) against FlowEncoder on the same path: a block
stream and the instruction path it stands for must give the same packets, byte for byte, for
every kind of block end (conditional branch both ways, direct call, return compressed,
direct and indirect jump), a window cut by an instruction count inside a block, the end at a
return, and ids it was never told about."""
from __future__ import annotations

import numpy as np
import pytest

from pt_decoder import block_encoder as be
from pt_decoder.flow_encoder import FlowEncoder

BASE = 0x400000
# block  address   bytes               instruction
CODE = {
    0x400000: "48ffc0",          # A: inc rax
    0x400003: "4839d8",          #    cmp rax, rbx
    0x400006: "7408",            #    je 0x400010          (cond)
    0x400008: "e813000000",      # B: call 0x400020       (call)
    0x40000d: "ebf1",            # R: jmp 0x400000        (jmp)
    0x400010: "ffe1",            # D: jmp rcx             (indirect)
    0x400020: "90",              # C: nop
    0x400021: "c3",              #    ret                 (ret)
}
IMAGE = bytearray(0x40)
for address, hexbytes in CODE.items():
    raw = bytes.fromhex(hexbytes)
    IMAGE[address - BASE:address - BASE + len(raw)] = raw
BLOCKS = {0: (0x400000, 3), 1: (0x400008, 1), 2: (0x40000d, 1), 3: (0x400010, 1),
          4: (0x400020, 2)}
# A (je not taken) B (call) C (ret) R (jmp) A (je taken) D (jmp rcx -> A) A (not taken) B C
PATH = [0, 1, 4, 2, 0, 3, 0, 1, 4]


def read_code(address: int, size: int) -> bytes:
    return bytes(IMAGE[address - BASE:address - BASE + size])


def ips_of(blocks) -> list[int]:
    flow = FlowEncoder(read_code)
    ips = []
    for block in blocks:
        ip, count = BLOCKS[block]
        for _ in range(count):
            ips.append(ip)
            ip = flow.classify(ip)[1]
    return ips


def block_encoder() -> be.BlockEncoder:
    flow = FlowEncoder(read_code)
    enc = be.BlockEncoder(psb_period=4096, timing=False)
    for block, (start, count) in BLOCKS.items():
        last = ips_of([block])[-1]
        cls, fall, target = flow.classify(last)
        enc.define(block, start, count, cls, fall, target)
    return enc


def test_every_kind_of_block_end_gives_flow_encoders_packets():
    enc = block_encoder()
    done, reason, _ = enc.feed(np.array(PATH, dtype=np.uint32))
    assert (done, reason) == (len(PATH), be.STOP_NONE)
    ours = enc.take() + enc.finish(end_ip=0x40000d)     # C's ret returns into R
    theirs = FlowEncoder(read_code).encode(ips_of(PATH), end_ip=0x40000d)
    assert ours == theirs
    assert enc.instructions == len(ips_of(PATH))
    assert enc.depth == 1       # two calls, one return fed (finish writes the last ret)


def test_a_count_limit_cuts_inside_a_block():
    enc = block_encoder()
    done, reason, cut = enc.feed(np.array(PATH, dtype=np.uint32), max_instructions=5)
    assert reason == be.STOP_COUNT and done == 3 and cut == 1   # A(3) B(1) and C's nop
    ours = enc.take() + enc.finish(cut_ip=0x400021)
    theirs = FlowEncoder(read_code).encode(ips_of(PATH)[:5], end_ip=None)
    assert ours == theirs


def test_until_return_stops_at_the_return_that_leaves_the_first_function():
    enc = block_encoder()
    # the window starts in C (depth 0): its ret leaves it
    done, reason, _ = enc.feed(np.array([4, 2, 0], dtype=np.uint32), until_return=True)
    assert (done, reason) == (1, be.STOP_RETURN)
    ours = enc.take() + enc.finish(end_ip=0x40000d)
    assert ours == FlowEncoder(read_code).encode(ips_of([4]), end_ip=0x40000d)


def test_an_id_never_defined_stops_the_feed_and_bad_definitions_are_refused():
    enc = block_encoder()
    assert enc.feed(np.array([0, 7, 1], dtype=np.uint32))[:2] == (1, be.STOP_UNDEFINED)
    with pytest.raises(ValueError, match="class must be 0..7"):
        enc.define(9, 0x1000, 1, 8, 0x1001, 0)
    with pytest.raises(ValueError, match="has no instructions"):
        enc.define(9, 0x1000, 0, 0, 0x1001, 0)

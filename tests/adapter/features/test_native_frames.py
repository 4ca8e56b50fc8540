"""features.native_frames on this very process: addresses of libc functions become DAP frames
with the symbol, the library and instructionPointerReference; the walk ends at an address no
module maps; frame ids stay in their reserved range."""
from __future__ import annotations

import ctypes
import os
import re

from adapter.features import native_frames
from adapter.features.native_frames import (
    NATIVE_FRAME_ID_BASE,
    NATIVE_FRAME_ID_END,
    NativeFrameMaker,
    call_chain,
)
from pt_decoder.image import Image


def test_call_chain_puts_the_ip_first_and_drops_kernel_addresses():
    assert call_chain(0x1000, (0x1000, 0x2000)) == [0x1000, 0x2000]
    assert call_chain(0x1000, (0x2000,)) == [0x1000, 0x2000]
    assert call_chain(0x1000, (0xffffffff81000000, 0x2000)) == [0x1000, 0x2000]


def test_frames_of_libc_addresses_and_the_end_of_the_walk():
    libc = ctypes.CDLL(None)
    getpid = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    write = ctypes.cast(libc.write, ctypes.c_void_p).value
    image = Image.from_process(os.getpid())
    frames = NativeFrameMaker().frames(image, [getpid + 1, write + 5, 0x10, write], "now")
    assert len(frames) == 2  # 0x10 is mapped by nothing: the walk ends there
    top, caller = frames
    assert re.fullmatch(r"\w*getpid\+0x1 \[libc[\w.-]*, now\]", top["name"]), top
    assert top["instructionPointerReference"] == f"{getpid + 1:#x}"
    # a return address is named by the call before it, but keeps its own value as the IP
    assert re.fullmatch(r"\w*write\+0x5 \[libc[\w.-]*, now\]", caller["name"]), caller
    assert caller["instructionPointerReference"] == f"{write + 5:#x}"
    assert all(f["presentationHint"] == "subtle" for f in frames)
    assert all(NATIVE_FRAME_ID_BASE <= f["id"] < NATIVE_FRAME_ID_END for f in frames)
    assert len({f["id"] for f in frames}) == 2


def test_frame_ids_wrap_inside_their_range(monkeypatch):
    maker = NativeFrameMaker()
    maker._next_id = NATIVE_FRAME_ID_END - 2
    ids = [maker._frame_id() for _ in range(3)]
    assert ids == [NATIVE_FRAME_ID_END - 1, NATIVE_FRAME_ID_BASE + 1, NATIVE_FRAME_ID_BASE + 2]
    assert native_frames.MAX_NATIVE_FRAMES == 16

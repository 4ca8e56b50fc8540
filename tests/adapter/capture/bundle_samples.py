"""A small, real, decodable bundle for the tests that break bundles on purpose: a counted loop
(`mov ecx, 10; dec ecx; jnz; ret`) as a raw image, its PT stream written by pt_decoder's
FlowEncoder (the packets the hardware would write), stored by BundleWriter."""
from __future__ import annotations

import pathlib

from adapter.capture.bundle import BundleWriter
from pt_decoder.flow_encoder import FlowEncoder

BASE = 0x400000
CODE = bytes.fromhex("b90a000000" "ffc9" "75fc" "c3")  # mov ecx,10; dec ecx; jnz -4; ret
CPU = {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 4}
INSTRUCTIONS = 1 + 2 * 10 + 1


def loop_stream() -> bytes:
    """The PT stream of the loop's 22 instructions."""
    def read_code(address: int, size: int) -> bytes:
        offset = address - BASE
        return CODE[offset:offset + size] if 0 <= offset < len(CODE) else b""
    ips = [BASE] + [BASE + 5, BASE + 7] * 10 + [BASE + 9]
    return FlowEncoder(read_code).encode(ips, end_ip=BASE + 0x100)


def write_loop_bundle(root: pathlib.Path) -> pathlib.Path:
    """The bundle at `root`: one stream (tid 100), one copied raw image; complete."""
    writer = BundleWriter(root, "stepper", CPU, pid=100, copy_images=False)
    writer.add_stream_bytes(100, loop_stream(), pid=100)
    writer.add_snapshot("loop.bin", BASE, CODE, pid=100, origin="[loop]")
    writer.add_thread(100, 100, "loop")
    writer.finish()
    return root

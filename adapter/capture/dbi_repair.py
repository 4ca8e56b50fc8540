"""The AVX-512 repair of Frida Stalker's context restore, applied in the recorded process.

Layer: adapter.capture (mechanism of the DBI recorder; dbi.py decides when to apply it). It
knows the bytes of one Frida build's template and /proc/PID/mem, nothing of recording.

Why: every time a thread followed by Stalker leaves Stalker's runtime for the program's code
(a block compiled, an inline-cache miss, a follow or unfollow), Stalker's epilog helper
restores the vector state it saved. On a CPU with AVX-512 it restores the upper halves of
zmm0-15 (`vinserti64x4`) and *then* runs the older restore of ymm0-15's upper 128 bits,
sixteen VEX.256 `vinserti128 ymmN, ymmN, [rsp+16N], 1`. A VEX.256 write zeroes bits 511:256
of its register (SDM Vol. 1, 15.5 "Accessing XMM, YMM and ZMM registers"), so the program
comes back with those bits cleared: numpy's dot/matmul on OpenBLAS's SkylakeX kernels gave
wrong results 1-2 times per recorded window (frida 17.26.2; frida-gum
gum/backend-x86/gumstalker-x86.c, gum_exec_ctx_write_epilog_helper).

The helper is generated for each followed thread from a constant byte array (the VEX
instructions), which the agent library keeps in its read-only data. The repair rewrites that
array, before the first thread is followed, into the same sixteen inserts EVEX-encoded at
512 bits: `vinserti32x4 zmmN, zmmN, [rsp+16N], 1` (EVEX.512.66.0F3A.W0 38 /r ib; the memory
operand's disp8 is scaled by 16, the Tuple4 size), which write bits 255:128 and keep 511:256,
padded with one 8-byte NOP to the array's length. It is applied only when the array is found
exactly once with exactly the expected bytes; anything else is refused (RepairError), and the
recorder then does not use DBI on this CPU. The agent library is unmapped when the Frida
session ends, so the rewritten bytes leave with it.
"""
from __future__ import annotations

import re

from adapter.hw.procfs import file_mappings

# The template as frida-gum 17.26.2 builds it (x86-64): vinserti128 ymmN, ymmN, [rsp+16N], 1.
_VEX_RESTORE = bytes.fromhex(
    "c4e37d38042401"
    "c4e375384c241001" "c4e36d3854242001" "c4e365385c243001" "c4e35d3864244001"
    "c4e355386c245001" "c4e34d3874246001" "c4e345387c247001"
    "c4633d388424800000" "0001" "c46335388c24900000" "0001"
    "c4632d389424a00000" "0001" "c46325389c24b00000" "0001"
    "c4631d38a424c00000" "0001" "c4631538ac24d00000" "0001"
    "c4630d38b424e00000" "0001" "c4630538bc24f00000" "0001")
_NOP8 = bytes.fromhex("0f1f840000000000")     # nop dword [rax+rax*1+0]


class RepairError(Exception):
    """The repair cannot be applied safely; the text says why."""


def evex_vinserti32x4_rsp(n: int) -> bytes:
    """`vinserti32x4 zmmN, zmmN, xmmword [rsp+16N], 1` for N in 0..15 (SDM Vol. 2, 2.7 EVEX:
    P0 = R X B R' 0 m2 m1 m0 with the map 0F3A = 3; P1 = W vvvv 1 pp with pp = 66; P2 = z L'L
    b V' aaa with L'L = 512 bits; register fields inverted)."""
    if not 0 <= n < 16:
        raise ValueError(f"register must be 0..15, got {n}")
    p0 = (0 if n >= 8 else 0x80) | 0x40 | 0x20 | 0x10 | 0x03
    p1 = ((~n & 15) << 3) | 0x04 | 0x01
    p2 = 0x40 | 0x08
    reg = (n & 7) << 3
    if n == 0:
        return bytes((0x62, p0, p1, p2, 0x38, reg | 0x04, 0x24, 0x01))
    return bytes((0x62, p0, p1, p2, 0x38, 0x40 | reg | 0x04, 0x24, n, 0x01))


EVEX_RESTORE = b"".join(evex_vinserti32x4_rsp(n) for n in range(16)) + _NOP8
assert len(EVEX_RESTORE) == len(_VEX_RESTORE) == 151


def cpu_has_avx512() -> bool:
    """Whether this CPU has AVX-512 (Stalker saves zmm state only then, and only then does
    the VEX restore destroy it)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return " avx512f" in line
    except OSError:
        return False
    return False


def _agent_ranges(pid: int) -> list[tuple[int, int]]:
    """The readable mappings of Frida's agent library in process `pid`."""
    ranges = []
    for m in file_mappings(pid):
        if "frida-agent" in m.path and m.perms.startswith("r"):
            ranges.append((m.start, m.end))
    return ranges


def repair_stalker_epilog(pid: int) -> int:
    """Rewrite the VEX restore template in process `pid`'s Frida agent (see the module doc).
    Returns the address rewritten. Raises RepairError when the agent is not found, or the
    template is not found exactly once with the expected bytes (another Frida build)."""
    ranges = _agent_ranges(pid)
    if not ranges:
        raise RepairError(f"Frida's agent is not mapped in process {pid}")
    hits: list[int] = []
    already: list[int] = []
    unreadable: list[str] = []
    with open(f"/proc/{pid}/mem", "r+b", buffering=0) as mem:
        for start, end in ranges:
            mem.seek(start)
            try:
                data = mem.read(end - start)
            except OSError as exc:
                unreadable.append(f"{start:#x}-{end:#x}: {exc.strerror}")
                continue
            hits += [start + m.start() for m in re.finditer(re.escape(_VEX_RESTORE), data)]
            already += [start + m.start() for m in re.finditer(re.escape(EVEX_RESTORE), data)]
        if len(hits) != 1 or already:
            raise RepairError(
                f"Frida's vector-state restore template was found {len(hits)} times "
                f"({len(already)} already rewritten) instead of once: this Frida build is not "
                "the one the AVX-512 repair was checked against, and Stalker would clear "
                "bits 511:256 of zmm0-15 in the recorded program"
                + (f" (unreadable: {', '.join(unreadable)})" if unreadable else "")
                + f" [{len(ranges)} agent mappings searched]")
        mem.seek(hits[0])
        mem.write(EVEX_RESTORE)
        mem.seek(hits[0])
        if mem.read(len(EVEX_RESTORE)) != EVEX_RESTORE:
            raise RepairError(f"the rewrite of Frida's restore template at {hits[0]:#x} did "
                              "not hold")
    return hits[0]

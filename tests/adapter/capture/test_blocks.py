"""The stepper's static analysis: instruction kinds, Jcc conditions (SDM
Vol. 2 Appendix B), branch emulation, stack tracking and return proof."""
from __future__ import annotations

import itertools

import pytest

from adapter.capture import blocks
from adapter.hw.ptrace import Regs

BASE = 0x1000


def cache_of(code: bytes, base: int = BASE) -> blocks.CodeCache:
    def read(addr, n):
        off = addr - base
        if not 0 <= off < len(code):
            raise OSError("unmapped")
        return code[off:off + n]
    return blocks.CodeCache(read)


@pytest.mark.parametrize("code,kind", [
    (b"\x74\x05", blocks.Kind.JCC), (b"\x0f\x85\x00\x01\x00\x00", blocks.Kind.JCC),
    (b"\xeb\x02", blocks.Kind.JMP), (b"\xe8\x00\x00\x00\x00", blocks.Kind.CALL),
    (b"\xff\xe0", blocks.Kind.JMP_INDIRECT), (b"\x41\xff\xd3", blocks.Kind.CALL_INDIRECT),
    (b"\xc3", blocks.Kind.RET), (b"\xf3\xc3", blocks.Kind.RET), (b"\x0f\x05", blocks.Kind.SYSCALL),
    (b"\xe3\x02", blocks.Kind.LOOP), (b"\xe2\xfe", blocks.Kind.LOOP), (b"\x0f\x0b", blocks.Kind.OTHER),
    (b"\x48\x89\xd8", blocks.Kind.PLAIN), (b"\xf3\x48\xa5", blocks.Kind.PLAIN),
    (b"\x3e\xff\xe0", blocks.Kind.JMP_INDIRECT), (b"\xf2\xff\x25\x00\x00\x00\x00", blocks.Kind.JMP_INDIRECT),
])
def test_kinds(code, kind):
    ins = cache_of(code + b"\x90" * 8).insn(BASE)
    assert ins.kind == kind and ins.size == len(code)


def test_rep_string_is_marked():
    assert cache_of(b"\xf3\x48\xa5").insn(BASE).rep
    assert not cache_of(b"\x48\x89\xd8").insn(BASE).rep


def test_undecodable_and_unmapped():
    assert cache_of(b"\x06").insn(BASE).kind == blocks.Kind.UNDECODABLE   # push es: not in 64-bit
    assert cache_of(b"\x0f\xff").insn(BASE).kind == blocks.Kind.OTHER     # ud0 raises #UD
    assert cache_of(b"\x90").insn(BASE + 100).kind == blocks.Kind.UNDECODABLE


def _flags(cf=0, pf=0, zf=0, sf=0, of=0):
    return cf | pf << 2 | zf << 6 | sf << 7 | of << 11


def test_condition_table_against_the_sdm_definitions():
    """Every tttn code over every combination of CF PF ZF SF OF."""
    defs = {
        0x0: lambda c, p, z, s, o: o, 0x1: lambda c, p, z, s, o: not o,
        0x2: lambda c, p, z, s, o: c, 0x3: lambda c, p, z, s, o: not c,
        0x4: lambda c, p, z, s, o: z, 0x5: lambda c, p, z, s, o: not z,
        0x6: lambda c, p, z, s, o: c or z, 0x7: lambda c, p, z, s, o: not (c or z),
        0x8: lambda c, p, z, s, o: s, 0x9: lambda c, p, z, s, o: not s,
        0xA: lambda c, p, z, s, o: p, 0xB: lambda c, p, z, s, o: not p,
        0xC: lambda c, p, z, s, o: s != o, 0xD: lambda c, p, z, s, o: s == o,
        0xE: lambda c, p, z, s, o: z or s != o, 0xF: lambda c, p, z, s, o: not z and s == o,
    }
    for cond, fn in defs.items():
        for bits in itertools.product((0, 1), repeat=5):
            assert blocks.condition_holds(cond, _flags(*bits)) == bool(fn(*bits)), (cond, bits)


def test_jcc_condition_code_read_from_both_encodings_and_prefixes():
    assert cache_of(b"\x7c\x02").insn(BASE).cond == 0xC             # jl rel8
    assert cache_of(b"\x0f\x8e\x00\x00\x00\x00").insn(BASE).cond == 0xE  # jle rel32
    assert cache_of(b"\x3e\x75\x02").insn(BASE).cond == 0x5         # ds-hinted jne


def test_perform_branches():
    mem = {}

    def read(a):
        return mem[a]

    def write(a, v):
        mem[a] = v
    regs = Regs()
    regs.rsp = 0x8000
    mem[0x8000] = 0x4242
    ret = cache_of(b"\xc3").insn(BASE)
    assert blocks.perform(ret, regs, read, write) == 0x4242 and regs.rsp == 0x8008
    regs.rax = 0x5555
    call = cache_of(b"\xff\xd0").insn(BASE)        # call rax
    assert blocks.perform(call, regs, read, write) == 0x5555
    assert regs.rsp == 0x8000 and mem[0x8000] == BASE + 2
    jmp = cache_of(b"\xff\x25\x10\x00\x00\x00").insn(BASE)   # jmp [rip+0x10]
    mem[BASE + 6 + 0x10] = 0x7777
    assert blocks.perform(jmp, regs, read, write) == 0x7777
    regs.fs_base = 0x9000
    mem[0x9010] = 0x1234
    fsjmp = cache_of(b"\x64\xff\x24\x25\x10\x00\x00\x00").insn(BASE)  # jmp fs:[0x10]
    assert blocks.perform(fsjmp, regs, read, write) == 0x1234
    regs.rcx = 1
    loop = cache_of(b"\xe2\xfe").insn(BASE)         # loop self
    assert blocks.perform(loop, regs, read, write) == BASE + 2 and regs.rcx == 0
    regs.eflags = _flags(zf=1)
    je = cache_of(b"\x74\x10").insn(BASE)
    assert blocks.perform(je, regs, read, write) == BASE + 0x12
    regs.eflags = 0
    assert blocks.perform(je, regs, read, write) == BASE + 2
    with pytest.raises(blocks.EmulationError):
        blocks.perform(cache_of(b"\x0f\x05").insn(BASE), regs, read, write)


def test_walk_follows_calls_and_proves_returns():
    # 0x1000: call 0x100a ; 0x1005: jne +0 ; ... 0x100a: push rbp ; pop rbp ; ret
    code = bytearray(b"\x90" * 32)
    code[0:5] = b"\xe8\x05\x00\x00\x00"      # call 0x100a
    code[5:7] = b"\x75\x00"                  # jne 0x1007
    code[10:13] = b"\x55\x5d\xc3"            # push rbp; pop rbp; ret
    walker = blocks.Walker(cache_of(bytes(code)))
    shadow = []
    walk = walker.walk(BASE, 0x8000, None, shadow, set(), 1000)
    assert walk.ips == [0x1000, 0x100a, 0x100b, 0x100c] and walk.stop == 0x1005
    assert walk.reason == "branch" and shadow == []
    # unknown RSP: the return is not proven, the walk stops at it
    shadow = []
    walk = walker.walk(BASE, None, None, shadow, set(), 1000)
    assert walk.stop == 0x100c and len(shadow) == 1
    # without prediction it stops at the ret too
    walk = blocks.Walker(cache_of(bytes(code)), predict_returns=False).walk(
        BASE, 0x8000, None, [], set(), 1000)
    assert walk.stop == 0x100c


def test_walk_budget_and_armed_addresses():
    code = b"\x90" * 20 + b"\xc3"
    walker = blocks.Walker(cache_of(code))
    walk = walker.walk(BASE, 0x8000, None, [], set(), 5)
    assert walk.ips == list(range(BASE, BASE + 5)) and walk.stop == BASE + 5
    assert walk.reason == "budget"
    walk = walker.walk(BASE, 0x8000, None, [], {BASE + 7}, 100)
    assert walk.stop == BASE + 7 and walk.reason == "armed"

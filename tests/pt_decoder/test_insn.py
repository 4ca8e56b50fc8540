"""Instruction layer: the x86 classifier, the block-cache walk, damage as data.

Layer: tests of pt_decoder.insn (with the event and timing layers under it).
- insn_ild.h against capstone (an independent disassembler) on every
  instruction of real binaries (the static-glibc hello, this machine's libc),
  and hand-checked encodings for the control transfers the flow depends on;
- the hot loop (cached blocks, in-hand TNT bits) gives exactly what stepping
  one instruction at a time with libipt's rules gives, and chunked decoding
  gives the same columns;
- damage is data: a missing image, a corrupted byte, a truncated stream give
  error items/gaps with offset and address and decoding goes on.
"""
from __future__ import annotations

import importlib

import pytest

from pt_decoder import insn_flags as F
from pt_decoder.event import cpu_errata
from pt_decoder.image import Image
from pt_decoder.insn import InsnDecoder, ild_probe

GLIBC = "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"


@pytest.fixture(scope="module")
def glibc(traces_dir):
    folder = traces_dir / GLIBC
    image = Image()
    image.add_elf(str(folder / "hello"))
    return (folder / "pt.bin").read_bytes(), image, folder


def _decode(data, image, **kw):
    return InsnDecoder(data, image, errata=cpu_errata(6, 85), **kw).decode()


# --- the classifier ---------------------------------------------------------------------------------

@pytest.mark.parametrize("hexbytes,mode,want", [
    ("e8 10 00 00 00", 3, (5, "call", 1, 0x10)),
    ("e8 00 00 00 00", 3, (5, "call", 1, 0)),               # call next insn (get-IP): no return-stack push
    ("66 e8 10 00 00 00", 3, (6, "call", 1, 0x10)),         # 64-bit: rel32 whatever the operand size
    ("66 e8 10 00", 2, (4, "call", 1, 0x10)),               # 32-bit: rel16 with 66
    ("ff d0", 3, (2, "call", 0, 0)),                        # call rax
    ("41 ff 14 24", 3, (4, "call", 0, 0)),                  # call [r12]
    ("ff 1d 00 00 00 00", 3, (6, "far_call", 0, 0)),        # call far [rip]
    ("c3", 3, (1, "return", 0, 0)),
    ("c2 08 00", 3, (3, "return", 0, 0)),
    ("cb", 3, (1, "far_return", 0, 0)),
    ("eb fe", 3, (2, "jump", 1, -2)),
    ("e9 00 01 00 00", 3, (5, "jump", 1, 0x100)),
    ("ff e0", 3, (2, "jump", 0, 0)),                        # jmp rax
    ("ff 24 c5 00 10 40 00", 3, (7, "jump", 0, 0)),         # jmp [rax*8+table]: a jump table
    ("74 05", 3, (2, "cond_jump", 1, 5)),
    ("0f 84 00 10 00 00", 3, (6, "cond_jump", 1, 0x1000)),
    ("e2 fe", 3, (2, "cond_jump", 1, -2)),                  # loop
    ("e3 02", 2, (2, "cond_jump", 1, 2)),                   # jecxz
    ("0f 05", 3, (2, "far_call", 0, 0)),                    # syscall
    ("0f 07", 3, (2, "far_return", 0, 0)),                  # sysret
    ("cd 80", 2, (2, "far_call", 0, 0)),                    # int 0x80
    ("cf", 3, (1, "far_return", 0, 0)),                     # iret
    ("f3 0f ae e0", 3, (4, "ptwrite", 0, 0)),               # ptwrite eax
    ("0f 22 d8", 3, (3, "other", 0, 0)),                    # mov cr3, rax (binds PIP, not a branch)
    ("48 b8 88 77 66 55 44 33 22 11", 3, (10, "other", 0, 0)),   # mov rax, imm64
    ("b8 44 33 22 11", 2, (5, "other", 0, 0)),
    ("66 b8 22 11", 2, (4, "other", 0, 0)),
    ("c5 fc 77", 3, (3, "other", 0, 0)),                    # vzeroall: VEX without ModRM
    ("62 f1 7d 48 6f 44 24 01", 3, (8, "other", 0, 0)),     # vmovdqa32 zmm0,[rsp+0x40] (EVEX disp8*N)
    ("c4 e3 7d 18 c1 01", 3, (6, "other", 0, 0)),           # vinsertf128 (VEX map 3 + imm8)
    ("8b 04 24", 1, (2, "other", 0, 0)),                    # 16-bit: mov ax,[si]: no SIB byte
    ("8b 06 34 12", 1, (4, "other", 0, 0)),                 # 16-bit: mov ax,[0x1234]: disp16
    ("8b 04 24", 3, (3, "other", 0, 0)),                    # 64-bit: mov eax,[rsp]: SIB
    ("0f", 3, (0, "error", 0, 0)),                          # truncated
])
def test_classifier_on_known_encodings(hexbytes, mode, want):
    assert ild_probe(bytes.fromhex(hexbytes.replace(" ", "")), mode) == want


def _capstone_sweep(path, section=".text"):
    import capstone
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as fh:
        text = ELFFile(fh).get_section_by_name(section)
        code, base = text.data(), text["sh_addr"]
    md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
    off, seen, wrong = 0, 0, []
    while off < len(code):
        ins = next(md.disasm_lite(code[off:off + 15], base + off, 1), None)
        if ins is None:
            off += 1
            continue
        length, cls, direct, _ = ild_probe(code[off:off + 15], 3)
        mnem = ins[2]
        expect = ("return" if mnem.startswith("ret") else "call" if mnem == "call"
                  else "jump" if mnem == "jmp" else "cond_jump" if mnem.startswith(("j", "loop")) else None)
        if length != ins[1] or (expect and cls != expect):
            wrong.append((hex(base + off), code[off:off + ins[1]].hex(), mnem, length, cls))
        seen += 1
        off += ins[1]
    return seen, wrong


def test_classifier_agrees_with_capstone_on_a_static_glibc_binary(traces_dir):
    seen, wrong = _capstone_sweep(traces_dir / GLIBC / "hello")
    assert seen > 100_000 and wrong == []


def test_classifier_agrees_with_capstone_on_this_machines_libc():
    import glob
    libs = glob.glob("/usr/lib/x86_64-linux-gnu/libc.so.6") + glob.glob("/lib64/libc.so.6")
    if not libs:
        pytest.skip("no x86-64 libc.so.6 on this machine")
    seen, wrong = _capstone_sweep(libs[0])
    assert seen > 100_000 and wrong == []


# --- the walk ----------------------------------------------------------------------------------------

def test_hot_loop_equals_stepping_with_libipts_rules(glibc):
    data, image, _ = glibc
    fast, step = _decode(data, image), _decode(data, image, fast=False)
    assert len(fast) == 59234
    assert (fast.ip, fast.tsc, fast.cycles, fast.flags, fast.items) == \
        (step.ip, step.tsc, step.cycles, step.flags, step.items)


def test_chunked_decode_gives_the_same_columns(glibc):
    data, image, _ = glibc
    whole = _decode(data, image)
    dec = InsnDecoder(data, image, errata=cpu_errata(6, 85))
    pieces = list(dec.chunks(1000))
    assert len(pieces) > 50
    ips = [ip for p in pieces for ip in p.ip]
    assert ips == list(whole.ip)
    assert InsnDecoder(data, image, errata=cpu_errata(6, 85)).count()[0] == 59234


def test_chunk_views_are_the_copied_columns_without_the_copy(glibc):
    """chunks(views=True) (what `ptdebug decode` prints from) yields the same columns and
    items as the copying chunks(), read before the next piece overwrites them."""
    data, image, _ = glibc
    copied = [(list(p.ip), list(p.tsc), list(p.cycles), list(p.flags), p.items)
              for p in InsnDecoder(data, image, errata=cpu_errata(6, 85)).chunks(1000)]
    viewed = [(list(p.ip), list(p.tsc), list(p.cycles), list(p.flags), p.items)
              for p in InsnDecoder(data, image, errata=cpu_errata(6, 85)).chunks(1000, views=True)]
    assert len(viewed) > 50 and viewed == copied


def test_flags_describe_the_branches(glibc):
    data, image, _ = glibc
    flow = _decode(data, image)
    calls = sum(1 for f in flow.flags if f & F.CALL)
    rets = sum(1 for f in flow.flags if f & F.RETURN)
    conds = [f for f in flow.flags if f & F.CONDITIONAL]
    assert calls > 100 and rets > 100 and len(conds) > 1000
    assert any(f & F.TAKEN for f in conds) and any(not f & F.TAKEN for f in conds)
    assert flow.flags[0] & F.RESUMED
    # a taken branch's next instruction is not the fall-through in general; a
    # non-branch is always followed by the next address
    for i in range(len(flow.ip) - 1):
        if not flow.flags[i] & (F.TAKEN | F.FAR) and flow.flags[i + 1] & F.RESUMED == 0:
            assert flow.ip[i + 1] > flow.ip[i]


# --- damage is data ----------------------------------------------------------------------------------

def test_missing_image_is_a_gap_at_the_first_instruction(glibc):
    data, _, _ = glibc
    flow = _decode(data, [])
    assert len(flow) == 0
    (gap,) = flow.gaps()
    assert (gap.offset, gap.ip, gap.code, gap.reason) == (1786, 4200096, 13,
                                                           "no memory mapped at this address")


def test_a_corrupted_byte_is_a_gap_at_its_offset(glibc):
    data, image, _ = glibc
    good = _decode(data, image)
    bad = bytearray(data)
    bad[5000] ^= 0xFF
    flow = _decode(bytes(bad), image)
    gaps = flow.gaps()
    assert gaps and all(4000 < g.offset < 6000 and g.ip for g in gaps)
    # the flow is the good one until the damaged packet is used
    same = next(i for i, (a, b) in enumerate(zip(flow.ip, good.ip)) if a != b)
    assert same > 20_000 and same <= gaps[0].position


def test_decoding_goes_on_at_the_next_psb_after_damage(tmp_path, traces_dir):
    corpus = importlib.import_module("benchmarks.corpus")
    info = corpus.realistic_stream(tmp_path / "s.pt", size_mb=0.05, seed=3)
    data = (tmp_path / "s.pt").read_bytes()
    image = Image()
    image.add_elf(info["elf"])
    kw = dict(mtc_freq=3, nom_freq=36, cpuid_0x15_eax=2, cpuid_0x15_ebx=300)
    good = _decode(data, image, **kw)
    bad = bytearray(data)
    bad[len(data) // 3] = 0xD9          # a reserved opcode byte: an unknown packet
    flow = _decode(bytes(bad), image, **kw)
    gaps = flow.gaps()
    assert gaps and gaps[0].offset >= len(data) // 3 - 64
    # after the resync at the next PSB the flow is the good flow's tail again
    tail = 100_000
    assert len(flow) > tail and list(flow.ip[-tail:]) == list(good.ip[-tail:])
    assert flow.flags[gaps[-1].position] & F.RESUMED


def test_a_truncated_stream_keeps_what_it_has(glibc):
    data, image, _ = glibc
    good = _decode(data, image)
    flow = _decode(data[:9000], image)
    assert 0 < len(flow) < len(good)
    assert list(flow.ip) == list(good.ip[:len(flow)])


def test_overflow_is_a_gap_and_tracing_resumes(traces_dir):
    folder = traces_dir / "libipt-2.0.5-ptt" / "ovf-fup"
    if not folder.is_dir():
        pytest.skip("libipt ptt test ovf-fup not present")
    image = Image()
    image.add_raw(str(folder / "ovf-fup.bin"), 0x1000)
    flow = InsnDecoder((folder / "ovf-fup.pt").read_bytes(), image).decode()
    (gap,) = flow.gaps()
    assert gap.reason == "overflow" and gap.ip
    assert len(flow) > gap.position and flow.flags[gap.position] & F.RESUMED


def test_the_layer_verbs_step_through_the_same_flow(glibc):
    data, image, _ = glibc
    whole = _decode(data, image)
    dec = InsnDecoder(data, image, errata=cpu_errata(6, 85))
    assert dec.sync_forward() == 8 and dec.offset > 8
    seen, items = [], 0
    while (thing := dec.next()) is not None:
        if thing[0] == "insn":
            seen.append(thing[1])
        else:
            items += 1
    assert seen == list(whole.ip)
    assert items == len(whole.items)
    from pt_decoder.errors import PtError
    with pytest.raises(PtError):
        InsnDecoder(data, image).sync_set(3)
    again = InsnDecoder(data, image, errata=cpu_errata(6, 85))
    assert again.sync_set(8) == 8 and again.next()[0] in ("insn", "event")


def test_random_damage_never_crashes_or_hangs(glibc):
    import random
    data, image, _ = glibc
    rng = random.Random(1234)
    for trial in range(150):
        bad = bytearray(data)
        for _ in range(rng.choice((1, 3, 20))):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        if trial % 10 == 0:
            bad = bad[:rng.randrange(len(bad))]
        flow = _decode(bytes(bad), image)
        assert len(flow) <= 2 * 59234
        for pos, off, ip, code in flow.errors():
            assert 0 <= pos <= len(flow) and 0 < code < 30 and off <= len(bad)
    noise = bytes(rng.randrange(256) for _ in range(20000))
    assert len(_decode(b"\x02\x82" * 8 + noise, image).items) >= 0

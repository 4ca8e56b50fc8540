"""Round trip on a real program: its true path (ptrace single-stepping) -> PT
(FlowEncoder: timing packets, CYC, return compression, periodic PSB+) ->
InsnDecoder -> exactly the same path.

Layer: tests of pt_decoder (insn/event/timing layers) with the encoder and the
image of a live process. The fixture (tests/fixtures/programs/flow_mix.c +
flow_lib.c as a shared library) runs recursion, indirect calls through a
table, a jump table, a PLT call into the library, a signal handler and
syscalls inside a small window that the test single-steps; a Go program
(flow_goroutines.go) switches goroutines on the stepped thread.
"""
from __future__ import annotations

import subprocess

import pytest
from fixture_builds import PROGRAMS
from ptrace_path import record

from pt_decoder import insn_flags as F
from pt_decoder.flow_encoder import FlowEncoder
from pt_decoder.image import Image
from pt_decoder.insn import InsnDecoder

TIMING = dict(mtc_freq=3, nom_freq=36, cpuid_0x15_eax=2, cpuid_0x15_ebx=300)


def _symbol(elf_path, name):
    from elftools.elf.elffile import ELFFile
    with open(elf_path, "rb") as fh:
        (sym,) = ELFFile(fh).get_section_by_name(".symtab").get_symbol_by_name(name)
        return sym["st_value"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    out = tmp_path_factory.mktemp("flow")
    lib = out / "libflow.so"
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", "-o", str(lib), str(PROGRAMS / "flow_lib.c")], check=True)
    exe = out / "flow_mix"
    subprocess.run(["gcc", "-O1", "-no-pie", "-fno-pie", "-fcf-protection=none", "-o", str(exe),
                    str(PROGRAMS / "flow_mix.c"), "-L" + str(out), "-lflow", "-Wl,-rpath," + str(out)],
                   check=True)
    begin, end = _symbol(exe, "window_begin"), _symbol(exe, "window_end")
    path, image = record([str(exe)], begin, end, image_of_process=Image.from_process)
    return path, image, exe, end


def _collapse_rep(path, image):
    """A rep-prefixed string instruction is one instruction to PT (single-stepping
    sees each iteration): collapse its repeats."""
    out = []
    for ip in path:
        if out and out[-1] == ip:
            continue
        out.append(ip)
    return out


def test_the_window_exercises_every_kind_of_flow(recorded):
    path, image, exe, _ = recorded
    assert 300 < len(path) < 100_000
    lib = [m for m in image.modules if m.path.endswith("libflow.so")]
    assert lib, "the shared library is mapped"
    in_lib = [ip for ip in path if lib[0].load_address <= ip < lib[0].load_address + lib[0].size]
    assert in_lib, "the path enters the shared library"
    handler = _symbol(exe, "on_usr1")
    assert handler in path, "the path runs the signal handler"


@pytest.mark.parametrize("psb_period,cyc", [(256, True), (4096, False), (0, True)])
def test_decoding_the_encoded_path_gives_it_back_exactly(recorded, psb_period, cyc):
    path, image, _, end = recorded
    want = _collapse_rep(path, image)
    tscs = [1_000_000 + 3 * i for i in range(len(want))]
    fe = FlowEncoder(image.read, timing=True, cyc=cyc, psb_period=psb_period, return_compression=True,
                     mtc_freq=3, nom_freq=36, cpuid_0x15=(2, 300))
    data = fe.encode(want, tscs=tscs, end_ip=end)
    flow = InsnDecoder(data, image, **TIMING).decode()
    assert flow.errors() == []
    assert list(flow.ip) == want
    # time never runs backwards and stays within the window's true TSC range (an
    # instruction gets the time of the packet that resolved it: TNT bits wait in
    # their packet until it is full, so a branch may see a somewhat later time)
    assert all(a <= b for a, b in zip(flow.tsc, flow.tsc[1:]))
    assert tscs[0] - 1000 <= flow.tsc[0] and flow.tsc[-1] <= tscs[-1] + 1000
    # ... and is exactly libipt's time for the same stream
    from oracle import libipt
    assert libipt.available(), "libipt.so.2 is missing: scripts/bootstrap.sh installs libipt-dev"
    sections = [libipt.Section(bytes(s.data), s.vaddr) for s in image.sections]
    ref = [r for r in libipt.libipt_insns(data, sections, mtc_freq=3, nom_freq=36, cpuid_0x15=(2, 300))
           if r["type"] == "insn"]
    assert [r["ip"] for r in ref] == want
    assert [r.get("tsc") for r in ref] == list(flow.tsc)
    # calls and returns balance out to what the path did
    calls = sum(1 for f in flow.flags if f & F.CALL)
    rets = sum(1 for f in flow.flags if f & F.RETURN)
    assert calls > 20 and rets > 20


def test_return_compression_is_what_the_stream_uses(recorded):
    path, image, _, end = recorded
    want = _collapse_rep(path, image)
    compressed = FlowEncoder(image.read, return_compression=True, psb_period=0).encode(want, end_ip=end)
    plain = FlowEncoder(image.read, return_compression=False, psb_period=0).encode(want, end_ip=end)
    assert len(compressed) < len(plain)
    for data in (compressed, plain):
        assert list(InsnDecoder(data, image).decode().ip) == want


def test_a_go_program_switching_goroutines_round_trips(tmp_path, monkeypatch):
    """Go (tests/fixtures/programs/flow_goroutines.go): the stepped thread runs the
    scheduler, which switches goroutines (runtime.gogo's indirect jump to a saved PC),
    closures, deferred calls and channel operations. One P and no asynchronous
    preemption, so that the window stays on one thread and short (single-stepping is
    slow enough to make every goroutine look preemptible)."""
    from fixture_builds import build_go
    exe = build_go("flow_goroutines.go", tmp_path)
    monkeypatch.setenv("GOMAXPROCS", "1")
    monkeypatch.setenv("GODEBUG", "asyncpreemptoff=1")
    begin, end = _symbol(exe, "main.windowBegin"), _symbol(exe, "main.windowEnd")
    path, image = record([str(exe)], begin, end, image_of_process=Image.from_process)
    want = _collapse_rep(path, image)
    assert _symbol(exe, "main.work") in want, "a goroutine ran on the stepped thread"
    assert _symbol(exe, "runtime.gogo.abi0") in want, "the scheduler switched goroutines"
    data = FlowEncoder(image.read, timing=True, cyc=True, psb_period=1024, mtc_freq=3, nom_freq=36,
                       cpuid_0x15=(2, 300)).encode(want, end_ip=end)
    flow = InsnDecoder(data, image, **TIMING).decode()
    assert flow.errors() == []
    assert list(flow.ip) == want


def test_a_callee_run_untraced_is_no_call_in_the_history(recorded):
    """The stepper runs a debugger's tracer unrecorded (adapter/capture/stepper.py): the
    indirect call into it is the last instruction before tracing stops (TIP.PGD at the
    callee), its return address the first after tracing is enabled again. Here every callee
    of the fixture's indirect calls is cut from the real path and encoded so. The decode gives
    the cut path back (as libipt does); the TIP.PGD binds to each such call, which then opens
    no frame (no CALL bit): the history's depth after each is the caller's, and the other
    calls and returns still balance. A call whose next instruction is not its return address
    is refused."""
    path, image, _, end = recorded
    want = _collapse_rep(path, image)
    whole = InsnDecoder(FlowEncoder(image.read, psb_period=0).encode(want, end_ip=end),
                        image).decode().to_history()
    cut, kept, untraced = [], [], {}
    i = 0
    while i < len(want):
        cut.append(want[i])
        kept.append(i)
        if whole.flags(i) & F.CALL and whole.flags(i) & F.INDIRECT:
            depth = whole.depth(i)
            j = i + 1
            while j < len(want) and whole.depth(j) != depth:
                j += 1
            if j < len(want):
                untraced[len(cut) - 1] = want[i + 1]
                i = j
                continue
        i += 1
    assert len(untraced) >= 3, "the window makes indirect calls through the table"
    data = FlowEncoder(image.read, timing=True, cyc=True, psb_period=256, mtc_freq=3,
                       nom_freq=36, cpuid_0x15=(2, 300)).encode(cut, end_ip=end,
                                                                untraced=untraced)
    flow = InsnDecoder(data, image, **TIMING).decode()
    assert flow.errors() == []
    assert list(flow.ip) == cut
    from oracle import libipt
    sections = [libipt.Section(bytes(s.data), s.vaddr) for s in image.sections]
    assert [r["ip"] for r in libipt.libipt_insns(data, sections, mtc_freq=3, nom_freq=36,
                                                  cpuid_0x15=(2, 300))
            if r["type"] == "insn"] == cut
    history = flow.to_history()
    for k in untraced:
        assert not history.flags(k) & F.CALL
        assert history.flags(k + 1) & F.RESUMED
        assert history.depth(k + 1) == history.depth(k)
    # every other call of the path kept is still one, and the depth at the end is the whole's
    assert sum(1 for f in flow.flags if f & F.CALL) == \
        sum(1 for i in kept if whole.flags(i) & F.CALL) - len(untraced)
    assert history.depth(len(cut) - 1) == whole.depth(len(want) - 1)
    bad = next(k for k in untraced if cut[k + 1] != cut[k + 2])
    with pytest.raises(ValueError, match=r"untraced\[\d+\]"):
        FlowEncoder(image.read).encode(cut[:bad + 1] + cut[bad + 2:], untraced={bad: 1})
    # a path that ends in an untraced callee (the window closed there) ends at the call
    last = max(untraced)
    data = FlowEncoder(image.read).encode(cut[:last + 1], untraced={last: untraced[last]})
    flow = InsnDecoder(data, image).decode()
    assert flow.errors() == [] and list(flow.ip) == cut[:last + 1]

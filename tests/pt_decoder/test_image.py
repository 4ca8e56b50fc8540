"""pt_decoder.image: ELF/raw overlays, a live process's address space, the vDSO, perf maps.

Oracles are independent of the code under test: binutils `nm` for symbol
addresses, the process's own memory (/proc/PID/mem) and auxiliary vector
(/proc/PID/auxv, AT_SYSINFO_EHDR) for what is really mapped.
"""
from __future__ import annotations

import os
import signal
import struct
import subprocess

import pytest
from elftools.elf.elffile import ELFFile
from fixture_builds import build_c

from pt_decoder.errors import ErrorCode, PtError
from pt_decoder.image import Image, Section, Symbol

AT_SYSINFO_EHDR = 33  # getauxval(3): address of the vDSO's ELF header


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return build_c("lines_demo.c", tmp_path_factory.mktemp("image"), "-g", "-O0")


def nm_address(binary, name: str) -> int:
    for line in subprocess.run(["nm", str(binary)], capture_output=True, text=True, check=True).stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == name:
            return int(parts[0], 16)
    raise AssertionError(f"nm found no {name} in {binary}")


def assert_well_formed(image: Image) -> None:
    starts = [s.vaddr for s in image.sections]
    assert starts == sorted(starts)
    for a, b in zip(image.sections, image.sections[1:]):
        assert a.end <= b.vaddr, f"{a.name}@{a.vaddr:#x} overlaps {b.name}@{b.vaddr:#x}"


def test_add_elf_maps_code_at_base_and_symbolizes(demo):
    base = 0x5555_0000_0000
    image = Image()
    module = image.add_elf(str(demo), base=base)
    with open(demo, "rb") as f:
        elf = ELFFile(f)
        text = elf.get_section_by_name(".text")
        f.seek(text["sh_offset"])
        expected = f.read(text["sh_size"])
    assert image.read(base + text["sh_addr"], len(expected)) == expected
    square = nm_address(demo, "square")
    assert image.symbolize(base + square + 4) == Symbol("square", 4, str(demo))
    assert image.find_symbol("sum_squares")[0] == base + nm_address(demo, "sum_squares")
    assert module.kind == "elf" and module.base == base and len(module.build_id) == 40
    # Data segments are not code: nothing is mapped at .rodata.
    with open(demo, "rb") as f:
        rodata = ELFFile(f).get_section_by_name(".rodata")["sh_addr"]
    assert image.read(base + rodata, 4) is None
    assert_well_formed(image)


def test_later_add_overrides_overlapped_bytes():
    image = Image()
    image.add_raw(b"A" * 32, 0x1000)
    generation = image.generation
    image.add_raw(b"B" * 8, 0x1008)          # inside: splits A in two
    assert image.generation > generation
    image.add_raw(b"C" * 16, 0x1018)         # straddles A's end
    image.add_raw(b"D" * 4, 0x0ffe)          # straddles A's start
    assert_well_formed(image)
    assert image.read(0x0ffe, 0x30) == b"DDDD" + b"A" * 6 + b"B" * 8 + b"A" * 8 + b"C" * 16
    names = [(s.vaddr, len(s.data)) for s in image.sections]
    assert names == [(0xffe, 4), (0x1002, 6), (0x1008, 8), (0x1010, 8), (0x1018, 16)]
    # A split piece keeps the offset of its bytes in the source.
    image2 = Image()
    image2.add_raw(bytes(range(64)), 0x2000, offset=0)
    image2.add_raw(b"\xff" * 4, 0x2010)
    tail = image2.section_at(0x2014)
    assert tail.vaddr == 0x2014 and tail.offset == 0x14 and bytes(tail.data[:2]) == b"\x14\x15"


def test_read_at_the_edges():
    image = Image()
    image.add_raw(b"0123", 0x100)
    image.add_raw(b"4567", 0x104)            # adjacent: read continues
    image.add_raw(b"xy", 0x10a)              # not adjacent: read stops
    assert image.read(0x102, 10) == b"234567"
    assert image.read(0x108, 1) is None
    assert image.read(0xff, 1) is None
    assert image.read(0x10b, 5) == b"y"
    assert image.section_at(0x10a) == Section(0x10a, b"xy", "[raw]", 0)


def test_add_raw_file_with_offset_and_size(tmp_path):
    blob = tmp_path / "blob.bin"
    blob.write_bytes(bytes(range(256)))
    image = Image()
    module = image.add_raw(str(blob), 0x4000, offset=0x10, size=0x20)
    assert image.read(0x4000, 0x40) == bytes(range(0x10, 0x30))
    assert (module.path, module.load_address, module.size, module.offset) == (str(blob), 0x4000, 0x20, 0x10)
    with pytest.raises(PtError) as err:
        image.add_raw(str(blob), 0, offset=0x1000)
    assert err.value.code == ErrorCode.INVALID


def test_bad_inputs_name_what_is_wrong(tmp_path):
    not_elf = tmp_path / "notes.txt"
    not_elf.write_text("hello")
    with pytest.raises(PtError) as err:
        Image().add_elf(str(not_elf))
    assert err.value.code == ErrorCode.BAD_IMAGE and "notes.txt" in str(err.value)
    with pytest.raises(PtError) as err:
        Image().add_elf(str(tmp_path / "missing"))
    assert err.value.code == ErrorCode.BAD_FILE and "missing" in str(err.value)
    dead = subprocess.Popen(["true"])
    dead.wait()
    with pytest.raises(PtError) as err:
        Image.from_process(dead.pid)
    assert err.value.code == ErrorCode.BAD_FILE and f"/proc/{dead.pid}/maps" in str(err.value)


def _start_and_stop(argv):
    """Start a fixture, wait for its "ready" line, stop it with SIGSTOP."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    ready = proc.stdout.readline()
    assert ready.startswith("ready"), ready
    os.kill(proc.pid, signal.SIGSTOP)
    _, status = os.waitpid(proc.pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    return proc, ready


def _auxv(pid: int, key: int) -> int:
    with open(f"/proc/{pid}/auxv", "rb") as f:
        data = f.read()
    for k, v in struct.iter_unpack("<QQ", data):
        if k == key:
            return v
    raise AssertionError(f"auxv of {pid} has no entry {key}")


@pytest.mark.live
def test_from_process_matches_the_live_process(demo):
    proc, _ = _start_and_stop([str(demo), "10", "wait"])
    try:
        image = Image.from_process(proc.pid)
        assert_well_formed(image)
        exe = next(m for m in image.modules if m.path == str(demo))
        with open(demo, "rb") as f:
            elf = ELFFile(f)
            build_id = next(n["n_desc"] for n in elf.get_section_by_name(".note.gnu.build-id").iter_notes())
        assert exe.build_id == build_id and exe.kind == "elf" and exe.offset == 0
        # PIE: the load bias is where the first mapping begins (p_vaddr 0).
        square = exe.base + nm_address(demo, "square")
        size = image.find_symbol("square")[1]
        assert size > 0
        with open(f"/proc/{proc.pid}/mem", "rb", buffering=0) as mem:
            mem.seek(square)
            live = mem.read(size)
        with open(demo, "rb") as f:
            text = ELFFile(f).get_section_by_name(".text")
            f.seek(text["sh_offset"] + nm_address(demo, "square") - text["sh_addr"])
            on_disk = f.read(size)
        assert image.read(square, size) == live == on_disk
        assert image.symbolize(square + 1) == Symbol("square", 1, str(demo))
        # libc is mapped and its exported functions are named.
        printf = image.find_symbol("printf")
        assert printf is not None and "libc" in printf[2]
        assert image.symbolize(printf[0] + 2).name in ("printf", "_IO_printf")
        # The vDSO: where the kernel says it is, copied from memory, with its own symbols.
        vdso = next(m for m in image.modules if m.path == "[vdso]")
        assert vdso.load_address == _auxv(proc.pid, AT_SYSINFO_EHDR)
        assert vdso.kind == "snapshot"
        assert image.read(vdso.load_address, 4) == b"\x7fELF"
        gettime = image.find_symbol("__vdso_clock_gettime")
        assert gettime is not None and gettime[2] == "[vdso]"
        assert vdso.load_address <= gettime[0] < vdso.load_address + vdso.size
        assert image.symbolize(gettime[0] + 1).module == "[vdso]"
        assert not any(s.name == "[vsyscall]" for s in image.sections)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.live
def test_from_process_snapshots_jit_code_named_by_perf_map(tmp_path):
    binary = build_c("jit_demo.c", tmp_path, "-O1")
    proc, ready = _start_and_stop([str(binary)])
    perf_map = f"/tmp/perf-{proc.pid}.map"
    try:
        addr = int(ready.split()[1], 16)
        image = Image.from_process(proc.pid)
        assert image.read(addr, 6) == bytes([0xB8, 0x2A, 0, 0, 0, 0xC3])
        anon = image.section_at(addr)
        assert anon.name in ("[anon]",) or anon.name.startswith("[anon")
        assert image.symbolize(addr + 5) == Symbol("jit_answer", 5, perf_map)
        assert image.symbolize(addr + 6) is None
        # Without the perf map the code is still there, unnamed.
        assert Image.from_process(proc.pid, perf_map=False).symbolize(addr) is None
    finally:
        proc.kill()
        proc.wait()
        if os.path.exists(perf_map):
            os.unlink(perf_map)


def test_perf_map_later_lines_win_and_bad_lines_are_reported(tmp_path):
    path = tmp_path / "perf-1.map"
    path.write_text("1000 20 py::old:/a.py\n1000 10 py::new function:/a.py\nzz not hex\n2000 8\n")
    image = Image()
    assert image.add_perf_map(str(path)) == 2
    assert image.symbolize(0x1008) == Symbol("py::new function:/a.py", 8, str(path))
    assert image.symbolize(0x1010) is None
    assert len(image.warnings) == 2 and ":3:" in image.warnings[0] and ":4:" in image.warnings[1]
    with pytest.raises(PtError) as err:
        image.add_perf_map(str(tmp_path / "absent.map"))
    assert err.value.code == ErrorCode.BAD_FILE


@pytest.mark.live
def test_bundle_style_mappings_and_snapshots_rebuild_the_process_image(demo):
    """What a trace bundle keeps (file mappings at their addresses, snapshot bytes)
    rebuilds an image with the same bytes and the same symbols as the live one."""
    proc, _ = _start_and_stop([str(demo), "10", "wait"])
    try:
        live = Image.from_process(proc.pid)
    finally:
        proc.kill()
        proc.wait()
    again = Image()
    for section in live.sections:
        if section.name.startswith("/"):
            again.add_mapping(section.name, section.vaddr, section.offset, len(section.data))
        else:
            again.add_snapshot(bytes(section.data), section.vaddr, section.name)
    assert [(s.vaddr, bytes(s.data)) for s in again.sections] == [(s.vaddr, bytes(s.data)) for s in live.sections]
    for name in ("square", "printf", "__vdso_clock_gettime"):
        address = live.find_symbol(name)[0]
        assert again.symbolize(address + 1) == live.symbolize(address + 1)
    exe = next(m for m in again.modules if m.path == str(demo))
    assert exe.base == next(m for m in live.modules if m.path == str(demo)).base
    # Two mappings of one file make one module spanning both.
    image = Image()
    first = image.add_mapping(str(demo), 0x10000, 0, 0x1000)
    both = image.add_mapping(str(demo), 0x11000, 0x1000, 0x1000)
    assert len(image.modules) == 1 and both.load_address == 0x10000 and both.size == 0x2000
    assert both.base == first.base == 0x10000 and both.offset == 0
    with pytest.raises(PtError) as err:
        image.add_mapping("/nonexistent/lib.so", 0x20000)
    assert err.value.code == ErrorCode.BAD_FILE


def test_images_of_one_file_share_its_code_bytes_until_the_last_is_gone(demo, tmp_path):
    """Issue 17 (soak): an adapter keeping one decoded bundle per capture held its own copy of
    the interpreter's and libraries' code per capture (~70 MB each). Images of the same
    unchanged file share one buffer; a changed file is read afresh; the buffer goes with
    the last Image holding it."""
    import gc
    import weakref

    def code_buffers(image):
        return [s.data.obj if isinstance(s.data, memoryview) else s.data for s in image.sections]

    first, second = Image(), Image()
    first.add_elf(str(demo), base=0x400000)
    second.add_elf(str(demo), base=0x7f0000000000)
    shared = code_buffers(first)
    assert shared and all(a is b for a, b in zip(shared, code_buffers(second)))
    assert first.read(first.sections[0].vaddr, 16) == second.read(second.sections[0].vaddr, 16)

    raw = tmp_path / "code.bin"
    raw.write_bytes(b"\x90" * 64)
    one = Image()
    one.add_raw(str(raw), 0x1000)
    os.utime(raw, ns=(0, 1))  # same bytes, another mtime: not trusted to be the same file
    raw.write_bytes(b"\xcc" * 64)
    other = Image()
    other.add_raw(str(raw), 0x1000)
    assert one.read(0x1000, 4) == b"\x90" * 4 and other.read(0x1000, 4) == b"\xcc" * 4

    gone = weakref.ref(shared[0])
    del first, second, shared
    gc.collect()
    assert gone() is None

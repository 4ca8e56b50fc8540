"""features.native_frames on this very process: addresses of libc functions become DAP frames
with the symbol, the library and instructionPointerReference; the walk ends at an address no
module maps; frame ids stay in their reserved range."""
from __future__ import annotations

import ctypes
import mmap
import os
import re

import pytest

from adapter.features import native_frames
from adapter.features.native_frames import (
    NATIVE_FRAME_ID_BASE,
    NATIVE_FRAME_ID_END,
    NativeFrameMaker,
    ProcessSymbols,
    _debug_file,
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


def test_process_symbols_name_what_image_names_and_libc_internals():
    """ProcessSymbols (no code bytes read) agrees with Image.from_process on libc's exported
    functions; the implementation behind memset (an IFUNC) is named from libc's separate
    debug file where one is installed (before: `in 0x7f...`)."""
    libc = ctypes.CDLL(None)
    symbols = ProcessSymbols(os.getpid())
    symbols.refresh()
    image = Image.from_process(os.getpid())
    for name in ("getpid", "write", "read", "malloc"):
        address = ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
        ours, theirs = symbols.symbolize(address + 1), image.symbolize(address + 1)
        assert theirs is not None and ours is not None, name
        assert (ours.name, ours.offset, ours.module) == (theirs.name, theirs.offset,
                                                          theirs.module), name
        assert symbols.module_at(address).path == image.module_at(address).path
    memset = ctypes.cast(libc.memset, ctypes.c_void_p).value  # dlsym resolves the IFUNC
    module = symbols.module_at(memset)
    if _debug_file(module.build_id) is None:
        pytest.skip(f"no separate debug file for {module.path}: its local symbols are absent")
    found = symbols.symbolize(memset + 3)
    assert found is not None and "memset" in found.name and "@" not in found.name, found
    assert found.offset == 3


def test_process_symbols_are_kept_until_the_maps_change(tmp_path):
    symbols = ProcessSymbols(os.getpid())
    assert symbols.refresh() is True
    write = ctypes.cast(ctypes.CDLL(None).write, ctypes.c_void_p).value
    table = symbols.table(symbols.module_at(write))
    assert symbols.refresh() is False  # nothing mapped or unmapped: nothing re-read
    region = mmap.mmap(-1, 3 * mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    try:
        assert symbols.refresh() is True
        assert symbols.table(symbols.module_at(write)) is table  # same file, same bias: kept
    finally:
        region.close()


def test_process_symbols_read_the_perf_map_and_its_changes():
    jit = mmap.mmap(-1, mmap.PAGESIZE)
    address = ctypes.addressof(ctypes.c_char.from_buffer(jit))
    path = f"/tmp/perf-{os.getpid()}.map"
    symbols = ProcessSymbols(os.getpid())
    try:
        with open(path, "w") as f:
            f.write(f"{address:x} 40 py::hot_loop:/srv/app.py\n")
        symbols.refresh()
        assert symbols.symbolize(address + 0x10).name == "py::hot_loop:/srv/app.py"
        with open(path, "a") as f:  # a JIT that recompiles appends: the later line wins
            f.write(f"{address:x} 40 py::hot_loop_v2:/srv/app.py\n")
        assert symbols.symbolize(address + 0x10).name == "py::hot_loop_v2:/srv/app.py"
    finally:
        os.unlink(path)
        del address
        jit.close()


def _libpython(symbols: ProcessSymbols):
    module = next((m for m in symbols.modules if "libpython" in os.path.basename(m.path)), None)
    if module is None:
        pytest.skip("this interpreter is not linked against a shared libpython")
    return module


def test_no_frame_is_named_after_a_section_marker_or_data_of_libpython():
    """Issue 35: a data-breakpoint stop showed `__GNU_EH_FRAME_HDR+0x85d58 [libpython3.11.so.1.0]`,
    an address in libpython's data named after a section marker (a size-0 STT_NOTYPE symbol
    that ran on to the next function symbol, past the end of the code). On this process's own
    libpython: an address in .eh_frame_hdr, .data, .bss or the GOT gets no symbol, and its frame
    shows the address with the module only; a real function still gets its name."""
    from elftools.elf.elffile import ELFFile
    symbols = ProcessSymbols(os.getpid())
    symbols.refresh()
    module = _libpython(symbols)
    with open(module.path, "rb") as f:
        elf = ELFFile(f)
        sections = {name: elf.get_section_by_name(name)["sh_addr"] + module.base
                    for name in (".eh_frame_hdr", ".data", ".bss", ".got")
                    if elf.get_section_by_name(name) is not None}
    assert ".eh_frame_hdr" in sections and ".data" in sections
    for name, address in sections.items():
        found = symbols.symbolize(address + 0x10)
        assert found is None, (name, found)
    address = sections[".eh_frame_hdr"] + 0x10
    frame, = NativeFrameMaker().frames(symbols, [address], "at the write")
    assert frame["name"] == f"{address:#x} [{os.path.basename(module.path)}, at the write]", frame
    # the stop's description (data_breakpoints._symbol) says the same
    from adapter.features.data_breakpoints import DataBreakpoints
    assert DataBreakpoints._symbol(None, address, symbols) == \
        f"{address:#x} ({os.path.basename(module.path)})"
    # a real function of libpython keeps its name
    function = ctypes.cast(ctypes.pythonapi.PyLong_FromLong, ctypes.c_void_p).value
    found = symbols.symbolize(function + 2)
    assert found is not None and found.name == "PyLong_FromLong" and found.offset == 2, found
    assert DataBreakpoints._symbol(None, function + 2, symbols) == \
        f"PyLong_FromLong+0x2 ({os.path.basename(module.path)}, ip {function + 2:#x})"


def test_elf_function_symbols_keep_functions_only():
    """pt_decoder.symbols on libpython: every symbol it gives is an STT_FUNC or STT_GNU_IFUNC
    of an executable section, and none runs past the end of its section."""
    from elftools.elf.elffile import ELFFile

    from pt_decoder.symbols import elf_function_symbols
    symbols = ProcessSymbols(os.getpid())
    symbols.refresh()
    module = _libpython(symbols)
    with open(module.path, "rb") as f:
        elf = ELFFile(f)
        code = [(s["sh_addr"], s["sh_addr"] + s["sh_size"]) for s in elf.iter_sections()
                if s["sh_flags"] & 0x4]  # SHF_EXECINSTR
        entries = elf_function_symbols(elf, 0)
        kinds = {}
        for section in (".symtab", ".dynsym"):
            table = elf.get_section_by_name(section)
            for s in (table.iter_symbols() if table is not None else ()):
                kinds.setdefault((s["st_value"], s.name), s["st_info"]["type"])
    assert entries
    names = {name for _, _, name in entries}
    assert "__GNU_EH_FRAME_HDR" not in names and "_DYNAMIC" not in names
    assert "_GLOBAL_OFFSET_TABLE_" not in names and "__bss_start" not in names
    for start, size, name in entries:
        assert kinds[(start, name)] in ("STT_FUNC", "STT_GNU_IFUNC"), (name, kinds[(start, name)])
        assert size > 0, name
        assert any(lo <= start and start + size <= hi for lo, hi in code), (name, start, size)

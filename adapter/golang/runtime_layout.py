"""The Go runtime's layout in one binary, read from the binary itself: where the current g is
found, the offsets of g.goid, g.m, m.curg and m.g0 (from DWARF; they differ between Go
versions), and the instructions that switch goroutines.

Layer: adapter.golang (Go correlation). Pure reading of an ELF file with pyelftools; knows
nothing of processes, traces or DAP.

Facts relied on (amd64):
  * The current g lives in the thread's TLS slot at fs_base-8 for a statically linked Go
    binary (no PT_TLS segment; Go's internal linker), or at fs_base + (runtime.tlsg -
    round_up(PT_TLS memsz, align)) when externally linked (Delve, pkg/proc/bininfo.go
    setGStructOffsetElf, does the same). R14 holds g as well, but only in ABIInternal Go code
    (Go's src/cmd/compile/abi-internal.md), not in assembly, cgo or signal handlers: the TLS
    slot is always right, so ptdebug reads that.
  * Every goroutine switch writes the TLS slot: runtime.gogo before jumping into the resumed
    goroutine, runtime.mcall and runtime.systemstack when moving to g0 and back, the signal
    handler (setg), morestack. Each is an instruction `MOV reg, %fs:-8` (64 REX.W 89 /r with a
    SIB, no base, disp32 0xfffffff8): `g_store_addresses` finds them all by scanning the text.
"""
from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field

from elftools.elf.elffile import ELFFile

STRUCTS = {"runtime.g": ("goid", "m", "sched", "atomicstatus", "stackguard0", "preempt"),
           "runtime.m": ("g0", "curg", "id", "procid", "locks", "p"),
           "runtime.p": ("preempt", "sysmontick", "schedtick"),
           "runtime.sysmontick": ("schedwhen", "schedtick"),
           "runtime.gobuf": ("sp", "pc", "g")}
"""The members ptdebug needs, by structure."""

# MOV r64, %fs:0xfffffffffffffff8: prefix 64, REX.W (48, or 4c for r8-r15), 89, ModRM with
# mod=00 rm=100 (a SIB follows) and any reg, SIB 25 (no base, no index), disp32 -8.
_TLS_G_STORE = re.compile(rb"\x64[\x48\x4c]\x89[\x04\x0c\x14\x1c\x24\x2c\x34\x3c]"
                          rb"\x25\xf8\xff\xff\xff", re.DOTALL)


class LayoutError(Exception):
    """The binary lacks what ptdebug needs (not Go, no DWARF, unknown layout); the text says
    which."""


@dataclass
class RuntimeLayout:
    """Where a Go binary keeps goroutine identity."""

    path: str
    go_version: str
    """From the runtime.buildVersion string when found, else ''."""
    offsets: dict[str, dict[str, int]]
    """structure -> member -> byte offset (DWARF DW_AT_data_member_location)."""
    tls_g_offset: int
    """The current g is the u64 at fs_base + this (negative)."""
    symbols: dict[str, int] = field(default_factory=dict)
    """runtime switch routines: name -> address (runtime.gogo's body 'gogo', runtime.mcall,
    runtime.systemstack, ...) where the symbol table has them."""
    g_stores: list[int] = field(default_factory=list)
    """Addresses of every instruction that writes the TLS g slot (the switch points)."""

    @property
    def goid_offset(self) -> int:
        return self.offsets["runtime.g"]["goid"]

    @classmethod
    def from_elf(cls, path: str) -> RuntimeLayout:
        """Raises LayoutError naming what is missing."""
        with open(path, "rb") as f:
            elf = ELFFile(f)
            if elf.get_section_by_name(".gopclntab") is None:
                raise LayoutError(f"{path} is not a Go binary (no .gopclntab)")
            if not elf.has_dwarf_info():
                raise LayoutError(f"{path} has no DWARF (built with -ldflags=-w?): the "
                                  "runtime.g layout cannot be read")
            offsets = _struct_offsets(elf)
            missing = [f"{s}.{m}" for s, members in STRUCTS.items() for m in members
                       if m not in offsets.get(s, {})]
            if missing:
                raise LayoutError(f"{path}: DWARF lacks {', '.join(missing)}")
            symbols = _symbols(elf)
            tls = _tls_g_offset(elf, symbols)
            stores = g_store_addresses(elf)
            version = _go_version(elf, symbols)
        return cls(path, version, offsets, tls, symbols, stores)


def _struct_offsets(elf: ELFFile) -> dict[str, dict[str, int]]:
    """Member offsets of the STRUCTS, from the first CU that defines each (Go puts the
    runtime's types in the runtime CU; the walk stops as soon as all are found)."""
    want = set(STRUCTS)
    found: dict[str, dict[str, int]] = {}
    dwarf = elf.get_dwarf_info()
    for cu in dwarf.iter_CUs():
        top = cu.get_top_DIE()
        name = top.attributes.get("DW_AT_name")
        if name is not None and name.value not in (b"runtime", b"runtime/internal/sys") \
                and found == {} and not name.value.startswith(b"runtime"):
            continue  # types of the runtime live in the runtime's compile unit
        for die in top.iter_children():
            if die.tag != "DW_TAG_structure_type":
                continue
            attr = die.attributes.get("DW_AT_name")
            struct = attr.value.decode() if attr is not None else ""
            if struct not in want or struct in found:
                continue
            members = {}
            for child in die.iter_children():
                if child.tag == "DW_TAG_member" and "DW_AT_name" in child.attributes:
                    loc = child.attributes.get("DW_AT_data_member_location")
                    if loc is not None and isinstance(loc.value, int):
                        members[child.attributes["DW_AT_name"].value.decode()] = loc.value
            found[struct] = members
        if want <= set(found):
            break
    return found


SWITCH_SYMBOLS = ("gogo", "runtime.gogo.abi0", "runtime.mcall", "runtime.systemstack.abi0",
                  "runtime.systemstack", "runtime.morestack.abi0", "runtime.goexit.abi0",
                  "runtime.goexit1", "runtime.coroswitch", "runtime.park_m", "runtime.schedule", "runtime.execute",
                  "runtime.tlsg", "runtime.buildVersion",
                  "runtime.gopark")  # where a DAP Go window closes: its goroutine parks


def _symbols(elf: ELFFile) -> dict[str, int]:
    symtab = elf.get_section_by_name(".symtab")
    out: dict[str, int] = {}
    if symtab is None:
        return out
    for name in SWITCH_SYMBOLS:
        found = symtab.get_symbol_by_name(name)
        if found:
            out[name] = found[0]["st_value"]
    return out


def _tls_g_offset(elf: ELFFile, symbols: dict[str, int]) -> int:
    tls = [seg for seg in elf.iter_segments() if seg["p_type"] == "PT_TLS"]
    if not tls:
        return -8  # Go's internal linker: g is the word just below the thread pointer
    seg = tls[0]
    align = max(1, seg["p_align"])
    memsz = (seg["p_memsz"] + align - 1) // align * align
    return symbols.get("runtime.tlsg", 0) - memsz


def g_store_addresses(elf: ELFFile) -> list[int]:
    """Addresses of the instructions writing the TLS g slot, in the executable sections."""
    out: list[int] = []
    for section in elf.iter_sections():
        if section["sh_type"] != "SHT_PROGBITS" or not section["sh_flags"] & 0x4:  # SHF_EXECINSTR
            continue
        data = section.data()
        base = section["sh_addr"]
        out.extend(base + m.start() for m in _TLS_G_STORE.finditer(data))
    return sorted(out)


def _go_version(elf: ELFFile, symbols: dict[str, int]) -> str:
    section = elf.get_section_by_name(".go.buildinfo")
    if section is None:
        return ""
    match = re.search(rb"go1\.\d+(?:\.\d+)?", section.data())
    return match.group().decode() if match else ""


_layouts: dict[tuple, RuntimeLayout] = {}
_layouts_lock = threading.Lock()


def _layout_key(path: str) -> tuple:
    """The binary's build-id (GNU's, else Go's) when it has one (a capture's bundle holds its
    own copy or hard link of the executable the adapter read when the program started: the
    same binary under another path), else (path, size, mtime). Raises OSError."""
    stat = os.stat(path)
    from elftools.common.exceptions import ELFError

    from pt_decoder.image import elf_identity
    try:
        with open(path, "rb") as f:
            build_id = elf_identity(ELFFile(f))
    except (ELFError, ValueError):
        build_id = None  # not an ELF file: RuntimeLayout.from_elf says so
    if build_id:
        return ("build-id", build_id)
    return (path, stat.st_size, stat.st_mtime_ns)


def layout_of(path: str) -> RuntimeLayout:
    """RuntimeLayout.from_elf, remembered per binary (its build-id, else path, size and
    mtime): reading the runtime's DWARF takes one to two and a half seconds, and every capture
    of a session records the same binary (each bundle under its own path). Raises
    LayoutError."""
    try:
        key = _layout_key(path)
    except OSError as exc:
        raise LayoutError(f"{path}: {exc.strerror}") from None
    with _layouts_lock:
        layout = _layouts.get(key)
        if layout is None:
            layout = _layouts[key] = RuntimeLayout.from_elf(path)
        return layout

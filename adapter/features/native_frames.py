"""Native stack frames that ptdebug knows and the Python debugger does not: the instruction
pointer and user-space call chain of a perf sample (a data-breakpoint hit), shown as DAP stack
frames above debugpy's Python frames.

Layer: features. Turns addresses into DAP `StackFrame` objects with `instructionPointerReference`
(so VS Code's disassembly view opens there), a name from the process's symbols
(pt_decoder.image: perf-map entries, then ELF symbols) and, where the module carries DWARF line
information and is small enough to read at once, its source file and line (pt_decoder.lines).
It knows nothing of debugpy, of watchpoints or of how the frames are spliced into a response.

Frame ids come from a range of their own, [NATIVE_FRAME_ID_BASE, NATIVE_FRAME_ID_END): debugpy
numbers its frames from 1 upwards, the replayed frames of features.reverse start at 1 << 27 and
the local variablesReferences of features.record_breakpoints at 1 << 28 (docs/protocol.md).
"""
from __future__ import annotations

import os
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from adapter.hw import procfs

NATIVE_FRAME_ID_BASE = 1 << 26
NATIVE_FRAME_ID_END = 1 << 27
MAX_NATIVE_FRAMES = 16
"""The perf call chain is a frame-pointer walk; past this many frames it is mostly libpython."""
LINE_TABLE_MAX_BYTES = 4 << 20
"""Modules larger than this (libpython) or without their own .debug_line (libc, whose lines
are in a separate debug file) are named by symbol only: reading their DWARF takes seconds, and
a source line matters in the user's own native code."""
DEBUG_ROOT = "/usr/lib/debug"
"""Where distributions install separate debug files (.build-id/xx/rest.debug): a stripped
library's local symbols (libc's __memmove_avx_unaligned_erms behind memcpy) are only there."""
SMALL_MODULE_BYTES = 1 << 20
"""Modules read ahead whatever their name (ProcessSymbols.warm) are at most this large."""
USER_SPACE_END = 1 << 47
"""x86-64 canonical user addresses are below 2^47 (SDM Vol. 1 §3.3.7.1); the rest is kernel."""


@dataclass
class NativeStack:
    """The native frames of one stopped thread, innermost first, and what they came from."""
    thread_id: int
    frames: list[dict] | None
    """DAP StackFrame objects (ids in the native range); None until `make` built them."""
    registers: dict[str, int] = field(default_factory=dict)
    """User registers of the sample (the innermost frame's), by name."""
    when: str = ""
    """What moment the frames show, e.g. "at the write" (they are not the thread's present)."""
    make: Callable[[], list[dict]] | None = None
    """Builds `frames` when first needed: a stop is sent before its frames are symbolised."""
    hidden: int = 0
    """Frames of debugpy's list not shown (the handler's, above the writer's frame)."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def get_frames(self) -> list[dict]:
        with self._lock:
            if self.frames is None:
                self.frames = self.make() if self.make is not None else []
            return self.frames

    def owns(self, frame_id: object) -> bool:
        return any(frame["id"] == frame_id for frame in self.get_frames())

    def is_top(self, frame_id: object) -> bool:
        frames = self.get_frames()
        return bool(frames) and frames[0]["id"] == frame_id


class NativeFrameMaker:
    """Builds native frames for one process; keeps line tables between stops."""

    def __init__(self):
        self._line_tables: dict[tuple[str, int], object] = {}
        self._next_id = NATIVE_FRAME_ID_BASE

    def frames(self, image, ips: list[int], when: str) -> list[dict]:
        """DAP frames for `ips` (innermost first: the sample IP, then return addresses) in the
        process whose code `image` (pt_decoder.image.Image) maps. The walk ends at the first
        address no module maps (a frame-pointer chain that left the stack)."""
        frames = []
        for depth, ip in enumerate(ips[:MAX_NATIVE_FRAMES]):
            if not 0 < ip < USER_SPACE_END:
                break
            # A return address follows its call: its line is the call's, one byte before.
            where = ip if depth == 0 else ip - 1
            module = image.module_at(where)
            symbol = image.symbolize(where)
            if module is None and symbol is None:
                break
            name = f"{symbol.display}+{symbol.offset + ip - where:#x}" if symbol else f"{ip:#x}"
            library = os.path.basename(module.path) if module else "?"
            frame = {"id": self._frame_id(), "name": f"{name} [{library}, {when}]",
                     "line": 0, "column": 0, "instructionPointerReference": f"{ip:#x}",
                     "presentationHint": "subtle"}
            line = self._line(module, where)
            if line is not None:
                frame.update({"source": {"name": os.path.basename(line[0]), "path": line[0],
                                         "presentationHint": "deemphasize"},
                              "line": line[1], "column": 1})
            frames.append(frame)
        return frames

    def _frame_id(self) -> int:
        self._next_id += 1
        if self._next_id >= NATIVE_FRAME_ID_END:
            self._next_id = NATIVE_FRAME_ID_BASE + 1
        return self._next_id

    def _line(self, module, address: int) -> tuple[str, int] | None:
        from elftools.common.exceptions import ELFError

        from pt_decoder.errors import PtError
        from pt_decoder.lines import LineTable
        if module is None or module.kind != "elf":
            return None
        key = (module.path, module.base)
        table = self._line_tables.get(key)
        if key not in self._line_tables:
            try:
                small = os.path.getsize(module.path) <= LINE_TABLE_MAX_BYTES
                table = (LineTable.for_elf(module.path, module.base, source="dwarf")
                         if small and has_own_lines(module.path) else None)
            except (OSError, PtError, ELFError):
                table = None  # no file any more, or no line information: symbol names only
            self._line_tables[key] = table
        return table.lookup(address) if table is not None else None


def has_own_lines(path: str) -> bool:
    """Whether the ELF file itself has a .debug_line section. A system library's lines live in
    a separate debug file (/usr/lib/debug/.build-id) whose DWARF takes seconds to read (libc's:
    about 10 s here): a stop must not wait for that, and the user's own code is built with -g."""
    from elftools.elf.elffile import ELFFile
    with open(path, "rb") as f:
        return ELFFile(f).get_section_by_name(".debug_line") is not None


def call_chain(ip: int, callchain: tuple[int, ...]) -> list[int]:
    """The sample's user-space addresses, innermost first: perf puts the sampled IP first in
    PERF_SAMPLE_CALLCHAIN (perf_event_open(2)); a chain without it gets it added."""
    chain = [a for a in callchain if 0 < a < USER_SPACE_END]
    if not chain or chain[0] != ip:
        chain.insert(0, ip)
    return chain


class ProcessSymbols:
    """`module_at` and `symbolize` (pt_decoder.image.Image's interface, all NativeFrameMaker
    needs) for a live process, from /proc/PID/maps and the symbols of every mapped ELF, the
    perf map (/tmp/perf-PID.map) and the vDSO, without reading any code bytes.

    Image.from_process copies every executable mapping (hundreds of MB with numpy's BLAS):
    a third of a second per data-breakpoint hit. Here the module list is rebuilt only when
    /proc/PID/maps changes (one read per `refresh`), and a module's symbol table is read
    once, on first use, then kept for as long as the same file is mapped at the same bias.
    A file without .symtab (a stripped libc) takes its local symbols from its separate
    debug file (DEBUG_ROOT/.build-id) where one is installed, its .dynsym otherwise."""

    def __init__(self, pid: int):
        self.pid = pid
        self.modules: list = []
        self._maps: list[procfs.Mapping] = []
        self._tables: dict[tuple, object] = {}
        """(path, device, inode, mtime, bias) -> SymbolTable, across refreshes."""
        self._layouts: dict[tuple, tuple] = {}
        """(path, device, inode, mtime) -> (PT_LOAD (p_vaddr, p_offset, p_filesz)s, build id)."""
        self._keys: dict[int, tuple] = {}
        """id(module) -> its table key (None: a snapshot table kept in _snapshots)."""
        self._code: dict[int, list[tuple[int, int]]] = {}
        """id(module) -> its executable mappings (lo, hi): a module spans its data too."""
        self._snapshots: dict[tuple, object] = {}
        self._perf_map: tuple[tuple, object] | None = None
        self._loading: dict[tuple, threading.Event] = {}
        self._lock = threading.RLock()

    def refresh(self) -> bool:
        """Re-read /proc/PID/maps; rebuild the module list if it changed. Returns whether
        it did. Raises OSError when the process is gone."""
        # Only file-backed and executable mappings name modules: the heap and anonymous
        # memory (malloc's arenas, numpy's buffers) change all the time and name none.
        mappings = [m for m in procfs.maps(self.pid) if "/" in m.path or "x" in m.perms]
        with self._lock:
            if mappings == self._maps:
                return False
            self._maps = mappings
            self._rebuild(mappings)
            return True

    def _rebuild(self, mappings: list[procfs.Mapping]) -> None:
        from pt_decoder.image import Module
        spans: dict[str, list[tuple[int, int, str, int]]] = {}
        anonymous = []
        for m in mappings:
            if m.path.startswith("/"):
                spans.setdefault(m.path, []).append((m.start, m.end, m.perms, m.offset))
            elif "x" in m.perms and m.path == "[vdso]":
                anonymous.append((m.start, m.end, m.path))
        modules, keys, code_of = [], {}, {}
        for path, maps in spans.items():
            code = [m for m in maps if "x" in m[2]]
            if not code:
                continue
            try:
                stat = os.stat(path)
            except OSError:
                continue  # deleted since it was mapped: no symbols to read
            file_key = (path, stat.st_dev, stat.st_ino, stat.st_mtime_ns)
            layout = self._layout(file_key)
            if layout is None:
                continue
            loads, build_id = layout
            lo, _, _, offset = code[0]
            segment = next((s for s in loads if s[1] <= offset < s[1] + max(s[2], 1)), None)
            if segment is None:
                continue
            bias = lo - (segment[0] + offset - segment[1])
            low, high = min(m[0] for m in maps), max(m[1] for m in maps)
            module = Module(path, "elf", low, high - low, min(maps)[3], bias, build_id)
            modules.append(module)
            keys[id(module)] = file_key + (bias,)
            code_of[id(module)] = [(m[0], m[1]) for m in code]
        for lo, hi, name in anonymous:
            module = Module(name, "snapshot", lo, hi - lo, 0, 0, None)
            modules.append(module)
            keys[id(module)] = ("snapshot", name, lo, hi)
            code_of[id(module)] = [(lo, hi)]
        self.modules, self._keys, self._code = modules, keys, code_of

    def _layout(self, file_key: tuple) -> tuple | None:
        if file_key not in self._layouts:
            try:
                self._layouts[file_key] = elf_layout(file_key[0])
            except (OSError, ValueError, struct.error):
                self._layouts[file_key] = None  # not an ELF file we can read: no symbols
        return self._layouts[file_key]

    def module_at(self, addr: int):
        with self._lock:
            for module in self.modules:
                if module.load_address <= addr < module.load_address + module.size:
                    return module
        return None

    def executable(self, module, addr: int) -> bool:
        """Whether `addr` is in one of `module`'s executable mappings (not its data)."""
        with self._lock:
            return any(lo <= addr < hi for lo, hi in self._code.get(id(module), ()))

    def symbolize(self, addr: int, wait: float | None = None):
        """The function holding `addr` (pt_decoder.symbols.Symbol), or None: the perf map
        first (JIT code), then the symbols of the module mapped there. `wait`: seconds to wait
        for a table not read yet (it is read on another thread meanwhile, and kept); None
        when it is not there by then. Default: until it is read."""
        perf = self._perf_table()
        if perf is not None:
            symbol = perf.lookup(addr)
            if symbol is not None:
                return symbol
        module = self.module_at(addr)
        if module is None or not self.executable(module, addr):
            return None  # data of a module (its .eh_frame_hdr, .data, GOT): no function there
        if wait is not None:
            with self._lock:
                ready = self._keys.get(id(module)) in self._tables
            if not ready:
                reader = threading.Thread(target=self.table, args=(module,), daemon=True,
                                          name="ptdebug-symbols-of-a-stop")
                reader.start()
                reader.join(wait)
                if reader.is_alive():
                    return None
        table = self.table(module)
        return table.lookup(addr) if table is not None else None

    def table(self, module):
        """The symbol table of `module` (read on first use, then kept), or None."""
        with self._lock:
            key = self._keys.get(id(module))
            if key is None:
                return None
            if key in self._tables:
                return self._tables[key]
            loading = self._loading.get(key)
            mine = loading is None
            if mine:
                loading = self._loading[key] = threading.Event()
        # Read outside the lock: a hit in one module never waits for another's table.
        if mine:
            table = self._read_table(module, key)
            with self._lock:
                self._tables[key] = table
                del self._loading[key]
            loading.set()
            return table
        loading.wait()
        return self._tables.get(key)

    def _read_table(self, module, key: tuple):
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile

        from pt_decoder.symbols import SymbolTable, elf_function_symbols
        limit = module.load_address + module.size
        try:
            if key[0] == "snapshot":
                import io
                with open(f"/proc/{self.pid}/mem", "rb", buffering=0) as mem:
                    mem.seek(module.load_address)
                    elf = ELFFile(io.BytesIO(mem.read(module.size)))
                    loads = [s["p_vaddr"] for s in elf.iter_segments()
                             if s["p_type"] == "PT_LOAD"]
                    bias = module.load_address - min(loads) if loads else 0
                    return SymbolTable(elf_function_symbols(elf, bias), module.path, limit)
            with open(module.path, "rb") as f:  # its own names first: they are the public ones
                elf = ELFFile(f)
                entries = elf_function_symbols(elf, module.base)
                stripped = elf.get_section_by_name(".symtab") is None
            debug = _debug_file(module.build_id) if stripped else None
            if debug is not None:
                with open(debug, "rb") as f:  # names there carry versions: memcpy@GLIBC_2.2.5
                    entries += [(start, size, name.split("@", 1)[0]) for start, size, name
                                in elf_function_symbols(ELFFile(f), module.base)]
            return SymbolTable(entries, module.path, limit)
        except (OSError, ELFError, ValueError):
            return None

    def _perf_table(self):
        """/tmp/perf-PID.map's symbols, re-read when the file changes."""
        from pt_decoder.errors import PtError
        from pt_decoder.symbols import SymbolTable, read_perf_map
        path = f"/tmp/perf-{self.pid}.map"
        try:
            stat = os.lstat(path)
        except OSError:
            return None
        key = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        with self._lock:
            if self._perf_map is None or self._perf_map[0] != key:
                try:
                    owners = {0, os.stat(f"/proc/{self.pid}").st_uid}
                    entries, _ = read_perf_map(path, owners)
                    table = SymbolTable(reversed(entries), path)
                except (OSError, PtError):
                    table = None  # another user's file, a link: not read
                self._perf_map = (key, table)
            return self._perf_map[1]

    def warm(self, addresses=()) -> None:
        """Read the module list and the symbol tables a first hit most likely needs (the
        modules holding `addresses`, libc, libpython, numpy's core: about 0.5 s of reading),
        so that hit does not wait for them. Not every module's: reading them all (numpy's
        BLAS alone 0.65 s) held the GIL long enough to delay the adapter's other threads."""
        self.refresh()
        likely = ("libc.so", "libc-", "libpython", "_multiarray_umath")
        wanted = [self.module_at(a) for a in addresses]
        wanted += [m for m in self.modules if os.path.basename(m.path).startswith(likely)]
        wanted += [m for m in self.modules if m not in wanted and _small(m.path)]
        for module in wanted:
            if module is not None:
                self.table(module)
                time.sleep(0.01)  # let the adapter's other threads have the GIL between


def _small(path: str) -> bool:
    """A file whose symbols read in milliseconds (the user's own native code, as a rule)."""
    try:
        return os.path.getsize(path) <= SMALL_MODULE_BYTES
    except OSError:
        return False


def elf_layout(path: str) -> tuple[tuple[tuple[int, int, int], ...], str | None] | None:
    """(PT_LOAD (p_vaddr, p_offset, p_filesz)s, GNU build id in hex or None) of a 64-bit
    little-endian ELF file, from its program headers alone; None for any other file.
    (pyelftools parses every section header first: half a second for a numpy process's
    twenty libraries, where this reads a few hundred bytes of each.)"""
    with open(path, "rb") as f:
        header = f.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return None
        phoff, = struct.unpack_from("<Q", header, 32)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
        loads, notes = [], []
        for index in range(phnum):
            kind, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from(
                "<IIQQQQ", table, index * phentsize)
            if kind == 1:  # PT_LOAD
                loads.append((vaddr, offset, filesz))
            elif kind == 4:  # PT_NOTE
                notes.append((offset, filesz))
        build_id = None
        for offset, size in notes:
            f.seek(offset)
            data, pos = f.read(min(size, 4096)), 0
            while pos + 12 <= len(data) and build_id is None:
                namesz, descsz, note_type = struct.unpack_from("<III", data, pos)
                name_end = pos + 12 + namesz
                desc = pos + 12 + (namesz + 3) // 4 * 4
                if note_type == 3 and data[pos + 12:name_end].rstrip(b"\0") == b"GNU":
                    build_id = data[desc:desc + descsz].hex()  # NT_GNU_BUILD_ID
                pos = desc + (descsz + 3) // 4 * 4
        return tuple(loads), build_id


def _debug_file(build_id: str | None) -> str | None:
    """The separate debug file of a build id, if the distribution's package is installed."""
    if not build_id or len(build_id) < 3:
        return None
    path = os.path.join(DEBUG_ROOT, ".build-id", build_id[:2], build_id[2:] + ".debug")
    return path if os.path.isfile(path) else None

"""Where CPython keeps the running frame of a thread: the structure offsets of one interpreter
build, found in the running process.

Layer: adapter.python (mechanism only). Reads ELF files (pyelftools) and /proc/PID/maps; knows
nothing of recording, traces or DAP. frame_probe.py uses a layout to read, at a stop of a
thread, its current frame's code object and instruction.

The chain read, per version (x86-64, default build, not free-threaded):
  3.10  _PyRuntime.interpreters.head -> PyInterpreterState.tstate_head -> PyThreadState.next...
        tstate->frame (PyFrameObject*) -> f_code, f_lasti (int: code unit index)
        (Include/cpython/pystate.h, Include/cpython/frameobject.h, Include/internal/
        pycore_interp.h, pycore_runtime.h of CPython 3.10)
  3.11  interp->threads.head; tstate->cframe (_PyCFrame*) -> current_frame
        (_PyInterpreterFrame*) -> f_code, prev_instr (_Py_CODEUNIT*: the instruction being
        executed, set by INSTRUCTION_START in Python/ceval.c); code units start at
        PyCodeObject.co_code_adaptive (Include/internal/pycore_frame.h, Include/cpython/code.h)
  3.12  as 3.11, other offsets; f_code first; frames owned by the C stack (owner 3) are the
        interpreter's entry shims (Include/internal/pycore_frame.h of 3.12)
  3.13  tstate->current_frame -> f_executable, instr_ptr (the instruction being executed);
        every offset is read from the _Py_DebugOffsets at the start of _PyRuntime
        (Include/internal/pycore_runtime.h of 3.13), which CPython exports for debuggers.
The thread is matched by PyThreadState.thread_id, which is pthread_self(): on glibc x86-64
the thread's TCB, i.e. its fs_base register (so no version-specific native_thread_id).

Sources of offsets, in order: _Py_DebugOffsets (3.13+, read from the ELF file's initial
_PyRuntime, so the same for every process of that build), else the table KNOWN_LAYOUTS
(3.10-3.12; checked in tests against offsetof() compiled with each installed version's
headers). Tested on this machine: 3.10.13, 3.11.7, 3.12.1, 3.13.0 (pyenv builds).
"""
from __future__ import annotations

import dataclasses
import os
import re
import struct
import threading

from adapter.hw.mappings import load_bias
from adapter.hw.procfs import file_mappings


class LayoutError(Exception):
    """No usable CPython layout for the process; the text says why."""


@dataclasses.dataclass(frozen=True)
class CPythonLayout:
    version: tuple[int, int, int]
    source: str
    """Where the offsets came from ("_Py_DebugOffsets", "known layout 3.11")."""
    runtime_interpreters_head: int
    interp_threads_head: int
    tstate_next: int
    tstate_thread_id: int
    tstate_cframe: int | None
    """3.11/3.12: offset of the _PyCFrame*; None where the frame hangs off the thread state."""
    cframe_current_frame: int | None
    tstate_frame: int | None
    """3.10 (PyFrameObject*) and 3.13+ (_PyInterpreterFrame*): the frame in the thread state."""
    frame_code: int
    frame_instr: int
    instr_kind: str
    """"pointer": a _Py_CODEUNIT* into co_code_adaptive (3.11+); "lasti": an int index (3.10)."""
    frame_owner: int | None
    """Offset of the frame's owner byte (3.12+: 3 = an entry shim owned by the C stack)."""
    frame_previous: int
    code_qualname: int
    code_filename: int
    code_firstlineno: int
    code_linetable: int
    code_adaptive: int | None
    unicode_state: int
    unicode_length: int
    unicode_ascii_header: int
    unicode_compact_header: int
    bytes_size: int
    bytes_data: int

    @property
    def linetable_format(self) -> str:
        return "3.10" if self.version[:2] <= (3, 10) else "3.11"

    @property
    def frame_read_size(self) -> int:
        """Bytes to read at the frame to have code, instruction and owner in one read."""
        ends = [self.frame_code + 8, self.frame_instr + 8]
        if self.frame_owner is not None:
            ends.append(self.frame_owner + 1)
        return max(ends)


_COMMON_STR = dict(unicode_state=32, unicode_length=16, bytes_size=16, bytes_data=32)

# offsetof() values for x86-64 builds, from each version's headers (tests/adapter/python/
# test_cpython_layout.py compiles them again against the installed headers).
KNOWN_LAYOUTS = {
    (3, 10): dict(runtime_interpreters_head=32, interp_threads_head=8, tstate_next=8,
                  tstate_thread_id=176, tstate_cframe=None, cframe_current_frame=None,
                  tstate_frame=24, frame_code=32, frame_instr=96, instr_kind="lasti",
                  frame_owner=None, frame_previous=24, code_qualname=112, code_filename=104,
                  code_firstlineno=40, code_linetable=120, code_adaptive=None,
                  unicode_ascii_header=48, unicode_compact_header=72, **_COMMON_STR),
    (3, 11): dict(runtime_interpreters_head=40, interp_threads_head=16, tstate_next=8,
                  tstate_thread_id=152, tstate_cframe=56, cframe_current_frame=8,
                  tstate_frame=None, frame_code=32, frame_instr=56, instr_kind="pointer",
                  frame_owner=69, frame_previous=48, code_qualname=128, code_filename=112,
                  code_firstlineno=72, code_linetable=136, code_adaptive=184,
                  unicode_ascii_header=48, unicode_compact_header=72, **_COMMON_STR),
    (3, 12): dict(runtime_interpreters_head=40, interp_threads_head=72, tstate_next=8,
                  tstate_thread_id=136, tstate_cframe=56, cframe_current_frame=0,
                  tstate_frame=None, frame_code=0, frame_instr=56, instr_kind="pointer",
                  frame_owner=70, frame_previous=8, code_qualname=128, code_filename=112,
                  code_firstlineno=68, code_linetable=136, code_adaptive=192,
                  unicode_ascii_header=40, unicode_compact_header=56, **_COMMON_STR),
}
"""3.10 has no co_qualname: code_qualname is co_name there."""

FRAME_OWNED_BY_CSTACK = 3
"""_PyInterpreterFrame.owner of an entry shim (3.12+, Include/internal/pycore_frame.h)."""

_DEBUG_COOKIE = b"xdebugpy"


def _debug_offsets(data: bytes) -> dict:
    """The fields of _Py_DebugOffsets (CPython 3.13 Include/internal/pycore_runtime.h) that
    the probe needs, from the first bytes of _PyRuntime. Raises LayoutError."""
    if data[:8] != _DEBUG_COOKIE:
        raise LayoutError("_PyRuntime does not start with the _Py_DebugOffsets cookie")
    q = struct.unpack_from("<64Q", data, 8)
    version, free_threaded = q[0], q[1]
    if free_threaded:
        raise LayoutError("a free-threaded CPython build is not supported")
    # q[2:5] runtime_state {size, finalizing, interpreters_head}
    # q[5:18] interpreter_state {size, id, next, threads_head, ...13 fields}
    # q[18:27] thread_state {size, prev, next, interp, current_frame, thread_id, native_thread_id,
    #          datastack_chunk, status}
    # q[27:33] interpreter_frame {size, previous, executable, instr_ptr, localsplus, owner}
    # q[33:43] code_object {size, filename, name, qualname, linetable, firstlineno, argcount,
    #          localsplusnames, localspluskinds, co_code_adaptive}
    # q[43:45] pyobject, q[45:49] type_object, q[49:52] tuple, q[52:55] list, q[55:58] dict,
    # q[58:60] float, q[60:63] long, then bytes_object {size, ob_size, ob_sval} and
    # unicode_object {size, state, length, asciiobject_size}
    rest = struct.unpack_from("<7Q", data, 8 + 63 * 8)
    bytes_size, bytes_data = rest[1], rest[2]
    unicode_state, unicode_length, ascii_size = rest[4], rest[5], rest[6]
    return dict(version=version, runtime_interpreters_head=q[4], interp_threads_head=q[8],
                tstate_next=q[20], tstate_thread_id=q[23], tstate_cframe=None,
                cframe_current_frame=None, tstate_frame=q[22], frame_code=q[29],
                frame_instr=q[30], instr_kind="pointer", frame_owner=q[32],
                frame_previous=q[28], code_qualname=q[36], code_filename=q[34],
                code_firstlineno=q[38], code_linetable=q[37], code_adaptive=q[42],
                unicode_ascii_header=ascii_size, unicode_compact_header=ascii_size + 16,
                unicode_state=unicode_state, unicode_length=unicode_length,
                bytes_size=bytes_size, bytes_data=bytes_data)


@dataclasses.dataclass
class PythonImage:
    """The ELF file that holds the interpreter (libpython or a static python) in a process."""

    path: str
    load_bias: int
    runtime: int
    """Run-time address of _PyRuntime."""
    layout: CPythonLayout
    eval_ranges: list[tuple[int, int]]
    """Run-time [start, end) of the interpreter loop's code."""
    eval_code: list[bytes]
    """Its machine code (from the file: what a planted INT3 hides in memory)."""


def _version_from(elf, path: str, symbols: dict) -> tuple[int, int, int]:
    """Py_Version (3.11+, PY_VERSION_HEX in .rodata), else the file name (libpython3.10)."""
    if "Py_Version" in symbols:
        value, _size = symbols["Py_Version"]
        data = _read_at(elf, value, 4)
        if data is not None:
            hexv = int.from_bytes(data, "little")
            return (hexv >> 24, (hexv >> 16) & 0xFF, (hexv >> 8) & 0xFF)
    m = re.search(r"python(\d)\.(\d+)", os.path.basename(path))
    if m:
        return (int(m.group(1)), int(m.group(2)), 0)
    raise LayoutError(f"{path}: cannot tell which CPython version it is")


def _read_at(elf, vaddr: int, size: int) -> bytes | None:
    """Bytes at link-time address `vaddr` from the file's PT_LOAD segments (None: not in it,
    or in .bss)."""
    for seg in elf.iter_segments():
        if seg["p_type"] != "PT_LOAD":
            continue
        start = seg["p_vaddr"]
        if start <= vaddr and vaddr + size <= start + seg["p_filesz"]:
            elf.stream.seek(seg["p_offset"] + vaddr - start)
            return elf.stream.read(size)
    return None


EVAL_FUNCTIONS = ("_PyEval_EvalFrameDefault", "_PyEval_EvalFrameDefault.cold")
"""The interpreter loop and its cold part (GCC's hot/cold split): the only code that sets the
thread's current frame and its instruction pointer (Python/ceval.c, 3.10-3.13)."""
REQUIRED_SYMBOLS = ("_PyRuntime", EVAL_FUNCTIONS[0])


@dataclasses.dataclass
class InterpreterFile:
    """What the probe needs from the interpreter's ELF file, at link-time addresses."""

    layout: CPythonLayout
    runtime: int
    """_PyRuntime."""
    eval_ranges: list[tuple[int, int]]
    """[start, end) of the EVAL_FUNCTIONS found (empty when the file has no sizes for them)."""
    eval_code: list[bytes]
    """The machine code of each of eval_ranges, as in the file (no breakpoint planted)."""


_files: dict[tuple[str, int, int], InterpreterFile] = {}
_files_lock = threading.Lock()


def layout_from_elf(path: str) -> InterpreterFile:
    """The layout, _PyRuntime and interpreter loop of the CPython in ELF file `path`,
    remembered per file (path, size, mtime): every capture of a session reads the same
    libpython. Raises LayoutError naming the file and what is missing."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise LayoutError(f"{path}: {exc.strerror}") from None
    key = (path, stat.st_size, stat.st_mtime_ns)
    with _files_lock:
        found = _files.get(key)
        if found is None:
            found = _files[key] = _read_interpreter_file(path)
        return found


def _read_interpreter_file(path: str) -> InterpreterFile:
    from elftools.elf.elffile import ELFFile
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed by the `with f` below
    except OSError as exc:
        raise LayoutError(f"{path}: {exc.strerror}") from None
    with f:
        try:
            elf = ELFFile(f)
            symbols = {}
            for name in (".gnu.hash", ".hash"):
                # the dynamic linker's hash table: a few ms instead of indexing every symbol
                table = elf.get_section_by_name(name)
                if table is None or not hasattr(table, "get_symbol"):
                    continue
                for wanted in REQUIRED_SYMBOLS + ("Py_Version",):
                    found = table.get_symbol(wanted)
                    if found is not None and wanted not in symbols:
                        symbols[wanted] = (found["st_value"], found["st_size"])
                break
            for name in (".dynsym", ".symtab"):
                # .dynsym holds what is needed in a shared libpython; the full .symtab (slow
                # to index: ~1 s for libpython3.11) only when something is missing from it.
                # The loop's 4-8 byte .cold part is in .symtab only and is not looked for.
                if all(w in symbols for w in REQUIRED_SYMBOLS):
                    break
                table = elf.get_section_by_name(name)
                if table is None:
                    continue
                for wanted in REQUIRED_SYMBOLS + ("Py_Version", EVAL_FUNCTIONS[1]):
                    if wanted in symbols or (wanted == EVAL_FUNCTIONS[1] and name == ".dynsym"):
                        continue
                    found = table.get_symbol_by_name(wanted)
                    if found:
                        symbols[wanted] = (found[0]["st_value"], found[0]["st_size"])
        except Exception as exc:  # pyelftools raises many kinds on a damaged file
            raise LayoutError(f"{path}: not a readable ELF file ({exc})") from None
        if "_PyRuntime" not in symbols:
            raise LayoutError(f"{path}: no _PyRuntime symbol (not a CPython interpreter)")
        if elf.elfclass != 64 or elf["e_machine"] != "EM_X86_64":
            raise LayoutError(f"{path}: an {elf['e_machine']} {elf.elfclass}-bit interpreter; "
                              "ptdebug reads x86-64 CPython only")
        table = elf.get_section_by_name(".gnu.hash") or elf.get_section_by_name(".hash")
        if table is not None and hasattr(table, "get_symbol") and \
                table.get_symbol("_Py_NegativeRefcount") is not None:
            # Py_REF_DEBUG (a --with-pydebug build): other object headers than the table's
            raise LayoutError(f"{path}: a debug build of CPython (--with-pydebug) is not "
                              "supported (its objects are laid out differently)")
        version = _version_from(elf, path, symbols)
        runtime = symbols["_PyRuntime"][0]
        eval_ranges = []
        eval_code = []
        for name in EVAL_FUNCTIONS:
            if name in symbols and symbols[name][1]:
                start, size = symbols[name]
                code = _read_at(elf, start, size)
                if code is not None:
                    eval_ranges.append((start, start + size))
                    eval_code.append(code)
        if version[:2] >= (3, 13):
            data = _read_at(elf, runtime, 8 + 70 * 8)
            if data is None:
                raise LayoutError(f"{path}: _PyRuntime has no initial data to read offsets from")
            fields = _debug_offsets(data)
            fields.pop("version")
            layout = CPythonLayout(version, "_Py_DebugOffsets", **fields)
        else:
            known = KNOWN_LAYOUTS.get(version[:2])
            if known is None:
                raise LayoutError(f"{path}: CPython {version[0]}.{version[1]} is not supported "
                                  "(3.10-3.13 are)")
            layout = CPythonLayout(version, f"known layout {version[0]}.{version[1]}", **known)
        return InterpreterFile(layout, runtime, eval_ranges, eval_code)


def find_python(pid: int) -> PythonImage:
    """The interpreter loaded in process `pid`: the mapped file that defines _PyRuntime
    (libpython first, then the executable). Raises LayoutError when there is none or its
    version is not supported."""
    try:
        paths = list(dict.fromkeys(m.path for m in file_mappings(pid)
                                   if m.path.startswith("/")))
    except OSError as exc:
        raise LayoutError(f"process {pid}: cannot read its mappings ({exc.strerror})") from None
    candidates = [p for p in paths if "libpython" in os.path.basename(p)]
    candidates += [p for p in paths if re.match(r"python\d", os.path.basename(p))]
    errors = []
    for path in candidates:
        try:
            found = layout_from_elf(path)
        except LayoutError as exc:
            errors.append(str(exc))
            continue
        try:
            bias = load_bias(pid, path)
        except OSError as exc:
            errors.append(f"{path}: no load address in process {pid} ({exc})")
            continue
        return PythonImage(path, bias, found.runtime + bias, found.layout,
                           [(lo + bias, hi + bias) for lo, hi in found.eval_ranges],
                           found.eval_code)
    waiting = _libpython_not_loaded_yet(candidates, paths)
    if waiting is not None:
        raise LayoutError(f"process {pid} has not loaded its interpreter library {waiting} "
                          "yet (the dynamic loader maps it after exec): start the window where "
                          "the interpreter runs, e.g. --from Py_RunMain")
    if errors:
        raise LayoutError(f"process {pid}: " + "; ".join(errors))
    raise LayoutError(f"process {pid} runs no CPython interpreter (no libpython or python "
                      "executable is mapped)")


def _libpython_not_loaded_yet(candidates: list[str], mapped: list[str]) -> str | None:
    """The libpython a python executable among `candidates` needs (DT_NEEDED) that is not
    among the `mapped` files yet: a program caught at exec, before the dynamic loader ran."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile
    names = {os.path.basename(p) for p in mapped}
    for path in candidates:
        if "libpython" in os.path.basename(path):
            continue
        try:
            with open(path, "rb") as f:
                for section in ELFFile(f).iter_sections():
                    if isinstance(section, DynamicSection):
                        for tag in section.iter_tags("DT_NEEDED"):
                            if tag.needed.startswith("libpython") and tag.needed not in names:
                                return tag.needed
        except (OSError, ELFError):
            continue
    return None

"""adapter.python.cpython_layout: the offsets it uses for each installed CPython (3.10-3.12 from
its table, 3.13 from the _Py_DebugOffsets in libpython) equal offsetof() compiled against that
version's own headers (tests/fixtures/programs/cpython_offsets.c), and a running interpreter is
found in /proc with its _PyRuntime at the address the process uses."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys
import sysconfig

import pytest
from python_interpreters import VERSIONS, interpreter

from adapter.python.cpython_layout import LayoutError, find_python, layout_from_elf

PROGRAMS = pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "programs"

# cpython_offsets.c name -> CPythonLayout field (3.10 has no co_qualname: co_name stands in)
FIELDS = {"runtime_interpreters_head": "runtime_interpreters_head",
          "interp_threads_head": "interp_threads_head", "tstate_next": "tstate_next",
          "tstate_thread_id": "tstate_thread_id", "tstate_cframe": "tstate_cframe",
          "cframe_current_frame": "cframe_current_frame",
          "tstate_current_frame": "tstate_frame", "tstate_frame": "tstate_frame",
          "frame_code": "frame_code", "frame_instr": "frame_instr",
          "frame_previous": "frame_previous", "frame_owner": "frame_owner",
          "code_qualname": "code_qualname", "code_adaptive": "code_adaptive",
          "code_filename": "code_filename", "code_firstlineno": "code_firstlineno",
          "code_linetable": "code_linetable", "unicode_ascii_header": "unicode_ascii_header",
          "unicode_compact_header": "unicode_compact_header", "unicode_state": "unicode_state",
          "unicode_length": "unicode_length", "bytes_size": "bytes_size",
          "bytes_data": "bytes_data"}


def _facts(exe: str) -> dict:
    code = ("import sysconfig, sys; print(sysconfig.get_paths()['include']); "
            "print(sysconfig.get_config_var('LIBDIR')); print(sysconfig.get_config_var('LDLIBRARY'))")
    include, libdir, ldlibrary = subprocess.run([exe, "-c", code], capture_output=True, text=True,
                                                check=True).stdout.split("\n")[:3]
    return {"include": include, "library": str(pathlib.Path(libdir) / ldlibrary)}


@pytest.mark.parametrize("version", VERSIONS)
def test_layout_equals_offsetof_from_the_versions_headers(version, tmp_path):
    exe = interpreter(version)
    if exe is None:
        pytest.skip(f"no CPython {version} on this machine")
    if shutil.which("gcc") is None:
        pytest.skip("no gcc to compile cpython_offsets.c")
    facts = _facts(exe)
    if not pathlib.Path(facts["include"], "internal").is_dir():
        pytest.skip(f"CPython {version} has no internal headers installed")
    library = pathlib.Path(facts["library"])
    if not library.is_file() or not library.name.endswith((".so", ".so.1.0")):
        pytest.skip(f"CPython {version} is not built as a shared libpython")
    binary = tmp_path / "offsets"
    subprocess.run(["gcc", "-I", facts["include"], str(PROGRAMS / "cpython_offsets.c"), "-o",
                    str(binary)], check=True, capture_output=True)
    measured = dict(line.split("=") for line in
                    subprocess.run([str(binary)], capture_output=True, text=True,
                                   check=True).stdout.split())
    found = layout_from_elf(str(library))
    layout = found.layout
    assert layout.version[:2] == tuple(int(x) for x in version.split("."))
    assert layout.source == ("_Py_DebugOffsets" if version >= "3.13" else f"known layout {version}")
    if version == "3.10":
        measured["code_qualname"] = measured.pop("code_name")
    checked = 0
    for name, value in measured.items():
        field = FIELDS.get(name)
        if field is None:
            continue
        assert getattr(layout, field) == int(value), f"{version}: {name}"
        checked += 1
    assert checked >= 18
    assert found.runtime > 0
    assert found.eval_ranges and all(hi > lo for lo, hi in found.eval_ranges)


def test_running_interpreter_is_found_in_proc():
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('ready', flush=True); "
                             "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        image = find_python(proc.pid)
        assert image.layout.version[:2] == sys.version_info[:2]
        assert "python" in pathlib.Path(image.path).name
        # the run-time address of _PyRuntime lies inside the interpreter file's mappings
        with open(f"/proc/{proc.pid}/maps") as maps:
            spans = [tuple(int(x, 16) for x in line.split()[0].split("-"))
                     for line in maps if line.rstrip().endswith(image.path)]
        assert any(lo <= image.runtime < hi for lo, hi in spans)
    finally:
        proc.kill()
        proc.wait()


def test_a_process_without_python_is_named():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(LayoutError, match=f"process {proc.pid} runs no CPython"):
            find_python(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_files_that_are_not_a_supported_interpreter_are_named(tmp_path):
    with pytest.raises(LayoutError, match="no _PyRuntime symbol"):
        layout_from_elf("/bin/true")
    with pytest.raises(LayoutError, match="No such file"):
        layout_from_elf(str(tmp_path / "missing.so"))
    # the interpreter running the tests, its ELF header saying another machine (AArch64)
    library = pathlib.Path(sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LDLIBRARY"))
    if not library.is_file():
        pytest.skip("the running interpreter has no shared libpython")
    data = bytearray(library.read_bytes())
    data[18:20] = (183).to_bytes(2, "little")   # e_machine = EM_AARCH64
    other = tmp_path / library.name
    other.write_bytes(bytes(data))
    with pytest.raises(LayoutError, match="EM_AARCH64 64-bit interpreter; ptdebug reads x86-64"):
        layout_from_elf(str(other))

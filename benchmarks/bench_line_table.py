"""Reading a DWARF line table: ptdebug's reader (pt_decoder/dwarf_line_units.py headers, the
program run in C by pt_decoder/_dwarf_lines.pyx) against pyelftools' LineProgram, side by
side in one run, into the same LineTable (the two give the same rows:
tests/pt_decoder/test_dwarf_lines.py).

Role: benchmark; figures go to docs/PERFORMANCE.md. The table is the largest this machine
has: the running interpreter's libpython when it was built with -g (pyenv's), else libc's
separate debug file, else a gcc -g build of tests/fixtures/programs/lines_demo.c.

    .venv/bin/python -m benchmarks.bench_line_table [--json]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import time

from elftools.elf.elffile import ELFFile

from pt_decoder.lines import LineTable, _separate_debug_file


def _largest_table() -> str:
    name = sysconfig.get_config_var("INSTSONAME") or ""
    libpython = os.path.join(sysconfig.get_config_var("LIBDIR") or "", name)
    if name and os.path.isfile(libpython):
        with open(libpython, "rb") as f:
            if ELFFile(f).get_section_by_name(".debug_line") is not None:
                return libpython
    with open("/usr/lib/x86_64-linux-gnu/libc.so.6", "rb") as f:
        debug = _separate_debug_file(ELFFile(f))
    if debug:
        return debug
    out = os.path.join(tempfile.mkdtemp(), "lines_demo")
    source = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "programs",
                          "lines_demo.c")
    subprocess.run(["gcc", "-g", "-O2", "-o", out, source], check=True)
    return out


def _time(build, path: str, repeat: int) -> tuple[float, int]:
    best, rows = float("inf"), 0
    for _ in range(repeat):
        with open(path, "rb") as f:
            elf = ELFFile(f)
            started = time.perf_counter()
            rows = len(build(elf, 0))
            best = min(best, time.perf_counter() - started)
    return best, rows


def run(quick: bool = False) -> dict:
    path = _largest_table()
    ours, rows = _time(LineTable._from_dwarf_units, path, 1 if quick else 3)
    theirs, their_rows = _time(LineTable._from_dwarf_pyelftools, path, 1)
    assert rows == their_rows
    return {"file": path, "rows": rows, "ptdebug_s": round(ours, 3),
            "pyelftools_s": round(theirs, 3), "speedup": round(theirs / ours, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run()
    if args.json:
        print(json.dumps(result))
    else:
        print(f"{result['file']}: {result['rows']:,} rows; ptdebug {result['ptdebug_s']} s, "
              f"pyelftools {result['pyelftools_s']} s ({result['speedup']}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

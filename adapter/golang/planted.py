"""The program's own bytes where a debugger planted breakpoints: what readMemory and
disassemble show instead of the `int3` (0xCC) Delve writes, as Delve's own views do.

Layer: adapter.golang. Reads /proc/PID/maps and the mapped files; knows nothing of DAP or of
Delve's connection (the caller passes the breakpoint addresses Delve lists).

Why from the file: Go code is not modified at run time, so for an address in a file-backed
mapping the byte in the file at the mapping's offset is the instruction's byte. Delve's JSON-RPC
lists its breakpoints' addresses but not the bytes it saved.
"""
from __future__ import annotations

import os

from adapter.hw.procfs import file_mappings


def original_bytes(pid: int, addresses: list[int]) -> dict[int, int]:
    """address -> the byte the program's file holds there, for each of `addresses` in a
    file-backed mapping of process `pid` (others are left out)."""
    if not addresses:
        return {}
    try:
        mappings = [(m.start, m.end, m.offset, m.path) for m in file_mappings(pid)
                    if m.path.startswith("/")]
    except OSError:
        return {}
    found: dict[int, int] = {}
    files: dict[str, int] = {}
    try:
        for address in addresses:
            for low, high, offset, path in mappings:
                if low <= address < high:
                    if path not in files:
                        try:
                            files[path] = os.open(path, os.O_RDONLY)
                        except OSError:
                            break
                    byte = os.pread(files[path], 1, offset + address - low)
                    if byte:
                        found[address] = byte[0]
                    break
    finally:
        for fd in files.values():
            os.close(fd)
    return found


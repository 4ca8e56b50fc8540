"""Where an ELF file is loaded in a running process: its load bias, from /proc/PID/maps.

Layer: adapter.hw (the running process as the kernel shows it); the ELF side is
pt_decoder.image.elf_load_bias, the rule a recording's decode applies to its images, so that a
line table or a symbol table read for a live program is the one a capture of it uses.
"""
from __future__ import annotations

import os

from pt_decoder.image import elf_load_bias


def all_mappings(pid: int):
    """(start, end, permissions, file offset, name) of every mapping in /proc/PID/maps, in its
    order; an anonymous one's name is "". Raises OSError when it cannot be read."""
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = fields[0].split("-")
            yield int(start, 16), int(end, 16), fields[1], int(fields[2], 16), \
                fields[5].strip() if len(fields) == 6 else ""


def file_mappings(pid: int):
    """(start, end, permissions, file offset, path) of each named mapping in /proc/PID/maps
    (a file's, or the kernel's [heap], [vdso]...; anonymous ones are left out), in its
    order. Raises OSError when it cannot be read."""
    return (m for m in all_mappings(pid) if m[4])


def load_bias(pid: int, path: str) -> int:
    """Run-time minus link-time addresses of the ELF file `path` in process `pid` (0 for an
    executable linked at its address, Go's default), from its first mapping. Raises OSError
    when /proc/PID/maps cannot be read or the file is not mapped there."""
    real = os.path.realpath(path)
    for start, _end, _perms, offset, name in file_mappings(pid):
        if os.path.realpath(name) == real:
            bias = elf_load_bias(real, start, offset)
            if bias is not None:
                return bias
    raise OSError(f"{path} is not mapped in process {pid}")

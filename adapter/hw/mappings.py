"""Where an ELF file is loaded in a running process: its load bias, from /proc/PID/maps
(read by procfs.py).

Layer: adapter.hw (the running process as the kernel shows it); the ELF side is
pt_decoder.image.elf_load_bias, the rule a recording's decode applies to its images, so that a
line table or a symbol table read for a live program is the one a capture of it uses.
"""
from __future__ import annotations

import os

from adapter.hw.procfs import file_mappings
from pt_decoder.image import elf_load_bias


def load_bias(pid: int, path: str) -> int:
    """Run-time minus link-time addresses of the ELF file `path` in process `pid` (0 for an
    executable linked at its address, Go's default), from its first mapping. Raises OSError
    when /proc/PID/maps cannot be read or the file is not mapped there."""
    real = os.path.realpath(path)
    for m in file_mappings(pid):
        if os.path.realpath(m.path) == real:
            bias = elf_load_bias(real, m.start, m.offset)
            if bias is not None:
                return bias
    raise OSError(f"{path} is not mapped in process {pid}")

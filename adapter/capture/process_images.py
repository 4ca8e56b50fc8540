"""The executable mappings of a recorded process, as a bundle lists them, kept per process
for the life of the recorder: a capture reads /proc/PID/maps again and looks at the files of
mappings it has not seen before only (issue 33: listing an onnxruntime service's images read
every mapped file, 130 ms after each window).

Layer: adapter.capture (beside record.py, which writes what this lists into each bundle).
Reads /proc/PID/maps (adapter.hw.procfs) and the mapped files' ELF notes (pt_decoder's
build-id reader); knows nothing of the recorder.

A file mapping is known by its maps line (address range, offset, inode, path):
a file replaced on disk or mapped anew is another line, and is looked at again. What is not
a file (anonymous code, the vDSO, a file deleted since it was mapped) is copied from the
process's memory at every capture, as its bytes may have changed.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from adapter.hw import procfs
from pt_decoder.bundle_reader import file_build_id


@dataclass(frozen=True)
class FileMapping:
    path: str
    address: int
    offset: int
    size: int
    """Bytes of the file the mapping holds (a mapping may run past the file's end)."""
    build_id: str | None


@dataclass(frozen=True)
class MemoryMapping:
    name: str
    """"[anon]", "[vdso]", "/path (deleted)" ..."""
    address: int
    end: int


class ProcessImages:
    """The executable mappings of the processes recorded from this process."""

    def __init__(self) -> None:
        self._files: dict[tuple, FileMapping] = {}
        """(start, end, offset, inode, path) of a maps line -> the mapping it describes
        (every process recorded so far)."""

    def mappings(self, pid: int) -> list[FileMapping | MemoryMapping]:
        """The executable mappings of `pid` now ([vsyscall] left out: the kernel emulates
        it and it cannot be read). Raises OSError when /proc/PID/maps cannot be read."""
        found: list[FileMapping | MemoryMapping] = []
        for line in procfs.maps(pid):
            if "x" not in line.perms or line.path == "[vsyscall]":
                continue
            key = (line.start, line.end, line.offset, line.inode, line.path)
            known = self._files.get(key)
            if known is not None:
                found.append(known)
                continue
            name = line.path
            if name.startswith("/") and os.path.isfile(name):
                try:
                    size = min(line.end - line.start, max(0, os.stat(name).st_size - line.offset))
                except OSError:
                    found.append(MemoryMapping(name, line.start, line.end))
                    continue
                mapping = FileMapping(name, line.start, line.offset, size, file_build_id(name))
                self._files[key] = mapping
                found.append(mapping)
            else:
                found.append(MemoryMapping(name or "[anon]", line.start, line.end))
        return found


PROCESS_IMAGES = ProcessImages()
"""The recorder process's one instance (a DAP recorder worker records one program many times)."""

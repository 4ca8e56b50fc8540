"""A Go program's source lines as a debugger steps through them: the runtime's own lines left
out, so that stepping by line passes over runtime internals (the scheduler, stack growth,
write barriers, signal handling) the way Delve's `next` passes over them.

Layer: adapter.golang. Wraps a pt_decoder LineTable; knows nothing of histories, DAP or
processes.

Which files are the runtime's: those of the `runtime` package and `internal/runtime/...` under
the GOROOT the binary was built with, found from the table itself (the directory holding
runtime/proc.go). Every other file keeps its lines, the standard library included: stepping in
(`stepIn`) may enter fmt, and stepping over calls skips them anyway.
"""
from __future__ import annotations

import array
import threading

RUNTIME_PACKAGES = ("runtime/", "internal/runtime/")


def runtime_source_root(files: list[str]) -> str | None:
    """GOROOT/src of the Go toolchain that built the code the table covers, or None."""
    for name in files:
        if name.endswith("/runtime/proc.go"):
            return name[:-len("runtime/proc.go")]
    return None


class WithoutRuntime:
    """A LineTable whose `line_ids` give 0 (no line) to the Go runtime's lines; everything
    else (lookup for frames, line_key, statement_addresses for breakpoints) is the table's."""

    def __init__(self, table, root: str):
        self.table = table
        self.root = root
        prefixes = tuple(root + package for package in RUNTIME_PACKAGES)
        self.hidden = frozenset(
            line_id for line_id in range(1, table.line_count)
            if (key := table.line_key(line_id)) is not None and key[0].startswith(prefixes))
        """Line ids of the runtime's lines."""

    @classmethod
    def wrap(cls, table):
        """`table` wrapped when it holds Go runtime lines, else `table` itself. One wrapper a
        table: LineTable.for_elf hands every capture of a binary the same table, and finding
        the runtime's line ids walks all of them (a fifth of a second for a small program)."""
        with _wrapping:
            wrapped = _wrapped.get(id(table))
        if wrapped is not None:
            return wrapped
        root = runtime_source_root(list(getattr(table, "files", []) or []))
        if root is None:
            return table
        wrapped = cls(table, root)
        with _wrapping:  # the wrapper holds its table: the id is not reused while kept
            _wrapped[id(table)] = wrapped
            while len(_wrapped) > _WRAPPERS_KEPT:
                del _wrapped[next(iter(_wrapped))]
        return wrapped

    def line_ids(self, ips, statements: bool = False) -> array.array:
        ids = self.table.line_ids(ips, statements=statements)
        hidden = self.hidden
        if hidden:
            ids = array.array(ids.typecode, (0 if i in hidden else i for i in ids))
        return ids

    def __getattr__(self, name):
        return getattr(self.table, name)

    def __hash__(self) -> int:  # History caches line maps per table
        return id(self)


_WRAPPERS_KEPT = 16
_wrapped: dict[int, WithoutRuntime] = {}
"""id(LineTable) -> its WithoutRuntime, the newest last."""
_wrapping = threading.Lock()

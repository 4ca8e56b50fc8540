"""Whether a Go function exists in a program: what a record breakpoint's
`recordWindow.function` names is checked when the breakpoint is set, not when it is hit
(issue 34: a misspelt `main.chekcsum` was accepted and failed only at the hit).

Layer: adapter.golang. Reads the ELF symbols of the program's executable (pt_decoder.image,
read once per binary); knows nothing of DAP or of Delve.

Only names with a package qualifier are checked (`main.work`, `net/http.(*conn).serve`): every
Go function is in the executable itself, whose symbols are there from the first instruction. A
name without one can only be a C function of a cgo program, maybe in a library not loaded yet
(a launched program is held before its dynamic loader ran): it is left to the recorder.
"""
from __future__ import annotations

import os


def missing_function(pid: int, name: str) -> str | None:
    """Why `name` is no function of the Go program process `pid` runs, or None when it is one
    (or when that cannot be told: no qualifier, or the executable cannot be read)."""
    if "." not in name:
        return None
    from pt_decoder.errors import PtError
    from pt_decoder.image import Image
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        image = Image()
        image.add_elf(exe, 0)
        found = image.find_symbol(name)
    except (OSError, PtError):
        return None
    if found is not None:
        return None
    return (f"no function {name!r} in {os.path.basename(exe)} (process {pid}); Go functions "
            "are named package.Name (main.work) or package.(*Type).Method")

"""Keeps the kernel's OOM killer off a recorder while it traces a thread.

Why: a tracer killed (SIGKILL) while its tracee waits in a ptrace stop lets the tracee go with
the SIGTRAP it stopped for still pending, and the program dies of it (kernel behaviour: the
tracer's exit detaches without clearing the stop's signal, the single-step flag or the debug
registers; nothing in user space runs in between; issue 17, docs/testing.md). ptdebug never
kills its recorders that way (it ends them with SIGINT, which detaches cleanly), but the OOM
killer would, and it picks by size: a recorder holding a large window may look like the best
victim on a server short of memory, and the program it records would die with it. With
oom_score_adj at its minimum (-1000, needs CAP_SYS_RESOURCE; -999 where only that is allowed)
the OOM killer chooses another process; the previous value is put back when the recording
ends.

Layer: adapter.capture. Knows nothing of the stepper.
"""
from __future__ import annotations

import contextlib

OOM_SCORE_ADJ = "/proc/self/oom_score_adj"
SHIELDED = (-1000, -999)
"""Tried in turn: -1000 (OOM_SCORE_ADJ_MIN) and the OOM killer never picks the process
(Documentation/filesystems/proc.rst); where it is refused (a root without CAP_SYS_RESOURCE, as
in some VMs and containers), -999, which leaves the process the last choice of all."""


@contextlib.contextmanager
def shielded_from_oom_killer(log=lambda message: None):
    """Within the block this process has the lowest oom_score_adj it may set; yields it, or
    None when it could lower nothing (`log` says why)."""
    try:
        with open(OOM_SCORE_ADJ) as f:
            previous = f.read().strip()
    except OSError as exc:
        log(f"the recorder stays open to the OOM killer ({exc.strerror})")
        yield None
        return
    reached = None
    refused = None
    for value in SHIELDED:
        try:
            with open(OOM_SCORE_ADJ, "w") as f:
                f.write(str(value))
        except OSError as exc:
            refused = exc
            continue
        reached = value
        break
    if reached is None:
        log(f"the recorder stays open to the OOM killer ({refused.strerror}): were it killed "
            "in the window, the recorded thread would die of its pending SIGTRAP")
        yield None
        return
    try:
        yield reached
    finally:
        try:
            with open(OOM_SCORE_ADJ, "w") as f:
                f.write(previous)
        except OSError:
            pass  # raising it back needs no capability: not reached

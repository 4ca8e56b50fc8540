"""What a backend can do beyond forwarding DAP, declared as optional protocols: features ask
`isinstance(backend, RunsInsidePython)` instead of checking the backend's name, as Delve's
pkg/proc declares a target's optional powers as interfaces.

Layer: its own, between backends and features (imports nothing of ptdebug; features and the
session import it, backends need not: a backend declares a power simply by having its methods
or attributes, which `runtime_checkable` lets features test for).
tests/adapter/backends/test_powers.py checks which of DebugpyBackend, DelveBackend and
ReplayBackend has which.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable


@runtime_checkable
class RunsInsidePython(Protocol):
    """The debugger runs inside a CPython debuggee (debugpy's pydevd): `evaluate` runs Python
    in the program, threads are Python threads, the program is never ptrace-stopped by it."""

    def native_thread_id(self, thread_id: int) -> int:
        """The OS thread id of DAP thread `thread_id` (asked of the debuggee once per
        thread). Raises AdapterError."""

    def evaluations_done(self, timeout: float) -> bool:
        """Wait until no evaluation runs in the debuggee (False: one still does)."""


@runtime_checkable
class HandsOverThreads(Protocol):
    """The debugger holds the program with ptrace (Delve): a recording needs it to let go of
    the program for the window and to take it back after (docs/go.md)."""

    def thread_of(self, thread_id: int) -> tuple[int, int]:
        """(OS thread id, pc) the DAP thread (a goroutine) runs on now."""

    def hand_over(self, tid: int, pc: int) -> object:
        """Let go of the program, the thread parked at `pc`; returns the golang.park.Parked."""

    def take_back(self, while_held=None) -> None:
        """Hold the program again (with the user's breakpoints); `while_held()` runs while
        every thread is stopped."""

    def window_stops(self, thread_id: int, start_pc: int, record_lines) -> tuple[dict, dict]:
        """(watched, unwatched) address -> WindowStop: the user's breakpoints the recorded
        thread may reach in the window."""

    def thread_id_probe(self) -> dict:
        """What the recorder needs to write the running thread's id (a goroutine's) into the
        trace (golang.stepper_probe offsets). Raises AdapterError."""


@runtime_checkable
class ServesDataBreakpoints(Protocol):
    """The debugger owns the debug registers and serves DAP data breakpoints itself (its
    capability may be learnt after the start: the attribute says what is known now)."""

    native_data_breakpoints: bool


@runtime_checkable
class ServesInstructionBreakpoints(Protocol):
    """The debugger serves DAP instruction breakpoints itself."""

    native_instruction_breakpoints: bool


@runtime_checkable
class ShowsOriginalBytes(Protocol):
    """The debugger plants breakpoints in the program's code and can say what bytes they
    hide (readMemory and disassemble show the program's own, as the debugger does)."""

    def original_bytes(self, address: int, count: int) -> dict[int, int]:
        """address -> original byte of each planted breakpoint in [address, address+count)."""


@runtime_checkable
class ServesCustomRequests(Protocol):
    """The backend answers custom requests of its own (`ptdebug/...`): the session plugs each
    handler into its row of the route table as the `backend` step (adapter/routes.py)."""

    def custom_requests(self) -> dict[str, Callable]:
        """command -> handler(Request) -> answer, DEFERRED, or None (not taken)."""


@runtime_checkable
class ReplaysRecordings(Protocol):
    """No program runs: the backend serves a recorded bundle (backends/replay.py)."""

    replayed: object


def records(backend) -> bool:
    """Whether record breakpoints can record in this backend's program."""
    return isinstance(backend, (RunsInsidePython, HandsOverThreads))

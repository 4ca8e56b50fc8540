"""Holding a recorded goroutine on its thread for a window with the Go runtime's own lock: what
`runtime.LockOSThread` does, done from outside while the thread is stopped, and undone where
`runtime.UnlockOSThread` would undo it.

Layer: adapter.golang. Reads and writes the process's memory (adapter.hw.ptrace.Memory) with
the runtime layout of runtime_layout.py; the stepper (adapter.capture.stepper) calls it as its
`hold`; knows nothing of traces or DAP.

Why (issue 14, item 3): the stepper records one thread. preemption is held off for the window
(recording.py, park.py), but a goroutine still leaves its thread by the runtime's own hand: at
a stack check during a garbage collection's stop-the-world (newstack -> gopreempt_m ->
schedule), or when it sleeps or blocks and another thread runs it when it is ready. A
goroutine locked to its thread (g.lockedm = m, m.lockedg = g) is run by that thread only:
`schedule` on the locked M parks the M until the goroutine is ready (stoplockedm), and whoever
finds the goroutine runnable hands its P to the locked M (startlockedm). So the recorded
thread follows the goroutine through every switch, and what the program computes does not
change: only which thread runs that goroutine, and that another thread runs the P's other
goroutines while it waits (Go's runtime/proc.go, LockOSThread's contract).

Runtime facts relied on (runtime/proc.go, Go 1.10 on; checked against Go 1.26):
  * LockOSThread: m.lockedExt++, then m.lockedg = g and g.lockedm = m (dolockOSThread);
    UnlockOSThread: m.lockedExt-- and, when lockedExt and lockedInt are both 0, both pointers
    cleared (dounlockOSThread). The scheduler looks at the two pointers only. ptdebug sets the
    pointers and no counter: a thread with lockedExt set creates threads through the template
    thread, which LockOSThread starts first and which most programs never have ("fatal
    error: on a locked thread with no template thread", seen 2026-12-03 when ptdebug counted
    itself in lockedExt); with lockedInt set, a goroutine that exits throws. If the program
    locks and unlocks the thread itself in the window, its UnlockOSThread clears the lock
    (the goroutine may then move, as before the lock, and the window says which goroutine
    it ended in).
  * Only the goroutine itself, running, changes or reads its lock (and the M running it);
    others read g.lockedm only of a runnable g. So the lock is taken and given back only at a
    stop where the thread runs the goroutine (its TLS g is the goroutine): never while the
    goroutine waits, when the locked M sleeps in stoplockedm and would sleep for ever if
    the lock vanished (and `stoplockedm` throws on a lock that changed under it).
  * A locked goroutine that exits kills its thread instead of returning it to the pool
    (gdestroy). So the lock is given back at the entry of runtime.goexit1, where a goroutine
    ends (still running on its own stack): `visits`. Likewise before runtime.coroswitch (a
    coroutine of iter.Pull), which throws when the lock differs from the one at the
    coroutine's creation.
  * Back from the scheduler the goroutine may run on another P, whose sysmon record is not
    the one pushed ahead when the window began (park.hold_preemption): sysmon then asks the
    slowed goroutine to yield again within 10 ms, at its next stack check, and it went round
    the scheduler ~25 times in a 40,000-instruction window without getting past its first
    prologue (seen 2026-12-03, go_held.go `exits`). So preemption is held again each time
    the goroutine comes back, and resumed on every P it was held on when the lock is given
    back.
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

from adapter.hw import ptrace as pt

from .park import Parked, hold_preemption, resume_preemption
from .runtime_layout import STRUCTS

LOCK_MEMBERS = {"runtime.g": ("lockedm", "stack"),
                "runtime.m": ("lockedg", "lockedExt", "lockedInt")}
"""The members the lock reads (the counts, g.stack) and writes (the pointers) besides STRUCTS'
(read with every member of those structures by runtime_layout)."""


@dataclass(frozen=True)
class LockLayout:
    """What the lock needs of one binary in one process: plain numbers, so that a recorder
    process gets it in its JSON spec instead of reading DWARF again. Has what
    park.hold_preemption reads of a RuntimeLayout (`offsets`, `tls_g_offset`)."""

    tls_g_offset: int
    offsets: dict
    """structure -> member -> offset, for STRUCTS' members and LOCK_MEMBERS."""
    leave_at: dict
    """Where the lock is given back before the instruction runs: runtime.goexit1 and
    runtime.coroswitch (name -> address in the process, load bias applied), where found."""

    @classmethod
    def of(cls, layout, pid: int) -> LockLayout | None:
        """From a RuntimeLayout of process `pid`'s executable; None when the binary's runtime
        lacks a member (a Go older than 1.10)."""
        wanted = {s: set(members) | set(LOCK_MEMBERS.get(s, ())) for s, members in STRUCTS.items()}
        offsets = {s: {m: layout.offsets.get(s, {}).get(m) for m in members}
                   for s, members in wanted.items()}
        if any(v is None for members in offsets.values() for v in members.values()):
            return None
        bias = _load_bias(pid, layout.path)
        leave_at = {name: layout.symbols[name] + bias for name in LEAVE_AT
                    if name in layout.symbols}
        return cls(layout.tls_g_offset, offsets, leave_at)

    def to_json(self) -> dict:
        return asdict(self)


LEAVE_AT = {"runtime.goexit1": "where the goroutine ended",
            "runtime.coroswitch": "before a coroutine switch (iter.Pull)"}
"""Functions entered on the goroutine's own stack before what a lock must not meet."""


def _load_bias(pid: int, path: str) -> int:
    """0 for an executable linked at its address (Go's default); a PIE's bias otherwise."""
    from adapter.hw.mappings import load_bias
    try:
        return load_bias(pid, path)
    except OSError:
        return 0


class GoroutineLock:
    """The stepper's `hold` for a Go window: takes the lock at the first stop where the thread
    runs a goroutine (`at_stop`), gives it back where the goroutine ends (`visits`) or where the
    window ends (`release`, once `home` says the thread runs it again).

    State for the user (`describe`, the manifest): whether the goroutine was held, by whom, and
    how the lock ended."""

    def __init__(self, pid: int, layout: LockLayout):
        self.pid = pid
        self.layout = layout
        self.memory = pt.Memory(pid)
        self.g = 0
        """The held goroutine's g (0: none yet)."""
        self.m = 0
        self.goid: int | None = None
        self.state = "not taken"
        """"not taken", "held", "held by the program" (it had locked itself: nothing to undo),
        "released", "released WHERE" (LEAVE_AT), "left locked: WHY" (see abandon), "not
        possible: WHY"."""
        self.visits = {address: functools.partial(self._leave, LEAVE_AT[name])
                       for name, address in layout.leave_at.items()}
        """address -> called at the stop before it runs (the stepper's one-shot stops)."""
        self.preemption_held: list[Parked] = []
        """Each P's sysmon record pushed ahead (park.hold_preemption), to resume at release."""
        self._away = False
        self._g, self._m = layout.offsets["runtime.g"], layout.offsets["runtime.m"]
        self.stack_hi: int | None = None
        """g.stack.hi when the lock was taken (stack_moved)."""

    @classmethod
    def for_process(cls, pid: int, layout) -> GoroutineLock | None:
        lock_layout = LockLayout.of(layout, pid)
        return cls(pid, lock_layout) if lock_layout is not None else None

    # -- reading --------------------------------------------------------------------------

    def _word(self, address: int, size: int = 8) -> int:
        return int.from_bytes(self.memory.read(address, size), "little")

    def _put(self, address: int, value: int, size: int = 8) -> None:
        self.memory.write(address, value.to_bytes(size, "little"))

    def _current_g(self, regs) -> int:
        try:
            return self._word((regs.fs_base + self.layout.tls_g_offset) & 0xFFFFFFFFFFFFFFFF)
        except OSError:
            return 0

    @property
    def holding(self) -> bool:
        return self.state == "held"

    # -- the stepper's calls --------------------------------------------------------------

    def at_stop(self, regs) -> None:
        """Take the lock at the first stop that runs a goroutine (not g0: goid 0); hold
        preemption off then and whenever the goroutine is back from the scheduler."""
        if self.state == "not taken":
            self._take(regs)
            if self.state.startswith("held"):
                self._hold_preemption(regs)
        elif self.state in ("held", "held by the program"):  # on the thread: follow it
            home = self._current_g(regs) == self.g
            if home and self._away:
                self._hold_preemption(regs)
            self._away = not home

    def _take(self, regs) -> None:
        g_, m_ = self._g, self._m
        g = self._current_g(regs)
        if not g:
            return
        try:
            goid = self._word(g + g_["goid"])
            m = self._word(g + g_["m"])
            if not goid or not m or self._word(m + m_["curg"]) != g:
                return  # g0, a signal handler's gsignal, or a switch half done: next stop
            self.g, self.m, self.goid = g, m, goid
            self.stack_hi = self._word(g + g_["stack"] + 8)  # g.stack.hi
            if self._word(g + g_["lockedm"]) == m:
                self.state = "held by the program"
                return
            if self._word(m + m_["lockedg"]) or self._word(g + g_["lockedm"]):
                self.state = "not possible: the thread or goroutine is locked to another"
                return
            # as dolockOSThread, without a count (the module docstring says why)
            self._put(m + m_["lockedg"], g)
            self._put(g + g_["lockedm"], m)
            self.state = "held"
        except OSError as exc:
            self.state = f"not possible: {exc}"

    def stack_moved(self) -> int:
        """How far the goroutine's stack moved since the lock was taken: Go grows a stack by
        copying it (runtime.copystack), every frame at the same distance from the new top, so
        the trigger's return comes at entry_rsp + 8 + this. Seen 2026-12-03: `--from main.work
        --until-return` of a work() that recursed 160 KiB deep missed the return and recorded
        on to the program's exit."""
        if self.stack_hi is None:
            return 0
        try:
            return self._word(self.g + self._g["stack"] + 8) - self.stack_hi
        except OSError:
            return 0

    def _hold_preemption(self, regs) -> None:
        try:
            self.preemption_held.append(hold_preemption(self.pid, regs.fs_base, self.layout))
        except OSError:
            pass  # preempted as usual: the lock still brings the goroutine back

    def _resume_preemption(self) -> None:
        for held in self.preemption_held:
            try:
                resume_preemption(held)
            except OSError:
                pass
        self.preemption_held = []

    def home(self, regs) -> bool:
        """Whether the thread runs the held goroutine now (the lock can be given back)."""
        return not self.holding or self._current_g(regs) == self.g

    def release(self, regs) -> None:
        """As dounlockOSThread, at a stop where `home` holds."""
        self._resume_preemption()
        if not self.holding:
            return
        g_, m_ = self._g, self._m
        g, m = self.g, self.m
        try:
            # the lock is the program's now if it called LockOSThread in the window (a count
            # is set), and gone if it called UnlockOSThread after that
            counted = self._word(m + m_["lockedExt"], 4) or self._word(m + m_["lockedInt"], 4)
            if not counted and self._word(m + m_["lockedg"]) == g \
                    and self._word(g + g_["lockedm"]) == m:
                self._put(m + m_["lockedg"], 0)
                self._put(g + g_["lockedm"], 0)
            self.state = "released"
        except OSError as exc:
            self.state = f"left locked: {exc}"

    def abandon(self, why: str) -> None:
        """The goroutine did not come back to the thread in time (it waits for something):
        the lock stays, as if it had called runtime.LockOSThread, until it ends."""
        self._resume_preemption()
        if self.holding:
            self.state = f"left locked: {why}"

    def _leave(self, where: str, regs) -> None:
        if self.holding and self.home(regs):
            self.release(regs)
            self.state = f"released {where}"

    def describe(self) -> str:
        who = f"goroutine {self.goid}" if self.goid is not None else "the goroutine"
        if self.state.startswith("left locked"):
            return (f"{who} stays locked to its thread, as after runtime.LockOSThread, until it "
                    f"ends ({self.state[len('left locked: '):]}); what it computes is unchanged")
        return f"{who} held on the thread: {self.state}"

    def close(self) -> None:
        self._resume_preemption()  # a window cut short (the program exited, an error)
        self.memory.close()

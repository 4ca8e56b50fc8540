"""Hot lines: what each source line did in a recorded window: how often it ran, its cycles
and instructions, its share of the window's cycles, and the branches taken on it.

Layer: adapter.lsp (the model behind the language server; server.py shows it). Built from a
Recording (adapter/recording/recording.py, whose cycle attribution rule it uses); knows nothing
of LSP or DAP.

Definitions (the tests check the lenses against them):
- an instruction belongs to the line its address has in the line table (DWARF row, or Go
  pclntab), not only to statement starts;
- a line *executes* each time control enters it from another line: a position whose line
  differs from the previous instruction's, except when that instruction was a return into the
  line of the matching call (coming back from a callee continues the calling line's execution);
- cycles of a line: the sum of its instructions' cycles; share: cycles / the window's cycles.
  A stepper recording's cycles are stepper time (wall-clock ns of a ptrace-slowed thread, not
  CPU time; adapter/recording/recording.py): its lenses and hovers say so, lead with instructions, and
  its share is of the window's instructions, the exact measure.
- branches: per conditional branch on the line, how often it was taken and not taken; per
  call and indirect jump, how often each target (function) was reached.
- Python lines of a Python capture (the stepper's Python probe): a line's instructions and
  cycles are those run while it was the running Python line, native code under it included;
  executions are runs of it (coming back from a call it made continues one execution); no
  branches (`_python_lines`).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field

from adapter.recording.recording import Recording
from pt_decoder import insn_flags


@dataclass
class Branch:
    """A conditional branch instruction at `address`."""

    address: int
    taken: int = 0
    not_taken: int = 0


@dataclass
class LineStats:
    file: str
    line: int
    executions: int = 0
    instructions: int = 0
    cycles: int = 0
    branches: dict[int, Branch] = field(default_factory=dict)
    """Conditional branches by address."""
    calls: Counter = field(default_factory=Counter)
    """Function name -> calls made from this line."""
    indirect: Counter = field(default_factory=Counter)
    """Target function -> indirect jumps/calls from this line that went there."""


class HotLines:
    """Per-file, per-line statistics of one decoded bundle."""

    def __init__(self, bundle: str, by_file: dict[str, dict[int, LineStats]], total_cycles: int,
                 total_instructions: int, stepper: bool = False, slowed_by: str = "ptrace"):
        self.bundle = bundle
        self.by_file = by_file
        """Source path as the line table names it -> line number -> stats."""
        self.total_cycles = total_cycles
        self.total_instructions = total_instructions
        self.stepper = stepper
        """Recorded by the ptrace stepper (or DBI): the cycles are stepper time, not CPU
        cycles."""
        self.slowed_by = slowed_by
        """What slowed the recorded thread, one word (Recording.slowed_short)."""

    @classmethod
    def from_decoded(cls, decoded: Recording) -> HotLines:
        lines = decoded.lines
        stats: dict[int, LineStats] = {}   # by line id
        total_cycles = total_instructions = 0

        def entry_of(line_id: int) -> LineStats:
            entry = stats.get(line_id)
            if entry is None:
                file, number = lines.line_key(line_id)
                entry = stats[line_id] = LineStats(file, number)
            return entry

        for thread in decoded.threads:
            history = thread.history
            n = len(history)
            if not n:
                continue
            ids = history.line_ids(lines, statements=False)
            flags = history.flags_range()
            ips = history.ips()
            weights = thread.cycle_weights()
            gap_positions = {g.position for g in history.gaps}
            total_instructions += n
            total_cycles += sum(weights)
            # Per line: instructions and cycles (whole-column passes, no per-position branches).
            for line_id, count in Counter(ids).items():
                if line_id:
                    entry_of(line_id).instructions += count
            cycles_by_line: dict[int, int] = dict.fromkeys(stats, 0)
            for line_id, weight in zip(ids, weights):
                if weight:
                    cycles_by_line[line_id] = cycles_by_line.get(line_id, 0) + weight
            for line_id, cycles in cycles_by_line.items():
                if line_id and cycles:
                    entry_of(line_id).cycles += cycles
            line_of_ip = dict(zip(ips, ids))
            # Executions: only positions where the line changes, control transfers and gaps
            # matter; visit those in order with the stack of calling lines.
            transfer_mask = insn_flags.CALL | insn_flags.RETURN
            transfers = [p for p, f in enumerate(flags)
                         if f & transfer_mask and not f & insn_flags.FAR]
            changes = [p for p in range(1, n) if ids[p] != ids[p - 1]]
            events = sorted(set(transfers) | set(changes) | gap_positions | {0})
            transfer_set, change_set = set(transfers), set(changes)
            call_lines: list[int] = []
            resumes_at: dict[int, int] = {}
            for p in events:
                if p in gap_positions:
                    call_lines = []
                    resumes_at.pop(p, None)
                line_id = ids[p] if p < n else 0
                if line_id and (p == 0 or p in change_set) and line_id != resumes_at.pop(p, -1):
                    entry_of(line_id).executions += 1
                if p in transfer_set:
                    if flags[p] & insn_flags.CALL:
                        call_lines.append(line_id)
                    elif call_lines:
                        resumes_at[p + 1] = call_lines.pop()
                    else:
                        resumes_at.pop(p + 1, None)
            # Branches: per (address, flags) and, for calls and indirect jumps, per target.
            for (ip, f), count in Counter(zip(ips, flags)).items():
                line_id = line_of_ip[ip]
                if line_id and f & insn_flags.CONDITIONAL and not f & insn_flags.FAR:
                    branch = entry_of(line_id).branches.setdefault(ip, Branch(ip))
                    if f & insn_flags.TAKEN:
                        branch.taken += count
                    else:
                        branch.not_taken += count
            jump_mask = insn_flags.CALL | insn_flags.INDIRECT
            targets = Counter((ips[p], ips[p + 1], f) for p, f in enumerate(flags)
                              if f & jump_mask and not f & (insn_flags.FAR | insn_flags.RETURN)
                              and p + 1 < n and (p + 1) not in gap_positions)
            for (ip, target, f), count in targets.items():
                line_id = line_of_ip[ip]
                if not line_id:
                    continue
                entry = entry_of(line_id)
                name = decoded.function(target)[0]
                if f & insn_flags.CALL:
                    entry.calls[name] += count
                if f & insn_flags.INDIRECT:
                    entry.indirect[name] += count
        by_file: dict[str, dict[int, LineStats]] = {}
        for entry in list(stats.values()) + _python_lines(decoded):
            by_file.setdefault(entry.file, {})[entry.line] = entry
        return cls(os.path.abspath(decoded.root), by_file, total_cycles, total_instructions,
                   decoded.stepper, decoded.slowed_short)

    def share(self, entry: LineStats) -> float:
        """The line's share of the window: of its cycles, or of its instructions for a stepper
        recording (whose cycles are not the CPU's)."""
        if self.stepper:
            return (entry.instructions / self.total_instructions if self.total_instructions
                    else 0.0)
        return entry.cycles / self.total_cycles if self.total_cycles else 0.0

    def for_path(self, path: str) -> dict[int, LineStats]:
        """The lines of the source file at `path`: the same path, else the recorded path that
        shares the longest tail of directories with it (sources built elsewhere)."""
        norm = os.path.normpath(path)
        if norm in self.by_file:
            return self.by_file[norm]
        wanted = norm.split(os.sep)
        best, best_len = None, 0
        for recorded in self.by_file:
            parts = os.path.normpath(recorded).split(os.sep)
            common = 0
            while common < min(len(parts), len(wanted)) and \
                    parts[-1 - common] == wanted[-1 - common]:
                common += 1
            if common > best_len:
                best, best_len = recorded, common
            elif common == best_len and common:
                best = None  # two recorded files match as well: do not guess
        return self.by_file.get(best, {}) if best else {}


def _python_lines(decoded: Recording) -> list[LineStats]:
    """The Python source lines of a Python capture (the stepper's Python probe,
    docs/python.md): each line gets the instructions and cycles run while it was the running
    Python line (the native code under it included) and its executions (runs of it; coming back
    from a call it made continues the same execution, as for native lines)."""
    if decoded.python_table is None:
        return []
    out: dict[tuple[str, int], LineStats] = {}
    for thread in decoded.threads:
        n = len(thread.history)
        if not n:
            continue
        frames = decoded.python_frames(thread)
        weights = thread.cycle_weights()
        segments = list(frames.stacks())
        last_by_depth: list[tuple[int, int] | None] = []   # (code, line) last run per depth
        previous = None
        for k, (start, stack) in enumerate(segments):
            stop = segments[k + 1][0] if k + 1 < len(segments) else n
            if not stack:
                last_by_depth = []
                previous = None
                continue
            code, index = stack[-1]
            info = frames.codes.get(code)
            if info is None:
                continue
            line = info.line(index)
            depth = len(stack)
            key = (code, line)
            entry = out.get((info.filename, line))
            if entry is None:
                entry = out[(info.filename, line)] = LineStats(info.filename, line)
            entry.instructions += stop - start
            entry.cycles += sum(weights[start:stop])
            del last_by_depth[depth:]
            while len(last_by_depth) < depth:
                last_by_depth.append(None)
            returned_into = previous is not None and previous[1] > depth and \
                last_by_depth[depth - 1] == key
            if (key, depth) != previous and not returned_into:
                entry.executions += 1
            last_by_depth[depth - 1] = key
            previous = (key, depth)
    return list(out.values())


def format_count(n: float) -> str:
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return f"{n:.0f}"


def lens_title(hot: HotLines, entry: LineStats) -> str:
    if hot.stepper:
        return (f"{format_count(entry.executions)}× · {format_count(entry.instructions)} "
                f"instructions · {100 * hot.share(entry):.1f}% of window · "
                f"{format_ns(entry.cycles)} stepper time ({hot.slowed_by}-slowed)")
    return (f"{format_count(entry.executions)}× · {format_count(entry.cycles)} cycles · "
            f"{100 * hot.share(entry):.1f}% of window")


def format_ns(ns: float) -> str:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return f"{ns / scale:.1f} {unit}"
    return f"{ns:.0f} ns"


def hover_markdown(hot: HotLines, entry: LineStats) -> str:
    where = f"**ptdebug** `{os.path.basename(entry.file)}:{entry.line}`: "
    if hot.stepper:
        parts = [(f"{where}{entry.executions:,} executions, {entry.instructions:,} instructions "
                  f"({100 * hot.share(entry):.2f}% of the window's), {entry.cycles:,} ns of "
                  "stepper time"),
                 "",
                 f"_Its time is the wall-clock time of a thread slowed by {hot.slowed_by}, "
                 "not CPU time or cycles; the instruction counts are exact._"]
    else:
        parts = [(f"{where}{entry.executions:,} executions, {entry.instructions:,} instructions, "
                  f"{entry.cycles:,} cycles ({100 * hot.share(entry):.2f}% of the window)")]
    if entry.branches:
        parts.append("")
        parts.append("| conditional branch | taken | not taken |")
        parts.append("|---|---:|---:|")
        for address in sorted(entry.branches):
            b = entry.branches[address]
            parts.append(f"| `{address:#x}` | {b.taken:,} | {b.not_taken:,} |")
    if entry.calls:
        parts.append("")
        parts.append("calls: " + ", ".join(f"`{name}` ×{count:,}"
                                            for name, count in entry.calls.most_common()))
    if entry.indirect:
        parts.append("")
        parts.append("indirect targets: " + ", ".join(
            f"`{name}` ×{count:,}" for name, count in entry.indirect.most_common()))
    parts.append("")
    parts.append(f"_capture: {hot.bundle}_")
    return "\n".join(parts)

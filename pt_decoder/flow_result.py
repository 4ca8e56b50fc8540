"""The decoded instruction flow of one stream, as columns plus items.

Layer: pt_decoder, produced by insn.pyx (InsnDecoder.decode) and consumed by
the tools (ptxed/ips/jsonl formatters), parallel decode (stitching) and the
history (History.from_columns). Pure data; knows no decoding.

Columns, one entry per executed instruction: `ip`, `tsc` (TSC-based time,
libipt's pt_insn_time after the instruction), `cycles` (cumulative CYC
cycles), `flags` (insn_flags bits). `items`: events, errors and the end of
the trace, each `(kind, pos, offset, ip, code, event)` placed before the
instruction with index `pos`; kind is "event", "error", "sync_error", "eos".
"""
from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from pt_decoder.errors import errstr


@dataclass
class FlowResult:
    ip: array
    tsc: array
    cycles: array
    flags: array
    items: list = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.ip)

    def errors(self) -> list:
        """The error items: (pos, offset, ip, code)."""
        return [(pos, off, ip, code) for kind, pos, off, ip, code, _ in self.items
                if kind in ("error", "sync_error")]

    def gaps(self) -> list:
        """Trace damage as history gaps: errors and overflows, each with the
        instruction position it precedes, the trace offset and the IP."""
        from pt_decoder.history import Gap
        out = []
        for kind, pos, off, ip, code, ev in self.items:
            if kind in ("error", "sync_error"):
                out.append(Gap(pos, off, ip, code, errstr(code)))
            elif kind == "event" and ev["type"] == "overflow":
                out.append(Gap(pos, off, ev["ip"] or 0, 25, "overflow"))
        return out

    def to_history(self, meta: dict | None = None):
        """The flow as a pt_decoder.history.History (columns are shared, not copied)."""
        from pt_decoder.history import History
        return History.from_columns(self.ip, self.tsc, self.cycles, self.flags, self.gaps(), meta or {})

    def ptwrites(self) -> list[tuple[int, int]]:
        """(position, value) of the flow's PTWRITE events, each placed on the instruction the
        recorder meant. A PTWRITE bound to an FUP is reported after the instruction at that
        IP: the PTWRITE itself (Intel PT), or the instruction the stepper stopped before when
        it read the value (a goroutine id, a Python frame sample); the sample goes on it."""
        out = []
        ips = self.ip
        for kind, pos, _off, _ip, _code, ev in self.items:
            if kind != "event" or not ev or ev.get("type") != "ptwrite":
                continue
            ip = ev.get("ip")
            if ip is not None and pos > 0 and ips[pos - 1] == ip:
                pos -= 1
            out.append((pos, ev["payload"]))
        return out

    def extend(self, other: FlowResult) -> None:
        """Append `other` (a later piece of the same stream) to this result."""
        base = len(self.ip)
        self.ip.extend(other.ip)
        self.tsc.extend(other.tsc)
        self.cycles.extend(other.cycles)
        self.flags.extend(other.flags)
        self.items.extend((k, pos + base, off, ip, code, ev) for k, pos, off, ip, code, ev in other.items)

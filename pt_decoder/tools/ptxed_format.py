"""Formatters of a decoded flow: libipt ptxed's text, bare IPs, JSON lines.

Layer: pt_decoder.tools (presentation only). Reads a FlowResult; knows the
output formats and nothing of decoding. `ptxed` follows libipt 2.0.5's ptxed
(print_insn/print_event/diagnose) for the options ptdebug supports, so that
its output equals libipt's `-ptxed*.exp` files.
"""
from __future__ import annotations

import json
from collections.abc import Iterator

from pt_decoder.errors import errstr
from pt_decoder.insn_flags import SPECULATIVE

EXEC_MODES = ("<unknown>", "16-bit", "32-bit", "64-bit")


def describe_event(ev: dict, event_ip: bool = False) -> str:
    """The text between ptxed's brackets for one event."""
    t = ev["type"]
    ip = ev["ip"]
    sup = ip is None

    def with_ip(text: str, value=ip, show=True) -> str:
        if event_ip and show and value is not None:
            return "%s, ip: %016x" % (text, value)
        return text

    if t == "enabled":
        text = "resumed" if ev["a"] else "enabled"
        return "%s, ip: %016x" % (text, ip) if event_ip else text
    if t == "disabled":
        return with_ip("disabled")
    if t == "async_disabled":
        if not event_ip:
            return "disabled"
        text = "disabled, at: %016x" % ev["at"]
        return text if sup else "%s, ip: %016x" % (text, ip)
    if t == "async_branch":
        if not event_ip:
            return "interrupt"
        text = "interrupt, from: %016x" % ev["at"]
        return text if sup else "%s, to: %016x" % (text, ip)
    if t in ("paging", "async_paging"):
        text = "paging, cr3: %016x%s" % (ev["payload"], ", nr" if ev["a"] else "")
        if t == "async_paging" and event_ip:
            text += ", ip: %016x" % (ip or 0)
        return text
    if t == "overflow":
        return with_ip("overflow")
    if t == "exec_mode":
        return with_ip("exec mode: %s" % EXEC_MODES[ev["a"]])
    if t == "tsx":
        text = "aborted" if ev["b"] else ("begin transaction" if ev["a"] else "committed")
        return with_ip(text)
    if t == "stop":
        return "stopped"
    if t in ("vmcs", "async_vmcs"):
        text = "vmcs, base: %016x" % ev["payload"]
        if t == "async_vmcs" and event_ip:
            text += ", ip: %016x" % (ip or 0)
        return text
    if t == "exstop":
        return with_ip("exstop")
    if t == "mwait":
        return with_ip("mwait %x %x" % (ev["payload"], ev["aux"]))
    if t == "pwre":
        return "pwre c%u.%u%s" % ((ev["payload"] + 1) & 0xf, (ev["aux"] + 1) & 0xf, " hw" if ev["a"] else "")
    if t == "pwrx":
        why = ("int: " if ev["a"] else "") + ("st: " if ev["b"] else "") + ("hw: " if ev["c"] else "")
        return "pwrx %sc%u (c%u)" % (why, (ev["payload"] + 1) & 0xf, (ev["aux"] + 1) & 0xf)
    if t == "ptwrite":
        return with_ip("ptwrite: %x" % ev["payload"])
    if t == "tick":
        return with_ip("tick")
    if t == "cbr":
        return "cbr: %x" % ev["payload"]
    if t == "mnt":
        return "mnt: %x" % ev["payload"]
    return t


def _item_line(item, event_ip: bool, event_time: bool) -> str | None:
    kind, pos, off, ip, code, ev = item
    if kind == "event":
        if ev["status_update"]:
            return None
        prefix = "%016x  " % ev["tsc"] if event_time and ev["tsc"] is not None else ""
        return "[%s%s]" % (prefix, describe_event(ev, event_ip))
    if kind == "eos":
        return "[end of trace]"
    what = "sync error" if kind == "sync_error" else "error"
    return "[%x, %x: %s: %s]" % (off, ip, what, errstr(code))


def ptxed_lines(flow, event_ip: bool = False, event_time: bool = False,
                insn_time: bool = False) -> Iterator[str]:
    """ptxed's output lines (without --att/--raw-insn: IPs only, `? ` for speculative);
    insn_time puts each instruction's TSC before it (16 hex digits, two spaces)."""
    items = flow.items
    k = 0
    ips, flags = flow.ip, flow.flags
    for i in range(len(ips)):
        while k < len(items) and items[k][1] <= i:
            line = _item_line(items[k], event_ip, event_time)
            if line is not None:
                yield line
            k += 1
        line = ("? %016x" if flags[i] & SPECULATIVE else "%016x") % ips[i]
        yield ("%016x  %s" % (flow.tsc[i], line)) if insn_time else line
    for item in items[k:]:
        line = _item_line(item, event_ip, event_time)
        if line is not None:
            yield line


def ips_lines(flow) -> Iterator[str]:
    """One lower-case hex IP a line; events and errors as `[...]` lines."""
    for line in ptxed_lines(flow, event_ip=True):
        if line.startswith("["):
            yield line
        else:
            yield "%x" % int(line.lstrip("? "), 16)


def jsonl_lines(flow) -> Iterator[str]:
    """One JSON object per instruction ({"ip", "tsc", "cycles", "flags"}) or item."""
    items = flow.items
    k = 0
    n = len(flow.ip)
    for i in range(n + 1):
        while k < len(items) and (i == n or items[k][1] <= i):
            kind, pos, off, ip, code, ev = items[k]
            rec = {"kind": kind, "offset": off}
            if kind == "event":
                rec.update(ev)
            elif kind != "eos":
                rec.update(ip=ip, code=code, error=errstr(code))
            yield json.dumps(rec)
            k += 1
        if i < n:
            yield json.dumps({"ip": flow.ip[i], "tsc": flow.tsc[i], "cycles": flow.cycles[i],
                              "flags": flow.flags[i]})

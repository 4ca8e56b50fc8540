"""Formatters of a decoded flow: libipt ptxed's text, bare IPs, JSON lines.

Layer: pt_decoder.tools (presentation only). Reads a FlowResult; knows the
output formats and nothing of decoding. `ptxed` follows libipt 2.0.5's ptxed
(print_insn/print_event/diagnose) for the options ptdebug supports, so that
its output equals libipt's `-ptxed*.exp` files.

`ptdebug decode` prints the instruction lines with the compiled writer
(text_out.pyx) and takes the lines of items (events, errors, end of trace),
stream headers and statistics from here (item_text, stream_header,
stat_line, config_error_line). The whole-flow generators ptxed_lines,
ips_lines and jsonl_lines are the plain-Python definition of each format,
which the compiled writer is tested against line for line.

In `jsonl` every line is a JSON object: an instruction has no "kind"; items
have "kind" ("event", "error", "sync_error", "eos"), and so do the records
that are not the flow: {"kind": "stream", "tid"} before each stream of a
bundle, {"kind": "config_error", "error"}, {"kind": "stat", "insn"}.
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


def jsonl_item(item) -> str:
    """An item as one JSON object: {"kind", "offset"} + the event's fields, or
    {"ip", "code", "error"} for an error."""
    kind, pos, off, ip, code, ev = item
    rec = {"kind": kind, "offset": off}
    if kind == "event":
        rec.update(ev)
    elif kind != "eos":
        rec.update(ip=ip, code=code, error=errstr(code))
    return json.dumps(rec)


def jsonl_lines(flow) -> Iterator[str]:
    """One JSON object per instruction ({"ip", "tsc", "cycles", "flags"}) or item."""
    items = flow.items
    k = 0
    n = len(flow.ip)
    for i in range(n + 1):
        while k < len(items) and (i == n or items[k][1] <= i):
            yield jsonl_item(items[k])
            k += 1
        if i < n:
            yield json.dumps({"ip": flow.ip[i], "tsc": flow.tsc[i], "cycles": flow.cycles[i],
                              "flags": flow.flags[i]})


def item_text(fmt: str, event_ip: bool = False, event_time: bool = False):
    """item -> its line in format `fmt` (None: the item prints nothing), for
    text_out.TextSink.write_flow. `ips` shows events with their IPs."""
    if fmt == "jsonl":
        return jsonl_item
    if fmt == "ips":
        return lambda item: _item_line(item, True, False)
    return lambda item: _item_line(item, event_ip, event_time)


def stream_header(fmt: str, tid) -> str:
    """The line before each stream of a bundle."""
    if fmt == "jsonl":
        return json.dumps({"kind": "stream", "tid": tid})
    return "[stream tid %s]" % tid


def stat_line(fmt: str, insns: int) -> str:
    """--stat's line (ptxed's `insn: N.`)."""
    if fmt == "jsonl":
        return json.dumps({"kind": "stat", "insn": insns})
    return "insn: %d." % insns


def config_error_line(fmt: str, error: str) -> str:
    """ptxed's line for a configuration it cannot use (an unknown CPU)."""
    if fmt == "jsonl":
        return json.dumps({"kind": "config_error", "error": error})
    return "[0, 0: config error: %s]" % error

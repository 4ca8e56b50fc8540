"""`ptdebug watch`: a hardware watchpoint on a running process, one hit a line.

    ptdebug watch --pid PID (--addr ADDR | --symbol NAME) [--len N] [--access w|rw|x]
                  [--count N] [--duration S] [--json] [--mechanism perf|ptrace]
                  [--wakeup each|batch]

Each hit is printed as it is read: thread, IP, the function and source line
there (ELF symbols and DWARF lines, the perf-map file of a JIT or CPython's
trampolines, Go's pclntab), and the watched bytes before and after. With
--json, one JSON object a line: watch, pid, tid, ip, symbol, file, line,
time (CLOCK_MONOTONIC ns), address (the register's piece that fired) and
its offset in the watch, old, new, exact, callchain, regs (the user registers
at the hit; an execute watch's text line shows the first arguments rdi rsi rdx). Values of up
to 8 bytes are shown as little-endian integers ("0x..."), longer ones as hex
bytes in memory order; null where not known.

Ends after --count hits, after --duration seconds, when the process exits,
or on Ctrl-C / SIGTERM; the target is then left as it was (every perf event
closed, or every thread's debug registers cleared and detached).

Layer: a command of the adapter's console script. It parses, symbolises and
prints; the engines are adapter.watchpoints (perf) and adapter.watch_traced
(ptrace). Symbols come from pt_decoder.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import resource
import signal
import sys
import threading
import time

from elftools.elf.elffile import ELFFile

from adapter import watch_traced as wt
from adapter import watchpoints as wp
from pt_decoder.errors import PtError
from pt_decoder.image import Image
from pt_decoder.lines import LineTable

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
BAD_INPUT = frozenset({"bad_access", "bad_length", "unaligned", "unmapped", "no_process"})
"""WatchError codes that say the request was wrong (exit 2: no such process, no such symbol,
a length or address the hardware cannot watch); the others say this machine or the process's
state refused it (exit 1: permission, no free debug register, already traced)."""


class Symbolizer:
    """Address -> (function+offset, file, line) in one process, built once and cached.

    The perf-map file (/tmp/perf-PID.map) grows while a JIT or CPython with
    `-X perf` runs, so it is re-read when it changed and a lookup misses.
    """

    def __init__(self, pid: int):
        self.pid = pid
        self.image = Image.from_process(pid)
        self._lines: dict[str, LineTable | None] = {}
        self._go: dict[str, bool] = {}
        self._perf_map = f"/tmp/perf-{pid}.map"
        self._perf_map_stamp = self._stamp()

    def _stamp(self):
        try:
            st = os.stat(self._perf_map)
            return st.st_size, st.st_mtime_ns
        except OSError:
            return None

    def function(self, addr: int) -> str | None:
        sym = self.image.symbolize(addr)
        if sym is None and self._stamp() not in (None, self._perf_map_stamp):
            self._perf_map_stamp = self._stamp()
            try:
                self.image.add_perf_map(self._perf_map)
            except PtError:
                pass  # refused (not a regular file of the process's user): as at the start
            sym = self.image.symbolize(addr)
        if sym is not None:
            return f"{sym.display}+{sym.offset:#x}" if sym.offset else sym.display
        table = self._line_table(addr) if self._is_go(addr) else None
        found = table.function(addr) if table is not None else None  # Go pclntab names
        if found is not None:
            name, start = found
            return f"{name}+{addr - start:#x}" if addr != start else name
        return None

    def _is_go(self, addr: int) -> bool:
        module = self.image.module_at(addr)
        if module is None or module.kind != "elf":
            return False
        if module.path not in self._go:
            with open(module.path, "rb") as f:
                self._go[module.path] = ELFFile(f).get_section_by_name(".gopclntab") is not None
        return self._go[module.path]

    def line(self, addr: int) -> tuple[str, int] | None:
        table = self._line_table(addr)
        return table.lookup(addr) if table is not None else None

    def module(self, addr: int) -> str | None:
        module = self.image.module_at(addr)
        return module.path if module is not None else None

    def _line_table(self, addr: int) -> LineTable | None:
        module = self.image.module_at(addr)
        if module is None or module.kind != "elf":
            return None
        if module.path not in self._lines:
            try:
                self._lines[module.path] = LineTable.for_elf(module.path, module.base)
            except PtError:  # no DWARF and no pclntab: names only
                self._lines[module.path] = None
        return self._lines[module.path]

    def find(self, name: str) -> tuple[int, int, bool]:
        """(address, size, is_function) of a function or data symbol `name`."""
        found = self.image.find_symbol(name)
        if found is not None:
            return found[0], found[1], True
        for module in self.image.modules:
            if module.kind != "elf":
                continue
            with open(module.path, "rb") as f:
                elf = ELFFile(f)
                for section_name in (".symtab", ".dynsym"):
                    section = elf.get_section_by_name(section_name)
                    if section is None:
                        continue
                    for sym in section.get_symbol_by_name(name) or []:
                        if sym["st_shndx"] == "SHN_UNDEF":
                            continue
                        if sym["st_info"]["type"] == "STT_TLS":
                            raise wp.WatchError("bad_access", f"{name} is thread-local: each thread has "
                                                "its own copy; watch one thread's copy by --addr")
                        return module.base + sym["st_value"], sym["st_size"], False
        raise wp.WatchError("unmapped", f"no symbol {name!r} in process {self.pid}")


def _value(data: bytes | None) -> str | None:
    if data is None:
        return None
    if len(data) <= 8:
        return f"{int.from_bytes(data, 'little'):#0{2 + 2 * len(data)}x}"
    return data.hex()


def hit_record(hit: wp.Hit, symbols: Symbolizer) -> dict:
    """The JSON object of one hit. A data hit's IP is the instruction after the access
    (a trap), so the function and line are those of IP - 1, inside the accessing instruction."""
    where = hit.ip if hit.watch.request.access == wp.Access.EXECUTE else hit.ip - 1
    line = symbols.line(where)
    chain = []
    for i, addr in enumerate(hit.callchain[1:], 1):
        # Return addresses: the call is the instruction before.
        chain.append({"ip": f"{addr:#x}", "symbol": symbols.function(addr - 1 if i else addr)})
    return {
        "watch": hit.watch.id, "pid": hit.pid, "tid": hit.tid, "ip": f"{hit.ip:#x}",
        "symbol": symbols.function(where), "module": symbols.module(where),
        "file": line[0] if line else None, "line": line[1] if line else None,
        "time": hit.time_ns, "address": f"{hit.address:#x}",
        "offset": hit.address - hit.watch.request.address,
        "old": _value(hit.old), "new": _value(hit.new), "exact": hit.exact, "callchain": chain,
        "regs": {name: f"{value:#x}" for name, value in hit.regs.items()},
    }


def format_text(rec: dict) -> str:
    where = rec["symbol"] or "??"
    if rec["file"]:
        where += f" ({os.path.basename(rec['file'])}:{rec['line']})"
    values = f"  [+{rec['offset']:#x}]" if rec["offset"] else ""
    if rec["regs"] and rec["old"] is None and rec["new"] is None and not rec["offset"]:
        # An execute watch: the first integer arguments (System V AMD64 ABI: rdi, rsi, rdx).
        values = "  args " + " ".join(rec["regs"].get(r, "?") for r in ("rdi", "rsi", "rdx"))
    if rec["old"] is not None or rec["new"] is not None:
        values += f"  {rec['old'] or '?'} -> {rec['new'] or '?'}"
    return (f"tid {rec['tid']}  ip {rec['ip']}  {where}{values}  "
            f"t={rec['time'] / 1e9:.6f}")


def _parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ptdebug watch", description=__doc__.split("\n\n")[0])
    p.add_argument("--pid", type=int, required=True, help="the process to watch (every thread)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--addr", type=lambda s: int(s, 0), help="address (0x... or decimal)")
    where.add_argument("--symbol", help="a global variable or function of the process")
    p.add_argument("--len", type=int, dest="length",
                   help="bytes to watch: 1, 2, 4, 8, or 16/24/32 (8-aligned); default: the symbol's "
                        "size, else 8 (1 for --access x)")
    p.add_argument("--access", choices=["w", "rw", "x"], default="w",
                   help="w: writes, rw: reads and writes, x: execution (x86 has no read-only watch)")
    p.add_argument("--count", type=int, default=0, help="stop after N hits (default: run until stopped)")
    p.add_argument("--duration", type=float, default=0, help="stop after S seconds")
    p.add_argument("--json", action="store_true", help="one JSON object per hit")
    p.add_argument("--wakeup", choices=["each", "batch"], default="each",
                   help="perf: read each hit at once (default), or in batches: less cost per hit "
                        "for a hot watch, values read up to 0.1 s later")
    p.add_argument("--mechanism", choices=["perf", "ptrace"], default="perf",
                   help="perf: the target never stops (default); ptrace: ptdebug traces the target "
                        "and stops the hitting thread, so old/new values are exact (slower per hit)")
    return p.parse_args(argv)


class _Stop(Exception):
    """SIGTERM, Ctrl-C, --count or --duration: end the watch."""


def _raise_stop(signum, frame):
    raise _Stop()


def _raise_fd_limit() -> None:
    """The perf mechanism needs an event fd per thread, CPU and register: take the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(list(sys.argv[1:] if argv is None else argv))
    _raise_fd_limit()
    try:
        wp.require_process(args.pid)
        wp.check_readable(args.pid)
        symbols = Symbolizer(args.pid)
        request = _request(args, symbols)
        # Refuse a bad request before touching the target (attaching, for ptrace).
        wp.plan(request)
        wp.check_mapped(args.pid, request.address, request.length, request.access)
    except wp.WatchError as exc:
        print(f"ptdebug watch: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.code in BAD_INPUT else EXIT_ERROR
    except (PtError, OSError) as exc:  # the process vanished or its files cannot be read
        print(f"ptdebug watch: cannot read process {args.pid}: {exc}", file=sys.stderr)
        return EXIT_ERROR

    old_term = signal.signal(signal.SIGTERM, _raise_stop)
    try:
        run = _run_ptrace if args.mechanism == "ptrace" else _run_perf
        return run(args, request, symbols)
    except wp.WatchError as exc:
        print(f"ptdebug watch: {exc}", file=sys.stderr)
        return EXIT_USAGE if exc.code in BAD_INPUT else EXIT_ERROR
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _request(args, symbols: Symbolizer) -> wp.WatchRequest:
    access = wp.Access(args.access)
    length = args.length
    if args.symbol is not None:
        address, size, _ = symbols.find(args.symbol)
        if length is None:
            length = 1 if access == wp.Access.EXECUTE else (size if size in (1, 2, 4, 8, 16, 24, 32) else 8)
    else:
        address = args.addr
    if length is None:
        length = 1 if access == wp.Access.EXECUTE else 8
    return wp.WatchRequest(address, length, access)


def _emit(hit: wp.Hit, args, symbols: Symbolizer) -> None:
    rec = hit_record(hit, symbols)
    print(json.dumps(rec) if args.json else format_text(rec), flush=True)


def _armed_message(args, request: wp.WatchRequest, watch: wp.Watch) -> None:
    pieces = ", ".join(f"{a:#x}/{n}" for a, n in watch.pieces)
    print(f"ptdebug watch: watching {request.describe()} in process {args.pid} with "
          f"{len(watch.pieces)} debug register{'s' if len(watch.pieces) > 1 else ''} ({pieces}) "
          f"through {args.mechanism}; Ctrl-C to stop", file=sys.stderr, flush=True)


def _run_perf(args, request: wp.WatchRequest, symbols: Symbolizer) -> int:
    """Hits are drained by a reader thread so that the watched bytes are read
    right after each hit, however long symbolising a new module takes here."""
    seen = 0
    deadline = time.monotonic() + args.duration if args.duration else None
    with wp.PerfWatcher(args.pid, wakeup=args.wakeup) as watcher:
        watch = watcher.add(request)
        _armed_message(args, request, watch)
        hits: queue.Queue = queue.Queue()
        done = threading.Event()

        def drain():
            try:
                while not done.is_set():
                    for item in watcher.poll(0.1):
                        hits.put(item)
                    if not watcher.alive():
                        # hits written between the last poll and the exit are still in the
                        # ring: read them before saying the process ended
                        for item in watcher.poll(0):
                            hits.put(item)
                        hits.put(_EXITED)
                        return
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread, which raises it
                hits.put(exc)

        reader = threading.Thread(target=drain, name="watch-reader", daemon=True)
        reader.start()
        try:
            while True:
                timeout = 0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic()))
                try:
                    item = hits.get(timeout=timeout)
                except queue.Empty:
                    item = None
                if item is _EXITED:
                    print(f"ptdebug watch: process {args.pid} exited", file=sys.stderr)
                    return EXIT_OK
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, wp.LostHits):
                    what = "some" if item.count < 0 else str(item.count)
                    print(f"ptdebug watch: warning: {what} hits not reported ({item.reason})",
                          file=sys.stderr, flush=True)
                elif item is not None:
                    _emit(item, args, symbols)
                    seen += 1
                    if args.count and seen >= args.count:
                        return EXIT_OK
                if deadline is not None and time.monotonic() >= deadline:
                    return EXIT_OK
        except (_Stop, KeyboardInterrupt):
            return EXIT_OK
        finally:
            done.set()
            # bounded: a SIGINT/SIGTERM raised inside hits.get() can leave the queue's lock
            # held (an exception between acquiring it and entering the `with`), and the
            # reader then blocks in hits.put for ever (a CI run hung here on SIGTERM); it is a
            # daemon thread, and the watcher's fds are closed by the `with` either way
            reader.join(READER_JOIN_S)


READER_JOIN_S = 1.0
"""How long the watch waits for its reader thread to see `done` (it polls every 0.1 s)."""
_EXITED = object()


def _run_ptrace(args, request: wp.WatchRequest, symbols: Symbolizer) -> int:
    """Ctrl-C, SIGTERM and the --duration alarm are blocked for the whole session and
    taken by the session's wait (sigwaitinfo), never by a handler that could fire
    between two ptrace calls: no thread is left stopped, traced or with a register
    armed (a register left armed in an untraced thread would kill it with SIGTRAP)."""
    stops = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGALRM})
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, stops | {signal.SIGCHLD})
    seen = 0
    try:
        session = wt.TracedWatchSession(args.pid)
        try:
            watch = session.add(request)
            _armed_message(args, request, watch)
            session.start()
            if args.duration:
                signal.setitimer(signal.ITIMER_REAL, args.duration)
            while True:
                hit = session.wait_hit(stops)
                if hit is None:
                    return EXIT_OK
                session.resume(hit)  # the values are read: let the thread go before printing
                _emit(hit, args, symbols)
                seen += 1
                if args.count and seen >= args.count:
                    return EXIT_OK
        except wt.ProcessExited:
            print(f"ptdebug watch: process {args.pid} exited", file=sys.stderr)
            return EXIT_OK
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            session.close()
    finally:
        # Take the stop signals that came meanwhile, so that unblocking them does not
        # turn a handled Ctrl-C into a KeyboardInterrupt.
        while signal.sigtimedwait(stops, 0) is not None:
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

"""The replay backend: a recorded trace bundle in place of a debugger and a program, for a
launch configuration `{"request": "launch", "replay": "PATH"}`.

Layer: backends (chosen by the one `create_backend` switch). Opens the bundle (one made by
`ptdebug record`, `ptdebug import perf.data` or a kept capture) with adapter.recording.recording and,
for a Go program recorded with goroutine ids, indexes its goroutines with adapter.golang; then
hands the whole to the session (`BackendHooks.backend_recording`). The session's trace features
(record_breakpoints, reverse, trace_scope, goroutine_view) show each recorded thread as a
capture it is replaying: stack traces from the history, stepBack / next / stepIn / stepOut /
reverseContinue / continue through it, the Processor Trace scope. This module answers what a
debugger would answer besides: threads, breakpoints (verified where the recorded code has the
line), `evaluate` (values were not recorded), the goroutine requests, and the memory and
disassembly of the bundle's images. Like every backend it knows nothing of the features.
A Python capture (the manifest's "python" table) has its breakpoints on .py files verified
against the recorded code objects' line tables.

Threads: one a recorded stream (thread or CPU) of the bundle, ids 1, 2, ...; for a Go bundle
whose recorder wrote goroutine ids, one a goroutine (id = goid) on the stream where it ran most.
Each starts at the end of its history (where the recording stopped: step back from there), or
at its start with `stopOnEntry`; a goroutine at the last (first) instruction it ran. Nothing
runs: the replay never reaches a "live" position, and moves past either end of the history
stop there, saying so.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field

from adapter.backends.base import Backend
from adapter.disassemble import Disassembler
from adapter.protocol.errors import (
    AdapterError,
    InvalidLaunchConfig,
    InvalidRequest,
    MemoryAccessError,
)
from adapter.protocol.messages import Event, Request, Response
from adapter.routes import REPLAYED

log = logging.getLogger("ptdebug.dap")

CAPABILITIES = {
    "supportsConfigurationDoneRequest": True,
    "supportsSteppingGranularity": True,
    "supportsFunctionBreakpoints": False,
    "supportsConditionalBreakpoints": False,
    "supportsEvaluateForHovers": False,
}
"""What a replay serves beyond ptdebug's own capabilities (Step Back is announced by the
trace features once the histories are in place)."""
NOT_RECORDED = ("values were not recorded: a trace holds the path the threads took "
                "(instructions, branches, time), not memory or registers")


@dataclass
class ReplayedThread:
    """One thread of the replay, as the client sees it."""

    thread_id: int
    """Its DAP thread id (a goroutine's id for the goroutines of a Go bundle)."""
    name: str
    stream: int
    """Index of its stream in the bundle (Recording.threads)."""
    position: int
    """Where in that stream's history it starts."""
    goid: int | None = None
    """The goroutine, for the goroutines of a Go bundle."""


@dataclass
class ReplayedBundle:
    """Everything the session needs of a replayed bundle."""

    path: str
    trace: object
    """adapter.recording.recording.Recording: every stream decoded once."""
    threads: list[ReplayedThread]
    goroutines: dict[int, object] = field(default_factory=dict)
    """stream index -> adapter.recording.goroutines.ThreadGoroutines (Go bundles with goids)."""
    memory: BundleMemory | None = None
    disassembler: BundleDisassembler | None = None
    at_start: bool = False
    """The threads start at the beginning of their histories (stopOnEntry), else at the end."""

    def describe(self) -> str:
        manifest = self.trace.manifest
        status = manifest.get("status") or "?"
        if manifest.get("partial_reason"):
            status += f": {manifest['partial_reason']}"
        return f"replay of {self.path} ({manifest.get('backend') or '?'} recording, {status})"


class BundleMemory:
    """The code of a bundle's images in place of a process's memory (readMemory, and what
    `disassemble` reads). Nothing else was recorded: other addresses are unreadable."""

    pid = None
    """No process behind it."""

    def __init__(self, code):
        self.code = code
        """pt_decoder.image.Image of the bundle's images at their recorded addresses."""

    def read(self, address: int, count: int) -> tuple[bytes, int]:
        """(bytes of the images from `address`, unreadable bytes that follow within `count`)."""
        data = self.code.read(address, count) or b""
        return data, count - len(data)

    def write(self, address: int, data: bytes, allow_partial: bool) -> int:
        raise MemoryAccessError("a recording cannot be written to: no program runs in a replay")


class BundleDisassembler(Disassembler):
    """`disassemble` over the bundle's images, with the bundle's symbols and DWARF lines."""

    def __init__(self, memory: BundleMemory, symbols):
        super().__init__(memory)
        self._image = symbols

    def _image_for(self, insns: list[tuple]):
        return self._image


class _LocalChannel:
    """What the session expects of a backend's channel (`send_request` for `disconnect`),
    answered in process."""

    def __init__(self, backend: ReplayBackend):
        self.backend = backend

    def send_request(self, command: str, arguments: dict | None,
                     callback: Callable[[Response], None]) -> None:
        callback(self.backend.request(command, arguments))


class ReplayBackend(Backend):
    """Serves a recorded bundle: no debugger process, no program."""

    name = "replay"
    title = "the replay"

    def __init__(self, hooks):
        super().__init__(hooks)
        self.replayed: ReplayedBundle | None = None
        """The bundle and its threads, once started."""
        self.channel = _LocalChannel(self)
        self._after: list[Callable[[], None]] = []
        """Events to send once the response being made has gone out."""
        self._answers: dict[str, Callable[[dict], dict]] = {
            command: getattr(self, "_" + command.replace("ptdebug/", "ptdebug_"))
            for command in REPLAYED}
        """command -> its answer here, for the rows of the route table marked `replay`
        (adapter/routes.py); every other request is refused."""

    # --- starting -------------------------------------------------------------------------
    def start(self, config) -> None:
        from adapter.recording.recording import Recording, TraceError
        path = os.path.expanduser(config.replay)
        if not os.path.isabs(path):
            path = os.path.join(config.cwd or os.getcwd(), path)
        try:
            with self.hooks.backend_progress(f"ptdebug: decoding {os.path.basename(path)}") \
                    as progress:
                trace = Recording.open(path, progress)
        except TraceError as exc:
            raise InvalidLaunchConfig(f"replay: {exc}") from None
        goroutines = _goroutines(trace)
        threads = _threads(trace, goroutines, config.stopOnEntry)
        if not threads:
            raise InvalidLaunchConfig(f"replay: {path} holds no recorded instruction")
        memory = BundleMemory(trace.code)
        self.replayed = ReplayedBundle(path, trace, threads, goroutines, memory,
                                       BundleDisassembler(memory, trace.symbols),
                                       config.stopOnEntry)
        log.info("%s: %d threads", self.replayed.describe(), len(threads))

    def initialize(self, client_arguments: dict) -> dict:
        return dict(CAPABILITIES)

    def launch(self, request: Request, config) -> None:
        self.hooks.backend_recording(self.replayed)
        request.respond({})
        for note in self.replayed.trace.notes:  # what of the recording is not loaded
            self._event("output", {"category": "console", "output": f"ptdebug: {note}\n"})
        self._event("initialized", {})

    def attach(self, request: Request, config) -> None:
        raise InvalidLaunchConfig("a bundle is replayed with a launch configuration "
                                  "(\"request\": \"launch\", \"replay\": PATH)")

    def close(self, timeout: float = 3.0) -> None:
        self.closing = True

    # --- requests -------------------------------------------------------------------------
    def handles(self, command: str) -> bool:
        return True  # everything is answered here, if only to say a replay cannot do it

    def forward(self, request: Request, observe=None) -> None:
        raw = self._answer(request.command, request.raw.get("arguments") or {})
        if observe is not None:
            observe(raw)
        request.respond_like(raw)
        after, self._after = self._after, []
        for send in after:
            send()

    def request(self, command: str, arguments: dict | None = None,
                timeout: float = 10.0) -> Response:
        return Response(self._answer(command, arguments or {}))

    def _answer(self, command: str, arguments: dict) -> dict:
        """The response to `command` as a raw DAP message."""
        raw = {"type": "response", "seq": 0, "request_seq": 0, "command": command}
        handler = self._answers.get(command)
        try:
            if handler is None:
                raise AdapterError(f"{command!r} is not available in a replay: no program runs")
            raw.update(success=True, body=handler(arguments))
        except AdapterError as exc:
            raw.update(success=False, message=exc.message, body=exc.to_error_body())
        return raw

    def _thread(self, arguments: dict) -> ReplayedThread:
        thread_id = arguments.get("threadId")
        for thread in self.replayed.threads:
            if thread.thread_id == thread_id:
                return thread
        raise InvalidRequest(f"thread {thread_id!r} is not in the replayed recording")

    def _configurationDone(self, arguments: dict) -> dict:
        replayed = self.replayed
        first = replayed.threads[0]
        where = "start" if replayed.at_start else "end"
        text = (f"{replayed.describe()}: {len(replayed.threads)} threads, each at the {where} "
                "of its recorded history; step back and forward through it")
        self._after.append(lambda: self._event("stopped", {
            "reason": "entry", "threadId": first.thread_id, "allThreadsStopped": True,
            "description": text, "text": text}))
        return {}

    def _threads(self, arguments: dict) -> dict:
        return {"threads": [{"id": t.thread_id, "name": t.name} for t in self.replayed.threads]}

    def _stackTrace(self, arguments: dict) -> dict:
        self._thread(arguments)  # a thread of the replay is answered by the trace features
        return {"stackFrames": [], "totalFrames": 0}

    def _scopes(self, arguments: dict) -> dict:
        return {"scopes": []}

    def _variables(self, arguments: dict) -> dict:
        return {"variables": []}

    def _evaluate(self, arguments: dict) -> dict:
        raise AdapterError(f"cannot evaluate in a replay: {NOT_RECORDED}")

    def _setBreakpoints(self, arguments: dict) -> dict:
        """Verified where the recorded images have code for the line (one of their line
        tables has a statement there; for a .py file, a recorded code object's line table has
        the line); a replay stops at them when it passes that code. Conditions, hit counts and
        log messages cannot be evaluated on a recording: the answer says so."""
        path = (arguments.get("source") or {}).get("path") or ""
        answered = []
        for number, asked in enumerate(arguments.get("breakpoints") or [], 1):
            line = asked.get("line")
            found = self._statements(path, line)
            entry = {"id": number, "verified": bool(found), "line": line,
                     "source": {"path": path}}
            if not found:
                entry["message"] = ("no recorded Python code at this line (no recorded code "
                                    "object's line table has it)" if path.endswith(".py") else
                                    "no recorded code at this line (no image of the bundle "
                                    "has a statement there)")
            elif any(asked.get(key) for key in ("condition", "logMessage")):
                # said, not dropped: the replay stops at every recorded run of the line
                entry["message"] = ("its condition is not evaluated in a replay: "
                                    f"{NOT_RECORDED}; it stops at every recorded run of "
                                    "the line")
            elif asked.get("hitCondition"):
                entry["message"] = ("its hit count is decided on the recorded runs of the "
                                    "line, counted from the start of the recording")
            answered.append(entry)
        return {"breakpoints": answered}

    def _statements(self, path: str, line) -> list[int]:
        """Native statement addresses of `path`:`line`; for a .py file of a Python capture,
        [line] when a recorded code object's line table holds the line (the trace features stop
        where that line runs)."""
        from pt_decoder.errors import PtError
        if path.endswith(".py"):
            return [line] if line in self._python_lines(path) else []
        try:
            return list(self.replayed.trace.lines.statement_addresses(path, line))
        except (PtError, OSError, TypeError) as exc:
            log.info("replay: no line table for %s:%s: %s", path, line, exc)
            return []

    def _python_lines(self, path: str) -> set[int]:
        """Lines of `path` in the recorded code objects' line tables (empty: no Python
        attribution, or no code of that file was recorded)."""
        table = self.replayed.trace.manifest.get("python")
        if not isinstance(table, dict):
            return set()
        from pt_decoder.python_frames import CodeInfo, line_ranges
        wanted = os.path.realpath(path)
        found: set[int] = set()
        for ident, entry in (table.get("codes") or {}).items():
            try:
                info = CodeInfo.from_json(entry)
                if os.path.realpath(info.filename) != wanted:
                    continue
                ranges = line_ranges(info.linetable, info.firstlineno, info.fmt)
            except (KeyError, ValueError, TypeError) as exc:
                log.info("replay: Python code object %s unreadable: %s", ident, exc)
                continue
            found.update(line for _, _, line in ranges if line is not None)
        return found

    def _setFunctionBreakpoints(self, arguments: dict) -> dict:
        return {"breakpoints": [{"verified": False, "message": "not supported in a replay"}
                                for _ in arguments.get("breakpoints") or []]}

    def _setExceptionBreakpoints(self, arguments: dict) -> dict:
        return {}

    def _pause(self, arguments: dict) -> dict:
        return {}  # nothing runs: every thread is always paused

    def _disconnect(self, arguments: dict) -> dict:
        return {}

    def _terminate(self, arguments: dict) -> dict:
        self._after.append(lambda: self._event("terminated", {}))
        return {}

    def _ptdebug_goroutines(self, arguments: dict) -> dict:
        """`ptdebug/goroutines` of a Go bundle: the goroutines recorded, where each ran last."""
        trace = self.replayed.trace
        out = []
        for thread in self.replayed.threads:
            if thread.goid is None:
                continue
            indexed = self.replayed.goroutines[thread.stream]
            last = indexed.index.ranges(thread.goid)[-1][1] - 1
            ip = indexed.history.ip(last)
            name, _ = trace.function(ip)
            place = trace.line(ip) or ("", 0)
            out.append({"id": thread.goid, "threadId": indexed.tid, "status": "recorded",
                        "waitReason": "", "function": name, "file": place[0],
                        "line": place[1], "userFunction": name, "labels": {}})
        return {"goroutines": out}

    def _event(self, name: str, body: dict) -> None:
        self.hooks.backend_event(Event({"type": "event", "seq": 0, "event": name,
                                        "body": body}))


def _goroutines(trace) -> dict[int, object]:
    """stream index -> recording.goroutines.ThreadGoroutines for a Go bundle whose recorder
    wrote goroutine ids (the recording's own index); empty for any other bundle."""
    from adapter.recording.goroutines import GoroutineHistoryError
    try:
        return trace.goroutines()
    except GoroutineHistoryError as exc:
        log.info("replay: no goroutines: %s", exc)
        return {}


def _threads(trace, goroutines: dict[int, object], at_start: bool) -> list[ReplayedThread]:
    """The threads of the replay (see the module docstring)."""
    threads: list[ReplayedThread] = []
    homes: dict[int, tuple[int, int, int]] = {}
    """goid -> (instructions on its stream, stream, position) of the stream it ran most on."""
    for n, indexed in goroutines.items():
        for goid in indexed.index.goroutines():
            if goid <= 0:
                continue  # g0 (the scheduler) and unknown stretches: reached by stepping
            ranges = indexed.index.ranges(goid)
            count = sum(b - a for a, b in ranges)
            position = ranges[0][0] if at_start else ranges[-1][1] - 1
            if goid not in homes or count > homes[goid][0]:
                homes[goid] = (count, n, position)
    for goid, (_, n, position) in sorted(homes.items()):
        tid = trace.threads[n].tid
        threads.append(ReplayedThread(goid, f"goroutine {goid} (recorded on thread {tid})", n,
                                      position, goid))
    next_id = max(homes, default=0) + 1
    for n, thread in enumerate(trace.threads):
        if n in goroutines or not len(thread.history):
            continue
        name = f"thread {thread.tid}" + (f" ({thread.name})" if thread.name else "")
        threads.append(ReplayedThread(next_id, name + " [recorded]", n,
                                      0 if at_start else len(thread.history) - 1))
        next_id += 1
    return threads

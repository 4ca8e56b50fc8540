"""DAP data breakpoints ("Break on Value Change") for a Python debuggee behind debugpy, on the
hardware watchpoint engine (adapter.watchpoints.PerfWatcher).

Layer: features. Knows DAP and the Session's hooks; uses the watchpoint engine and, through
the backend, debugpy's `evaluate`, `threads`, `stackTrace`, `variables` and `pause`.

- `dataBreakpointInfo`: the object named (a variable in a `variablesReference`, an expression
  in a frame, or a raw address with `asAddress`) is probed in the debuggee (features.buffer_probe)
  for the address and size of its buffer; a buffer larger than the debug registers cover is
  watched on its first bytes, and the description says which. The `dataId` is
  `ADDRESS/LENGTH` in hex/decimal, valid for the life of the object. A variable debugpy gave
  no evaluateName (a numpy row or element) is named from its parent's expression, learnt from
  the `variables` responses the client got (`paths`); a temporary is refused by the probe.
- `setDataBreakpoints` arms a perf breakpoint event per watch on every thread of the debuggee
  (the engine's job); the debuggee never stops for the hardware, so a hit is turned into a
  stop here: debugpy is asked to `pause`, and its `stopped` event (reason `pause`) is replaced
  by one with reason `data breakpoint`, the writing thread's id, and a description naming the
  watched object, the thread, the native function that wrote, and the old and new values.
  The Python stack is debugpy's; the writer stops at its next Python line (x86 data
  breakpoints trap after the write, SDM Vol. 3B §17.3.1.2, and pydevd pauses at a line).
- Which threads stop follows debugpy's own launch/attach option `stopAllThreadsOnSuspend`
  (default true: every thread pauses, as at any debugpy stop). With false only the writing
  thread is suspended and the others run on. debugpy's adapter rewrites every `pause` to
  threadId "*" (debugpy/adapter/clients.py `pause_request`), so the single-thread suspension is
  asked of pydevd in the debuggee instead: an `evaluate` without a frame (pydevd runs it on
  any thread) calls pydevd's `set_suspend(thread, CMD_THREAD_SUSPEND, suspend_other_threads=
  False, is_pause=True)` for the writer, which is what pydevd's own single-thread pause does
  (pydevd_api.py `request_suspend_thread`). pydevd then reports `stopped` (reason `pause`)
  for that thread alone, which becomes the data-breakpoint stop.
- The stopped thread's `stackTrace` starts with the native frames of the write (the sample's
  IP and call chain, features.native_frames: `instructionPointerReference`, symbol, DWARF line
  where the module has one, presentationHint `subtle`), then debugpy's Python frames; they show
  the moment of the write, not where the thread now waits. Their `scopes` are the sample's
  registers; `evaluate` in them is refused. They are dropped when the program continues.
- Latency (docs/PERFORMANCE.md): the stop of a held writer is made from what is at hand, with
  no round trip to debugpy: the perf sample, the watched bytes, the symbols of
  features.native_frames.ProcessSymbols (kept across hits, re-read only when the process's
  maps change, read ahead in a thread when a watch is first set), the thread name from the
  client's last `threads`. The native frames are symbolised on the first `stackTrace`.
"""
from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from adapter.features.buffer_probe import (
    RANGE_GROUP,
    Buffer,
    NotAnExpression,
    child_expression,
    decode_value,
    describe_watch,
    probe_expression,
    watch_range,
)
from adapter.features.native_frames import (
    NativeFrameMaker,
    NativeStack,
    ProcessSymbols,
    call_chain,
)
from adapter.features.writer_trap import (
    ERRORS_EXPRESSION,
    UNINSTALL_EXPRESSION,
    held_stop,
    install_expression,
    sig_data,
)
from adapter.hw import procfs
from adapter.memory import parse_address
from adapter.powers import RunsInsidePython
from adapter.protocol.errors import AdapterError, BackendTimeout, InvalidRequest
from adapter.protocol.messages import Request
from adapter.protocol.schema import DataBreakpointInfoArguments, SetDataBreakpointsArguments
from adapter.routes import DATA_BREAKPOINTS
from adapter.watchpoints import (
    Access,
    LostHits,
    PerfWatcher,
    WatchError,
    WatchRequest,
    one_per_store,
)

log = logging.getLogger("ptdebug.dap")

ACCESS = {"write": Access.WRITE, "readWrite": Access.READ_WRITE}
POLL_INTERVAL = 0.05
STOP_TIMEOUT = 5.0
RESUME_GRACE = 0.3
TRAP_WAIT = 2.0
WARM_WAIT_S = 5.0
"""Seconds the first setDataBreakpoints waits for the symbols read ahead (about 0.5 s)."""
SYMBOL_WAIT_S = 0.02
"""Seconds a stop waits for the symbol table of the writing code's module, if not read yet."""
"""How long after its perf sample a hitting thread has to reach the handler's stop."""
ORPHAN_AFTER = 0.5
"""A handler's stop with no perf sample after this long is shown without one (lost)."""
_DATA_ID = re.compile(r"^(0x[0-9a-fA-F]+)/(\d+)$")


@dataclass
class Target:
    """What a dataId watches: `length` bytes at `address`, and how to describe them."""
    address: int
    length: int
    label: str
    format: str = ""


@dataclass
class Armed:
    """A data breakpoint in force: its DAP id, target, access and engine watch."""
    id: int
    target: Target
    access: Access
    watch: object


class DataBreakpoints:
    """The data-breakpoint feature of one session."""

    capabilities: ClassVar[dict] = {"supportsDataBreakpoints": True,
                                    "supportsDataBreakpointBytes": True}

    def __init__(self, session, watcher: PerfWatcher):
        self.session = session
        self.watcher = watcher
        """The engine, on the debuggee's pid."""
        self.targets: dict[str, Target] = {}
        """dataId -> target, from dataBreakpointInfo answers."""
        self.armed: dict[tuple[int, int, Access], Armed] = {}
        """(address, length, access) -> the data breakpoint armed for it."""
        self.frames: dict[int, int] = {}
        """variablesReference -> frameId, learnt from scopes/variables responses."""
        self.paths: dict[int, tuple[str | None, str, int]] = {}
        """variablesReference -> (expression of the object it expands, its type, the index of
        its first child): how a child with no evaluateName is named (a numpy row '02')."""
        self._next_id = 1
        self.trap = False
        """Whether the writer's SIGTRAP handler is installed in the debuggee (writer_trap)."""
        self._held: dict[int, tuple[dict, float]] = {}
        """OS thread id -> (the handler's `stopped` event, when it came), until its hit."""
        self._held_ready = threading.Condition()
        self._lock = threading.Lock()
        self._stops: queue.Queue = queue.Queue()
        self._pending = None
        self.paused = session.paused
        """Whether the debuggee is stopped (a `stopped` event since the last `continued`): a
        write then comes from the user (an evaluate, a setVariable) and is reported, not
        turned into a stop."""
        self._resumed = threading.Event()
        self._closed = threading.Event()
        self._poller: threading.Thread | None = None
        routes = session.routes
        routes.add(DATA_BREAKPOINTS, "scopes", take=self._scopes, watch=self._observe_scopes)
        routes.add(DATA_BREAKPOINTS, "variables", watch=self._observe_variables)
        routes.add(DATA_BREAKPOINTS, "threads", watch=self._observe_threads)
        routes.add(DATA_BREAKPOINTS, "evaluate", take=self._evaluate)
        # the native frames' watch acts only while there are native frames (_show_stop): an
        # observed response is re-encoded, an unobserved one is relayed as debugpy sent it
        routes.add(DATA_BREAKPOINTS, "stackTrace", take=self._page_stack,
                   watch=self._observe_stack)
        routes.on_events(DATA_BREAKPOINTS, self._filter_event)
        self.native: NativeStack | None = None
        """The native frames of the last data-breakpoint stop, until the program continues."""
        self._frame_maker = NativeFrameMaker()
        self.symbols = ProcessSymbols(watcher.pid)
        """The debuggee's modules and symbols, kept across hits (re-read when its maps change)."""
        self._warmer: threading.Thread | None = None
        """The thread reading the symbols ahead (_start_warming), once started."""
        self._shown: dict[int, bytes] = {}
        """Data breakpoint id -> the value last shown as `new`: the old value of a hit perf
        gave none for (not the first of its batch)."""
        self.thread_names: dict[int, str] = {}
        """debugpy thread id -> name, from the `threads` responses the client gets."""
        self._stack_pages: dict[object, tuple[list[dict], int, bool]] = {}
        """client request seq -> (native frames shown, native frame count, drop debugpy's)."""

    @classmethod
    def probe(cls, session, pid: int) -> DataBreakpoints | None:
        """The feature if a hardware watchpoint can really be armed in `pid`, else None (logged).

        Arms and removes a write watch on the first writable mapping of the process. Only
        for a Python debuggee (debugpy backend): the buffer probe is Python code."""
        if not isinstance(session.backend, RunsInsidePython):
            return None
        try:
            address = _first_writable(pid)
            watcher = PerfWatcher(pid)
        except (OSError, WatchError) as exc:
            log.info("data breakpoints unavailable for process %d: %s", pid, exc)
            return None
        try:
            watcher.remove(watcher.add(WatchRequest(address, 8, Access.WRITE)))
        except (OSError, WatchError) as exc:
            log.info("data breakpoints unavailable for process %d: %s", pid, exc)
            watcher.close()
            return None
        return cls(session, watcher)

    # --- requests -------------------------------------------------------------------------
    def info(self, request: Request, args: DataBreakpointInfoArguments) -> dict:
        self._start_warming()
        if args.asAddress:
            address = parse_address(args.name)
            known = next((t for t in self.targets.values() if t.address == address), None)
            length = args.bytes or (known.length if known else 8)
            if known is not None:  # an address already named: keep its name and element type
                label = known.label if length == known.length else (
                    f"{length} bytes of {known.label}")
                return self._describe(Target(address, length, label, known.format),
                                      f"{label}: {length} bytes at {address:#x}")
            return self._describe(Target(address, length, f"{length} bytes at {address:#x}"),
                                  f"{length} bytes at {address:#x}")
        expression, frame_id = args.name, args.frameId
        if args.variablesReference is not None:
            expression, frame_id = self._child_expression(args.variablesReference, args.name)
            if expression is None:
                return {"dataId": None, "description": f"{args.name!r} has no expression "
                        "ptdebug can evaluate (debugpy gave it no evaluateName and its parent "
                        "is not a variable ptdebug has seen expanded, or it is a value "
                        "debugpy computed, such as an array's min)"}
        try:
            source = probe_expression(expression)
        except NotAnExpression as exc:
            return {"dataId": None, "description": str(exc)}
        arguments = {"expression": source, "context": "repl"}
        if frame_id is not None:
            arguments["frameId"] = frame_id
        response = self.session.backend.request("evaluate", arguments, timeout=10)
        if not response.success:
            text = response.error_text.strip().splitlines()[-1:] or ["failed"]
            return {"dataId": None, "description": f"cannot watch {expression}: {text[0]}"}
        buffer = Buffer.from_result(response.raw["body"]["result"])
        if args.bytes:
            start, length = buffer.address, min(args.bytes, buffer.nbytes)
        else:
            start, length = watch_range(buffer.address, buffer.nbytes)
        return self._describe(Target(start, length, expression, buffer.format),
                              describe_watch(expression, buffer, length))

    def _describe(self, target: Target, description: str) -> dict:
        data_id = f"{target.address:#x}/{target.length}"
        self.targets[data_id] = target
        return {"dataId": data_id, "description": description,
                "accessTypes": ["write", "readWrite"], "canPersist": False}

    def set(self, request: Request, args: SetDataBreakpointsArguments) -> dict:
        """Replace the whole set: the registers of watches not asked for again are released
        before any new one is placed, so a set that fits the four registers always fits."""
        if args.breakpoints:
            # what the first hit reads (the symbols of the modules a write most likely runs
            # in) is read before a watch is armed: a write right after it stopped 50 ms after
            # the write instead of 3.5 ms (issue 33 item 6)
            self._start_warming()
            self._warmer.join(WARM_WAIT_S)
        results: list[dict | None] = []
        wanted: dict[tuple[int, int, Access], Target] = {}
        for bp in args.breakpoints:
            target = self.targets.get(bp.dataId) or _target_from_id(bp.dataId)
            if target is None:
                results.append({"verified": False, "message": f"unknown dataId "
                                f"{bp.dataId!r}: ask dataBreakpointInfo first"})
            elif bp.accessType not in ACCESS:
                results.append({"verified": False, "message": "x86 debug registers cannot "
                                "break on reads alone: use 'readWrite'"})
            elif bp.condition or bp.hitCondition:
                results.append({"verified": False, "message": "conditions on data "
                                "breakpoints are not supported"})
            else:
                key = (target.address, target.length, ACCESS[bp.accessType])
                wanted.setdefault(key, target)
                results.append(None)
        with self._lock:
            for key in [k for k in self.armed if k not in wanted]:
                self.watcher.remove(self.armed.pop(key).watch)
            if any(k not in self.armed for k in wanted):
                self._install_trap()
            done: dict[tuple, dict] = {}
            for index, bp in enumerate(args.breakpoints):
                if results[index] is not None:
                    continue
                target = self.targets.get(bp.dataId) or _target_from_id(bp.dataId)
                key = (target.address, target.length, ACCESS[bp.accessType])
                results[index] = done.get(key) or self._arm(key, wanted[key], bp.accessType)
                done[key] = results[index]
            if not self.armed:
                why = self._uninstall_trap()
                if why is not None:
                    self._tell(f"ptdebug: could not restore the program's SIGTRAP action: "
                               f"{why}\n")
        if self.armed and self._poller is None:
            self._poller = threading.Thread(target=self._poll_loop, name="ptdebug-watch",
                                            daemon=True)
            self._poller.start()
        return {"breakpoints": results}

    def _arm(self, key: tuple[int, int, Access], target: Target, access: str) -> dict:
        armed = self.armed.get(key)
        if armed is None:
            try:
                watch = self.watcher.add(WatchRequest(*key), signal_thread=sig_data(
                    self._next_id) if self.trap else None)
            except (WatchError, OSError) as exc:
                code = getattr(exc, "code", "os_error")
                return {"verified": False, "message": f"{exc} [{code}]"}
            armed = Armed(self._next_id, target, key[2], watch)
            self._next_id += 1
            self.armed[key] = armed
        return {"id": armed.id, "verified": True,
                "message": f"watching {target.label} ({target.length} bytes at "
                           f"{target.address:#x}) for {access}s"}

    def _install_trap(self) -> None:
        """Install the writer's SIGTRAP handler in the debuggee (features.writer_trap) before
        any watch that signals is armed: SIGTRAP's default action would end the program."""
        if self.trap:
            return
        stop_all = self.session.launch_arguments.get("stopAllThreadsOnSuspend", True) is not False
        try:
            response = self.session.backend.request(
                "evaluate", {"expression": install_expression(stop_all), "context": "repl"},
                timeout=10)
            installed = response.success and "installed" in str(
                (response.raw.get("body") or {}).get("result"))
            why = "" if installed else (response.error_text or "no answer").strip()
        except AdapterError as exc:
            installed, why = False, exc.message
        self.trap = installed
        if not installed:
            self._tell(f"ptdebug: cannot install the handler that stops a writer at its write "
                       f"({why.splitlines()[-1] if why else 'unknown'}): data breakpoints "
                       "pause the program after the write instead, at the writer's next "
                       "Python line\n")

    def _uninstall_trap(self) -> str | None:
        """Restore the debuggee's SIGTRAP action once no watch signals any more; None when it
        is restored, else why not (the caller says it to the user while it still can)."""
        if not self.trap:
            return None
        self.trap = False
        try:
            response = self.session.backend.request(
                "evaluate", {"expression": UNINSTALL_EXPRESSION, "context": "repl"}, timeout=5)
            if not response.success:
                return response.error_text.strip() or "the evaluation failed"
        except AdapterError as exc:  # the program or debugpy is gone
            return exc.message
        return None

    def _tell(self, text: str) -> None:
        self.session.client.send_event("output", {"category": "important", "output": text})

    # --- learning frames of variablesReferences -------------------------------------------
    def _observe_scopes(self, request: Request) -> Callable[[dict], None]:
        return lambda response: self._learn_scopes(request.raw, response)

    def _observe_variables(self, request: Request) -> Callable[[dict], None]:
        return lambda response: self._learn_variables(request.raw, response)

    def _observe_threads(self, request: Request) -> Callable[[dict], None]:
        return self._learn_threads

    def _learn_scopes(self, request: dict, response: dict) -> None:
        frame_id = (request.get("arguments") or {}).get("frameId")
        for scope in (response.get("body") or {}).get("scopes", ()):
            if scope.get("variablesReference"):
                self.frames[scope["variablesReference"]] = frame_id
                self.paths[scope["variablesReference"]] = (None, "scope", 0)

    def _learn_variables(self, request: dict, response: dict) -> None:
        parent = (request.get("arguments") or {}).get("variablesReference")
        frame_id = self.frames.get(parent)
        for variable in (response.get("body") or {}).get("variables", ()):
            reference = variable.get("variablesReference")
            if reference:
                self.frames[reference] = frame_id
                self.paths[reference] = self._path_of(parent, variable)

    def _path_of(self, parent: int | None, variable: dict) -> tuple[str | None, str, int]:
        """(expression, type, first index) of what a variable expands to. A range group of
        debugpy's ("[0:8] ", the items of a numpy array) stands for its array from `start`."""
        name = str(variable.get("name", "")).strip()
        group = RANGE_GROUP.match(name)
        parent_expr, parent_type, start = self.paths.get(parent, (None, "", 0))
        if group is not None and parent_expr is not None:
            return parent_expr, parent_type, int(group.group(1))
        expression = variable.get("evaluateName") or child_expression(parent_expr, parent_type,
                                                               start, name)
        return expression, str(variable.get("type") or ""), 0

    def _child_expression(self, reference: int, name: str) -> tuple[str | None, int | None]:
        """The expression of child `name` of `reference` and the frame to evaluate it in:
        debugpy's evaluateName, else one made from the parent's (a numpy row or element,
        which debugpy names '02' under a range group, with no evaluateName)."""
        response = self.session.backend.request("variables", {"variablesReference": reference},
                                                timeout=10)
        if not response.success:
            raise InvalidRequest(f"variablesReference {reference} is not valid now: "
                                 f"{response.error_text}")
        for variable in response.raw.get("body", {}).get("variables", ()):
            if variable.get("name") == name:
                expression = variable.get("evaluateName")
                if not expression:
                    parent_expr, parent_type, start = self.paths.get(reference, (None, "", 0))
                    expression = child_expression(parent_expr, parent_type, start, name.strip())
                return expression, self.frames.get(reference)
        raise InvalidRequest(f"no variable {name!r} in variablesReference {reference}")

    # --- hits -----------------------------------------------------------------------------
    def _poll_loop(self) -> None:
        """Read hits until closed. Nothing ends this thread but close(): a failure is told to
        the user (an `output` event) and watching goes on."""
        while not self._closed.is_set():
            try:
                self._poll_once()
            except Exception as exc:  # the engine must outlive any failure
                log.exception("data breakpoints: reading hits failed")
                self._tell(f"ptdebug: data breakpoints: reading hits failed ({exc!r}); "
                           "watching goes on\n")
                self._closed.wait(POLL_INTERVAL)

    def _poll_once(self) -> None:
        with self._lock:
            if not self.armed:
                events = []
            else:
                try:
                    events = self.watcher.poll(POLL_INTERVAL)
                except (OSError, WatchError) as exc:
                    self._tell(f"ptdebug: data breakpoints: polling failed: {exc}\n")
                    events = []
        if not self.armed:
            self._closed.wait(POLL_INTERVAL)
        hits = one_per_store([e for e in events if not isinstance(e, LostHits)])
        lost = sum(e.count for e in events if isinstance(e, LostHits))
        if lost:
            self._tell(f"ptdebug: {lost} watchpoint hits were lost\n")
        self._release_orphans({hit.tid for hit in hits})
        if not hits or self._closed.is_set():
            return
        recording = self.session.recording
        if recording is not None:
            for tid in {hit.tid for hit in hits}:
                # a write by a thread a record window holds: the window closes there, so that
                # the stop comes now and its history ends at the write (record_breakpoints)
                recording.close_window_of(tid, "data breakpoint")
        if not self.trap:
            self._guarded(hits[0], self._pause_for, hits[0], len(hits))
            return
        for hit in hits:
            self._guarded(hit, self._hold_for, hit)

    def _guarded(self, hit, handle, *args) -> None:
        """Run one hit's handling; any failure becomes an `output` event naming the thread,
        the address and the reason, and the next hit is handled as usual."""
        try:
            handle(*args)
        except AdapterError as exc:  # a known way for a hit to fail: the user is told
            log.warning("data breakpoint hit of tid %d not stopped: %s", hit.tid, exc.message)
            self._report_unstopped(hit, exc.message)
        except Exception as exc:  # one bad hit must not end the engine
            log.exception("data breakpoint hit failed")
            self._report_unstopped(hit, f"{exc!r}")

    def _hold_for(self, hit) -> None:
        """A hit of a signalling watch: its thread is held in the debuggee's handler (or is
        on its way there); match the handler's stop and report it as the data breakpoint's."""
        armed = self._armed_of(hit)
        if armed is None:
            return
        hidden = self.session.run_control.hidden_stop_in_progress()
        held = self._take_held(hit.tid, RESUME_GRACE if self.paused else TRAP_WAIT)
        if held is not None:
            self._stop_held(hit, armed, held)
        elif self._after_hidden_stop(hit):
            pass  # the handler's stop, if any, is held by ptdebug's own stop meanwhile
        elif hidden:
            self._stop_after_hidden(hit)  # the hidden stop ended while we waited
        elif self.paused:
            self._report_while_paused([hit])
        else:
            raise AdapterError(f"the thread did not stop in ptdebug's SIGTRAP handler within "
                               f"{TRAP_WAIT:g} s{self._trap_errors()}")

    def _take_held(self, tid: int, timeout: float) -> dict | None:
        with self._held_ready:
            self._held_ready.wait_for(lambda: tid in self._held, timeout)
            entry = self._held.pop(tid, None)
        return entry[0] if entry else None

    def _release_orphans(self, sampled: set[int]) -> None:
        """Stops of the handler whose perf sample never came (lost): reported all the same,
        with what is known, so that no thread stays stopped unseen."""
        now = time.monotonic()
        with self._held_ready:
            orphans = [(tid, raw) for tid, (raw, when) in self._held.items()
                       if tid not in sampled and now - when > ORPHAN_AFTER]
            for tid, _ in orphans:
                del self._held[tid]
        for tid, raw in orphans:
            watch_id, _ = held_stop(raw.get("body") or {})
            armed = next((a for a in self.armed.values() if a.id == watch_id), None)
            label = armed.target.label if armed else f"data breakpoint {watch_id}"
            body = dict(raw.get("body") or {})
            text = (f"{label} was written by thread tid {tid}, held at the write (the hit's "
                    "perf sample was lost: values unknown)")
            body.update({"reason": "data breakpoint", "description": text, "text": text,
                         "hitBreakpointIds": [watch_id], "preserveFocusHint": False})
            self.paused = True
            self._resumed.clear()
            self.session.client.send_event("stopped", body)

    def _stop_held(self, hit, armed: Armed, raw: dict) -> None:
        """The stop of a thread held at its write. Everything here is local and cached (no
        round trip to debugpy, no file read unless the maps changed): the write -> `stopped`
        time is what a user waits (docs/PERFORMANCE.md)."""
        started = time.monotonic_ns()
        body = dict(raw.get("body") or {})
        thread_id = body.get("threadId")
        new = self.watcher.read_now(armed.watch)  # the writer is held: this is its write
        change, written_by = self._change(hit, armed, new)
        image = self._image()
        text = (f"{change}{written_by} thread "
                f"{self._thread_name(thread_id, hit.tid)!r} (tid {hit.tid}) in "
                f"{self._symbol(hit.ip, image)}; the thread is held at the write")
        stop_all = self.session.launch_arguments.get("stopAllThreadsOnSuspend", True)
        body.update({"reason": "data breakpoint", "description": text, "text": text,
                     "hitBreakpointIds": [armed.id], "preserveFocusHint": False,
                     "allThreadsStopped": stop_all is not False})
        self._show_stop(hit, thread_id, image, body)
        log.debug("data breakpoint stop: write sampled %.1f ms before the handler's stop "
                  "came, stop sent %.1f ms after it", (started - hit.time_ns) / 1e6,
                  (time.monotonic_ns() - started) / 1e6)

    def _show_stop(self, hit, thread_id, image, body: dict) -> None:
        self.paused = True
        self._resumed.clear()
        if thread_id is not None and not isinstance(image, str):
            chain = call_chain(hit.ip, hit.callchain)
            maker = self._frame_maker
            # Built on the first stackTrace, not before the `stopped` goes out.
            self.native = NativeStack(thread_id, None, dict(hit.regs), "at the write",
                                      make=lambda: maker.frames(image, chain, "at the write"))
            self.session.update_fast_path()  # stackTrace's watch acts now (_observe_stack)
        self.session.client.send_event("stopped", body)

    def _armed_of(self, hit) -> Armed | None:
        return next((a for a in self.armed.values() if a.watch is hit.watch), None)

    def _report_unstopped(self, hit, reason: str) -> None:
        armed = self._armed_of(hit)
        label = armed.target.label if armed else "a watched address"
        name = self._python_thread_name(hit.tid)
        if name is not None:
            name = f" ({name!r})"
        else:
            # the OS name: the executable's ('python') for every thread of a CPython before
            # 3.14, which names no OS thread; said as such, so it is not taken for the thread's
            try:
                with open(f"/proc/{hit.pid}/task/{hit.tid}/comm") as f:
                    name = f" (OS name {f.read().strip()!r})"
            except OSError:
                name = " (exited)"
        self._tell(f"ptdebug: a data breakpoint hit was not turned into a stop: {label} at "
                   f"{hit.address:#x} written by thread tid {hit.tid}{name} at ip {hit.ip:#x}: "
                   f"{reason}\n")

    def _python_thread_name(self, tid: int) -> str | None:
        """The `threading` name of OS thread `tid` in the debuggee (a frameless evaluation:
        the thread need not be stopped), or None (no such Python thread, no answer)."""
        # prefixed: debugpy shows a str result in the repl without quotes (1.8.22), and
        # "None" must not read as a thread named so
        expression = (f"'ptdebug:' + next((t.name for t in __import__('threading')"
                      f".enumerate() if t.native_id == {tid}), '')")
        try:
            response = self.session.backend.request(
                "evaluate", {"expression": expression, "context": "repl"}, timeout=2)
        except AdapterError:
            return None
        result = (response.raw.get("body") or {}).get("result") if response.success else None
        if isinstance(result, str) and result[:1] in ("'", '"') and result[-1:] == result[:1]:
            result = result[1:-1]
        if not isinstance(result, str) or not result.startswith("ptdebug:"):
            return None
        return result[len("ptdebug:"):] or None

    def _trap_errors(self) -> str:
        try:
            response = self.session.backend.request(
                "evaluate", {"expression": ERRORS_EXPRESSION, "context": "repl"}, timeout=5)
        except AdapterError:
            return ""
        found = (response.raw.get("body") or {}).get("result") if response.success else None
        return f" (handler errors: {found})" if found and found != "[]" else ""

    def _pause_for(self, hit, count: int) -> None:
        """Without the handler: ask debugpy to pause; the writer stops at its next line."""
        if self._after_hidden_stop(hit):
            return
        # debugpy's `continued` may arrive after the first write of a resumed thread: give
        # it a moment before calling a write "while paused".
        if self.paused and not self._resumed.wait(RESUME_GRACE):
            self._report_while_paused([hit])
            return
        self._stop_for(hit, count)

    def _after_hidden_stop(self, hit) -> bool:
        """A hit while ptdebug holds the program for itself (a record breakpoint's window,
        captureNow): the program would have been running, so the write is a stop, shown once
        the hidden operation is over (run_control.after_hidden_stop). False: none is."""
        return self.session.run_control.after_hidden_stop(
            lambda: self._guarded(hit, self._stop_after_hidden, hit))

    def _stop_after_hidden(self, hit) -> None:
        """The stop of a hit made during a hidden stop, now that it is over: the handler's
        stop of the writer if it came (held back by the capture, delivered since), else a
        stop made now: the program is paused for it, or, already stopped (an earlier hit's
        stop, every thread suspended), the writer's thread is named as stopped by it."""
        armed = self._armed_of(hit)
        if armed is None:
            return  # the data breakpoint was removed meanwhile
        held = self._take_held(hit.tid, RESUME_GRACE)
        if held is not None:
            self._stop_held(hit, armed, held)
            return
        stop_all = self.session.launch_arguments.get("stopAllThreadsOnSuspend", True)
        if stop_all is False or self.session.run_control.program_runs():
            self._stop_for(hit, 1)
            return
        thread_id, thread_name = self._dap_thread_of(hit.tid)
        change, written_by = self._change(hit, armed)
        image = self._image()
        text = (f"{change}{written_by} thread "
                f"{thread_name!r} (tid {hit.tid}) in {self._symbol(hit.ip, image)} while "
                "ptdebug recorded a trace window")
        body = {"reason": "data breakpoint", "description": text, "text": text,
                "hitBreakpointIds": [armed.id], "preserveFocusHint": False,
                "allThreadsStopped": True}
        if thread_id is not None:
            body["threadId"] = thread_id
        self._show_stop(hit, thread_id, image, body)

    def _stop_for(self, hit, count: int) -> None:
        armed = next((a for a in self.armed.values() if a.watch is hit.watch), None)
        if armed is None:
            return
        while not self._stops.empty():
            self._stops.get_nowait()
        self._pending = hit
        single = self.session.launch_arguments.get("stopAllThreadsOnSuspend", True) is False
        try:
            if single:
                self._suspend_only(hit.tid)
            else:
                self.session.backend.request("pause", {"threadId": 0}, timeout=STOP_TIMEOUT)
            try:
                stopped = self._stops.get(timeout=STOP_TIMEOUT)
            except queue.Empty:
                raise BackendTimeout("debugpy did not pause after a data breakpoint hit") from None
        finally:
            self._pending = None
        if single:
            # pydevd suspended exactly the writer: its stop names the thread.
            thread_id = (stopped.get("body") or {}).get("threadId")
            thread_name = self._thread_name(thread_id)
        else:
            thread_id, thread_name = self._dap_thread_of(hit.tid)
        change, written_by = self._change(hit, armed)
        image = self._image()
        symbol = self._symbol(hit.ip, image)
        text = (f"{change}{written_by} thread "
                f"{thread_name!r} (tid {hit.tid}) in {symbol}"
                + (f"; {count} writes seen" if count > 1 else ""))
        body = dict(stopped.get("body") or {})
        body.update({"reason": "data breakpoint", "description": text, "text": text,
                     "hitBreakpointIds": [armed.id], "preserveFocusHint": False})
        if thread_id is not None:
            body["threadId"] = thread_id
        self._show_stop(hit, thread_id, image, body)

    def _change(self, hit, armed: Armed, new: bytes | None = None) -> tuple[str, str]:
        """What a hit did to the watched value, as text, and the words that lead to its
        writer: ("buf changed from A to B", ": written by"), or, for a write that stored
        the bytes already there (a stop all the same: the hardware sees writes, not
        changes), ("buf written (value unchanged: A)", " by"). The values are never `?`
        while the bytes can be read: perf gives the value before the first and after the
        last write of a batch only, so a hit in between takes as old the value last shown
        for the watch, and as new the bytes read now; such a hit is never said to leave
        the value unchanged (what it wrote is not known), and equal values then read
        ("buf written (now A)", " by")."""
        # the bytes right after this very write: read while its writer is held, or perf's
        # after-value of a batch this hit ends
        after_known = new is not None or hit.new is not None
        if new is None:
            new = hit.new if hit.new is not None else self.watcher.read_now(armed.watch)
        old = hit.old if hit.old is not None else self._shown.get(armed.id)
        if new is not None:
            self._shown[armed.id] = new
        fmt = armed.target.format
        label = armed.target.label
        if old is not None and new is not None and bytes(old) == bytes(new):
            if hit.old is not None and after_known:  # both sides of this one write
                return f"{label} written (value unchanged: {decode_value(new, fmt)})", " by"
            return f"{label} written (now {decode_value(new, fmt)})", " by"
        old_text = decode_value(old, fmt) if old is not None else "(not read)"
        new_text = decode_value(new, fmt) if new is not None else "(unreadable now)"
        return f"{label} changed from {old_text} to {new_text}", ": written by"

    def _report_while_paused(self, hits: list) -> None:
        for hit in hits:
            armed = next((a for a in self.armed.values() if a.watch is hit.watch), None)
            if armed is None:
                continue
            change, _ = self._change(hit, armed)
            self.session.client.send_event("output", {"category": "console", "output":
                f"ptdebug: {change} while the program "
                f"was paused (thread tid {hit.tid}, in {self._symbol(hit.ip)})\n"})

    def _filter_event(self, raw: dict) -> bool:
        name = raw.get("event")
        if name in ("continued", "stopped", "terminated", "exited") and self.native is not None:
            self.native = None  # a new stop or a resumed thread: the write is history
            self.session.update_fast_path()
        if name == "continued":
            self.paused = False
            self._resumed.set()
            self.frames.clear()
            self.paths.clear()
        elif name == "stopped":
            mark = held_stop(raw.get("body") or {})
            if mark is not None:
                with self._held_ready:
                    self._held[mark[1]] = (raw, time.monotonic())
                    self._held_ready.notify_all()
                return True
            if self._pending is not None and (raw.get("body") or {}).get("reason") == "pause":
                self._stops.put(raw)
                return True
            self.paused = True
            self._resumed.clear()
        return False

    # --- native frames of the stopped writer ----------------------------------------------
    def _page_stack(self, request: Request) -> object:
        """Before a stackTrace of the writer is forwarded: ask debugpy for the Python frames
        that follow the native ones shown, so paging (startFrame, levels) counts both."""
        arguments = request.raw.get("arguments") or {}
        native = self.native
        reverse = self.session.reverse
        if (native is None or arguments.get("threadId") != native.thread_id
                or (reverse is not None and native.thread_id in reverse.replays)):
            return None
        frames = native.get_frames()
        count = len(frames)
        start, levels = arguments.get("startFrame") or 0, arguments.get("levels") or 0
        shown = frames[start:start + levels] if levels else frames[start:]
        first = start <= count  # this page holds the top of debugpy's frames
        forwarded = dict(arguments, startFrame=max(0, start - count) + (
            0 if first else native.hidden))
        drop, rest = False, 0
        if levels:
            rest = levels - len(shown)
            drop = rest <= 0  # only native frames asked: debugpy's answer gives the total
            forwarded["levels"] = max(rest, 1) + (HANDLER_FRAMES if first else 0)
        request.raw["arguments"] = forwarded
        self._stack_pages[request.raw.get("seq")] = (shown, count, drop, first, rest, native)
        return None

    def _observe_stack(self, request: Request) -> Callable[[dict], None] | None:
        """Watches stackTrace answers while there are native frames (a stop at a write)."""
        if self.native is None:
            return None
        return lambda response: self._merge_stack(request.raw, response)

    def _merge_stack(self, request: dict, response: dict) -> None:
        page = self._stack_pages.pop(request.get("seq"), None)
        if page is None or not response.get("success"):
            return
        shown, count, drop, first, rest, native = page
        body = response.setdefault("body", {})
        python = [] if drop else list(body.get("stackFrames") or [])
        total = body.get("totalFrames") or len(body.get("stackFrames") or [])
        if first:
            # debugpy lists the live stack of the held writer when it shows library code
            # (justMyCode false): the SIGTRAP handler and what it calls sit above the frame
            # that wrote. They are ptdebug's, not the program's: the writer's frame is first.
            cut = next((i for i, f in enumerate(python) if f.get("name") == "on_trap"
                        and not str((f.get("source") or {}).get("path", "")).endswith(".py")),
                       -1)
            native.hidden = cut + 1
            python = python[cut + 1:]
            if rest > 0:
                python = python[:rest]
        body["stackFrames"] = shown + python
        body["totalFrames"] = total + count - native.hidden

    def _scopes(self, request: Request) -> object:
        native = self.native
        frame_id = (request.raw.get("arguments") or {}).get("frameId")
        if native is None or not native.owns(frame_id):
            return None
        recording = self.session.recording
        if not native.is_top(frame_id) or recording is None or not native.registers:
            return {"scopes": []}
        registers = [{"name": name, "value": f"{value:#x}", "variablesReference": 0,
                      "memoryReference": f"{value:#x}"}
                     for name, value in native.registers.items()]
        reference = recording.reference(lambda: registers)
        return {"scopes": [{"name": f"Registers ({native.when})", "presentationHint":
                            "registers", "variablesReference": reference, "expensive": False}]}

    def _evaluate(self, request: Request) -> object:
        native = self.native
        if native is not None and native.owns((request.raw.get("arguments") or {})
                                              .get("frameId")):
            raise InvalidRequest("this is a native frame of the write (ptdebug shows it from "
                                 "the watchpoint's sample): evaluate in a Python frame")
        return None

    def _suspend_only(self, tid: int) -> None:
        """Ask pydevd to suspend the thread whose OS id is `tid`, and no other (see header)."""
        expression = (
            "__import__('pydevd').get_global_debugger().set_suspend("
            f"next(t for t in __import__('threading').enumerate() if t.native_id == {tid}), "
            "__import__('_pydevd_bundle.pydevd_comm_constants', fromlist=['_'])"
            ".CMD_THREAD_SUSPEND, suspend_other_threads=False, is_pause=True)")
        response = self.session.backend.request(
            "evaluate", {"expression": expression, "context": "repl"}, timeout=STOP_TIMEOUT)
        if not response.success:
            raise AdapterError(f"pydevd could not suspend thread tid {tid}: "
                               f"{response.error_text.strip()}")

    def _learn_threads(self, response: dict) -> None:
        for thread in (response.get("body") or {}).get("threads") or ():
            if isinstance(thread, dict) and type(thread.get("id")) is int:
                self.thread_names[thread["id"]] = str(thread.get("name", ""))

    def _thread_name(self, thread_id: int | None, tid: int | None = None) -> str:
        """The name debugpy gives the thread: remembered from the client's `threads`, else
        asked (a round trip of a few ms, once per thread)."""
        if thread_id in self.thread_names:
            return self.thread_names[thread_id]
        threads = self.session.backend.request("threads", {}, timeout=10).raw.get(
            "body", {}).get("threads", [])
        for thread in threads:
            self.thread_names[thread["id"]] = thread.get("name", "")
        return self.thread_names.get(thread_id, f"tid {tid}" if tid else f"thread {thread_id}")

    def _dap_thread_of(self, tid: int) -> tuple[int | None, str]:
        """debugpy's thread id and name for OS thread `tid` (asked of each stopped thread,
        once per thread: RunsInsidePython.native_thread_id remembers)."""
        backend = self.session.backend
        threads = backend.request("threads", {}, timeout=10).raw.get("body", {}).get("threads", [])
        for thread in threads:
            try:
                if backend.native_thread_id(thread["id"]) == tid:
                    return thread["id"], thread.get("name", "")
            except AdapterError:
                continue  # a thread without a Python frame to ask in
        return None, f"tid {tid}"

    def _image(self):
        """The debuggee's modules and symbols now (ProcessSymbols: the maps re-read, the
        symbol tables kept), or the reason they cannot be read."""
        try:
            self.symbols.refresh()
        except OSError as exc:  # a vanished process: say so
            return f"cannot read /proc/{self.watcher.pid}/maps: {exc.strerror or exc}"
        return self.symbols

    def _start_warming(self) -> None:
        """Once a session: read the symbols a first hit needs while nothing waits for them,
        from the first dataBreakpointInfo (the user is choosing what to watch) on; the first
        setDataBreakpoints waits for the rest."""
        with self._lock:
            if self._warmer is None:
                self._warmer = threading.Thread(target=self._warm, name="ptdebug-symbols",
                                                daemon=True)
                self._warmer.start()

    def _warm(self) -> None:
        # the demangler's first use loads its library: 10 ms of a first stop otherwise
        from pt_decoder.demangle import demangle
        demangle("_ZN7ptdebug4warmEv")
        try:
            self.symbols.warm()
        except OSError as exc:
            log.info("data breakpoints: symbols not read ahead: %s", exc)

    def _symbol(self, ip: int, image=None) -> str:
        image = self._image() if image is None else image
        if isinstance(image, str):
            return f"{ip:#x} ({image})"
        # at a stop, a symbol table not read yet (a writer in a library the read-ahead left
        # out: libtorch's takes seconds) is not waited for: the stack frames name it
        symbol = image.symbolize(ip, wait=SYMBOL_WAIT_S)
        if symbol is None:  # no function there: the address and its module, never a guess
            module = image.module_at(ip)
            return f"{ip:#x} ({module.path.rsplit('/', 1)[-1]})" if module is not None else f"{ip:#x}"
        module = symbol.module.rsplit("/", 1)[-1]
        return f"{symbol.display}+{symbol.offset:#x} ({module}, ip {ip:#x})"

    def let_go_before_disconnect(self) -> None:
        """The client is leaving: remove every watch and restore the program's SIGTRAP action
        now, while debugpy still answers `evaluate`. After debugpy's disconnect an attached
        program (`connect`, `pid`) runs on without debugpy's answers, and the handler would
        stay in it for good (issue 34). The watches go first: a perf SIGTRAP after the
        restore would meet the program's own action, by default the end of the program.
        A restore that fails is told to the user (`output`, category important) here, the
        last moment the client still listens."""
        why = self._stop_watching()
        if why is not None:
            self._tell(f"ptdebug: the data-breakpoint SIGTRAP handler stays installed in "
                       f"process {self.watcher.pid} ({why.splitlines()[-1]}): a later "
                       "SIGTRAP in it is passed on to the action it had before, but the "
                       "process shows SIGTRAP as caught until it exits\n")

    def close(self) -> None:
        why = self._stop_watching()
        if why is not None:  # debugpy lets go after: only the log can say
            log.warning("data breakpoints: SIGTRAP action not restored: %s", why)

    def _stop_watching(self) -> str | None:
        """Stop the poller, close every watch, then restore the program's SIGTRAP action
        (watches first: see let_go_before_disconnect). Returns why the restore failed, or
        None (restored, or nothing to restore)."""
        self._closed.set()
        if self._poller is not None:
            self._poller.join(1.0)
        with self._lock:
            self.watcher.close()
            self.armed.clear()
            if not self.trap or self.session.backend is None:
                return None
            return self._uninstall_trap()


HANDLER_FRAMES = 4
"""Python frames the writer's SIGTRAP handler may add above the writer's own (on_trap and what
it calls, when debugpy shows library code): asked for beyond a page, then cut."""
def _target_from_id(data_id: str) -> Target | None:
    match = _DATA_ID.match(data_id.strip())
    if match is None:
        return None
    address, length = int(match.group(1), 16), int(match.group(2))
    return Target(address, length, f"{length} bytes at {address:#x}")


def _first_writable(pid: int) -> int:
    for m in procfs.maps(pid):
        if m.perms.startswith("rw"):
            return m.start
    raise OSError(f"process {pid} has no writable mapping")

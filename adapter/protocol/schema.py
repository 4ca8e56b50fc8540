"""Typed arguments of what the adapter owns: launch/attach configurations and the requests it
answers itself. The one source of these shapes; docs/protocol.md and the VS Code extension's
`package.json` follow it.

Layer: protocol. Field names are the DAP / launch.json names (camelCase) on purpose, so the
dataclass *is* the wire shape. `parse(cls, payload)` checks every field once at the edge and
raises `InvalidRequest` (or `InvalidLaunchConfig`) naming the field; handlers then trust the
object. Requests that are only forwarded to a backend are not modelled here (see messages.Payload).
"""
from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import InvalidLaunchConfig, InvalidRequest

SIZE = re.compile(r"\s*[0-9]+(\.[0-9]+)?\s*([KMGT]i?B?|[kmgt]i?b?|B|b)?\s*")
"""A size as `capturesLimit` takes it: bytes, or a number with K/M/G/T, KB/KiB, ..."""


def check_size(key: str, value: str | None) -> None:
    """Refuse (InvalidLaunchConfig naming `key`) a size the captures limit cannot read."""
    if value is not None and not SIZE.fullmatch(value):
        raise InvalidLaunchConfig(f"{key} must be a size such as \"2GiB\" or \"500MB\", "
                                  f"got {value!r}")

# Every request the DAP specification defines (debugAdapterProtocol.json, 'Request' subtypes;
# tests/adapter/protocol/test_schema.py keeps this equal to the schema). The adapter uses it to
# tell "a standard request nobody here implements" from a backend's custom request.
DAP_REQUESTS = frozenset({
    "attach", "breakpointLocations", "cancel", "completions", "configurationDone", "continue",
    "dataBreakpointInfo", "disassemble", "disconnect", "evaluate", "exceptionInfo", "goto",
    "gotoTargets", "initialize", "launch", "loadedSources", "locations", "modules", "next",
    "pause", "readMemory", "restart", "restartFrame", "reverseContinue", "runInTerminal",
    "scopes", "setBreakpoints", "setDataBreakpoints", "setExceptionBreakpoints",
    "setExpression", "setFunctionBreakpoints", "setInstructionBreakpoints", "setVariable",
    "source", "stackTrace", "startDebugging", "stepBack", "stepIn", "stepInTargets", "stepOut",
    "terminate", "terminateThreads", "threads", "variables", "writeMemory",
})

BACKENDS = ("python", "go")


# --- launch and attach ---------------------------------------------------------------------
@dataclass
class RecordWindowSettings:
    """When a record breakpoint's trace window opens and closes (`recordWindow` of a launch or
    attach configuration, overridden key by key by a breakpoint's own `recordWindow`)."""
    function: str | None = None
    """Open at this native function's entry (the thread runs free until it gets there)."""
    untilReturn: bool = True
    """With `function`: close when it returns. On a Python line (no `function`): close when
    the Python function of that line returns."""
    lines: int | None = None
    """On a Python line: close after this many Python lines have run (the breakpoint's line
    is the first)."""
    instructions: int | None = None
    """Close after this many instructions (on a Python line, the cap of the window)."""
    milliseconds: float | None = None
    """Close after this many milliseconds."""
    until: str | None = None
    """Close before this address, function or FILE:LINE runs (a second breakpoint)."""
    timeout: float = 10.0
    """Seconds to wait for the thread to reach `function`."""
    untilPark: bool = True
    """Go: close where the goroutine parks (a channel, a lock, a sleep), so that Delve comes
    back then; false: follow it through its parks, to the window's other ends."""
    timeBound: float | None = None
    """Seconds after which the window closes whatever else it waits for (a safety bound, from
    the window's first instruction); the default depends on the debugger (record_window.py)."""
    recorder: Literal["auto", "stepper", "dbi"] | None = None
    """Which recorder records the window (overrides the configuration's `recorder`): "dbi"
    (Frida's Stalker, 10^7-10^8 instructions a second: a whole request; Python sessions, where
    Frida can attach), "stepper" (ptrace, 10^4-10^5 a second, anywhere), "auto" (the stepper
    for now: docs/recording.md, "Record breakpoints and the recorder")."""


@dataclass
class LaunchConfig:
    """`launch` arguments. Keys not named here are forwarded to the backend unchanged."""

    backend: Literal["python", "go"] | None = None
    """Which debugger runs the program; inferred from `program`/`module` when absent."""
    program: str | None = None
    """The script (Python) or package/binary (Go) to run."""
    module: str | None = None
    """Python only: run `python -m module` instead of a program."""
    args: list[str] = field(default_factory=list)
    """Command-line arguments of the program."""
    cwd: str | None = None
    """Working directory of the program; the adapter's when absent."""
    env: dict[str, str | None] = field(default_factory=dict)
    """Extra environment variables (a null value removes the variable, as debugpy does)."""
    stopOnEntry: bool = False
    """Stop at the first line of the program."""
    justMyCode: bool = True
    """Step and break in user code only (debugpy's option of the same name)."""
    stopAllThreadsOnSuspend: bool = True
    """Python: whether a stop (breakpoint, pause, data breakpoint) suspends every thread
    (debugpy's option of the same name); false suspends only the thread that stopped."""
    recordWindow: RecordWindowSettings | None = None
    """The trace window of record-mode breakpoints (ptdebug's own)."""
    recorder: Literal["auto", "stepper", "dbi"] = "auto"
    """Which recorder records the session's record breakpoints and captureNow (a
    breakpoint's `recordWindow.recorder` overrides it); see RecordWindowSettings.recorder."""
    noDebug: bool = False
    """Run without debugging (VS Code's "Run Without Debugging")."""
    mode: Literal["auto", "debug", "exec", "test"] | None = None
    """Go only (vscode-go's name): build and debug the package `program` ("debug"), run the
    built binary `program` ("exec"), or debug the package's tests ("test"); "auto" (the
    default) is "exec" for an ELF file and "debug" otherwise."""
    buildFlags: str | None = None
    """Go only (vscode-go's name): flags for `go build`, e.g. "-tags=integration"."""
    replay: str | None = None
    """A trace bundle to replay instead of running a program (`ptdebug record`, `ptdebug
    import`, a kept capture): its recorded threads step through the history, backwards too."""
    captures: str | None = None
    """Where captures are kept (default: `.ptdebug/captures` in `cwd`, else the user's data
    directory); they outlive the session. The directory keeps within its size limit by
    removing the oldest captures neither pinned nor in use (`ptdebug captures`)."""
    capturesLimit: str | None = None
    """The captures directory's size limit for this session, e.g. "2GiB", "500MB" (default:
    the directory's, set with `ptdebug captures limit SIZE`, else 2GiB); the oldest captures
    neither pinned nor in use are removed when it is reached."""

    def __post_init__(self) -> None:
        if self.program is None and self.module is None and self.replay is None:
            raise InvalidLaunchConfig("launch needs 'program' (or 'module' for Python, or "
                                      "'replay' for a trace bundle)")
        check_size("capturesLimit", self.capturesLimit)


@dataclass
class ConnectTarget:
    """Where a debugpy server listens (`python -m debugpy --listen HOST:PORT prog.py`)."""

    port: int
    """TCP port of the debugpy server."""
    host: str = "127.0.0.1"
    """Host of the debugpy server."""


@dataclass
class AttachConfig:
    """`attach` arguments: a process id, or a debugpy server to connect to."""

    backend: Literal["python", "go"] | None = None
    """Which debugger attaches; inferred from the process or `connect` when absent."""
    pid: int | None = None
    """Process to attach to (debugpy calls it `processId`; both are accepted)."""
    processId: int | None = None
    """debugpy's name for `pid`."""
    connect: ConnectTarget | None = None
    """A debugpy server to connect to instead of a pid."""
    justMyCode: bool = True
    """Step and break in user code only."""
    stopAllThreadsOnSuspend: bool = True
    """Python: whether a stop suspends every thread (debugpy's option of the same name)."""
    recordWindow: RecordWindowSettings | None = None
    """The trace window of record-mode breakpoints (ptdebug's own)."""
    recorder: Literal["auto", "stepper", "dbi"] = "auto"
    """Which recorder records the session's record breakpoints and captureNow (a
    breakpoint's `recordWindow.recorder` overrides it); see RecordWindowSettings.recorder."""
    captures: str | None = None
    """Where captures are kept (default: the user's data directory); they outlive the
    session. The directory keeps within its size limit by removing the oldest captures
    neither pinned nor in use (`ptdebug captures`)."""
    capturesLimit: str | None = None
    """The captures directory's size limit for this session, e.g. "2GiB", "500MB" (default:
    the directory's, set with `ptdebug captures limit SIZE`, else 2GiB)."""

    def __post_init__(self) -> None:
        check_size("capturesLimit", self.capturesLimit)
        if self.pid is None:
            self.pid = self.processId
        if (self.pid is None) == (self.connect is None):
            raise InvalidLaunchConfig("attach needs exactly one of 'pid' and 'connect'")


# --- requests the adapter answers itself ---------------------------------------------------
@dataclass
class ReadMemoryArguments:
    memoryReference: str
    """Address: decimal, or hex with 0x."""
    count: int
    """Bytes to read."""
    offset: int = 0
    """Added to the address; may be negative."""


@dataclass
class WriteMemoryArguments:
    memoryReference: str
    data: str
    """The bytes to write, base64."""
    offset: int = 0
    allowPartial: bool = False
    """Write what can be written instead of failing when part of the range is not writable."""


@dataclass
class DisassembleArguments:
    memoryReference: str
    instructionCount: int
    """Exactly this many instructions are returned (padded with 'invalid' ones)."""
    offset: int = 0
    """Bytes added to the address before `instructionOffset` is applied."""
    instructionOffset: int = 0
    """Instructions to skip from the address; negative disassembles backwards."""
    resolveSymbols: bool = True


@dataclass
class DataBreakpointInfoArguments:
    name: str
    """A variable name (with variablesReference), an expression, or an address (asAddress)."""
    variablesReference: int | None = None
    frameId: int | None = None
    bytes: int | None = None
    """Watch this many bytes from the address (supportsDataBreakpointBytes)."""
    asAddress: bool = False
    mode: str | None = None


@dataclass
class DataBreakpoint:
    dataId: str
    accessType: Literal["read", "write", "readWrite"] = "write"
    condition: str | None = None
    hitCondition: str | None = None


@dataclass
class SetDataBreakpointsArguments:
    breakpoints: list[DataBreakpoint]
    """Replaces every data breakpoint; an empty list clears them."""


@dataclass
class InstructionBreakpoint:
    instructionReference: str
    offset: int = 0
    condition: str | None = None
    hitCondition: str | None = None
    mode: str | None = None


@dataclass
class SetInstructionBreakpointsArguments:
    breakpoints: list[InstructionBreakpoint]


@dataclass
class StepBackArguments:
    threadId: int
    singleThread: bool = False
    granularity: Literal["statement", "line", "instruction"] = "statement"


@dataclass
class ReverseContinueArguments:
    threadId: int
    singleThread: bool = False


# --- custom requests (XxxIn arguments, XxxOut response body) --------------------------------
@dataclass
class GoroutineHistoryIn:
    """`ptdebug/goroutineHistory` (Go sessions): which goroutine ran which recorded
    instructions, from a recording's PTWRITE goids and its flow (docs/go.md)."""

    bundle: str
    """The recording to index (a bundle directory)."""
    thread: int | None = None
    """Only this recorded thread (tid); every recorded thread when absent."""
    maxRanges: int = 1000
    """At most this many ranges per goroutine (the first ones); `truncated` says so."""


@dataclass
class GoroutineRange:
    start: int
    """First instruction position (in the thread's history)."""
    stop: int
    """One past the last instruction position."""
    startTime: int
    """Time of the first instruction (the bundle's time unit)."""
    stopTime: int
    """Time of the instruction at `stop` (or the last one)."""


@dataclass
class GoroutineHistoryEntry:
    thread: int
    goid: int
    """0 is the thread's g0 (scheduler, system stack); -1 is unknown (before any goid)."""
    instructions: int
    time: int
    cycles: int
    confidence: Literal["observed", "flow", "assumed", "unknown"]
    """The weakest label among its ranges (adapter/golang/goroutine_index.py)."""
    ranges: list[GoroutineRange]
    truncated: bool = False


@dataclass
class GoroutineHistoryOut:
    goroutines: list[GoroutineHistoryEntry]
    timeUnit: str
    """"ns" (the stepper's clock) or "tsc" (Intel PT time stamps)."""


@dataclass
class CaptureNowIn:
    """`ptdebug/captureNow` (Python sessions): record a paused thread at once with the launch
    configuration's `recordWindow`; the program then runs on (features/record_breakpoints.py)."""

    threadId: int | None = None
    """The DAP thread to record; debugpy's first thread when absent."""


@dataclass
class CaptureGap:
    position: int
    """History position (instruction index) where the trace was lost."""
    reason: str


@dataclass
class CaptureLocation:
    path: str
    line: int


@dataclass
class CaptureNowOut:
    """The response body of `ptdebug/captureNow` and the body of every `ptdebug/capture` event:
    a trace window closed and its capture is kept in the session (docs/protocol.md)."""

    id: int
    """The capture's id, unique in the session."""
    threadId: int | None
    """The DAP thread the window followed."""
    tid: int
    """The recorded OS thread."""
    window: str
    """The window, described ("from kv_update(), until kv_update returns")."""
    instructions: int
    """Decoded instruction count."""
    cycles: int
    """Cycles in the window (the stepper's are ns of a thread slowed by ptrace)."""
    durationNs: int
    """Window length in nanoseconds."""
    clock: Literal["tsc", "stepper"]
    """Which clock `durationNs` and `cycles` come from: "tsc" (the CPU's TSC and CYC cycles,
    Intel PT) or "stepper" (the wall-clock ns of a thread slowed by its recorder, the ptrace
    stepper or DBI; its `cycles` are those ns again, not CPU cycles)."""
    clockLabel: str
    """The clock in words, for the views ("stepper time: wall-clock ns of a thread slowed by
    ptrace, not CPU time; ...")."""
    gaps: list[CaptureGap]
    """Where the trace was lost, if anywhere."""
    bundle: str
    """The trace bundle directory (manifest.json inside)."""
    endReason: str
    """Why the window closed ("the trigger function returned", ...)."""
    status: Literal["complete", "partial"]
    partial: bool
    """True when the capture ended before its window closed."""
    partialReason: str | None
    """Why a partial capture stopped early."""
    reason: Literal["breakpoint", "command"]
    """What opened the window: a record breakpoint, or `ptdebug/captureNow`."""
    location: CaptureLocation | None
    """The record breakpoint's source line (None for captureNow)."""
    recorder: dict[str, str] | None = None
    """Which recorder recorded the window and why: {"name": "stepper" | "dbi" | "intel_pt",
    "why": in words} (docs/recording.md, "Record breakpoints and the recorder")."""
    preparing: list[str] = field(default_factory=list)
    """What is still being prepared after the capture was announced ("storing the program's
    files in the captures store"): the capture answers stepping and views meanwhile; a
    `ptdebug/capturePrepared` event follows when it is done. Empty when nothing is."""


@dataclass
class CapturePreparedOut:
    """The body of the `ptdebug/capturePrepared` event: what a `ptdebug/capture` event listed
    in `preparing` is done (docs/protocol.md)."""

    id: int
    """The capture's id (its `ptdebug/capture` event's)."""
    bundle: str
    """Its trace bundle directory."""
    prepared: list[str]
    """What was prepared (the `preparing` of the capture event)."""
    problems: list[str] = field(default_factory=list)
    """What could not be prepared, each told to the user in an `output` event too."""


# --- the parser ----------------------------------------------------------------------------
T = typing.TypeVar("T")


def parse(cls: type[T], data: Any, path: str = "arguments") -> T:
    """Build `cls` from a JSON object, checking each field's type.

    Raises InvalidRequest naming the first wrong or missing field; unknown keys are ignored
    (they may be meant for the backend). Launch/attach configs raise InvalidLaunchConfig.
    """
    error = InvalidLaunchConfig if cls in (LaunchConfig, AttachConfig, ConnectTarget) \
        else InvalidRequest
    if not isinstance(data, dict):
        raise error(f"{path} must be an object, got {_json_type(data)}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise error(f"{path}.{f.name} is required")
            continue
        values[f.name] = _convert(hints[f.name], data[f.name], f"{path}.{f.name}", error)
    return cls(**values)


def _convert(hint: Any, value: Any, path: str, error: type[InvalidRequest]) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        inner = [o for o in options if o is not type(None)]
        return _convert(inner[0], value, path, error) if len(inner) == 1 else value
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise error(f"{path} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        return value
    if origin is list:
        if not isinstance(value, list):
            raise error(f"{path} must be an array, got {_json_type(value)}")
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{path}[{i}]", error) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise error(f"{path} must be an object, got {_json_type(value)}")
        _, item = typing.get_args(hint)
        return {str(k): _convert(item, v, f"{path}.{k}", error) for k, v in value.items()}
    if dataclasses.is_dataclass(hint):
        return parse(hint, value, path)
    if hint is Any:
        return value
    ok = isinstance(value, hint) and not (hint in (int, float) and isinstance(value, bool))
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        raise error(f"{path} must be {_TYPE_WORDS.get(hint, hint.__name__)}, "
                    f"got {_json_type(value)} {value!r:.60}")
    return value


_TYPE_WORDS = {str: "a string", int: "an integer", bool: "a boolean", float: "a number"}


def _json_type(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "an object", type(None): "null"}.get(type(value),
                                                                          type(value).__name__)

"""The VS Code side of a session: one handler per DAP request the adapter treats itself.

Layer: session (with session.py). Handlers are found by name, `<command>_request`, by the
channel; what has no handler here goes to `default_request`, which forwards it to the backend
or explains why not (`Session.route`). Each optional request names, in a comment, the
capability that announces it. Arguments of what is answered here are parsed into the
dataclasses of `protocol/schema.py` first, so a wrong type is an InvalidRequest naming the field.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from adapter.backends import infer_backend
from adapter.protocol.channel import DEFERRED
from adapter.protocol.errors import AdapterError, InvalidRequest, NotSupportedYet
from adapter.protocol.messages import Request
from adapter.protocol.schema import (
    AttachConfig,
    DataBreakpointInfoArguments,
    DisassembleArguments,
    LaunchConfig,
    ReadMemoryArguments,
    ReverseContinueArguments,
    SetDataBreakpointsArguments,
    SetInstructionBreakpointsArguments,
    StepBackArguments,
    WriteMemoryArguments,
    parse,
)

if TYPE_CHECKING:
    import threading

    from adapter.backends import Backend
    from adapter.disassemble import Disassembler
    from adapter.memory import ProcessMemory
    from adapter.protocol.channel import Channel
    from adapter.protocol.progress import ProgressReporter

log = logging.getLogger("ptdebug.dap")

REVERSE = "stepping backwards and reverse continue"
FEATURE_WAIT = 10.0
"""Seconds a request for a feature waits for the features the debuggee's pid brings (its
backend learns the pid a moment after the launch; a first stop may come before)."""


class SessionState(Protocol):
    """What the handlers read and change of the Session (adapter/session.py, which creates
    them with itself and documents each): passed in, so the session and its handlers do not
    name each other."""

    initialized: bool
    client_arguments: dict
    capabilities: dict
    launch_arguments: dict
    disassembler: Disassembler | None
    features_started: threading.Event

    @property
    def client(self) -> Channel: ...
    @property
    def progress(self) -> ProgressReporter: ...
    @property
    def backend(self) -> Backend | None: ...
    def start_backend(self, name: str, config: LaunchConfig | AttachConfig) -> Backend: ...
    def require_memory(self) -> ProcessMemory: ...
    def disconnect(self, request: Request) -> object: ...
    def route(self, request: Request) -> object: ...
    def finish(self) -> None: ...


class ClientHandlers:
    """Handlers of requests from the DAP client; the Session holds the state."""

    def __init__(self, session: SessionState):
        self.session = session

    # --- the lifecycle --------------------------------------------------------------------
    def initialize_request(self, request: Request) -> dict:
        self.session.client_arguments = dict(request.raw.get("arguments") or {})
        self.session.progress.supported = bool(
            self.session.client_arguments.get("supportsProgressReporting"))
        self.session.initialized = True
        return dict(self.session.capabilities)

    def launch_request(self, request: Request) -> object:
        self._require_initialize(request)
        config = parse(LaunchConfig, request.raw.get("arguments") or {})
        self.session.launch_arguments = dict(request.raw.get("arguments") or {})
        backend = self.session.start_backend(infer_backend(config), config)
        backend.launch(request, config)
        return DEFERRED

    def attach_request(self, request: Request) -> object:
        self._require_initialize(request)
        config = parse(AttachConfig, request.raw.get("arguments") or {})
        self.session.launch_arguments = dict(request.raw.get("arguments") or {})
        backend = self.session.start_backend(infer_backend(config), config)
        backend.attach(request, config)
        return DEFERRED

    def _require_initialize(self, request: Request) -> None:
        if not self.session.initialized:
            raise InvalidRequest(f"'{request.command}' before 'initialize': the DAP session "
                                 "starts with an initialize request")

    # Optional (capability 'supportsCancelRequest')
    def cancel_request(self, request: Request) -> dict:
        """A `cancel` with a progressId stops that operation of ptdebug's (its next progress
        report fails it: protocol/progress.py). A `cancel` of a request is a hint DAP lets an
        adapter ignore: ptdebug answers every request, so it does."""
        arguments = request.raw.get("arguments") or {}
        progress_id = arguments.get("progressId") if isinstance(arguments, dict) else None
        if isinstance(progress_id, str):
            self.session.progress.cancel(progress_id)
        return {}

    def disconnect_request(self, request: Request) -> object:
        return self.session.disconnect(request)

    # --- memory ---------------------------------------------------------------------------
    # Optional (capability 'supportsReadMemoryRequest')
    def readMemory_request(self, request: Request) -> dict:
        from adapter.memory import read_memory
        args = parse(ReadMemoryArguments, request.raw.get("arguments"))
        return read_memory(self.session.require_memory(), args)

    # Optional (capability 'supportsWriteMemoryRequest')
    def writeMemory_request(self, request: Request) -> dict:
        from adapter.memory import write_memory
        args = parse(WriteMemoryArguments, request.raw.get("arguments"))
        body = write_memory(self.session.require_memory(), args)
        if self.session.client_arguments.get("supportsMemoryEvent") and body["bytesWritten"]:
            self.session.client.send_event("memory", {
                "memoryReference": args.memoryReference, "offset": args.offset,
                "count": body["bytesWritten"]})
        return body

    # Optional (capability 'supportsDisassembleRequest')
    def disassemble_request(self, request: Request) -> dict:
        from adapter.disassemble import Disassembler
        args = parse(DisassembleArguments, request.raw.get("arguments"))
        session = self.session
        memory = session.require_memory()
        if session.disassembler is None or session.disassembler.memory is not memory:
            session.disassembler = Disassembler(memory)
        return session.disassembler.disassemble(args)

    # --- features that plug in later: typed here, served by the feature when present ------
    # Optional (capability 'supportsDataBreakpoints')
    def dataBreakpointInfo_request(self, request: Request) -> object:
        args = parse(DataBreakpointInfoArguments, request.raw.get("arguments"))
        return self._feature("data_breakpoints", "data breakpoints").info(request, args)

    # Optional (capability 'supportsDataBreakpoints')
    def setDataBreakpoints_request(self, request: Request) -> object:
        args = parse(SetDataBreakpointsArguments, request.raw.get("arguments"))
        return self._feature("data_breakpoints", "data breakpoints").set(request, args)

    # Optional (capability 'supportsInstructionBreakpoints')
    def setInstructionBreakpoints_request(self, request: Request) -> object:
        args = parse(SetInstructionBreakpointsArguments, request.raw.get("arguments"))
        return self._feature("instruction_breakpoints", "instruction breakpoints").set(
            request, args)

    # Optional (capability 'supportsStepBack')
    def stepBack_request(self, request: Request) -> object:
        args = parse(StepBackArguments, request.raw.get("arguments"))
        return self._feature("reverse", REVERSE).step_back(request, args)

    # Optional (capability 'supportsStepBack')
    def reverseContinue_request(self, request: Request) -> object:
        args = parse(ReverseContinueArguments, request.raw.get("arguments"))
        return self._feature("reverse", REVERSE).reverse_continue(request, args)

    def _feature(self, attribute: str, what: str):
        feature = getattr(self.session, attribute)
        session = self.session
        if feature is None and session.backend is not None and \
                not session.features_started.wait(FEATURE_WAIT):
            log.warning("%s: the debuggee's features were not ready within %g s", what,
                        FEATURE_WAIT)
        feature = getattr(session, attribute)
        if feature is None:
            raise NotSupportedYet(f"not supported yet: {what} are not available in this "
                                  "ptdebug session")
        return feature

    # --- everything else ------------------------------------------------------------------
    def default_request(self, request: Request) -> object:
        return self.session.route(request)

    def invalid_message(self, error: AdapterError) -> None:
        """A message that could not be read as DAP: say so on the console, keep serving."""
        self.session.client.send_event("output", {
            "category": "important",
            "output": f"ptdebug: ignored a message that is not DAP: {error.message} "
                      f"[error {error.error_id}]\n"})

    def channel_closed(self, reason: str) -> None:
        self.session.finish()

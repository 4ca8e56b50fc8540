"""The Delve-RPC bridge: a client of Delve's JSON-RPC API (version 2), for what Delve's DAP
server does not give ptdebug: goroutine details and labels, registers, memory, watchpoints,
the debugger's state and the debuggee's pid.

Layer: backends (a helper of delve.py). It speaks Go's net/rpc/jsonrpc: JSON-RPC 1.0 objects
written back to back on a raw TCP stream, no framing (Delve's
Documentation/api/json-rpc/README.md); requests `{"method": "RPCServer.<Name>", "params":
[{...}], "id": N}`, answers `{"id": N, "result": {...}, "error": null | "text"}`, matched by
id because `Command` answers only when the target stops and others may overtake it. It knows
nothing of DAP or of the session.

The same headless Delve (`--accept-multiclient`) serves this connection and a DAP one on the
same port: Delve peeks at the first byte of each new connection and treats 'C' (from
Content-Length) as DAP (service/rpccommon/server.go). docs/go.md says what that means for
ptdebug: run control stays on DAP, this bridge inspects.
"""
from __future__ import annotations

import itertools
import json
import socket
import threading
from dataclasses import dataclass

from adapter.protocol.errors import BackendError, BackendGone, BackendTimeout

from .base import dial

CONNECT_TIMEOUT = 10.0


class DelveRpcError(BackendError):
    """Delve answered a JSON-RPC call with an error; the text is Delve's."""
    error_id = 1405


@dataclass
class GoroutineInfo:
    """One goroutine as Delve lists it (service/api/types.go Goroutine), the fields ptdebug
    shows."""

    id: int
    """The goroutine id (runtime.g.goid)."""
    thread_id: int
    """The OS thread running it, 0 when it is not running."""
    status: int
    """runtime status (Delve's numbering: 0 idle, 1 runnable, 2 running, 3 syscall, 4 waiting)."""
    wait_reason: int
    """runtime.waitReason while waiting, else 0."""
    function: str
    """Function of its current location."""
    file: str
    line: int
    user_function: str
    """Topmost non-runtime function (Delve's userCurrentLoc)."""
    labels: dict[str, str]
    """pprof labels (runtime/pprof.Do / SetGoroutineLabels)."""

    @classmethod
    def from_json(cls, data: dict) -> GoroutineInfo:
        loc = data.get("currentLoc") or {}
        user = data.get("userCurrentLoc") or {}
        return cls(id=int(data["id"]), thread_id=int(data.get("threadID") or 0),
                   status=int(data.get("status") or 0),
                   wait_reason=int(data.get("waitReason") or 0),
                   function=((loc.get("function") or {}).get("name") or ""),
                   file=loc.get("file") or "", line=int(loc.get("line") or 0),
                   user_function=((user.get("function") or {}).get("name") or ""),
                   labels=dict(data.get("labels") or {}))


class DelveRpc:
    """One JSON-RPC connection to a headless Delve. Thread-safe: calls from several threads
    are matched to their answers by id."""

    def __init__(self, host: str, port: int, timeout: float = CONNECT_TIMEOUT):
        self.sock = dial(host, port, "Delve's JSON-RPC API", timeout)
        self._ids = itertools.count(1)
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._waiting: dict[int, tuple[threading.Event, list]] = {}
        self.closed = threading.Event()
        """Set when the connection ended (Delve exited or close() was called)."""
        self.close_reason = ""
        self._reader = threading.Thread(target=self._read_loop, name="delve-rpc", daemon=True)
        self._reader.start()

    # --- calls ----------------------------------------------------------------------------
    def call(self, method: str, timeout: float = 10.0, **params) -> dict:
        """Call `RPCServer.<method>` with `params` as its argument struct; returns `result`.

        Raises DelveRpcError with Delve's text when it refuses, BackendTimeout when it does not
        answer within `timeout` s, BackendGone when the connection is closed."""
        rid = next(self._ids)
        done = threading.Event()
        box: list = []
        with self._lock:
            if self.closed.is_set():
                raise BackendGone(f"Delve's JSON-RPC connection is closed ({self.close_reason})")
            self._waiting[rid] = (done, box)
        data = json.dumps({"method": "RPCServer." + method, "params": [params],
                           "id": rid}).encode()
        try:
            with self._send_lock:
                self.sock.sendall(data)
        except OSError as exc:
            with self._lock:
                self._waiting.pop(rid, None)
            raise BackendGone(f"cannot send {method} to Delve: {exc}") from None
        if not done.wait(timeout):
            with self._lock:
                self._waiting.pop(rid, None)
            raise BackendTimeout(f"Delve did not answer {method} within {timeout:g} s")
        answer = box[0]
        if answer is None:
            raise BackendGone(f"Delve went away before answering {method} ({self.close_reason})")
        if answer.get("error"):
            raise DelveRpcError(f"Delve: {method}: {answer['error']}")
        return answer.get("result") or {}

    # --- what ptdebug asks ----------------------------------------------------------------
    def version(self) -> dict:
        return self.call("GetVersion")

    def process_pid(self) -> int:
        return int(self.call("ProcessPid")["Pid"])

    def state(self) -> dict:
        """Delve's DebuggerState without waiting for a running target to stop."""
        return self.call("State", NonBlocking=True)["State"]

    def goroutines(self, limit: int = 0) -> list[GoroutineInfo]:
        """Every goroutine (or the first `limit`); needs the target stopped."""
        found: list[GoroutineInfo] = []
        start = 0
        while True:
            page = self.call("ListGoroutines", Start=start, Count=limit or 1000)
            found.extend(GoroutineInfo.from_json(g) for g in page.get("Goroutines") or [])
            start = int(page.get("Nextg") or -1)
            if start <= 0 or (limit and len(found) >= limit):
                return found[:limit] if limit else found

    def registers(self, thread_id: int) -> dict[str, int]:
        """General registers of an OS thread: name -> value (Rip, Rsp, R14, Fs_base, ...)."""
        regs = self.call("ListRegisters", ThreadID=thread_id, IncludeFp=False)
        out = {}
        for reg in regs.get("Regs") or []:
            try:
                out[reg["Name"]] = int(reg["Value"], 0)
            except (TypeError, ValueError):
                continue
        return out

    def read_memory(self, address: int, length: int) -> bytes:
        import base64
        result = self.call("ExamineMemory", Address=address, Length=length)
        return base64.b64decode(result.get("Mem") or "")

    def eval(self, expression: str, goroutine: int = -1, frame: int = 0) -> dict:
        return self.call("Eval", Scope={"GoroutineID": goroutine, "Frame": frame},
                         Expr=expression)["Variable"]

    def create_watchpoint(self, expression: str, kind: int, goroutine: int = -1,
                          frame: int = 0) -> dict:
        """A hardware watchpoint (Delve's: it follows stack moves). kind 1 read, 2 write,
        3 read|write (x86 has no read-only watch: Delve refuses 1)."""
        return self.call("CreateWatchpoint", Scope={"GoroutineID": goroutine, "Frame": frame},
                         Expr=expression, Type=kind)["Breakpoint"]

    def clear_breakpoint(self, breakpoint_id: int) -> None:
        self.call("ClearBreakpoint", Id=breakpoint_id)

    def detach(self, kill: bool, timeout: float = 5.0) -> None:
        self.call("Detach", timeout=timeout, Kill=kill)

    # --- the connection -------------------------------------------------------------------
    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._reader.join(2)

    def _read_loop(self) -> None:
        decoder = json.JSONDecoder()
        buffer = ""
        reason = "end of stream"
        try:
            while True:
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    break
                buffer += chunk.decode("utf-8", errors="replace")
                while True:
                    buffer = buffer.lstrip()
                    if not buffer:
                        break
                    try:
                        answer, end = decoder.raw_decode(buffer)
                    except json.JSONDecodeError:
                        break  # an object cut in two: wait for the rest
                    buffer = buffer[end:]
                    with self._lock:
                        waiter = self._waiting.pop(answer.get("id"), None)
                    if waiter is not None:
                        waiter[1].append(answer)
                        waiter[0].set()
        except OSError as exc:
            reason = str(exc)
        finally:
            with self._lock:
                self.close_reason = reason
                self.closed.set()
                waiting = list(self._waiting.values())
                self._waiting.clear()
            for done, box in waiting:
                box.append(None)
                done.set()

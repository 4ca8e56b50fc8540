"""A DAP test client for the end-to-end tests: framing, `expect_*` helpers, schema checks.

Every message received is validated against the DAP JSON schema
(`../shared/dap/debugAdapterProtocol.json`) with jsonschema, by its most specific definition
(`StackTraceResponse`, `StoppedEvent`, `ErrorResponse`, ...); a violation fails the next
`expect_*` call and `close()`. The client is independent of adapter.protocol on purpose: the
tests must not trust the code they test to read its own output.
"""
from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

import jsonschema

DEFAULT_TIMEOUT = 15.0


class DapSchema:
    """Validators for the definitions of debugAdapterProtocol.json, built on first use."""

    def __init__(self, path: str | os.PathLike):
        with open(path) as f:
            self.schema = json.load(f)
        self.definitions = self.schema["definitions"]
        self._validators: dict[str, jsonschema.Draft4Validator] = {}

    def definition_for(self, message: dict) -> str:
        kind = message.get("type")
        if kind == "response":
            if not message.get("success"):
                return "ErrorResponse"
            name = _cap(str(message.get("command"))) + "Response"
            return name if name in self.definitions else "Response"
        if kind == "event":
            name = _cap(str(message.get("event"))) + "Event"
            return name if name in self.definitions else "Event"
        if kind == "request":
            name = _cap(str(message.get("command"))) + "Request"
            return name if name in self.definitions else "Request"
        return "ProtocolMessage"

    def errors(self, message: dict) -> list[str]:
        name = self.definition_for(message)
        validator = self._validators.get(name)
        if validator is None:
            validator = jsonschema.Draft4Validator(
                {"$ref": f"#/definitions/{name}", "definitions": self.definitions})
            self._validators[name] = validator
        return [f"{name}: {e.message} at {list(e.absolute_path)}"
                for e in validator.iter_errors(message)]


def _cap(name: str) -> str:
    return name[:1].upper() + name[1:]


class DapClient:
    """One DAP connection to the adapter under test."""

    def __init__(self, rfile, wfile, schema: DapSchema, proc: subprocess.Popen | None = None,
                 sock: socket.socket | None = None):
        self.rfile, self.wfile = rfile, wfile
        self.schema = schema
        self.proc = proc
        """The adapter process (stdio mode, or the process behind the port)."""
        self.sock = sock
        self.seq = 0
        self.received: list[dict] = []
        """Every message received, in order."""
        self.schema_errors: list[str] = []
        self.terminal_processes: list[subprocess.Popen] = []
        """Processes started for runInTerminal requests."""
        self._queue: queue.Queue = queue.Queue()
        self._responses: dict[int, dict] = {}
        self._events: list[dict] = []
        self.closed = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self._read_loop, daemon=True).start()

    # --- construction ---------------------------------------------------------------------
    @classmethod
    def stdio(cls, argv: list[str], schema: DapSchema, stderr=None, **popen) -> DapClient:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=stderr if stderr is not None else subprocess.DEVNULL,
                                **popen)
        return cls(proc.stdout, proc.stdin, schema, proc=proc)

    @classmethod
    def tcp(cls, port: int, schema: DapSchema, proc=None) -> DapClient:
        sock = socket.create_connection(("127.0.0.1", port), timeout=DEFAULT_TIMEOUT)
        sock.settimeout(None)
        return cls(sock.makefile("rb"), sock.makefile("wb"), schema, proc=proc, sock=sock)

    # --- wire -----------------------------------------------------------------------------
    def _read_loop(self) -> None:
        try:
            while True:
                header = b""
                while not header.endswith(b"\r\n\r\n"):
                    ch = self.rfile.read(1)
                    if not ch:
                        return
                    header += ch
                length = None
                for line in header.decode("ascii").split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        length = int(line.split(":", 1)[1])
                if length is None:
                    self.schema_errors.append(f"a header without Content-Length: {header!r}")
                    return
                body = self.rfile.read(length)
                message = json.loads(body)
                for error in self.schema.errors(message):
                    self.schema_errors.append(f"{error} in {json.dumps(message)[:300]}")
                self._queue.put(message)
        except (OSError, ValueError) as exc:
            self.schema_errors.append(f"reading failed: {exc}")
        finally:
            self.closed.set()
            self._queue.put(None)

    def send_raw(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def send(self, message: dict) -> int:
        with self._lock:
            self.seq += 1
            message["seq"] = self.seq
            body = json.dumps(message).encode()
            self.send_raw(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            return self.seq

    def send_request(self, command: str, arguments: Any = None) -> int:
        message = {"type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        return self.send(message)

    # --- waiting --------------------------------------------------------------------------
    def _pump(self, deadline: float) -> dict:
        self.check_schema()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        try:
            message = self._queue.get(timeout=remaining)
        except queue.Empty:
            raise TimeoutError from None
        if message is None:
            self._queue.put(None)
            raise EOFError("the adapter closed the connection")
        self.received.append(message)
        if message["type"] == "response":
            self._responses[message["request_seq"]] = message
        elif message["type"] == "event":
            self._events.append(message)
        elif message["type"] == "request":
            self._reverse_request(message)
        self.check_schema()
        return message

    def _reverse_request(self, message: dict) -> None:
        """runInTerminal is served when `run_in_terminal` is set (the command runs as a child
        of the test, like a terminal would run it); everything else is refused."""
        arguments = message.get("arguments", {})
        if message["command"] == "runInTerminal" and self.run_in_terminal:
            env = dict(os.environ)
            env.update({k: v for k, v in (arguments.get("env") or {}).items() if v is not None})
            proc = subprocess.Popen(arguments["args"], cwd=arguments.get("cwd") or None, env=env,
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            self.terminal_processes.append(proc)
            self.send({"type": "response", "request_seq": message["seq"],
                       "command": "runInTerminal", "success": True,
                       "body": {"processId": proc.pid}})
            return
        self.send({"type": "response", "request_seq": message["seq"],
                   "command": message["command"], "success": False,
                   "message": f"the test client does not serve {message['command']}"})

    run_in_terminal = False
    """Serve runInTerminal reverse requests (set by a test that announces the capability)."""

    def check_schema(self) -> None:
        if self.schema_errors:
            raise AssertionError("messages violate the DAP schema:\n" +
                                 "\n".join(self.schema_errors))

    def expect_response(self, seq: int, timeout: float = DEFAULT_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while seq not in self._responses:
            try:
                self._pump(deadline)
            except TimeoutError:
                raise TimeoutError(f"no response to request {seq} within {timeout} s") from None
        return self._responses.pop(seq)

    def request(self, command: str, arguments: Any = None,
                timeout: float = DEFAULT_TIMEOUT) -> dict:
        """Send a request and return its response, successful or not."""
        return self.expect_response(self.send_request(command, arguments), timeout)

    def call(self, command: str, arguments: Any = None, timeout: float = DEFAULT_TIMEOUT) -> dict:
        """Send a request that must succeed; return its body."""
        response = self.request(command, arguments, timeout)
        assert response["success"], f"{command} failed: {response}"
        return response.get("body", {})

    def expect_event(self, name: str, timeout: float = DEFAULT_TIMEOUT,
                     pred: Callable[[dict], bool] = lambda e: True) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, event in enumerate(self._events):
                if event["event"] == name and pred(event):
                    return self._events.pop(i)
            try:
                self._pump(deadline)
            except TimeoutError:
                seen = [e["event"] for e in self.received if e["type"] == "event"]
                raise TimeoutError(f"no {name!r} event within {timeout} s; "
                                   f"events seen: {seen}") from None

    def expect_stopped(self, reason: str | None = None, timeout: float = DEFAULT_TIMEOUT) -> dict:
        """The body of the next `stopped` event, checked to have `reason` if given."""
        body = self.expect_event("stopped", timeout).get("body", {})
        if reason is not None:
            assert body.get("reason") == reason, f"stopped for {body.get('reason')!r}: {body}"
        return body

    def expect_closed(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._pump(deadline)
            except EOFError:
                return
            except TimeoutError:
                raise TimeoutError(f"the adapter kept the connection open {timeout} s") from None

    def events(self, name: str) -> list[dict]:
        return [m for m in self.received if m["type"] == "event" and m["event"] == name]

    def close(self) -> None:
        for proc in self.terminal_processes:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        for f in (self.wfile, self.rfile):
            try:
                f.close()
            except OSError:
                pass
        if self.sock is not None:
            self.sock.close()
        self.check_schema()


# --- processes, without psutil --------------------------------------------------------------
def process_start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks), or None if there is no such
    process or it is a zombie. With the pid it names one process even if pids are reused."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    if fields[0] == b"Z":
        return None
    return int(fields[19])


def descendants(root: int) -> dict[int, int]:
    """{pid: start time} of every live process below `root`, from /proc/*/stat."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(b")") + 2:].split()
            children.setdefault(int(fields[1]), []).append(int(name))
    out: dict[int, int] = {}
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            start = process_start_time(child)
            if start is not None:
                out[child] = start
            stack.append(child)
    return out


def still_alive(processes: dict[int, int]) -> list[int]:
    """The pids of `processes` ({pid: start time}) that still run (same start time)."""
    return [pid for pid, start in processes.items() if process_start_time(pid) == start]


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def marker_line(path: str | os.PathLike, name: str) -> int:
    """The 1-based line of `# @name` (Python) or `// @name` (C, Go) in a fixture program."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith((f"# @{name}", f"// @{name}")):
                return number
    raise LookupError(f"no '# @{name}' marker in {path}")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether some socket listens on 127.0.0.1:port (state 0A in /proc/net/tcp, proc(5)),
    found without connecting (a debugpy server takes one client)."""
    with open("/proc/net/tcp") as f:
        return any(f"0100007F:{port:04X}" == line.split()[1] and line.split()[3] == "0A"
                   for line in list(f)[1:])

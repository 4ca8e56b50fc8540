"""A blocking DAP client for the latency benchmarks: the least client overhead possible.

Role: benchmark support, shared by bench_dap.py (debugpy) and bench_goroutines.py (Delve). No
reader thread, no validation: it writes a request and reads until its response, parking the
events it passes on the way. Tests use tests/e2e/dapclient.py instead, which checks every
message against the DAP schema.
"""
from __future__ import annotations

import json
import subprocess
import time


class BlockingDapClient:
    """DAP over a pair of binary streams; `arguments[command]` holds what `timed` sends."""

    def __init__(self, rfile, wfile):
        self.rfile, self.wfile = rfile, wfile
        self.seq = 0
        self.events: list[dict] = []
        self.responses: dict[int, dict] = {}
        """Responses read while waiting for an event (Delve answers `attach` before its
        `initialized`, debugpy after), by request seq."""
        self.arguments: dict[str, dict] = {}

    def send(self, command: str, arguments: dict) -> int:
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command,
                           "arguments": arguments}).encode()
        self.wfile.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.wfile.flush()
        return self.seq

    def _read(self) -> dict:
        length = 0
        while True:
            line = self.rfile.readline()
            if not line:
                raise EOFError("the peer closed the connection")
            if line in (b"\r\n", b"\n"):
                break
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        return json.loads(self.rfile.read(length))

    def wait_response(self, seq: int) -> dict:
        while True:
            message = self.responses.pop(seq, None) or self._read()
            if message["type"] == "response" and message["request_seq"] == seq:
                if not message["success"]:
                    raise RuntimeError(f"{message['command']} failed: {message}")
                return message
            if message["type"] == "event":
                self.events.append(message)
            elif message["type"] == "response":
                self.responses[message["request_seq"]] = message

    def wait_event(self, name: str) -> dict:
        for i, event in enumerate(self.events):
            if event["event"] == name:
                return self.events.pop(i)
        while True:
            message = self._read()
            if message["type"] == "event":
                if message["event"] == name:
                    return message
                self.events.append(message)
            elif message["type"] == "response":
                self.responses[message["request_seq"]] = message

    def call(self, command: str, arguments: dict) -> dict:
        return self.wait_response(self.send(command, arguments)).get("body", {})

    def timed(self, command: str) -> int:
        """Nanoseconds from sending `command` (with `arguments[command]`) to its response."""
        start = time.perf_counter_ns()
        self.wait_response(self.send(command, self.arguments[command]))
        return time.perf_counter_ns() - start


def end_adapter(proc: subprocess.Popen, timeout: float = 15.0) -> None:
    """Close a DAP server's stdin (the session's end) and wait for it; killed if it lingers."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

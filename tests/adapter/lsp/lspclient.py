"""A tiny LSP client for the tests: JSON-RPC 2.0 with Content-Length framing over a child
process's stdin/stdout (the LSP base protocol), a reader thread, and `expect` helpers."""
from __future__ import annotations

import json
import queue
import subprocess
import threading
import time


class LspClient:
    def __init__(self, argv: list[str], cwd: str, env: dict | None = None):
        self.process = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.messages: queue.Queue = queue.Queue()
        self.seen: list[dict] = []
        self._next_id = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            headers = {}
            while True:
                line = stream.readline()
                if not line:
                    self.messages.put(None)
                    return
                line = line.decode("ascii").strip()
                if not line:
                    break
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            body = stream.read(int(headers["content-length"]))
            self.messages.put(json.loads(body))

    def _send(self, message: dict) -> None:
        data = json.dumps(message).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(data) + data)
        self.process.stdin.flush()

    def notify(self, method: str, params) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params, timeout: float = 60) -> object:
        self._next_id += 1
        ident = self._next_id
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        response = self.expect(lambda m: m.get("id") == ident and "method" not in m, timeout)
        if "error" in response:
            raise AssertionError(f"{method} failed: {response['error']}")
        return response.get("result")

    def expect(self, predicate, timeout: float = 60) -> dict:
        """The first message (seen before or arriving within `timeout`) that matches.
        Server requests met on the way are answered with a null result."""
        for message in self.seen:
            if predicate(message):
                self.seen.remove(message)
                return message
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching message within {timeout} s; seen: "
                                     f"{[m.get('method', m.get('id')) for m in self.seen]}")
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                continue
            if message is None:
                raise AssertionError("the server closed its output; stderr:\n"
                                     + self.process.stderr.read().decode(errors="replace"))
            if "method" in message and "id" in message:
                self._send({"jsonrpc": "2.0", "id": message["id"], "result": None})
            if predicate(message):
                return message
            self.seen.append(message)

    def shutdown(self) -> int:
        self.request("shutdown", None)
        self.notify("exit", None)
        try:
            return self.process.wait(10)
        finally:
            if self.process.poll() is None:
                self.process.kill()

"""`initialize` of a real `ptdebug dap` process announces what ptdebug serves whatever the
backend, among them `supportsSteppingGranularity` (instruction steps: in a recorded history by
features/reverse.py, live by Delve), which VS Code needs to step by instruction in the
Disassembly view (issue 16)."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(60)


def _read_message(stream) -> dict:
    length = None
    while True:
        line = stream.readline()
        assert line, "the adapter closed its output before answering"
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode().partition(":")
        if name.lower() == "content-length":
            length = int(value)
    assert length is not None, "a message without Content-Length"
    return json.loads(stream.read(length))


def test_initialize_announces_stepping_granularity():
    adapter = subprocess.Popen([sys.executable, "-m", "adapter.cli", "dap"], cwd=ROOT,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE)
    try:
        body = json.dumps({"seq": 1, "type": "request", "command": "initialize",
                           "arguments": {"adapterID": "ptdebug", "clientID": "pytest",
                                         "linesStartAt1": True, "columnsStartAt1": True,
                                         "pathFormat": "path"}}).encode()
        adapter.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        adapter.stdin.flush()
        while True:
            message = _read_message(adapter.stdout)
            if message.get("type") == "response":
                break
        assert message["command"] == "initialize" and message["success"], message
        capabilities = message["body"]
        assert capabilities.get("supportsSteppingGranularity") is True, capabilities
        assert capabilities.get("supportsConfigurationDoneRequest") is True
    finally:
        adapter.stdin.close()
        try:
            adapter.wait(timeout=10)
        except subprocess.TimeoutExpired:
            adapter.kill()
            adapter.wait()
        adapter.stdout.close()
        adapter.stderr.close()

"""ptdebug's own CPU per relayed backend response: the body written as the bytes it came in
(`Request.relay`) versus parsed and encoded again (`Request.respond_like`), side by side; and
the floor any proxy process written in Python pays on this machine, for comparison.

Layer: benchmark (imports adapter.protocol only). In memory, no pipes and no peers: a stream
of framed Delve-shaped `stackTrace` responses is read by MessageReader, each is answered to a
client Channel writing to /dev/null, by one path and then the other, alternating rounds; best
round of each. This isolates the hop's CPU work from the wake-ups that the end-to-end figures
in bench_goroutines / bench_dap include.

The floor: a client times framed round trips to an echo process over pipes, straight and
through a minimal relay process (read a frame, write it on; no parsing, one thread), the two
alternating. What the relay adds is what one more Python process in the path costs before
it does any work (two more pipe hops, two more wake-ups).

The C floor: the same against a Delve-like TCP peer, straight and through a process running
only the fast relay's C core (adapter/protocol/relay.py) with `stackTrace` plain: what the
fast path costs on this machine before Python does anything at all.

    .venv/bin/python -m benchmarks.bench_relay [--quick] [--json]
"""
from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import time

from adapter.protocol.channel import Channel
from adapter.protocol.framing import MessageReader, MessageWriter
from adapter.protocol.messages import Request


def _stack_trace_response(frames: int) -> bytes:
    """A `stackTrace` answer as Delve writes it (compact, body last)."""
    body = {"stackFrames": [
        {"id": 1000 + i, "name": f"main.worker{i}", "source": {
            "name": "main.go", "path": "/home/user/src/service/cmd/worker/main.go"},
         "line": 30 + i, "column": 0, "instructionPointerReference": f"0x{0x4a1b2c + i:x}",
         "presentationHint": "normal"} for i in range(frames)], "totalFrames": frames}
    message = {"seq": 0, "type": "response", "request_seq": 55, "success": True,
               "command": "stackTrace", "body": body}
    data = json.dumps(message, separators=(",", ":")).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(data), data)


class _NoHandlers:
    pass


def _round(stream: bytes, count: int, verbatim: bool) -> float:
    """Seconds per response to read it and answer the client's request with it."""
    with open(os.devnull, "wb") as sink:
        client = Channel(MessageReader(io.BytesIO(b"")), MessageWriter(sink), _NoHandlers(),
                         "client")
        reader = MessageReader(io.BytesIO(stream))
        request_raw = {"seq": 9, "type": "request", "command": "stackTrace",
                       "arguments": {"threadId": 1}}
        start = time.perf_counter()
        for _ in range(count):
            response = reader.read_message()
            request = Request(request_raw, client)
            if verbatim:
                request.relay(response)
            else:
                request.respond_like(response)
        return (time.perf_counter() - start) / count


_FRAMES = r"""
import sys
def read(f):
    line = f.readline()
    if not line:
        return None
    f.readline()
    return f.read(int(line.split(b":")[1]))
def write(f, body):
    f.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    f.flush()
"""
_ECHO = _FRAMES + r"""
while (body := read(sys.stdin.buffer)) is not None:
    write(sys.stdout.buffer, body)
"""
_RELAY = _FRAMES + r"""
import subprocess
echo = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE)
while (body := read(sys.stdin.buffer)) is not None:
    write(echo.stdin, body)
    write(sys.stdout.buffer, read(echo.stdout))
echo.stdin.close()
echo.wait()
"""


def _process_hop_floor(requests: int) -> dict:
    """Median and p99 round trip (us) to an echo process, straight and through a relay."""
    paths = {"straight": [sys.executable, "-c", _ECHO],
             "through_relay": [sys.executable, "-c", _RELAY, _ECHO]}
    procs = {name: subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
             for name, argv in paths.items()}
    body = b'{"seq":1,"type":"request","command":"stackTrace","arguments":{"threadId":1}}'
    frame = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    samples: dict[str, list[int]] = {name: [] for name in paths}
    try:
        for i in range(requests + 200):  # the first 200 of each warm up
            for name in (paths if i % 2 == 0 else reversed(list(paths))):
                proc = procs[name]
                start = time.perf_counter_ns()
                proc.stdin.write(frame)
                proc.stdin.flush()
                line = proc.stdout.readline()
                proc.stdout.readline()
                proc.stdout.read(int(line.split(b":")[1]))
                if i >= 200:
                    samples[name].append(time.perf_counter_ns() - start)
    finally:
        for proc in procs.values():
            proc.stdin.close()
            proc.wait(10)
    result: dict = {}
    for name, values in samples.items():
        values.sort()
        result[f"{name}_median_us"] = round(statistics.median(values) / 1e3, 1)
        result[f"{name}_p99_us"] = round(values[int(len(values) * 0.99)] / 1e3, 1)
    result["relay_adds_median_us"] = round(result["through_relay_median_us"]
                                           - result["straight_median_us"], 1)
    return result


# A Delve stand-in for the C floor: answers each request on its TCP connection at once, as
# Delve writes a response (compact, seq first, body last; the header and the body in two
# writes, as go-dap's WriteBaseMessage does on Delve's unbuffered connection).
_TCP_PEER = _FRAMES + r"""
import json, socket
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rfile = conn.makefile("rb")
body = {"stackFrames": [{"id": 1000, "name": "main.work", "line": 31, "column": 0}],
        "totalFrames": 1}
while (data := read(rfile)) is not None:
    request = json.loads(data)
    answer = json.dumps({"seq": 0, "type": "response", "request_seq": request["seq"],
                         "success": True, "command": request["command"], "body": body},
                        separators=(",", ":")).encode()
    conn.sendall(b"Content-Length: %d\r\n\r\n" % len(answer))
    conn.sendall(answer)
"""
# The C relay alone: the core of adapter/protocol/relay.py between stdin/stdout and the peer,
# `stackTrace` plain; Python only waits for the end.
_C_RELAY = r"""
import socket, sys
from adapter.protocol import _fastrelay
sock = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
core = _fastrelay.Core(1)
backend_python, backend_core = socket.socketpair()
core.attach_backend(sock.fileno(), backend_core.fileno())
core.set_plain({"stackTrace": [("threadId", _fastrelay.KINDS["integer"], True, False)]})
client_python, client_core = socket.socketpair()
core.start_client(0, client_core.fileno(), b"")
while client_python.recv(65536):
    pass
print(core.stats(), file=sys.stderr)
"""


def _peer() -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", _TCP_PEER], stdout=subprocess.PIPE)
    return proc, int(proc.stdout.readline())


def _c_relay_floor(requests: int, variants: dict[str, dict] | None = None) -> dict:
    """Median and p99 round trip (us) to a Delve-like TCP peer, straight and through the C
    relay process (what the fast path costs before Python does anything); `variants` adds
    relay processes run with other environment settings (name -> variables), side by side."""
    import socket
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    straight_peer, straight_port = _peer()
    sock = socket.create_connection(("127.0.0.1", straight_port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    paths = {"straight": (sock.makefile("rb"), sock.makefile("wb"))}
    peers, relays = [straight_peer], []
    for name, env in {"through_c_relay": {}, **(variants or {})}.items():
        relay_peer, relay_port = _peer()
        relay = subprocess.Popen([sys.executable, "-c", _C_RELAY, str(relay_port)],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=root,
                                 env=dict(os.environ, **env))
        paths[name] = (relay.stdout, relay.stdin)
        peers.append(relay_peer)
        relays.append(relay)
    names = list(paths)
    samples: dict[str, list[int]] = {name: [] for name in paths}
    try:
        for i in range(requests + 200):
            for name in names[i % len(names):] + names[:i % len(names)]:
                rfile, wfile = paths[name]
                body = b'{"seq":%d,"type":"request","command":"stackTrace",' \
                       b'"arguments":{"threadId":1}}' % (i + 1)
                start = time.perf_counter_ns()
                wfile.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
                wfile.flush()
                line = rfile.readline()
                rfile.readline()
                answer = json.loads(rfile.read(int(line.split(b":")[1])))
                if i >= 200:
                    samples[name].append(time.perf_counter_ns() - start)
                if answer["request_seq"] != i + 1:
                    raise RuntimeError(f"{name}: answer to {answer['request_seq']}, not {i + 1}")
    finally:
        sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        for relay in relays:
            relay.stdin.close()
        for proc in (*relays, *peers):
            proc.wait(10)
    result: dict = {}
    for name, values in samples.items():
        values.sort()
        result[f"{name}_median_us"] = round(statistics.median(values) / 1e3, 1)
        result[f"{name}_p99_us"] = round(values[int(len(values) * 0.99)] / 1e3, 1)
    for name in names[1:]:
        key = "relay_adds_median_us" if name == "through_c_relay" else f"{name}_adds_median_us"
        result[key] = round(result[f"{name}_median_us"] - result["straight_median_us"], 1)
    return result


def run(quick: bool = False) -> dict:
    count, rounds = (500, 3) if quick else (3000, 7)
    result: dict = {"responses_per_round": count, "rounds": rounds}
    for frames in (1, 20, 100):
        frame = _stack_trace_response(frames)
        stream = frame * count
        best = {"relay_verbatim": float("inf"), "re_encoded": float("inf")}
        for i in range(rounds):
            order = (True, False) if i % 2 == 0 else (False, True)
            for verbatim in order:
                seconds = _round(stream, count, verbatim)
                key = "relay_verbatim" if verbatim else "re_encoded"
                best[key] = min(best[key], seconds)
        result[f"stackTrace_{frames}_frames"] = {
            "message_bytes": len(frame),
            "relay_verbatim_us": round(best["relay_verbatim"] * 1e6, 1),
            "re_encoded_us": round(best["re_encoded"] * 1e6, 1),
            "verbatim_vs_re_encoded": round(best["relay_verbatim"] / best["re_encoded"], 3)}
    result["python_process_hop_floor"] = _process_hop_floor(500 if quick else 3000)
    result["c_relay_floor"] = _c_relay_floor(500 if quick else 3000)
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    result = run(quick="--quick" in argv)
    if "--json" in argv:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

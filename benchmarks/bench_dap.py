"""DAP request latency through `ptdebug dap` in front of debugpy, against debugpy alone.

Both sessions run at once, on the same kind of debuggee stopped at the same breakpoint; the
requests (a stackTrace, scopes, variables, evaluate mix) alternate between the two, one cycle
each, so machine noise falls on both alike. Reported: median and p99 latency of each path and
the added latency of ptdebug as a ratio (target: at most +10 % at the median and at p99).
A second pair of sessions does the same against a stand-in peer that answers at once, which
isolates ptdebug's own hop in microseconds (debugpy's own latency hides it in the first pair).

    .venv/bin/python -m benchmarks.bench_dap [--quick] [--json]
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import tempfile

from benchmarks.dap_client import BlockingDapClient

ROOT = pathlib.Path(__file__).resolve().parent.parent

PROGRAM = '''
import time
def handler(request_id, payload):
    tokens = list(range(64))
    cache = {"k%d" % i: i * i for i in range(32)}
    score = sum(tokens) / len(tokens)
    time.sleep(0)  # @stop
    return score, cache

handler(7, b"x" * 100)
'''

CYCLE = ("stackTrace", "scopes", "variables", "evaluate")

# A stand-in for debugpy's adapter that answers every request at once with a body of the same
# shape and size as debugpy's: run with and without ptdebug in front, it isolates the cost of
# ptdebug's own hop (framing, checks, routing, two more pipe crossings).
INSTANT_PEER = r'''
import json, sys
r, w = sys.stdin.buffer, sys.stdout.buffer
seq = 0
def send(m):
    global seq
    seq += 1
    m["seq"] = seq
    b = json.dumps(m).encode()
    w.write(b"Content-Length: %d\r\n\r\n%s" % (len(b), b))
    w.flush()
frames = [{"id": i + 1, "name": "handler", "line": 7, "column": 1,
           "source": {"path": "/srv/service.py", "name": "service.py"}} for i in range(3)]
variables = [{"name": "k%d" % i, "value": str(i * i), "type": "int", "evaluateName": "k%d" % i,
              "variablesReference": 0} for i in range(32)]
bodies = {"stackTrace": {"stackFrames": frames, "totalFrames": 3},
          "scopes": {"scopes": [{"name": "Locals", "variablesReference": 5, "expensive": False}]},
          "variables": {"variables": variables},
          "evaluate": {"result": "95.0", "type": "float", "variablesReference": 0},
          "initialize": {"supportsConfigurationDoneRequest": True}}
launch = None
while True:
    length = 0
    while True:
        line = r.readline()
        if not line:
            sys.exit(0)
        if line in (b"\r\n", b"\n"):
            break
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    m = json.loads(r.read(length))
    if m["type"] != "request":
        continue
    if m["command"] == "launch":
        launch = m
        send({"type": "event", "event": "initialized"})
        continue
    send({"type": "response", "request_seq": m["seq"], "command": m["command"],
          "success": True, "body": bodies.get(m["command"], {})})
    if m["command"] == "configurationDone":
        send({"type": "response", "request_seq": launch["seq"], "command": "launch",
              "success": True})
        send({"type": "event", "event": "stopped", "body": {"reason": "breakpoint",
                                                             "threadId": 1}})
    if m["command"] == "disconnect":
        sys.exit(0)
'''


class _Session(BlockingDapClient):
    """A debugpy session (through ptdebug or not) stopped at `# @stop` of the fixture."""

    def __init__(self, argv: list[str], program: str, env: dict | None = None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=ROOT, env=env)
        super().__init__(self.proc.stdout, self.proc.stdin)
        self.call("initialize", {"clientID": "bench", "adapterID": "python",
                                 "linesStartAt1": True, "columnsStartAt1": True,
                                 "pathFormat": "path"})
        launch = self.send("launch", {"program": program, "console": "internalConsole",
                                      "justMyCode": True})
        self.wait_event("initialized")
        with open(program) as source:
            line = next(i for i, text in enumerate(source, 1) if text.rstrip()
                        .endswith("# @stop"))
        self.call("setBreakpoints", {"source": {"path": program}, "breakpoints": [{"line": line}]})
        self.call("configurationDone", {})
        self.wait_response(launch)
        self.thread = self.wait_event("stopped")["body"]["threadId"]
        frames = self.call("stackTrace", {"threadId": self.thread})["stackFrames"]
        self.frame = frames[0]["id"]
        scopes = self.call("scopes", {"frameId": self.frame})["scopes"]
        self.locals = scopes[0]["variablesReference"]
        self.arguments = {
            "stackTrace": {"threadId": self.thread, "startFrame": 0, "levels": 20},
            "scopes": {"frameId": self.frame},
            "variables": {"variablesReference": self.locals},
            "evaluate": {"expression": "score * 2 + len(cache)", "frameId": self.frame,
                         "context": "repl"},
        }

    def close(self) -> None:
        try:
            self.send("disconnect", {"terminateDebuggee": True})
            self.wfile.close()
            self.proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait(10)


def _percentile(sorted_values: list[int], q: float) -> float:
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index] / 1000.0  # microseconds


def _stats(samples: list[int]) -> dict:
    s = sorted(samples)
    return {"n": len(s), "median_us": _percentile(s, 0.5), "p99_us": _percentile(s, 0.99)}


PTDEBUG = [sys.executable, "-m", "adapter.cli", "dap", "--log-level", "ERROR"]


def _side_by_side(direct: _Session, proxied: _Session, requests: int) -> dict:
    """`requests` timed requests on each session, one CYCLE on each in turn (the order
    alternating), after a warm-up; the figures of both and ptdebug's added latency."""
    samples = {"direct": {c: [] for c in CYCLE}, "ptdebug": {c: [] for c in CYCLE}}
    for _ in range(20):  # warm both paths up (imports, caches) before measuring
        for command in CYCLE:
            direct.timed(command)
            proxied.timed(command)
    for i in range(requests // len(CYCLE)):
        order = (("direct", direct), ("ptdebug", proxied))
        for name, session in (order if i % 2 == 0 else order[::-1]):
            for command in CYCLE:
                samples[name][command].append(session.timed(command))
    result: dict = {}
    for name in ("direct", "ptdebug"):
        every = [v for values in samples[name].values() for v in values]
        result[name] = _stats(every)
        result[name]["per_command_median_us"] = {c: _stats(v)["median_us"]
                                                 for c, v in samples[name].items()}
    for q in ("median_us", "p99_us"):
        added = result["ptdebug"][q] - result["direct"][q]
        result["added_" + q] = round(added, 1)
        result["added_" + q.replace("_us", "")] = round(added / result["direct"][q], 4)
    return result


def run(quick: bool = False) -> dict:
    """10,000 requests per path (1,000 with quick) against debugpy, and as many against an
    instant stand-in peer (ptdebug's own hop); returns the figures as a dict."""
    requests = int(os.environ.get("BENCH_DAP_REQUESTS", 0)) or (1_000 if quick else 10_000)
    result: dict = {"requests_per_path": requests, "mix": list(CYCLE)}
    with tempfile.TemporaryDirectory(prefix="bench_dap_") as tmp:
        program = os.path.join(tmp, "service.py")
        with open(program, "w") as f:
            f.write(PROGRAM)
        peer = os.path.join(tmp, "instant_peer.py")
        with open(peer, "w") as f:
            f.write(INSTANT_PEER)
        direct = _Session([sys.executable, "-m", "debugpy.adapter"], program)
        proxied = _Session(PTDEBUG, program)
        try:
            result["vs_debugpy"] = _side_by_side(direct, proxied, requests)
        finally:
            direct.close()
            proxied.close()
        env = dict(os.environ, PTDEBUG_DEBUGPY_ADAPTER=f"{sys.executable} {peer}")
        direct = _Session([sys.executable, peer], program)
        proxied = _Session(PTDEBUG, program, env=env)
        try:
            result["hop"] = _side_by_side(direct, proxied, requests)
        finally:
            direct.close()
            proxied.close()
    figures = result["vs_debugpy"]
    result["target_added_max"] = 0.10
    result["meets_target"] = figures["added_median"] <= 0.10 and figures["added_p99"] <= 0.10
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    result = run(quick="--quick" in argv)
    if "--json" in argv:
        print(json.dumps(result, indent=2))
        return 0
    for section, title in (("vs_debugpy", "in front of debugpy"),
                           ("hop", "in front of an instant peer (ptdebug's own hop)")):
        figures = result[section]
        print(f"{title}:")
        for name in ("direct", "ptdebug"):
            r = figures[name]
            print(f"  {name:8s} n={r['n']} median={r['median_us']:.0f} us "
                  f"p99={r['p99_us']:.0f} us  per command median: {r['per_command_median_us']}")
        print(f"  added: median {figures['added_median_us']:+.0f} us "
              f"({figures['added_median']:+.1%}), p99 {figures['added_p99_us']:+.0f} us "
              f"({figures['added_p99']:+.1%})")
    print(f"target (in front of debugpy): at most +10% at median and p99: "
          f"{'met' if result['meets_target'] else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

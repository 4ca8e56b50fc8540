"""Attach to a running service by pid and leave it (issue 34, "Show that it is fast" (a), (b)),
side by side in one run with each debugger's own way in:

- Python: `ptdebug dap` attach {pid} to tests/fixtures/programs/py_detach_service.py started
  plainly, against `ptdebug dap` attach {connect} to the same service started under
  `python -m debugpy --listen` (the way in that needs no injection: the floor of an attach).
- Go: `ptdebug dap` attach {pid} to tests/fixtures/programs/go_service (net/http), against
  Delve's own DAP server (`dlv dap`) attach {mode: local, processId} to the same binary.

Each round: a fresh service; time from the attach request to its answer (configurationDone
sent at `initialized`), then to the first `stopped` possible (a `pause` of one thread, answered
by `stopped`); then `continue`, `disconnect {terminateDebuggee: false}`, and the time from the
disconnect to the service's first answer to a request (the service asked in a loop).

Role: benchmark; figures go to docs/PERFORMANCE.md.

    .venv/bin/python -m benchmarks.bench_attach [--rounds N] [--json] [--no-go]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

from benchmarks.dap_client import BlockingDapClient, end_adapter

ROOT = pathlib.Path(__file__).resolve().parents[1]
PY_SERVICE = ROOT / "tests" / "fixtures" / "programs" / "py_detach_service.py"
GO_SERVICE = ROOT / "tests" / "fixtures" / "programs" / "go_service"
ADAPTER = [sys.executable, "-m", "adapter.cli", "dap"] + (["--log-file", os.environ["BENCH_ATTACH_LOG"], "--log-level", "DEBUG"] if os.environ.get("BENCH_ATTACH_LOG") else [])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening(port: int) -> bool:
    """Whether a socket listens on 127.0.0.1:`port`, read from /proc/net/tcp without connecting
    (debugpy's server takes one client: a probe connection would be it)."""
    with open("/proc/net/tcp") as table:
        return any(fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A"
                   for fields in (line.split() for line in list(table)[1:]))


def _ask_python(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
            sock.sendall(b"sum\n")
            return sock.makefile("rb").readline().startswith(b"ok ")
    except OSError:
        return False


def _ask_go(address: str) -> bool:
    try:
        return urllib.request.urlopen(f"http://{address}/work", timeout=2).status == 200
    except OSError:
        return False


def _serving_after(ask, started: float, limit: float = 20.0) -> float:
    """Seconds from `started` to the service's first good answer."""
    while time.monotonic() - started < limit:
        if ask():
            return time.monotonic() - started
        time.sleep(0.005)
    raise TimeoutError("the service did not answer after the disconnect")


def _session(command: list[str], attach: dict, ask, backend_name: str,
             port: int | None = None) -> dict:
    """One attach/pause/disconnect session through the DAP server `command`: on its stdio, or
    on 127.0.0.1:`port` where it listens there (`dlv dap` has no stdio mode)."""
    proc = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    if port is None:
        client = BlockingDapClient(proc.stdout, proc.stdin)
    else:
        deadline = time.monotonic() + 20
        while not _listening(port) and time.monotonic() < deadline:
            time.sleep(0.01)
        sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        client = BlockingDapClient(sock.makefile("rb"), sock.makefile("wb"))
    try:
        client.call("initialize", {"adapterID": "ptdebug", "linesStartAt1": True,
                                   "columnsStartAt1": True, "pathFormat": "path"})
        started = time.monotonic()
        request = client.send("attach", attach)
        client.wait_event("initialized")
        client.call("configurationDone", {})
        response = client.wait_response(request)
        if not response.get("success"):
            raise RuntimeError(f"{backend_name}: attach failed: {response.get('message')}")
        attached = time.monotonic() - started
        threads = client.call("threads", {})["threads"]
        client.call("pause", {"threadId": threads[0]["id"]})
        client.wait_event("stopped")
        stoppable = time.monotonic() - started
        client.call("continue", {"threadId": threads[0]["id"]})
        leaving = time.monotonic()
        client.call("disconnect", {"terminateDebuggee": False})
        serving = _serving_after(ask, leaving)
        return {"attach_s": attached, "first_stop_s": stoppable, "serving_again_s": serving}
    finally:
        end_adapter(proc)


def _python_round(by_pid: bool) -> dict:
    debugpy_port = None if by_pid else _free_port()
    prefix = [sys.executable] if by_pid else [sys.executable, "-m", "debugpy", "--listen",
                                              f"127.0.0.1:{debugpy_port}"]
    service = subprocess.Popen([*prefix, str(PY_SERVICE), "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    try:
        port = int(service.stdout.readline().split()[1])
        if by_pid:
            attach = {"pid": service.pid}
        else:
            deadline = time.monotonic() + 20
            while not _listening(debugpy_port) and time.monotonic() < deadline:
                time.sleep(0.05)
            attach = {"connect": {"host": "127.0.0.1", "port": debugpy_port}}
        time.sleep(0.3)  # the service settled, as one a user attaches to
        return _session(ADAPTER, attach, lambda: _ask_python(port),
                        "ptdebug pid" if by_pid else "ptdebug connect")
    finally:
        service.kill()
        service.wait()


def _go_binary(out_dir: str) -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    binary = os.path.join(out_dir, "go_service")
    subprocess.run([go, "build", "-gcflags=all=-N -l", "-o", binary, "."], cwd=GO_SERVICE,
                   check=True, env=dict(os.environ, CGO_ENABLED="0"))
    return binary


def _dlv() -> str:
    from adapter.backends.delve_process import find_dlv
    return find_dlv()


def _go_round(binary: str, through_ptdebug: bool) -> dict:
    service = subprocess.Popen([binary], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                               text=True)
    try:
        address = re.search(r"listening on (\S+)", service.stdout.readline()).group(1)
        time.sleep(0.3)
        if through_ptdebug:
            return _session(ADAPTER, {"backend": "go", "pid": service.pid},
                            lambda: _ask_go(address), "ptdebug")
        port = _free_port()
        return _session([_dlv(), "dap", "--listen", f"127.0.0.1:{port}"],
                        {"mode": "local", "processId": service.pid}, lambda: _ask_go(address),
                        "dlv dap", port)
    finally:
        service.kill()
        service.wait()


def _summary(rounds: list[dict]) -> dict:
    return {key: {"median": statistics.median(r[key] for r in rounds),
                  "min": min(r[key] for r in rounds), "max": max(r[key] for r in rounds)}
            for key in rounds[0]}


def run(rounds: int = 5, go: bool = True) -> dict:
    results: dict = {"python": {"ptdebug_pid": [], "ptdebug_connect": []}}
    for _ in range(rounds):  # interleaved: the machine's load falls on both alike
        results["python"]["ptdebug_pid"].append(_python_round(True))
        results["python"]["ptdebug_connect"].append(_python_round(False))
    if go:
        results["go"] = {"ptdebug_pid": [], "dlv_dap_pid": []}
        with tempfile.TemporaryDirectory(prefix="ptdebug-bench-attach-") as out_dir:
            binary = _go_binary(out_dir)
            for _ in range(rounds):
                results["go"]["ptdebug_pid"].append(_go_round(binary, True))
                results["go"]["dlv_dap_pid"].append(_go_round(binary, False))
    return {language: {way: _summary(runs) for way, runs in ways.items()}
            for language, ways in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-go", action="store_true")
    args = parser.parse_args()
    report = run(args.rounds, go=not args.no_go)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for language, ways in report.items():
        for way, figures in ways.items():
            cells = ", ".join(f"{key} {v['median']:.3f} s ({v['min']:.3f}-{v['max']:.3f})"
                              for key, v in figures.items())
            print(f"{language:7} {way:16} {cells}")


if __name__ == "__main__":
    main()

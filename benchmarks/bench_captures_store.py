"""What a second debug session's capture adds to the captures directory (issue 33: every
session copied libtorch_cpu.so, ~490 MB, into its capture; two sessions held 978 MB), through
`ptdebug dap` in front of real debugpy.

Two sessions, one after the other, of tests/fixtures/programs/py_request_service.py with one
record breakpoint (a 2,000-instruction window at `# @record_small`) keep one capture each in
one captures directory. Figures:
  first_session_bytes       the directory after the first session (its capture and the
                            program files it ran through, put into the store)
  second_session_bytes      what the second session added (target: about its trace alone)
  second_streams_bytes      the second capture's PT streams
  second_manifest_bytes     the second capture's manifest
  store_bytes               the store: each program file once
  per_session_copy_bytes    what a copy per session would have added (the files the second
                            capture names in the store: what main copied into each capture)
Sizes count each inode once (as `du` does).

    .venv/bin/python -m benchmarks.bench_captures_store [--json]
    ptdebug bench captures_store
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

from benchmarks.bench_capture_latency import SERVICE, _marker, _problem
from benchmarks.dap_client import BlockingDapClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
PTDEBUG = [sys.executable, "-m", "adapter.cli", "dap", "--log-level", "ERROR"]


def disk_bytes(directory: pathlib.Path) -> int:
    seen, total = set(), 0
    for folder, _, files in os.walk(directory):
        for name in files:
            st = os.lstat(os.path.join(folder, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def _session(captures: pathlib.Path) -> dict:
    """One session with one captured request; the capture's `ptdebug/capture` body."""
    adapter = subprocess.Popen(PTDEBUG, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=ROOT)
    client = BlockingDapClient(adapter.stdout, adapter.stdin)
    try:
        client.call("initialize", {"adapterID": "ptdebug", "clientID": "bench",
                                   "linesStartAt1": True, "columnsStartAt1": True})
        launch = client.send("launch", {"program": str(SERVICE),
                                        "args": ["plain,small", "0.5", "60"],
                                        "console": "internalConsole",
                                        "captures": str(captures)})
        client.wait_event("initialized")
        client.call("setBreakpoints", {"source": {"path": str(SERVICE)}, "breakpoints": [
            {"line": _marker("record_small"), "mode": "record", "condition": "kind == 'small'",
             "recordWindow": {"instructions": 2000}}]})
        client.call("configurationDone", {})
        client.wait_response(launch)
        while not any(e["event"] in ("ptdebug/capture", "terminated", "exited") or _problem(e)
                      for e in client.events):
            message = client._read()
            if message["type"] == "event":
                client.events.append(message)
        client.send("disconnect", {"terminateDebuggee": True})
        adapter.stdin.close()
        adapter.wait(30)
    finally:
        if adapter.poll() is None:
            adapter.kill()
            adapter.wait()
    problems = [_problem(e) for e in client.events if _problem(e)]
    if problems:
        raise RuntimeError("; ".join(problems))
    found = [e["body"] for e in client.events if e["event"] == "ptdebug/capture"]
    if not found:
        raise RuntimeError("no capture was announced")
    return found[0]


def run(quick: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="ptdebug-bench-store-") as work:
        captures = pathlib.Path(work) / "captures"
        _session(captures)
        first = disk_bytes(captures)
        capture = pathlib.Path(_session(captures)["bundle"])
        second = disk_bytes(captures) - first
        manifest = json.loads((capture / "manifest.json").read_text())
        store = captures / ".store" / "images"
        named = {i["file"].rsplit("/", 1)[-1] for i in manifest["images"]
                 if i["file"].startswith("../.store/")}
        return {
            "first_session_bytes": first,
            "second_session_bytes": second,
            "second_streams_bytes": sum(s["size"] for s in manifest["streams"]),
            "second_manifest_bytes": (capture / "manifest.json").stat().st_size,
            # (0 where there is no store: a ptdebug before issue 33, run for the comparison)
            "store_bytes": disk_bytes(store) if store.is_dir() else 0,
            "per_session_copy_bytes": sum((store / k).stat().st_size for k in named),
            "images_in_store": len(named),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    figures = run()
    print(json.dumps(figures) if options.json else
          "\n".join(f"{k}: {v}" for k, v in figures.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Attaching debugpy to a running Python process by pid, without gdb.

Layer: backends (helper of backends.debugpy). debugpy's own way (`attach {processId}`) runs
gdb to inject its code; ptdebug instead asks debugpy's adapter to wait for the debuggee
(`attach {listen}`: the adapter listens and says where in a `debugpyWaitingForServer` event),
then has adapter.python.inject start a thread in the process that runs debugpy's own attach
script pointed at that address, as debugpy's `--pid` launcher would (debugpy/server/cli.py,
attach_to_pid). The debuggee connects, and debugpy answers the `attach` as it does for a
process it injected itself.

Why a thread of its own: debugpy.connect returns only once the client has sent
`configurationDone` (pydevd's wait_for_ready_to_run); the thread ptdebug borrows to start it (a
service's main thread, mostly) is given back in milliseconds instead, and the attach thread
ends once debugpy is set up. What that thread raises is written to a report file of ptdebug's
(adapter.python.inject.report_file) and shown to the user if debugpy never connects.
"""
from __future__ import annotations

import importlib.util
import json
import os

LISTEN_HOST = "127.0.0.1"
ATTACH_THREAD = "ptdebug-attach"
"""The name of the thread that sets debugpy up in the process (it ends when it has)."""


def listen_arguments() -> dict:
    """What replaces `processId` in the `attach` sent to debugpy: listen on a free loopback
    port (debugpy's adapter picks it and tells it in debugpyWaitingForServer)."""
    return {"listen": {"host": LISTEN_HOST, "port": 0}}


def debugpy_server_dir() -> str:
    """debugpy/server of the debugpy ptdebug runs, the folder of its attach script."""
    spec = importlib.util.find_spec("debugpy")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("debugpy is not installed beside ptdebug")
    return os.path.join(next(iter(spec.submodule_search_locations)), "server")


def attach_source(host: str, port: int, log_dir: str | None, report_path: str) -> str:
    """The Python source run in the debuggee: a thread that runs debugpy's
    attach_pid_injected.attach with the setup its `--pid` launcher passes, in "connect" mode
    to the adapter at host:port."""
    setup = {"mode": "connect", "address": [host, port], "wait_for_client": False,
             "log_to": log_dir, "adapter_access_token": None}
    return (
        "import threading\n"
        "def _ptdebug_attach(server_dir, setup, report):\n"
        "    try:\n"
        "        import json, sys\n"
        "        sys.path.insert(0, server_dir)\n"
        "        try:\n"
        "            import attach_pid_injected\n"
        "        finally:\n"
        "            del sys.path[0]\n"
        "        attach_pid_injected.attach(json.loads(setup))\n"
        "    except BaseException:\n"
        "        import traceback\n"
        "        with open(report, 'w') as f:\n"
        "            f.write(traceback.format_exc())\n"
        f"threading.Thread(target=_ptdebug_attach, name={ATTACH_THREAD!r}, daemon=True, args=("
        f"{debugpy_server_dir()!r}, {json.dumps(setup)!r}, {report_path!r})).start()\n")


"""Data breakpoints on a threaded service (tests/fixtures/programs/dap_watch_service.py) through
`ptdebug dap` in front of real debugpy: an int64 KV cache and a float32 table written by a queue
worker that blocks in C after its write, a thread that blocks in Event.wait, a per-request thread
that exits, a looping writer; each with both values of `stopAllThreadsOnSuspend`. The stop is
on the writer's own thread, with the native frames of the write first and the Python frame at
the line that wrote under them."""
from __future__ import annotations

import ctypes
import os
import re

import pytest
from conftest import PROGRAMS, evaluate, launch, top_frame
from dapclient import marker_line

from adapter.features.native_frames import ProcessSymbols, _debug_file

pytestmark = pytest.mark.timeout(120)

SERVICE = PROGRAMS / "dap_watch_service.py"

WRITERS = {  # kind: (expression watched, thread name, marker of the write, old -> new)
    "queue": ("kv[2, 0]", "queue-worker", "queue_write", "from 0 to 1234567890123"),
    "event": ("table[2]", "event-writer", "event_write", "from 0.0 to 2.5"),
    "exit": ("kv[1, 1]", "request-1", "exit_write", "from 0 to -77"),
    "loop": ("kv[3, 7]", "loop-writer", "loop_write", "from 0 to 1"),
    "memmove": ("kv[1, 0]", "memmove-writer", "memmove_write", "from 0 to 5"),
}


def libc_has_debug_file() -> bool:
    symbols = ProcessSymbols(os.getpid())
    symbols.refresh()
    libc = symbols.module_at(ctypes.cast(ctypes.CDLL(None).memmove, ctypes.c_void_p).value)
    return _debug_file(libc.build_id) is not None


def armed_service(run, kind: str, **config) -> tuple[int, int]:
    """Launch the service with writer `kind`; returns (main thread, frame at # @armed)."""
    client = run.client
    launch(client, SERVICE, breakpoints=["armed"], args=[kind], **config)
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    main_thread = client.expect_stopped("breakpoint")["threadId"]
    return main_thread, top_frame(client, main_thread)["id"]


def watch(client, frame: int, expression: str) -> dict:
    info = client.call("dataBreakpointInfo", {"name": expression, "frameId": frame})
    assert info["dataId"], info
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    return body["breakpoints"][0]


def finish(run, thread_id: int, frame_id: int) -> None:
    """Clear the watches, let the service end (`stop = True`), check it exits 0."""
    client = run.client
    client.call("setDataBreakpoints", {"breakpoints": []})
    client.call("evaluate", {"expression": "globals().update(stop=True)", "frameId": frame_id,
                             "context": "repl"})
    client.call("continue", {"threadId": thread_id})
    assert client.expect_event("exited", timeout=30)["body"]["exitCode"] == 0
    client.call("disconnect", {})
    assert run.wait_exit() == 0


def test_int64_kv_cache_hit_stops_with_its_values(start_adapter):
    """Seen before: an int64 array's hit killed the hit thread (`'l'` unpacked in standard
    sizes), no `stopped` came and the session hung."""
    run = start_adapter()
    client = run.client
    main_thread, frame = armed_service(run, "queue")
    armed = watch(client, frame, "kv[2, 0]")
    client.call("continue", {"threadId": main_thread})
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert stopped["hitBreakpointIds"] == [armed["id"]]
    assert "from 0 to 1234567890123" in stopped["description"], stopped
    frames = client.call("stackTrace", {"threadId": stopped["threadId"],
                                        "levels": 40})["stackFrames"]
    python = next(f for f in frames if "instructionPointerReference" not in f)
    finish(run, stopped["threadId"], python["id"])


@pytest.mark.parametrize("stop_all", [True, False], ids=["stop_all", "writer_only"])
@pytest.mark.parametrize("kind", sorted(WRITERS))
def test_the_writer_stops_at_its_write(start_adapter, kind, stop_all):
    """Seen before: a writer that went back into C (queue.get, Event.wait) or exited was
    reported on MainThread or not at all, and a looping writer was shown at its loop head."""
    expression, name, marker, change = WRITERS[kind]
    run = start_adapter()
    client = run.client
    main_thread, frame = armed_service(run, kind, stopAllThreadsOnSuspend=stop_all)
    armed = watch(client, frame, expression)
    client.call("continue", {"threadId": main_thread})
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert stopped["hitBreakpointIds"] == [armed["id"]]
    assert change in stopped["description"], stopped
    assert stopped.get("allThreadsStopped", False) is stop_all, stopped
    threads = {t["id"]: t["name"] for t in client.call("threads")["threads"]}
    assert threads[stopped["threadId"]] == name, (threads, stopped)
    frames = client.call("stackTrace", {"threadId": stopped["threadId"],
                                        "levels": 40})["stackFrames"]
    native = [f for f in frames if "instructionPointerReference" in f]
    python = [f for f in frames if "instructionPointerReference" not in f]
    assert native and frames[0] is native[0], frames
    assert "at the write" in native[0]["name"]
    assert python[0]["line"] == marker_line(SERVICE, marker), python[0]
    assert python[0]["source"]["path"].endswith("dap_watch_service.py")
    if kind == "memmove":
        # libc's copy routine is named (before: `in 0x7f...`): from libc's separate debug
        # file, where its local symbols are (__memmove_avx_unaligned_erms behind memmove).
        assert re.search(r" in \S*mem\w+\+0x[0-9a-f]+ \(libc\.so", stopped["description"]) or (
            not libc_has_debug_file()), stopped["description"]
    # The main thread runs on only when the writer alone was stopped.
    main_frames = client.call("stackTrace", {"threadId": main_thread, "levels": 1})
    if not stop_all:
        assert not any("paused" in str(e["body"]) for e in client.events("stopped")
                       if e["body"].get("threadId") == main_thread
                       and e["body"]["reason"] != "breakpoint")
    assert evaluate(client, python[0]["id"], expression.split("[")[0] + ".dtype.name")
    assert main_frames is not None
    finish(run, stopped["threadId"], python[0]["id"])


def test_a_new_set_replaces_the_old_one_and_addresses_keep_their_names(start_adapter):
    """Seen before: one 8-byte watch replaced by a 32-byte one got `[no_register]` ("only 3
    of the four are free"), and `asAddress` on a named watch's address lost name and type."""
    run = start_adapter()
    client = run.client
    main_thread, frame = armed_service(run, "queue")
    element = client.call("dataBreakpointInfo", {"name": "kv[3, 0]", "frameId": frame})
    row = client.call("dataBreakpointInfo", {"name": "kv[2]", "frameId": frame})
    assert "bytes 0..32 of 64" in row["description"], row
    first = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": element["dataId"]}]})
    assert first["breakpoints"][0]["verified"] is True, first
    second = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": row["dataId"]}]})
    assert second["breakpoints"][0]["verified"] is True, second
    address = row["dataId"].split("/")[0]
    by_address = client.call("dataBreakpointInfo", {"name": address, "asAddress": True})
    assert by_address["dataId"] == row["dataId"]
    assert by_address["description"].startswith("kv[2]"), by_address
    client.call("continue", {"threadId": main_thread})
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert stopped["description"].startswith("kv[2] changed from [0, 0, 0, 0] to "
                                             "[1234567890123, 0, 0, 0]"), stopped
    python = next(f for f in client.call("stackTrace", {"threadId": stopped["threadId"],
                                                        "levels": 40})["stackFrames"]
                  if "instructionPointerReference" not in f)
    finish(run, stopped["threadId"], python["id"])


INJECT_FAILURE = (  # the next set_suspend in the debuggee raises once, then pydevd's is back
    "(lambda d: setattr(d, 'set_suspend', lambda *a, **k: (delattr(d, 'set_suspend'), "
    "(_ for _ in ()).throw(RuntimeError('injected by the test')))[1]))"
    "(__import__('pydevd').get_global_debugger())")


def test_a_failed_hit_is_told_and_the_next_hit_stops(start_adapter):
    """A hit whose handling fails (here pydevd raising in the writer's SIGTRAP handler) reaches
    the user as an `output` event (category important) naming the watch, the address, the
    thread and the handler's error; watching goes on and the next write stops its writer."""
    run = start_adapter()
    client = run.client
    main_thread, frame = armed_service(run, "queue")
    armed = watch(client, frame, "kv[2, 0]")
    evaluate(client, frame, INJECT_FAILURE)
    client.call("continue", {"threadId": main_thread})
    told = client.expect_event("output", pred=lambda e: "not turned into a stop"
                               in e["body"]["output"], timeout=30)["body"]
    assert told["category"] == "important", told
    address = armed["message"].split(" bytes at ")[1].split(")")[0]
    # the thread's Python name (before: its OS name, 'python' for every thread of CPython)
    for part in ("kv[2, 0]", address, "written by thread tid", "('queue-worker')",
                 "injected by the test"):
        assert part in told["output"], (part, told)
    assert not client.events("stopped")[1:], client.events("stopped")  # only the @armed stop
    # The engine is alive: the next write stops the queue worker at its write.
    client.call("evaluate", {"expression": "__import__('__main__').requests.put((2, 7))",
                             "context": "repl"})
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert stopped["hitBreakpointIds"] == [armed["id"]]
    assert "to 7" in stopped["description"], stopped
    threads = {t["id"]: t["name"] for t in client.call("threads")["threads"]}
    assert threads[stopped["threadId"]] == "queue-worker"
    python = next(f for f in client.call("stackTrace", {"threadId": stopped["threadId"],
                                                        "levels": 40})["stackFrames"]
                  if "instructionPointerReference" not in f)
    assert python["line"] == marker_line(SERVICE, "queue_write")
    finish(run, stopped["threadId"], python["id"])

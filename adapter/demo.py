"""`ptdebug demo`: a guided debug session on the shipped inference service, no VS Code needed.

Layer: a command (top). It copies the service (adapter/demo_assets/) into a temporary directory,
where debugpy treats it as the user's code, compiles its native helper there (kvcache.c, gcc -g),
starts `ptdebug dap` as a child process and drives it as a
DAP client would (its own small client on adapter.protocol's framing), printing what a user
would see: a data breakpoint on the KV cache catching the background thread's corrupting write,
a record breakpoint (condition `tokens == 0`) capturing the request path through the native
helper, the Processor Trace scope at the next stop, and stepping back through the capture to the
line where the bad value came from. Each step has a timeout; a step that fails ends the demo
with a message naming it and exit status 1. Every process it started is gone when it returns.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from adapter.hw import procfs
from adapter.protocol.framing import MessageReader, MessageWriter
from adapter.spawn import ptdebug_command

ASSETS = pathlib.Path(__file__).resolve().parent / "demo_assets"
STEP_TIMEOUT = 20.0
MAX_LINE_STEPS = 40


class DemoFailed(Exception):
    """A step of the demo did not happen as it should; the text says which and what was seen."""


class DapPeer:
    """A minimal DAP client of `ptdebug dap` over its stdio: requests, responses, events."""

    def __init__(self, argv: list[str], log):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, start_new_session=True)
        self.reader = MessageReader(self.proc.stdout)
        self.writer = MessageWriter(self.proc.stdin)
        self.seq = 0
        self.messages: queue.Queue = queue.Queue()
        self.responses: dict[int, dict] = {}
        self.events: list[dict] = []
        self._thread = threading.Thread(target=self._read, daemon=True, name="demo-dap")
        self._thread.start()

    def _read(self) -> None:
        while True:
            try:
                message = self.reader.read_message()
            except Exception as exc:  # noqa: BLE001 - any broken stream ends the session
                self.messages.put({"type": "closed", "reason": str(exc)})
                return
            if message is None:
                self.messages.put({"type": "closed", "reason": "end of stream"})
                return
            self.messages.put(message)

    def _pump(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise queue.Empty
        message = self.messages.get(timeout=remaining)
        kind = message.get("type")
        if kind == "response":
            self.responses[message["request_seq"]] = message
        elif kind == "event":
            self.events.append(message)
        elif kind == "closed":
            raise DemoFailed(f"the adapter closed the connection ({message['reason']})")

    def send(self, command: str, arguments: dict | None = None) -> int:
        self.seq += 1
        message = {"seq": self.seq, "type": "request", "command": command}
        if arguments is not None:
            message["arguments"] = arguments
        self.writer.write_message(message)
        return self.seq

    def response(self, seq: int, what: str, timeout: float = STEP_TIMEOUT) -> dict:
        deadline = time.monotonic() + timeout
        while seq not in self.responses:
            try:
                self._pump(deadline)
            except queue.Empty:
                raise DemoFailed(f"no answer to {what} within {timeout:g} s") from None
        response = self.responses.pop(seq)
        if not response.get("success"):
            raise DemoFailed(f"{what} failed: {response.get('message')} "
                             f"{(response.get('body') or {}).get('error', '')}")
        return response.get("body") or {}

    def call(self, command: str, arguments: dict | None = None,
             timeout: float = STEP_TIMEOUT) -> dict:
        return self.response(self.send(command, arguments), command, timeout)

    def event(self, name: str, what: str, match=lambda body: True,
              timeout: float = STEP_TIMEOUT) -> dict:
        """The first event `name` not taken yet whose body satisfies `match`."""
        deadline = time.monotonic() + timeout
        while True:
            for index, event in enumerate(self.events):
                if event.get("event") == name and match(event.get("body") or {}):
                    del self.events[index]
                    return event.get("body") or {}
            try:
                self._pump(deadline)
            except queue.Empty:
                seen = ", ".join(e.get("event", "?") for e in self.events[-8:]) or "none"
                raise DemoFailed(f"{what}: no '{name}' event within {timeout:g} s "
                                 f"(last events: {seen})") from None

    def close(self) -> None:
        for stream in (self.proc.stdin,):
            try:
                stream.close()
            except OSError:
                pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def marker_line(path: pathlib.Path, marker: str) -> int:
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.rstrip().endswith(f"@{marker}") or f"@{marker} " in text:
            return number
    raise DemoFailed(f"{path.name} has no @{marker} marker")


def descendants(root: int) -> list[int]:
    """Every process below `root` (children first found through /proc)."""
    parents: dict[int, list[int]] = {}
    for pid in procfs.pids():
        try:
            parent = procfs.stat(pid).ppid
        except OSError:
            continue
        parents.setdefault(parent, []).append(pid)
    found, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def copy_service(directory: str) -> pathlib.Path:
    """The service's files copied into `directory`, which the demo then debugs as the user's own
    code: in an installed ptdebug they live in site-packages, and debugpy's justMyCode skips
    code there (no breakpoint would stop)."""
    workspace = pathlib.Path(directory) / "service"
    workspace.mkdir()
    for name in ("service.py", "kvcache.c"):
        shutil.copyfile(ASSETS / name, workspace / name)
    return workspace


def build_helper(directory: str, source: pathlib.Path) -> str:
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        raise DemoFailed("no C compiler (gcc) on PATH: the demo builds its native helper with it")
    output = os.path.join(directory, "libkvcache.so")
    done = subprocess.run([compiler, "-g", "-O0", "-shared", "-fPIC", "-o", output,
                           str(source)], capture_output=True, text=True,
                          check=False)
    if done.returncode != 0:
        raise DemoFailed(f"compiling kvcache.c failed:\n{done.stderr}")
    return output


class Demo:
    def __init__(self, out, verbose: bool, workspace: pathlib.Path):
        self.out = out
        self.verbose = verbose
        self.service = workspace / "service.py"
        self.kvcache = workspace / "kvcache.c"

    def say(self, text: str = "") -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def step(self, title: str) -> None:
        self.say(f"\n==> {title}")

    def top(self, dap: DapPeer, thread_id: int) -> dict:
        frames = dap.call("stackTrace", {"threadId": thread_id, "levels": 20})["stackFrames"]
        if not frames:
            raise DemoFailed(f"thread {thread_id} has no stack")
        return frames[0]

    @staticmethod
    def place(frame: dict) -> str:
        source = frame.get("source") or {}
        source = source.get("name") or (source.get("path") or "?").rsplit("/", 1)[-1]
        return f"{frame['name']} at {source}:{frame.get('line')}"

    def run(self, dap: DapPeer, library: str) -> None:
        service = str(self.service)
        self.step("launch the inference service under ptdebug (debugpy behind it)")
        init = dap.call("initialize", {"clientID": "ptdebug-demo", "adapterID": "ptdebug",
                                       "linesStartAt1": True, "columnsStartAt1": True,
                                       "pathFormat": "path", "supportsMemoryEvent": True})
        self.say(f"service: {service} (a copy: debugpy's justMyCode skips site-packages)")
        modes = [m["mode"] for m in init.get("breakpointModes") or []]
        self.say(f"adapter breakpoint modes: {', '.join(modes)}")
        launch = dap.send("launch", {"program": service, "args": [library],
                                     "cwd": str(self.service.parent),
                                     "console": "internalConsole", "justMyCode": True,
                                     "recordWindow": {"function": "kv_update", "timeout": 15}})
        dap.event("initialized", "launch")
        ready = marker_line(self.service, "ready")
        dap.call("setBreakpoints", {"source": {"path": service},
                                    "breakpoints": [{"line": ready}]})
        dap.call("configurationDone", {})
        dap.response(launch, "launch")
        stopped = dap.event("stopped", "the breakpoint at @ready",
                            lambda b: b.get("reason") == "breakpoint")
        frame = self.top(dap, stopped["threadId"])
        self.say(f"stopped at {self.place(frame)}")

        self.step("data breakpoint on the KV cache slot 3 ('Break on Value Change')")
        dap.event("capabilities", "the data-breakpoint probe",
                  lambda b: (b.get("capabilities") or {}).get("supportsDataBreakpoints"))
        info = dap.call("dataBreakpointInfo", {"name": "cache[3]", "frameId": frame["id"]})
        if not info.get("dataId"):
            raise DemoFailed(f"cache[3] cannot be watched: {info.get('description')}")
        self.say(f"watch: {info['description']}")
        set_data = dap.call("setDataBreakpoints", {"breakpoints": [
            {"dataId": info["dataId"], "accessType": "write"}]})
        if not set_data["breakpoints"][0].get("verified"):
            raise DemoFailed(f"the data breakpoint was refused: {set_data}")
        dap.call("setBreakpoints", {"source": {"path": service}, "breakpoints": []})
        dap.call("continue", {"threadId": stopped["threadId"]})
        hit = dap.event("stopped", "the corrupting write",
                        lambda b: b.get("reason") == "data breakpoint")
        self.say(f"data breakpoint: {hit.get('description')}")
        frames = dap.call("stackTrace", {"threadId": hit["threadId"], "levels": 20})
        for frame in frames["stackFrames"]:
            if "instructionPointerReference" not in frame:
                self.say(f"the writer stopped at {self.place(frame)}")
                break
            self.say(f"  native frame of the write: {self.place(frame)} "
                     f"(ip {frame['instructionPointerReference']})")

        self.step("record breakpoint on the request path (condition: tokens == 0)")
        dap.call("setDataBreakpoints", {"breakpoints": []})
        request_line = marker_line(self.service, "request")
        after_line = marker_line(self.service, "after_request")
        answer = dap.call("setBreakpoints", {"source": {"path": service}, "breakpoints": [
            {"line": request_line, "mode": "record", "condition": "tokens == 0"},
            {"line": after_line, "condition": "tokens == 0"}]})
        self.say(f"line {request_line}: {answer['breakpoints'][0].get('message', 'set')}")
        dap.call("continue", {"threadId": hit["threadId"]})
        capture = dap.event("ptdebug/capture", "the record breakpoint", timeout=40)
        if capture.get("clock") == "stepper":  # its cycles are those ns: not CPU cycles
            cost = f"{capture['durationNs'] / 1e6:.3f} ms stepper time (ptrace-slowed)"
        else:
            cost = f"{capture['cycles']} cycles, {capture['durationNs'] / 1e6:.3f} ms"
        self.say(f"record breakpoint: capture {capture['id']}: thread {capture['tid']}, "
                 f"{capture['window']}: {capture['instructions']} instructions, {cost}, "
                 f"{len(capture['gaps'])} gaps")
        stopped = dap.event("stopped", "the stop after the recorded request",
                            lambda b: b.get("reason") == "breakpoint")
        thread_id = stopped["threadId"]
        frame = self.top(dap, thread_id)
        self.say(f"stopped at {self.place(frame)}")
        dap.event("capabilities", "supportsStepBack",
                  lambda b: (b.get("capabilities") or {}).get("supportsStepBack"), timeout=5)

        self.step("the Processor Trace scope of this stop")
        scopes = dap.call("scopes", {"frameId": frame["id"]})["scopes"]
        trace = next((s for s in scopes if s["name"] == "Processor Trace"), None)
        if trace is None:
            raise DemoFailed(f"no Processor Trace scope among {[s['name'] for s in scopes]}")
        variables = dap.call("variables", {"variablesReference": trace["variablesReference"]})
        for variable in variables["variables"]:
            self.say(f"  {variable['name']:<24} {variable['value']}")
            if variable["name"] == "last branches" and variable["variablesReference"]:
                branches = dap.call("variables", {
                    "variablesReference": variable["variablesReference"]})["variables"]
                for branch in branches[:4]:
                    self.say(f"      {branch['name']:<20} {branch['value']}")

        self.step("step back through the capture to where the bad value came from")
        scale_line = marker_line(self.kvcache, "scale")
        top = None
        for _ in range(MAX_LINE_STEPS):
            dap.call("stepBack", {"threadId": thread_id, "granularity": "line"})
            back = dap.event("stopped", "stepBack", lambda b: b.get("threadId") == thread_id)
            top = self.top(dap, thread_id)
            self.say(f"step back: {self.place(top)}  [{back.get('description', '')}]")
            if (top.get("source") or {}).get("path", "").endswith("kvcache.c") and \
                    top.get("line") == scale_line:
                break
        else:
            raise DemoFailed(f"stepping back never reached kvcache.c:{scale_line}")
        dap.call("stepBack", {"threadId": thread_id, "granularity": "instruction"})
        dap.event("stopped", "stepBack by instruction", lambda b: b.get("threadId") == thread_id)
        top = self.top(dap, thread_id)
        self.say(f"one instruction back: {self.place(top)} "
                 f"(ip {top.get('instructionPointerReference')})")
        frames = dap.call("stackTrace", {"threadId": thread_id, "levels": 20})["stackFrames"]
        live = next((f for f in frames if (f.get("source") or {}).get("path", "").endswith(
            "service.py")),
                    None)
        if live is not None:
            tokens = dap.call("evaluate", {"expression": "tokens", "frameId": live["id"],
                                           "context": "watch"})["result"]
            self.say(f"live frame {self.place(live)}: tokens = {tokens}")
        source = self.kvcache.read_text().splitlines()[scale_line - 1].strip()
        self.say(f"the bad value came from kvcache.c:{scale_line}: {source}  "
                 "(norm = tokens * 0.5 is 0 for a request with no tokens)")

        self.step("continue: replay to the live end, the service runs on")
        dap.call("setBreakpoints", {"source": {"path": service}, "breakpoints": []})
        dap.call("continue", {"threadId": thread_id})
        time.sleep(0.3)
        self.say("the service is running live again")
        dap.call("disconnect", {"terminateDebuggee": True}, timeout=15)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ptdebug demo", description=__doc__.split("\n")[0])
    parser.add_argument("--verbose", action="store_true", help="keep the adapter's log on stderr")
    args = parser.parse_args(argv)
    out = sys.stdout
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ptdebug-demo-") as directory:
        log_path = os.path.join(directory, "adapter.log")
        dap = None
        seen: set[int] = set()
        status = 0
        with open(log_path, "wb") as log:
            try:
                workspace = copy_service(directory)
                library = build_helper(directory, workspace / "kvcache.c")
                argv_dap = ptdebug_command("dap", "--log-level", "INFO")
                dap = DapPeer(argv_dap, sys.stderr if args.verbose else log)
                watcher = threading.Thread(target=_track, args=(dap.proc.pid, seen), daemon=True)
                watcher.start()
                Demo(out, args.verbose, workspace).run(dap, library)
            except DemoFailed as exc:
                out.write(f"\nptdebug demo: FAILED: {exc}\n")
                status = 1
            except KeyboardInterrupt:
                out.write("\nptdebug demo: interrupted\n")
                status = 130
            finally:
                if dap is not None:
                    seen.update(descendants(dap.proc.pid))
                    dap.close()
                _end(seen)
        if status == 1:
            tail = pathlib.Path(log_path).read_text(errors="replace").splitlines()[-15:]
            out.write("adapter log (last lines):\n" + "\n".join(tail) + "\n")
    if status == 0:
        out.write(f"\ndemo finished: OK in {time.monotonic() - started:.1f} s\n")
    out.flush()
    return status


def _track(root: int, seen: set[int]) -> None:
    """Remember the adapter's descendants while it lives (debugpy, the service)."""
    while os.path.exists(f"/proc/{root}"):
        seen.update(descendants(root))
        time.sleep(0.2)


def _end(pids: set[int]) -> None:
    """Kill whatever the demo started that is still alive."""
    deadline = time.monotonic() + 5
    alive = [p for p in pids if os.path.exists(f"/proc/{p}")]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if os.path.exists(f"/proc/{p}")]
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    sys.exit(main())

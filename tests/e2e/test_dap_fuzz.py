"""A DAP sequence fuzzer (issue 17): valid run-control and feature requests in random orders
and timings, plus mutated messages, sent to `ptdebug dap` in front of real debugpy and a small
threaded Python program (tests/fixtures/programs/dap_run_control.py).

It fails on any request left unanswered past REQUEST_LIMIT or on debugpy given up as stuck
(a wedge: backends/debugpy.py's STUCK_AFTER), on a message that breaks
the DAP schema, on an adapter that dies before the fuzzer's own `disconnect`, and on a
traceback in the adapter's log. Sessions follow one another until the time is spent; a random
`disconnect` ends one early (it must be answered and the adapter must exit, leaving nothing).

Bounded for CI: PTDEBUG_FUZZ_SECONDS (default 30, which keeps the suite under 20 minutes) of
fuzzing per seed. Without PTDEBUG_FUZZ_SEED the seeds of CI_SEEDS run, each a test of its
own that fails the build (seed 8's xfail went in session 10: green in every run since the
two-releases fix, 55da8b8). PTDEBUG_FUZZ_SEED=N repeats seed N; PTDEBUG_FUZZ_SEED=random draws
one (printed, and in every failure message). docs/testing.md has the figures.
"""
from __future__ import annotations

import json
import os
import random
import time

import pytest
from conftest import PROGRAMS, launch
from dapclient import marker_line

PROGRAM = PROGRAMS / "dap_run_control.py"
SOURCE = {"path": str(PROGRAM)}
FUZZ_SECONDS = float(os.environ.get("PTDEBUG_FUZZ_SECONDS") or 30)
SESSION_SECONDS = 40.0
"""At most this long per session: a session that no random disconnect ended is ended."""
REQUEST_LIMIT = 60.0
"""A request unanswered this long is a wedge (ptdebug's own limit on debugpy is 30 s)."""
DATA_BREAKPOINTS = os.environ.get("PTDEBUG_FUZZ_DATA_BREAKPOINTS", "1") != "0"
"""Whether `dataBreakpointInfo`/`setDataBreakpoints` are among the actions: on unless
PTDEBUG_FUZZ_DATA_BREAKPOINTS=0. The data-breakpoint paths wedged pydevd by timing whatever
the seed until session 9 (docs/testing.md, "What the fuzzer still finds"), and seed 17391865
until session 11 found why (a freeze that met a traced thread left others stopped). In CI
since session 12, after a 30-minute random run with them (seed 1275919448: 139 sessions,
30,529 requests, none unanswered) and seed 8 green with them three times."""
CI_SEEDS = (8,)
"""Seeds verified green with the code as committed (docs/testing.md has the runs)."""
_ASKED = os.environ.get("PTDEBUG_FUZZ_SEED") or ""
SEEDS = (CI_SEEDS if not _ASKED else
         (random.SystemRandom().randrange(1 << 32),) if _ASKED == "random" else (int(_ASKED),))

pytestmark = pytest.mark.timeout(int(FUZZ_SECONDS) + 240)


class Fuzzer:
    """One session's worth of random traffic, and the book of what still needs an answer."""

    def __init__(self, run, rng: random.Random, seed: int):
        self.run = run
        self.seed = seed
        self.client = run.client
        self.rng = rng
        self.pending: dict[int, tuple[str, float]] = {}
        """seq -> (command, time sent) of every request not answered yet."""
        self.threads: set[int] = set()
        self.frames: list[int] = []
        self.data_id: str | None = None
        self.sent: dict[str, int] = {}
        self.answered = 0
        self.failed = 0
        self.ended = False

    # --- traffic --------------------------------------------------------------------------
    def send(self, command: str, arguments=None) -> int:
        seq = self.client.send_request(command, arguments)
        self.pending[seq] = (command, time.monotonic())
        self.sent[command] = self.sent.get(command, 0) + 1
        return seq

    def pump(self, seconds: float) -> None:
        """Read what arrives for `seconds`; book the answers, learn threads and frames."""
        client = self.client
        deadline = time.monotonic() + seconds
        while True:
            try:
                client._pump(deadline)
            except TimeoutError:
                break
            except EOFError:
                assert self.ended, (f"the adapter closed the connection (seed {self.seed}); log:\n"
                                    f"{self.run.log()[-3000:]}")
                break
        for seq in [s for s in self.pending if s in client._responses]:
            response = client._responses.pop(seq)
            command, _ = self.pending.pop(seq)
            self.answered += 1
            self.failed += not response["success"]
            body = response.get("body") or {}
            if command == "threads" and response["success"]:
                self.threads = {t["id"] for t in body.get("threads", [])}
            elif command == "stackTrace" and response["success"]:
                self.frames = [f["id"] for f in body.get("stackFrames", [])][:5]
            elif command == "dataBreakpointInfo" and response["success"]:
                self.data_id = body.get("dataId")
        for event in client._events:
            if event["event"] == "stopped" and "threadId" in event.get("body", {}):
                self.threads.add(event["body"]["threadId"])
            # a debugpy given up as stuck answers everything at once afterwards: still a wedge
            stuck = event["event"] == "output" and "debugpy stopped answering" in \
                event["body"].get("output", "")
            assert not stuck, (f"debugpy wedged (seed {self.seed}): {event['body']['output']}"
                               f"adapter log tail:\n{self.run.log()[-3000:]}")
        client._events.clear()
        client.received.clear()
        now = time.monotonic()
        late = {seq: command for seq, (command, sent) in self.pending.items()
                if now - sent > REQUEST_LIMIT}
        assert not late, (f"unanswered after {REQUEST_LIMIT:g} s: {late} (seed {self.seed}); "
                          f"adapter log tail:\n{self.run.log()[-3000:]}")

    def thread(self) -> int:
        if self.threads and self.rng.random() < 0.95:
            return self.rng.choice(sorted(self.threads))
        return self.rng.choice([0, -1, 999999, 1])

    def step(self) -> None:
        """One random action."""
        rng = self.rng
        action = rng.choices(
            ["continue", "pause", "next", "stepIn", "stepOut", "threads", "stackTrace",
             "captureNow", "setBreakpoints", "data", "evaluate", "mutated", "burst"],
            weights=[12, 8, 4, 3, 3, 6, 5, 3, 5, 4 if DATA_BREAKPOINTS else 0, 3, 6, 3])[0]
        if action in ("continue", "pause", "next", "stepIn", "stepOut"):
            self.send(action, {"threadId": self.thread()})
        elif action == "threads":
            self.send("threads")
        elif action == "stackTrace":
            self.send("stackTrace", {"threadId": self.thread(), "levels": rng.choice([1, 5, 20])})
        elif action == "captureNow":
            self.send("ptdebug/captureNow", rng.choice([{}, {"threadId": self.thread()}]))
        elif action == "setBreakpoints":
            choice = rng.choice(["none", "main", "worker", "record", "record+main"])
            breakpoints = {
                "none": [],
                "main": [{"line": marker_line(PROGRAM, "main")}],
                "worker": [{"line": marker_line(PROGRAM, "worker"), "hitCondition": "% 50"}],
                "record": [{"line": marker_line(PROGRAM, "worker"), "mode": "record",
                            "hitCondition": "% 20"}],
                "record+main": [{"line": marker_line(PROGRAM, "worker"), "mode": "record",
                                 "hitCondition": "% 20"},
                                {"line": marker_line(PROGRAM, "main"), "hitCondition": "% 30"}],
            }[choice]
            self.send("setBreakpoints", {"source": SOURCE, "breakpoints": breakpoints})
        elif action == "data":
            if self.frames and rng.random() < 0.5:
                self.send("dataBreakpointInfo", {"name": "cache[3]",
                                                 "frameId": rng.choice(self.frames)})
            elif self.data_id and rng.random() < 0.6:
                self.send("setDataBreakpoints", {"breakpoints": [{"dataId": self.data_id}]})
            else:
                self.send("setDataBreakpoints", {"breakpoints": []})
        elif action == "evaluate":
            arguments = {"expression": rng.choice(["ticks", "rounds", "1/0", "cache[3]"]),
                         "context": "repl"}
            if self.frames and rng.random() < 0.7:
                arguments["frameId"] = rng.choice(self.frames)
            self.send("evaluate", arguments)
        elif action == "mutated":
            self.mutated()
        elif action == "burst":
            for command in rng.sample(["continue", "pause", "next", "threads", "continue"], 3):
                self.send(command, {"threadId": self.thread()} if command != "threads" else None)

    def mutated(self) -> None:
        """A message broken in one of the ways a confused or hostile client breaks them."""
        rng = self.rng
        kind = rng.choice(["types", "arguments", "command", "json", "envelope"])
        command = rng.choice(["continue", "next", "pause", "stackTrace", "setBreakpoints",
                              "evaluate", "setDataBreakpoints" if DATA_BREAKPOINTS else "next",
                              "ptdebug/captureNow", "threads"])
        if kind == "types":
            value = rng.choice(["1", None, -5, 2 ** 70, 1.5, [], {}, True])
            key = rng.choice(["threadId", "frameId", "levels", "breakpoints", "expression",
                              "source"])
            self.send(command, {key: value})
        elif kind == "arguments":
            self.send(command, rng.choice([[], "x", 7, None]))
        elif kind == "command":
            self.send(rng.choice(["contnue", "", "ptdebug/nothing", "x" * 300]), {})
        elif kind == "json":  # not JSON: an `output` event says so, no response is due
            body = json.dumps({"type": "request", "command": command, "seq": 10 ** 6})
            cut = body[:rng.randrange(1, len(body))].encode()
            self.client.send_raw(b"Content-Length: %d\r\n\r\n%s" % (len(cut), cut))
        else:  # JSON, not a DAP message: no response is due either
            message = rng.choice([{"type": "request"}, {"seq": "a", "type": "request"},
                                  {"type": "nonsense", "seq": 1}, [1, 2]])
            body = json.dumps(message).encode()
            self.client.send_raw(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


def _session(start_adapter, rng: random.Random, seconds: float, seed: int) -> Fuzzer:
    run = start_adapter()
    fuzzer = Fuzzer(run, rng, seed)
    launch(run.client, PROGRAM, breakpoints=["main"], args=["600"],
           recordWindow={"instructions": 200})
    run.track()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if rng.random() < 0.004:
            break  # a disconnect at a random moment
        fuzzer.step()
        fuzzer.pump(rng.choice([0, 0.002, 0.01, 0.05, 0.2]))
    run.track()
    fuzzer.ended = True
    seq = fuzzer.send("disconnect", {"terminateDebuggee": True})
    deadline = time.monotonic() + 30
    while seq in fuzzer.pending and time.monotonic() < deadline:
        fuzzer.pump(0.1)
    assert seq not in fuzzer.pending, f"disconnect unanswered (seed {seed})"
    assert run.wait_exit(30) == 0, f"adapter exit status (seed {seed})"
    run.assert_nothing_left(10)
    log = run.log()
    assert "Traceback" not in log, f"traceback in the adapter log (seed {seed}):\n{log[-4000:]}"
    return fuzzer


@pytest.mark.parametrize("seed", SEEDS)
def test_dap_sequence_fuzzer(start_adapter, capsys, seed):
    print(f"PTDEBUG_FUZZ_SEED={seed} PTDEBUG_FUZZ_SECONDS={FUZZ_SECONDS:g}")
    rng = random.Random(seed)
    end = time.monotonic() + FUZZ_SECONDS
    sessions = requests = failures = 0
    while time.monotonic() < end:
        fuzzer = _session(start_adapter, rng, min(SESSION_SECONDS, end - time.monotonic()),
                          seed)
        sessions += 1
        requests += fuzzer.answered
        failures += fuzzer.failed
    with capsys.disabled():
        print(f"\nDAP fuzzer: seed {seed}, {FUZZ_SECONDS:g} s, {sessions} sessions, "
              f"{requests} requests answered ({failures} with an error), none unanswered")
    assert requests > 0

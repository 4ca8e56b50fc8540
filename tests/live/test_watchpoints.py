"""Hardware watchpoints on real C processes, through perf breakpoint events (no ptrace stop).

The fixture tests/fixtures/programs/watch_threads.c writes one global from
several threads a known number of times; some threads exist when the watch is
armed, others are created after. Every write must be reported with the
writer's TID and function, and nothing else.
"""
from __future__ import annotations

import collections
import os
import pathlib
import re
import subprocess
import threading
import time

import pytest
from other_tracer import another_tracer, thread_states
from perf_events import perf_event_fds

from adapter import watchpoints as wp
from adapter.commands.watch import Symbolizer
from adapter.hw import ptrace

pytestmark = pytest.mark.live
PROGRAMS = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "programs"


@pytest.fixture(scope="module")
def watch_threads(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("watch") / "watch_threads"
    # -O0 and frame pointers: every function has a frame, so the user call
    # chain (frame-pointer walk) reaches the writer's caller.
    subprocess.run(["gcc", "-g", "-O0", "-fno-omit-frame-pointer", "-pthread", "-o", str(out),
                    str(PROGRAMS / "watch_threads.c")], check=True)
    return str(out)


class Target:
    """A running watch_threads process: addresses from its "ready" line, "go" on demand."""

    def __init__(self, binary: str, before: int, after: int, writes: int, interval_us: int, calls: int = 0):
        self.proc = subprocess.Popen([binary, str(before), str(after), str(writes), str(interval_us),
                                      str(calls)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline()
        self.addr = {k: int(v, 16) for k, v in re.findall(r"(\w+)=(0x[0-9a-f]+)", ready)}
        self.pid = self.proc.pid
        self.wrote: dict[int, int] = {}

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def wait_done(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("wrote"):
                _, tid, n, _ = line.split()
                self.wrote[int(tid)] = int(n)
            if line.startswith("done"):
                return
        raise AssertionError(f"the fixture ended without 'done' (status {self.proc.wait(timeout=10)})")

    def running(self) -> bool:
        with open(f"/proc/{self.pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state in "RS" and self.proc.poll() is None

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture
def target_factory(watch_threads):
    made = []

    def make(*args, **kw) -> Target:
        t = Target(watch_threads, *args, **kw)
        made.append(t)
        return t

    yield make
    for t in made:
        if t.proc.poll() is None:
            t.proc.kill()
            t.proc.wait()


def collect(watcher: wp.PerfWatcher, target: Target, settle_s: float = 0.3):
    """Every hit, read while the fixture runs, until it says done and the rings stay
    empty for `settle_s`."""
    hits, lost = [], []
    reader = threading.Thread(target=target.wait_done)
    reader.start()
    quiet_since = time.monotonic()
    while reader.is_alive() or time.monotonic() - quiet_since < settle_s:
        got = watcher.poll(0.05)
        for item in got:
            (lost if isinstance(item, wp.LostHits) else hits).append(item)
        if got:
            quiet_since = time.monotonic()
    return hits, lost


def test_every_write_of_every_thread_is_reported_with_tid_and_function(target_factory):
    target = target_factory(before=2, after=2, writes=25, interval_us=2000)
    with wp.PerfWatcher(target.pid) as watcher:
        watch = watcher.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
        target.go()
        hits, lost = collect(watcher, target)
    assert lost == []
    assert len(target.wrote) == 4
    per_tid = collections.Counter(h.tid for h in hits)
    assert per_tid == target.wrote            # every write, by the thread that made it
    symbols = Symbolizer(target.pid)
    for hit in hits:
        assert hit.watch is watch and hit.pid == target.pid
        assert hit.address == target.addr["value"]
        # A data breakpoint traps after the store: IP - 1 lies in the storing instruction.
        assert symbols.function(hit.ip - 1).startswith("store_value")
        file, line = symbols.line(hit.ip - 1)
        assert file.endswith("watch_threads.c") and _marker_line("store") == line
        assert hit.regs["rip"] == hit.ip and hit.callchain[0] == hit.ip
        assert symbols.function(hit.callchain[1] - 1).startswith("writer_main")
    # Per thread, hits come in time order (across threads the per-CPU rings
    # are merged per batch only).
    for tid in per_tid:
        times = [h.time_ns for h in hits if h.tid == tid]
        assert times == sorted(times)
    target.close()


_perf_fds = perf_event_fds


def _marker_line(name: str) -> int:
    for number, text in enumerate((PROGRAMS / "watch_threads.c").read_text().splitlines(), 1):
        if f"// @{name}" in text:
            return number
    raise AssertionError(f"no marker @{name}")


def test_thread_created_after_arming_is_caught(target_factory):
    # Only the main thread exists while the watch is armed; the writer is cloned later.
    target = target_factory(before=0, after=1, writes=10, interval_us=1000)
    threads_at_arming = set(os.listdir(f"/proc/{target.pid}/task"))
    with wp.PerfWatcher(target.pid) as watcher:
        watcher.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
        target.go()
        hits, lost = collect(watcher, target)
    (writer,) = target.wrote
    assert str(writer) not in threads_at_arming
    assert lost == [] and collections.Counter(h.tid for h in hits) == {writer: 10}
    target.close()


def test_a_target_traced_by_another_debugger_is_armed_without_the_freeze(target_factory):
    target = target_factory(before=1, after=0, writes=10, interval_us=1000)
    with another_tracer(ptrace.threads_of(target.pid)) as tracer:
        with open(f"/proc/{target.pid}/status") as f:
            assert f"TracerPid:\t{tracer}\n" in f.read()
        with wp.PerfWatcher(target.pid) as watcher:
            watcher.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
            target.go()
            hits, lost = collect(watcher, target)
        assert lost == [] and collections.Counter(h.tid for h in hits) == target.wrote
    target.close()


def test_a_thread_traced_by_another_tracer_leaves_no_other_thread_held(target_factory):
    """Another tracer (a record window's recorder, here a child) holds only the last thread:
    the freeze meets EPERM there and arms without it, and the threads it seized before that
    in the same pass are let go too. They stayed stopped and traced by ptdebug before, and a
    debugpy session answered nothing more (the DAP fuzzer with data breakpoints)."""
    target = target_factory(before=3, after=0, writes=10, interval_us=1000)
    last = max(int(t) for t in os.listdir(f"/proc/{target.pid}/task"))
    with another_tracer([last]):
        with wp.PerfWatcher(target.pid) as watcher:
            watcher.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
            others = {tid: state for tid, state in thread_states(target.pid).items()
                      if tid != last}
            assert others and all(t == 0 and s != "t" for t, s in others.values()), others
    target.proc.kill()
    target.proc.wait(10)


def test_old_and_new_values_follow_each_write(target_factory):
    # One slow writer: each hit is read before the next write, so old -> new is each step.
    target = target_factory(before=1, after=0, writes=6, interval_us=40000)
    with wp.PerfWatcher(target.pid) as watcher:
        watcher.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
        target.go()
        hits, _ = collect(watcher, target)
    values = [(1 << 16) | i for i in range(1, 7)]
    assert [int.from_bytes(h.new, "little") for h in hits] == values
    assert [int.from_bytes(h.old, "little") for h in hits] == [0] + values[:-1]
    target.close()


def test_a_32_byte_region_takes_four_registers_and_a_fifth_is_refused(target_factory):
    target = target_factory(before=1, after=1, writes=8, interval_us=1000)
    with wp.PerfWatcher(target.pid) as watcher:
        region = watcher.add(wp.WatchRequest(target.addr["region"], 32, wp.Access.WRITE))
        assert region.pieces == [(target.addr["region"] + 8 * i, 8) for i in range(4)]
        with pytest.raises(wp.WatchError) as info:
            watcher.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
        assert info.value.code == "no_register"
        message = str(info.value)
        assert "only 0 of the four are free" in message
        assert f"w {target.addr['region']:#x}+32 (4 registers)" in message
        target.go()
        hits, lost = collect(watcher, target)
    assert lost == [] and len(hits) == 16
    # Write i goes to region[i & 3]: each 8-byte register sees its share.
    assert collections.Counter(h.address - target.addr["region"] for h in hits) == {0: 4, 8: 4, 16: 4, 24: 4}
    assert all(h.watch is region for h in hits)
    target.close()


def test_execute_watch_counts_calls_exactly(target_factory):
    calls = 200  # under the kernel's samples-per-tick throttle (perf_event_max_sample_rate / HZ)
    target = target_factory(before=0, after=0, writes=0, interval_us=0, calls=calls)
    # 64 pages hold every sample even if this test's reader is slow to run.
    with wp.PerfWatcher(target.pid, ring_pages=64) as watcher:
        watcher.add(wp.WatchRequest(target.addr["counted"], 1, wp.Access.EXECUTE))
        target.go()
        hits, lost = collect(watcher, target)
    assert lost == []
    assert len(hits) == calls
    assert {h.ip for h in hits} == {target.addr["counted"]}     # a fault: IP is the instruction
    assert {h.tid for h in hits} == {target.pid}
    assert all(h.old is None and h.new is None for h in hits)
    target.close()


def test_close_leaves_the_target_untouched(target_factory):
    target = target_factory(before=1, after=0, writes=30, interval_us=3000)
    watcher = wp.PerfWatcher(target.pid)
    watcher.add(wp.WatchRequest(target.addr["region"], 32, wp.Access.READ_WRITE))
    assert watcher.event_count() > 0
    watcher.close()
    assert watcher.event_count() == 0
    assert _perf_fds() == []
    # All four registers are free again in every thread: four new watches arm.
    with wp.PerfWatcher(target.pid) as again:
        for i in range(4):
            again.add(wp.WatchRequest(target.addr["region"] + 8 * i, 8, wp.Access.WRITE))
    target.go()
    target.wait_done()
    assert target.running()
    with open(f"/proc/{target.pid}/status") as f:
        assert "TracerPid:\t0\n" in f.read()
    target.close()
    assert target.proc.returncode == 0


def test_threads_born_while_arming_are_armed_once(tmp_path):
    """Arm in the middle of a stream of new threads: every thread born after the
    arming ends is reported exactly once (inherited events), and no thread twice."""
    binary = tmp_path / "watch_spawn"
    subprocess.run(["gcc", "-O1", "-pthread", "-o", str(binary), str(PROGRAMS / "watch_spawn.c")],
                   check=True)
    proc = subprocess.Popen([str(binary), "300", "300"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        value = int(re.search(r"value=(0x[0-9a-f]+)", proc.stdout.readline()).group(1), 16)
        born: dict[int, int] = {}
        reader_done = threading.Event()

        def read_births():
            for line in proc.stdout:
                if line.startswith("born"):
                    _, tid, ns = line.split()
                    born[int(tid)] = int(ns)
                if line.startswith("done"):
                    break
            reader_done.set()

        threading.Thread(target=read_births, daemon=True).start()
        time.sleep(0.02)                     # let the stream of threads start
        with wp.PerfWatcher(proc.pid) as watcher:
            watcher.add(wp.WatchRequest(value, 8, wp.Access.WRITE))
            armed_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            hits = []
            quiet = time.monotonic()
            while not reader_done.is_set() or time.monotonic() - quiet < 0.3:
                got = watcher.poll(0.05)
                hits.extend(got)
                if got:
                    quiet = time.monotonic()
        assert all(isinstance(h, wp.Hit) for h in hits), hits
        per_tid = collections.Counter(h.tid for h in hits)
        assert max(per_tid.values()) == 1                       # nobody armed twice
        later = [tid for tid, ns in born.items() if ns > armed_ns]
        assert len(later) > 50
        assert all(per_tid[tid] == 1 for tid in later)          # everybody born later caught
    finally:
        proc.kill()
        proc.wait()

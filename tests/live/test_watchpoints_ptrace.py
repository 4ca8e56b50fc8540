"""Watchpoints in DR0-DR7 when ptdebug is the ptrace tracer: a hit stops the thread.

Same fixture as test_watchpoints.py (watch_threads.c). Here the thread that
hits is in a ptrace-stop while the values are read, so they are those its
own store left; after close() the debug registers are clear (a register left
armed in an untraced process would kill it with SIGTRAP, so a clean exit of
the fixture proves it) and nobody traces the process.
"""
from __future__ import annotations

import collections
import os
import signal
import time

import pytest
from test_watchpoints import Target, target_factory, watch_threads  # noqa: F401  (fixtures)

from adapter import watch_traced as wt
from adapter import watchpoints as wp

pytestmark = pytest.mark.live


def _thread_state(pid: int, tid: int) -> str:
    with open(f"/proc/{pid}/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _finish(target: Target) -> None:
    target.wait_done()
    target.close()
    assert target.proc.returncode == 0, f"fixture ended with {target.proc.returncode}"


def test_hit_stops_the_writer_with_exact_values_and_close_detaches(target_factory):
    target = target_factory(before=1, after=0, writes=5, interval_us=1000)
    session = wt.TracedWatchSession(target.pid)
    try:
        session.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
        session.start()
        target.go()
        hits = []
        for _ in range(5):
            hit = session.wait_hit()
            assert _thread_state(target.pid, hit.tid) == "t"     # stopped at the hit
            hits.append(hit)
            session.resume(hit)
    finally:
        session.close()
    writer = hits[0].tid
    assert writer != target.pid and {h.tid for h in hits} == {writer}
    values = [(1 << 16) | i for i in range(1, 6)]
    assert [int.from_bytes(h.new, "little") for h in hits] == values
    assert [int.from_bytes(h.old, "little") for h in hits] == [0] + values[:-1]
    assert all(h.exact and h.address == target.addr["value"] for h in hits)
    with open(f"/proc/{target.pid}/status") as f:
        assert "TracerPid:\t0\n" in f.read()
    _finish(target)
    assert target.wrote == {writer: 5}


def test_new_threads_are_armed_at_their_first_stop(target_factory):
    target = target_factory(before=0, after=2, writes=4, interval_us=1000)
    session = wt.TracedWatchSession(target.pid)
    try:
        session.add(wp.WatchRequest(target.addr["region"], 32, wp.Access.WRITE))
        session.start()
        target.go()
        per_tid = collections.Counter()
        for _ in range(8):
            hit = session.wait_hit()
            per_tid[hit.tid] += 1
            session.resume(hit)
    finally:
        session.close()
    _finish(target)
    assert per_tid == target.wrote and len(per_tid) == 2


def test_execute_watch_counts_calls_with_stops(target_factory):
    calls = 50
    target = target_factory(before=0, after=0, writes=0, interval_us=0, calls=calls)
    session = wt.TracedWatchSession(target.pid)
    try:
        session.add(wp.WatchRequest(target.addr["counted"], 1, wp.Access.EXECUTE))
        session.start()
        target.go()
        ips = []
        for _ in range(calls):
            hit = session.wait_hit()
            ips.append(hit.ip)
            session.resume(hit)
    finally:
        session.close()
    _finish(target)  # no 51st call was left pending: the fixture ran on and exited cleanly
    assert ips == [target.addr["counted"]] * calls


def test_fifth_register_and_bad_requests_change_nothing(target_factory):
    target = target_factory(before=1, after=0, writes=3, interval_us=1000)
    session = wt.TracedWatchSession(target.pid)
    try:
        session.add(wp.WatchRequest(target.addr["region"], 24, wp.Access.READ_WRITE))
        session.add(wp.WatchRequest(target.addr["neighbour"], 8, wp.Access.WRITE))
        with pytest.raises(wp.WatchError) as info:
            session.add(wp.WatchRequest(target.addr["value"], 2, wp.Access.WRITE))
        assert info.value.code == "no_register"
        assert "rw" in str(info.value) and "(3 registers)" in str(info.value)
        with pytest.raises(wp.WatchError, match="not aligned"):
            session.add(wp.WatchRequest(target.addr["value"] + 2, 4, wp.Access.WRITE))
        session.start()
        target.go()
        hit = session.wait_hit()
        assert hit.address == target.addr["neighbour"]     # store_value writes neighbour right after value
        session.resume(hit)
    finally:
        session.close()
    _finish(target)


def test_sigterm_to_the_target_is_passed_on(target_factory):
    target = target_factory(before=1, after=0, writes=1, interval_us=0)
    session = wt.TracedWatchSession(target.pid)
    try:
        session.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
        session.start()
        os.kill(target.pid, signal.SIGTERM)
        with pytest.raises(wt.ProcessExited):
            session.wait_hit()
    finally:
        session.close()
    # The tracer (also the parent here) reaped the exit; the process is gone.
    assert not os.path.exists(f"/proc/{target.pid}")


def test_a_job_control_stop_is_kept(target_factory):
    """SIGSTOP to the traced target stops it for job control (PTRACE_LISTEN), as untraced."""
    target = target_factory(before=1, after=0, writes=3, interval_us=1000)
    session = wt.TracedWatchSession(target.pid)
    try:
        session.add(wp.WatchRequest(target.addr["value"], 8, wp.Access.WRITE))
        session.start()
        os.kill(target.pid, signal.SIGSTOP)
        target.go()
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD, signal.SIGALRM})
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.5)
            assert session.wait_hit(frozenset({signal.SIGALRM})) is None  # no hit while stopped
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.sigtimedwait({signal.SIGALRM}, 0)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        # every thread in the job-control stop ("t"); on a loaded machine one was still
        # on its way there ("S") after the 0.5 s (ci45)
        settle = time.monotonic() + 10
        while True:
            states = {_thread_state(target.pid, int(t))
                      for t in os.listdir(f"/proc/{target.pid}/task")}
            if states == {"t"} or time.monotonic() > settle:
                break
            time.sleep(0.05)
        assert states == {"t"}
        os.kill(target.pid, signal.SIGCONT)
        hit = session.wait_hit()
        assert int.from_bytes(hit.new, "little") == (1 << 16) | 1
        session.resume(hit)
    finally:
        session.close()
    _finish(target)

"""Delve and the fast relay's thread share one CPU (backends.delve_process.colocation_cpu: each
plain request crosses the relay twice, and a crossing between CPUs costs an interrupt and, on a
VM, a hypervisor exit). Checked on the real processes of a Go session: every thread of Delve
and the adapter's relay thread are allowed one and the same CPU, the program being debugged
and the adapter's other threads are not restricted; PTDEBUG_COLOCATE=0 leaves everything
alone."""
from __future__ import annotations

import os

import pytest
from dapclient import cmdline, descendants
from go_support import GO_SESSION, copy_package, start_go

pytestmark = pytest.mark.timeout(120)


def _affinities(pid: int) -> dict[int, frozenset[int]]:
    """Thread id -> the CPUs it may run on, for the threads of `pid` alive while read (a
    thread that ends between the listing and the read is left out: a short-lived worker of
    the adapter or of Delve once failed the test as an empty set)."""
    out = {}
    for name in os.listdir(f"/proc/{pid}/task"):
        try:
            out[int(name)] = frozenset(os.sched_getaffinity(int(name)))
        except (ProcessLookupError, FileNotFoundError):
            continue
    return out


def _session(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    run = start_adapter()
    start_go(run.client, "launch", {"program": str(package), "args": ["wait"]},
             source=package / "main.go", breakpoints={"after_total": {}})
    run.client.expect_stopped("breakpoint", timeout=60)
    # the `process` event may follow the first stop (the backend learns the pid from Delve)
    program = run.client.expect_event("process", timeout=30)["body"]["systemProcessId"]
    delve = next(pid for pid in descendants(run.proc.pid)
                 if os.path.basename((cmdline(pid) or [""])[0]) == "dlv")
    return run, program, delve


def test_delve_and_the_relay_thread_share_one_cpu(start_adapter, tmp_path):
    everything = frozenset(os.sched_getaffinity(0))
    run, program, delve = _session(start_adapter, tmp_path)
    delve_cpus = set(_affinities(delve).values())
    assert len(delve_cpus) == 1
    (cpu_set,) = delve_cpus
    assert len(cpu_set) == 1, cpu_set
    adapter = list(_affinities(run.proc.pid).values())
    assert adapter.count(cpu_set) == 1, adapter  # the relay thread, and only it
    assert all(allowed == everything for allowed in adapter if allowed != cpu_set)
    assert set(_affinities(program).values()) == {everything}
    run.client.call("disconnect", {"terminateDebuggee": True})


def test_colocation_off(start_adapter, tmp_path, monkeypatch):
    monkeypatch.setenv("PTDEBUG_COLOCATE", "0")
    everything = frozenset(os.sched_getaffinity(0))
    run, _, delve = _session(start_adapter, tmp_path)
    assert set(_affinities(delve).values()) == {everything}
    assert set(_affinities(run.proc.pid).values()) == {everything}
    run.client.call("disconnect", {"terminateDebuggee": True})

"""Watchpoints on live Python processes: a numpy array's buffer, and fork().

The fixture (tests/fixtures/programs/watch_numpy.py) stores into arr[0] at
the line marked `# @marker` from a thread it starts only after the watch is
armed; the watch on `arr.ctypes.data` must report each store, from that
thread, inside numpy's native code that performs it.
"""
from __future__ import annotations

import os
import pathlib
import re
import struct
import subprocess
import sys
import threading
import time

import pytest

from adapter import watchpoints as wp
from adapter.commands.watch import Symbolizer, hit_record

pytestmark = pytest.mark.live
FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "programs" / "watch_numpy.py"


def test_numpy_buffer_write_is_reported_from_the_writing_thread():
    marker = [n for n, line in enumerate(FIXTURE.read_text().splitlines(), 1) if "# @marker" in line]
    assert len(marker) == 1 and "arr[0] =" in FIXTURE.read_text().splitlines()[marker[0] - 1]
    writes = 12
    proc = subprocess.Popen([sys.executable, str(FIXTURE), str(writes), "0.005"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        ready = proc.stdout.readline()
        data = int(re.search(r"data=(0x[0-9a-f]+)", ready).group(1), 16)
        threads_at_arming = set(os.listdir(f"/proc/{proc.pid}/task"))
        wrote = {}

        def read_until_done():
            for line in proc.stdout:
                if line.startswith("wrote"):
                    _, tid, n = line.split()
                    wrote[int(tid)] = int(n)
                if line.startswith("done"):
                    return

        with wp.PerfWatcher(proc.pid) as watcher:
            watcher.add(wp.WatchRequest(data, 8, wp.Access.WRITE))
            proc.stdin.write("go\n")
            proc.stdin.flush()
            reader = threading.Thread(target=read_until_done)
            reader.start()
            hits, quiet = [], time.monotonic()
            while reader.is_alive() or time.monotonic() - quiet < 0.3:
                got = watcher.poll(0.05)
                hits.extend(got)
                if got:
                    quiet = time.monotonic()
        assert all(isinstance(h, wp.Hit) for h in hits), hits
        (writer,) = wrote
        assert str(writer) not in threads_at_arming           # born after arming
        assert [h.tid for h in hits] == [writer] * writes     # every store, that thread only
        symbols = Symbolizer(proc.pid)
        records = [hit_record(h, symbols) for h in hits]
        for rec in records:
            assert "numpy" in rec["module"] and "_multiarray_umath" in rec["module"]
            # numpy's scalar store (DOUBLE_setitem in numpy 1.26-2.x).
            assert rec["symbol"] and rec["symbol"] == records[0]["symbol"]
        # The values are the floats stored (read within milliseconds of each hit).
        last = records[-1]
        assert last["new"] == f"{int.from_bytes(struct.pack('<d', float(writes)), 'little'):#018x}"
    finally:
        proc.kill()
        proc.wait()


_FORKER = """
import ctypes, os, sys, time
word = ctypes.c_uint64(0)
print(f"ready value={ctypes.addressof(word):#x}", flush=True)
sys.stdin.readline()
child = os.fork()
if child == 0:                     # a copy of the memory: not the watched process
    for i in range(5):
        word.value = 100 + i
        time.sleep(0.002)
    os._exit(0)
os.waitpid(child, 0)
for i in range(3):
    word.value = i + 1
    time.sleep(0.002)
print(f"done child={child}", flush=True)
sys.stdin.read()
"""


def test_a_forked_child_is_not_watched():
    proc = subprocess.Popen([sys.executable, "-c", _FORKER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        value = int(proc.stdout.readline().split("value=")[1], 16)
        with wp.PerfWatcher(proc.pid) as watcher:
            watcher.add(wp.WatchRequest(value, 8, wp.Access.WRITE))
            proc.stdin.write("go\n")
            proc.stdin.flush()
            done = proc.stdout.readline()
            assert done.startswith("done")
            hits, quiet = [], time.monotonic()
            while time.monotonic() - quiet < 0.3:
                got = watcher.poll(0.05)
                hits.extend(got)
                if got:
                    quiet = time.monotonic()
        assert len(hits) == 3 and {h.pid for h in hits} == {proc.pid}
        assert int.from_bytes(hits[-1].new, "little") == 3
    finally:
        proc.kill()
        proc.wait()

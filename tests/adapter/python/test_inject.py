"""adapter/python/inject.py on real CPython processes: source run in a sleeping program's main
thread changes what the program sees; what it raises is reported to ptdebug and never printed
into the program's stderr; a program that is not CPython is refused, untouched."""
from __future__ import annotations

import subprocess
import sys

import pytest

from adapter.hw import ptrace as pt
from adapter.python.inject import InjectError, run_python

pytestmark = pytest.mark.timeout(60)

PROGRAM = ("import time\nprint('ready', flush=True)\ninjected = None\n"
           "for _ in range(300):\n"
           "    if injected is not None:\n"
           "        print('saw', injected, flush=True)\n"
           "        break\n"
           "    time.sleep(0.01)\n")


def test_source_runs_in_the_main_thread_and_the_program_sees_it():
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        ran_on = run_python(proc.pid, "import __main__, threading\n"
                                      "__main__.injected = threading.current_thread().name")
        assert ran_on.startswith(f"thread {proc.pid}, waiting in "), ran_on
        out, err = proc.communicate(timeout=20)
        assert out.strip() == "saw MainThread", (out, err)
        assert proc.returncode == 0
    finally:
        proc.kill()
        proc.wait()


def test_what_the_source_raises_is_reported_not_printed_in_the_program():
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        with pytest.raises(InjectError, match="ZeroDivisionError"):
            run_python(proc.pid, "1 / 0")
        run_python(proc.pid, "import __main__\n__main__.injected = 'after'")
        out, err = proc.communicate(timeout=20)
        assert out.strip() == "saw after"
        assert err == "", err
        assert pt.tracer_of(proc.pid) == 0 if proc.poll() is None else True
    finally:
        proc.kill()
        proc.wait()


def test_a_program_that_is_not_cpython_is_refused():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        with pytest.raises(InjectError, match="is not a CPython program"):
            run_python(proc.pid, "pass")
        assert proc.poll() is None
        assert pt.tracer_of(proc.pid) == 0
    finally:
        proc.kill()
        proc.wait()

"""tests/hang_backstop.py, in real pytest runs of small test files: a hang that pytest-timeout
cannot end ends the run with the stacks and the test's name, and a process a test leaves
writing to the run's output is named and killed when the run ends."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import textwrap
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _pytest(tmp_path, body: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(textwrap.dedent('''\
        from hang_backstop import HangBackstop
        def pytest_configure(config):
            config.pluginmanager.register(HangBackstop(config), "backstop")
    '''))
    (tmp_path / "test_case.py").write_text(textwrap.dedent(body))
    env = dict(os.environ, PTDEBUG_HANG_GRACE_S="2",
               PYTHONPATH=f"{ROOT / 'tests'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    # stdout and stderr are pipes read to their end, as CI reads them, and pytest is started
    # by a shell that stays (as .ci/run's bash does)
    return subprocess.run(["bash", "-c", '"$@"; exit $?', "bash", sys.executable, "-m",
                           "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           *args, str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_a_hang_that_pytest_timeout_cannot_end_ends_the_run_with_its_stacks(tmp_path):
    started = time.monotonic()
    done = _pytest(tmp_path, '''\
        import signal, subprocess, time
        def test_stuck():
            # what a recorder once did to pytest-timeout: its alarm cancelled
            signal.setitimer(signal.ITIMER_REAL, 0)
            child = subprocess.Popen(["sleep", "300"])
            time.sleep(300)  # @stuck
        ''', "--timeout=1")
    assert done.returncode == 3, done
    assert "HANG: test_case.py::test_stuck ran 2 s past its timeout" in done.stderr, done
    assert "in test_stuck" in done.stderr and "sleep 300" in done.stderr, done
    assert time.monotonic() - started < 60


def test_a_process_left_writing_to_the_output_is_named_and_killed(tmp_path):
    marker = tmp_path / "pid"
    done = _pytest(tmp_path, f'''\
        import subprocess
        def test_leaves_a_process():
            child = subprocess.Popen(["sleep", "300"], start_new_session=True, stdout=1)
            open({str(marker)!r}, "w").write(str(child.pid))
        ''', "-s")  # -s: the child's stdout is the run's own
    pid = int(marker.read_text())
    assert done.returncode == 0, done
    assert "processes the tests left writing to the run's output" in done.stdout, done
    assert f"{pid} (parent" in done.stdout and "sleep 300" in done.stdout, done
    assert not pathlib.Path(f"/proc/{pid}").exists() or \
        pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"

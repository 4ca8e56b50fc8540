"""Shared pytest fixtures: where the shared test data lives, and skips that say why."""
from __future__ import annotations

import os
import pathlib

import pytest
from hang_backstop import HangBackstop
from perf_events import perf_event_fds

ROOT = pathlib.Path(__file__).resolve().parent.parent
# ../shared beside the checkout, as on every developer machine and in CI.
SHARED = pathlib.Path(os.environ.get("PTDEBUG_SHARED", ROOT.parent / "shared")).resolve()
TRACES = SHARED / "traces"


def pytest_configure(config):
    config.pluginmanager.register(HangBackstop(config), "ptdebug-hang-backstop")


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    if not SHARED.is_dir() or not any(SHARED.iterdir()):
        pytest.skip(f"shared data not found at {SHARED} (set PTDEBUG_SHARED)")
    return SHARED


@pytest.fixture(scope="session")
def traces_dir(shared_dir) -> pathlib.Path:
    if not TRACES.is_dir():
        pytest.skip(f"the recorded traces are not at {TRACES} (set PTDEBUG_SHARED)")
    return TRACES


@pytest.fixture(scope="session", autouse=True)
def captures_stay_in_the_test_run(tmp_path_factory):
    """Sessions that record keep their captures in the user's data directory when the launch
    names no `cwd` (adapter/capture/captures_dir.py): in a test run that is a temporary one,
    not the home directory of whoever runs the tests. Tests that check the default set their
    own XDG_DATA_HOME."""
    os.environ["XDG_DATA_HOME"] = str(tmp_path_factory.mktemp("xdg-data"))


@pytest.fixture(autouse=True)
def no_perf_event_left_open():
    """A test whose code under test leaves a perf event open in the test process fails here,
    by name: a leaked breakpoint event holds one of the thread's four debug registers, and
    once the whole run failed in tests far from the leak (tests/live/test_watchpoints*; stop 23's
    CI: one leak, 15 failures after it)."""
    before = set(perf_event_fds())
    yield
    leaked = set(perf_event_fds()) - before
    for fd in leaked:  # reported here, and closed: the tests after it see a clean process
        try:
            os.close(int(fd))
        except OSError:
            pass
    assert not leaked, f"perf event file descriptors left open: {sorted(leaked, key=int)}"

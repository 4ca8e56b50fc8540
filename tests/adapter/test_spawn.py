"""The Python processes ptdebug starts import ptdebug's and debugpy's own code whatever the
current directory holds (adapter/spawn.py): run from a workspace with its own `adapter/`,
`pt_decoder/` and `bisect.py`, nothing of the workspace is imported, while the plain
`python -m` commands they replace do import it (the workspace is a real threat)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from workspace_support import imported, make_workspace

from adapter import __version__
from adapter.spawn import module_command, package_main_command, ptdebug_command


@pytest.fixture
def workspace(tmp_path):
    return make_workspace(tmp_path)


def _run(argv: list[str], cwd, **env) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL, env={**os.environ, **env}, check=False)


def test_ptdebug_and_its_modules_start_from_a_hostile_workspace(workspace):
    ws, markers = workspace
    for argv in (ptdebug_command("--version"), module_command("adapter.cli", "--version")):
        done = _run(argv, ws)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"ptdebug {__version__} from "), done.stdout
        assert imported(markers) == []


def test_isolated_start_survives_a_workspace_on_pythonpath(workspace):
    """-I: a PYTHONPATH naming the workspace (a .env file's, say) does not reach ptdebug's
    children either; ptdebug's own location comes from adapter/__main__.py."""
    ws, markers = workspace
    done = _run(module_command("adapter.cli", "--version"), ws, PYTHONPATH=str(ws))
    assert done.returncode == 0, done.stderr
    assert imported(markers) == []


def test_debugpy_adapter_runs_none_of_the_workspace(workspace):
    ws, markers = workspace
    done = _run(package_main_command("debugpy.adapter"), ws)
    assert "Traceback" not in done.stderr, done.stderr
    assert imported(markers) == []


def test_the_plain_python_m_commands_do_import_the_workspace(workspace):
    """The threat is real: this is what ptdebug ran before (and what a test that cannot fail
    would not show)."""
    ws, markers = workspace
    _run([sys.executable, "-m", "debugpy.adapter"], ws)
    _run([sys.executable, "-m", "adapter.cli", "--version"], ws)
    assert imported(markers) == ["adapter", "bisect"]

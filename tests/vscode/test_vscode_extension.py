"""The VS Code extension builds, passes its own tests and packages, from this pytest run.

The extension's tests (vscode-extension/test/*.test.ts, node:test) include the DAP test client
driving the REAL adapter (`python -m adapter.cli dap`, debugpy, a Python fixture); they run
with this interpreter as PTDEBUG_PYTHON. scripts/bootstrap.sh installs node_modules (npm ci).
"""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "vscode-extension"
pytestmark = pytest.mark.timeout(300)


def _npm(*args: str, timeout: float = 240, env: dict | None = None) -> subprocess.CompletedProcess:
    npm = shutil.which("npm")
    assert npm, "npm is not installed: scripts/bootstrap.sh installs Node.js and npm"
    assert (EXTENSION / "node_modules" / ".bin" / "tsc").exists(), \
        "vscode-extension/node_modules is missing: run scripts/bootstrap.sh (npm ci)"
    return subprocess.run([npm, *args], cwd=EXTENSION, capture_output=True, text=True, check=False,
                          timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def compiled():
    result = _npm("run", "compile")
    assert result.returncode == 0, f"tsc failed:\n{result.stdout}\n{result.stderr}"
    return EXTENSION / "out"


def test_extension_tests_pass_against_the_real_adapter(compiled):
    result = _npm("test", env={"PTDEBUG_PYTHON": sys.executable})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-6000:]
    counts = dict(re.findall(r"^# (tests|pass|fail|skipped|cancelled) (\d+)$", output, re.MULTILINE))
    assert counts.get("fail") == "0" and counts.get("cancelled") == "0", output[-4000:]
    assert int(counts["pass"]) >= 20, counts
    # The launch/breakpoint scenario must really have run (never skipped).
    assert re.search(r"^ok \d+ - a Python fixture stops at a breakpoint", output, re.MULTILINE), output[-4000:]
    skipped = re.findall(r"^\s*ok \d+ - (.*) # SKIP (.*)$", output, re.MULTILINE)
    for name, reason in skipped:
        print(f"skipped: {name}: {reason}")
        assert "did not advertise" in reason, (name, reason)


def test_vsix_packages_only_what_runs(compiled, tmp_path):
    vsix = tmp_path / "ptdebug.vsix"
    result = _npm("exec", "--", "vsce", "package", "--no-update-package-json",
                  "--allow-missing-repository", "--out", str(vsix))
    assert result.returncode == 0, result.stdout + result.stderr
    names = zipfile.ZipFile(vsix).namelist()
    assert "extension/package.json" in names
    assert "extension/out/src/extension.js" in names
    assert any(n.startswith("extension/node_modules/vscode-languageclient/") for n in names)
    leaked = [n for n in names if n.startswith(("extension/src/", "extension/test/",
                                                "extension/out/test/", "extension/scripts/"))
              or "/typescript/" in n or "/@vscode/vsce" in n]
    assert not leaked, leaked[:10]

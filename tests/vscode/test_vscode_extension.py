"""The VS Code extension builds, passes its own tests and packages, from this pytest run.

The extension's tests (vscode-extension/test/*.test.ts, node:test) include the DAP test client
driving the REAL adapter (`python -m adapter.cli dap`, debugpy, a Python fixture), the process
picker against a real Python and Go process, and the bundled extension's registered commands;
they run with this interpreter as PTDEBUG_PYTHON. scripts/bootstrap.sh installs node_modules
(npm ci). The .vsix is built as a user would: from a clean copy of the extension's files, `npm
ci`, then `vsce package` (whose `vscode:prepublish` bundles with esbuild).
"""
from __future__ import annotations

import json
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


VSIX_FILES = {"extension.vsixmanifest", "[Content_Types].xml", "extension/package.json",
              "extension/readme.md", "extension/LICENSE.txt", "extension/dist/extension.js",
              "extension/dist/ThirdPartyNotices.txt"}
"""All a .vsix holds: the manifest, README, LICENSE, one bundled main and the licences of the
packages bundled into it (scripts/bundle.js)."""
VSIX_MAX_BYTES = 400_000
"""The .vsix was 99 KB when bundled (Dec 2026); unbundled it carried 176 JS files."""


def _clean_copy(destination: pathlib.Path) -> pathlib.Path:
    """The extension's files as a clone has them (tracked, or new and not ignored): no
    node_modules, out/ or dist/."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "-z", "--", "vscode-extension"], cwd=ROOT, capture_output=True,
                            check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination / "vscode-extension"


@pytest.mark.timeout(600)
def test_clean_copy_packages_one_bundled_main(tmp_path):
    copy = _clean_copy(tmp_path)
    assert not any((copy / d).exists() for d in ("node_modules", "out", "dist"))
    npm = shutil.which("npm")
    assert npm, "npm is not installed: scripts/bootstrap.sh installs Node.js and npm"
    ci = subprocess.run([npm, "ci", "--prefer-offline", "--no-audit", "--no-fund",
                         "--loglevel=error"], cwd=copy, capture_output=True, text=True,
                        timeout=400, check=False)
    assert ci.returncode == 0, f"npm ci in a clean copy failed:\n{ci.stdout}\n{ci.stderr}"
    vsix = tmp_path / "ptdebug.vsix"
    # vsce itself, as a user runs it; the flag only because package.json has no repository URL
    package = subprocess.run([npm, "exec", "--", "vsce", "package", "--allow-missing-repository",
                              "--out", str(vsix)], cwd=copy, capture_output=True, text=True,
                             timeout=180, check=False)
    assert package.returncode == 0, package.stdout + package.stderr
    archive = zipfile.ZipFile(vsix)
    names = set(archive.namelist())
    assert names == VSIX_FILES, sorted(names)
    assert vsix.stat().st_size < VSIX_MAX_BYTES, vsix.stat().st_size
    bundle = archive.read("extension/dist/extension.js").decode()
    assert 50_000 < len(bundle) < 1_000_000, len(bundle)
    manifest = json.loads(archive.read("extension/package.json"))
    assert manifest["main"] == "./dist/extension.js"
    # One main: everything but VS Code and Node's own modules is inside it.
    builtins = set(json.loads(subprocess.run(
        ["node", "-p", "JSON.stringify(require('module').builtinModules)"],
        capture_output=True, text=True, check=True, timeout=60).stdout))
    required = {name.removeprefix("node:") for name in
                re.findall(r"""require\(["']([^"']+)["']\)""", bundle)}
    assert "vscode" in required
    assert required - builtins - {"vscode"} == set(), sorted(required - builtins)
    for marker in ("ptdebug.pickProcess", "ptdebug.showLine", "ptdebug hot lines"):
        assert marker in bundle, marker
    notices = archive.read("extension/dist/ThirdPartyNotices.txt").decode()
    for package in ("vscode-languageclient", "vscode-jsonrpc", "vscode-languageserver-protocol"):
        assert re.search(rf"^{package} [\d.]+ \(MIT\)$", notices, re.MULTILINE), package

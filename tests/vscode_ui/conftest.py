"""Fixtures of the real-VS-Code tier: the .vsix built from this checkout and installed into
code-server, Chromium driven by Playwright, and one fresh code-server per test.

Nothing is mocked: code-server (VS Code 1.139 from npm, set up by scripts/vscode_setup.sh),
Debian's /usr/bin/chromium, the extension exactly as `vsce package` ships it, and the adapter
of this checkout running real debugpy. Each test gets its own user-data folder (settings,
breakpoints, logs) and workspace, so no state passes from one test to the next; the extension
is installed once per run into a throwaway extensions folder.

Screenshots and the text of the views go to tests/vscode_ui/artifacts/<test>/ (gitignored),
kept after the run, on success too.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest
from workbench import CodeServer, Workbench, copy_workspace

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
EXTENSION = ROOT / "vscode-extension"
ARTIFACTS = HERE / "artifacts"
APP = HERE / "app.py"
CHROMIUM = pathlib.Path("/usr/bin/chromium")
PTDEBUG = pathlib.Path(sys.executable).with_name("ptdebug")
"""The console script of the interpreter running the tests (the checkout's .venv): the
extension's `ptdebug.adapterPath`, the way a user points it at an install."""

USER_SETTINGS = {
    # a bare editor: no welcome page, tips, update checks, telemetry or trust prompt
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": False,
    "workbench.enableExperiments": False,
    "security.workspace.trust.enabled": False,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoCheckUpdates": False,
    "extensions.autoUpdate": False,
    "extensions.ignoreRecommendations": True,
    "chat.disableAIFeatures": True,
    "editor.minimap.enabled": False,
    "window.restoreWindows": "none",
    "files.hotExit": "off",
    "workbench.secondarySideBar.defaultVisibility": "hidden",
}

LAUNCH = {"type": "ptdebug", "request": "launch", "name": "ptdebug: app.py",
          "program": "${workspaceFolder}/app.py", "cwd": "${workspaceFolder}",
          "console": "internalConsole"}


@pytest.fixture(scope="session")
def code_server_launcher() -> pathlib.Path:
    """The code-server launcher scripts/vscode_setup.sh made. Not set up is a failure, not a
    skip: scripts/test.sh sets it up, and a tier that silently skips proves nothing."""
    check = subprocess.run(["bash", str(ROOT / "scripts" / "vscode_setup.sh"), "--check"],
                           capture_output=True, text=True, timeout=60, check=False)
    if check.returncode != 0:
        pytest.fail(check.stderr.strip() or "scripts/vscode_setup.sh --check failed")
    return pathlib.Path(check.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vsix(tmp_path_factory) -> pathlib.Path:
    """The .vsix of this checkout, packaged by vsce as a release is, from a copy of the
    extension's files (git's list: tracked, and new ones not ignored) with the checkout's
    node_modules linked in. A copy, because `vscode:prepublish` writes dist/, and tests/vscode
    builds into the checkout's dist/ at the same time on the other pytest worker.
    --no-dependencies: the extension is one bundled file (scripts/bundle.js), so vsce has no
    node_modules to walk (and `npm list` fails on a linked node_modules)."""
    npm = shutil.which("npm")
    assert npm, "npm is not installed: scripts/bootstrap.sh installs Node.js and npm"
    modules = EXTENSION / "node_modules"
    assert (modules / ".bin" / "vsce").exists(), \
        "vscode-extension/node_modules is missing: run scripts/bootstrap.sh (npm ci)"
    work = tmp_path_factory.mktemp("vsix")
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "-z", "--", "vscode-extension"], cwd=ROOT, capture_output=True,
                            check=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not name.startswith("vscode-extension/node_modules"):
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, work / name)
    copy = work / "vscode-extension"
    (copy / "node_modules").symlink_to(modules.resolve(), target_is_directory=True)
    out = work / "ptdebug.vsix"
    package = subprocess.run([npm, "exec", "--", "vsce", "package", "--no-dependencies",
                              "--allow-missing-repository", "--out", str(out)], cwd=copy,
                             capture_output=True, text=True, timeout=240, check=False)
    assert package.returncode == 0 and out.is_file(), package.stdout + package.stderr
    names = set(zipfile.ZipFile(out).namelist())
    assert {"extension/package.json", "extension/dist/extension.js"} <= names, sorted(names)
    return out


@pytest.fixture(scope="session")
def extensions_dir(code_server_launcher, vsix, tmp_path_factory) -> pathlib.Path:
    """A throwaway extensions folder holding only ptdebug, installed as a user does."""
    folder = tmp_path_factory.mktemp("extensions")
    data = tmp_path_factory.mktemp("install-user-data")
    done = subprocess.run([str(code_server_launcher), "--extensions-dir", str(folder),
                           "--user-data-dir", str(data), "--install-extension", str(vsix)],
                          capture_output=True, text=True, timeout=180, check=False)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert any(p.name.startswith("ptdebug.ptdebug-") for p in folder.iterdir()), \
        f"the extension is not in {folder}: {sorted(p.name for p in folder.iterdir())}\n{output}"
    return folder


@pytest.fixture(scope="session")
def browser():
    """Debian's Chromium under Playwright (never `playwright install`: no browser download)."""
    from playwright.sync_api import sync_playwright
    assert CHROMIUM.exists(), f"{CHROMIUM} is missing: run scripts/vscode_setup.sh"
    with sync_playwright() as playwright:
        # --no-sandbox: CI and these VMs run as root, where Chromium's sandbox refuses to start
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


@pytest.fixture
def artifacts(request) -> pathlib.Path:
    folder = ARTIFACTS / request.node.name.replace("/", "_")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.fixture
def vscode(request, code_server_launcher, extensions_dir, browser, tmp_path, artifacts):
    """A factory: `vscode(launch=..., workspace_settings=...)` starts code-server on a new
    workspace with app.py and that launch.json, opens it in a new browser page and returns
    the Workbench. `files`: more files copied into the workspace (a Go package's main.go and
    go.mod); `profile`: the text of the test HOME's ~/.profile (the login shell's, where the
    extension host takes PATH from). Everything ends with the test; a screenshot and the text of the views are
    kept under artifacts/ whatever the outcome."""
    started: list[tuple[CodeServer, Workbench, object]] = []

    def start(launch: dict | None = None, workspace_settings: dict | None = None,
              user_settings: dict | None = None, server_path: str | None = None,
              files: list[pathlib.Path] | None = None, profile: str | None = None) -> Workbench:
        home = tmp_path / f"vscode{len(started)}"
        folder = copy_workspace(APP, home / "workspace", launch or LAUNCH, workspace_settings,
                                files)
        if profile is not None:
            # the login shell's ~/.profile: where a person puts PATH and Go's variables, the
            # one place the extension host (and so the adapter) takes PATH from
            (home / ".profile").write_text(profile)
        settings = {**USER_SETTINGS, "ptdebug.adapterPath": str(PTDEBUG), **(user_settings or {})}
        # HOME: no user's ~/.config, ~/.local or ~/.profile leaks in (the extension host's PATH
        # is the login shell's, read from that HOME)
        env = {**os.environ, "HOME": str(home)}
        if server_path is not None:
            env["PATH"] = server_path
        server = CodeServer(code_server_launcher, extensions_dir, home, settings, env)
        server.start()
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        bench = Workbench(page, server, artifacts)
        started.append((server, bench, context))
        bench.open(folder)
        bench.workspace = folder
        return bench

    yield start
    for server, bench, context in started:
        bench.screenshot("end")
        (artifacts / "views.txt").write_text(bench.describe() + "\n\n[extension logs]\n"
                                             + server.extension_logs())
        context.close()
        server.stop()
        shutil.copy(server.log_path, artifacts / "code-server.log")

"""ptdebug driven by a DAP client nobody here wrote: Emacs `dap-mode` (Debian's elpa-dap-mode).

pytest runs `emacs --batch` with tests/clients/dap_mode_session.el, which uses dap-mode as a
user would (visit the file, `dap-breakpoint-add` on the `@stop` line, `dap-start-debugging`
against `ptdebug dap` on stdio, read a local through scopes/variables, `dap-continue`) and
writes what it saw as JSON lines. These tests check that transcript: the stop is at the marked
line, the local has its value, the program printed its line and exited with code 0; and that
no process of the session is left, also when Emacs quits in the middle of a session.

dap-mode 0.7 faults met, worked around in the elisp rather than in ptdebug:
- `dap--breakpoint-filter-enabled` reads `dap-exception-breakpoints`, defined only in dap-ui.el;
  without `(require 'dap-ui)` every session with exception filters (debugpy's, Delve's) dies of
  void-variable after setBreakpoints, before configurationDone.
- On the `exited` event dap-mode deletes the adapter's process at once (SIGKILL) instead of
  waiting for `terminated` and sending `disconnect`; the tests check that ptdebug's session
  leaves nothing behind even so.

ptdebug fault met and fixed (adapter/commands/dap.py): Emacs ends its subprocesses with SIGHUP to
their process group when it quits; the adapter had no SIGHUP handler, died without ending its
descendants, and a program still waiting for configurationDone was left running, orphaned
(`test_emacs_quits_mid_session[*-configuration]` is its regression test).

Every Emacs run has a 60 s limit, so a stalled session fails the test instead of hanging CI.
"""
from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import time
import uuid

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROGRAMS = ROOT / "tests" / "fixtures" / "programs"
PYTHON_PROGRAM = PROGRAMS / "client_session.py"
GO_PACKAGE = PROGRAMS / "go_client"
ELISP = pathlib.Path(__file__).with_name("dap_mode_session.el")
EMACS_LIMIT_S = 60
STEP_TIMEOUT_S = 40
GREETING = "hello from ptdebug"


def marker_line(path: pathlib.Path, name: str) -> int:
    """The 1-based line ending in `# @name` (Python) or `// @name` (Go)."""
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith((f"# @{name}", f"// @{name}")):
            return number
    raise LookupError(f"no @{name} marker in {path}")


def emacs() -> str:
    found = shutil.which("emacs")
    if found is None:
        pytest.fail("emacs is missing (scripts/bootstrap.sh installs emacs-nox and elpa-dap-mode)")
    probe = subprocess.run([found, "--batch", "--eval", "(require 'dap-mode)"],
                           capture_output=True, text=True, timeout=EMACS_LIMIT_S)
    if probe.returncode != 0:
        pytest.fail("Emacs cannot load dap-mode (scripts/bootstrap.sh installs elpa-dap-mode): "
                    + probe.stderr.strip().splitlines()[-1])
    return found


def go_path_dirs() -> list[str]:
    """Where `go` and `dlv` live, for the adapter's PATH (Go launches build, then run Delve)."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        pytest.fail("the Go toolchain is missing (scripts/bootstrap.sh installs it)")
    gopath = subprocess.run([go, "env", "GOPATH"], capture_output=True, text=True,
                            check=True).stdout.strip()
    return [str(pathlib.Path(go).parent), str(pathlib.Path(gopath) / "bin")]


def ptdebug_command() -> str:
    """The `ptdebug` console script of the interpreter running the tests, as a user configures it."""
    script = pathlib.Path(sys.executable).with_name("ptdebug")
    if not script.exists():
        pytest.fail(f"no ptdebug console script beside {sys.executable} (pip install -e .)")
    return str(script)


def processes_with_token(token: str) -> list[str]:
    """Processes whose environment holds this run's token: the run's adapter, backends, program."""
    needle = f"PTDEBUG_CLIENT_RUN={token}".encode()
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            stat = (entry / "stat").read_bytes()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        zombie = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] == b"Z"
        if needle in environ.split(b"\0") and not zombie:
            found.append(f"{entry.name}: {cmdline[:160]}")
    return found


def run_dap_mode(tmp_path: pathlib.Path, source: pathlib.Path, launch: dict, variable: str,
                 quit_at: str | None = None) -> list[dict]:
    """One Emacs batch run of dap_mode_session.el; its transcript, after nothing is left over."""
    transcript = tmp_path / "transcript.jsonl"
    emacs_dir = tmp_path / "emacs-home"
    emacs_dir.mkdir(exist_ok=True)
    token = uuid.uuid4().hex
    env = dict(os.environ,
               PATH=os.pathsep.join([*go_path_dirs(), os.environ.get("PATH", "")]),
               PTDEBUG_DAP_COMMAND=json.dumps([ptdebug_command(), "dap"]),
               PTDEBUG_LAUNCH=json.dumps(launch), PTDEBUG_SOURCE=str(source),
               PTDEBUG_VARIABLE=variable, PTDEBUG_TRANSCRIPT=str(transcript),
               PTDEBUG_STEP_TIMEOUT=str(STEP_TIMEOUT_S), PTDEBUG_CLIENT_RUN=token,
               # dap-mode's state in the test's folder (before: a /tmp/ptdebug-emacs-* left
               # behind by every run)
               PTDEBUG_EMACS_DIR=str(emacs_dir))
    env.pop("PTDEBUG_QUIT_AT", None)
    if quit_at:
        env["PTDEBUG_QUIT_AT"] = quit_at
    try:
        done = subprocess.run([emacs(), "--batch", "-l", str(ELISP)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=EMACS_LIMIT_S)
    except subprocess.TimeoutExpired as exc:
        seen = transcript.read_text() if transcript.exists() else "(no transcript)"
        raise AssertionError(f"emacs ran past {EMACS_LIMIT_S} s; transcript:\n{seen}") from exc
    records = ([json.loads(line) for line in transcript.read_text().splitlines()]
               if transcript.exists() else [])
    assert done.returncode == 0, (f"emacs exited {done.returncode}\nstderr:\n{done.stderr[-3000:]}"
                                  f"\ntranscript:\n{json.dumps(records, indent=1)[-6000:]}")
    deadline = time.monotonic() + 10
    while (left := processes_with_token(token)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes of the session left after Emacs ended: {left}"
    return records


def events(records: list[dict], name: str) -> list[dict]:
    return [r["body"] for r in records if r["kind"] == "event" and r["event"] == name]


def one(records: list[dict], kind: str) -> dict:
    found = [r for r in records if r["kind"] == kind]
    assert len(found) == 1, f"expected one {kind!r} record, got {found}; all: {records}"
    return found[0]


def python_launch() -> dict:
    return {"type": "ptdebug", "request": "launch", "program": str(PYTHON_PROGRAM)}


def go_launch() -> dict:
    return {"type": "ptdebug", "request": "launch", "program": str(GO_PACKAGE)}


def check_full_session(records: list[dict], source: pathlib.Path, expected_value: str) -> None:
    stop_line = marker_line(source, "stop")
    assert one(records, "breakpoint")["line"] == stop_line
    stopped = one(records, "stopped")
    assert (stopped["path"], stopped["line"]) == (str(source), stop_line), stopped
    assert [e["reason"] for e in events(records, "stopped")] == ["breakpoint"]
    assert one(records, "variable")["value"] == expected_value
    printed = "".join(e["output"] for e in events(records, "output") if e["category"] == "stdout")
    assert f"greeting={GREETING} count={len(GREETING)}" in printed
    assert [e["exitCode"] for e in events(records, "exited")] == [0]
    assert one(records, "ended")["state"] == "terminated"


def test_python_session_from_dap_mode(tmp_path):
    records = run_dap_mode(tmp_path, PYTHON_PROGRAM, python_launch(), "greeting")
    check_full_session(records, PYTHON_PROGRAM, repr(GREETING))


def test_go_session_from_dap_mode(tmp_path):
    records = run_dap_mode(tmp_path, GO_PACKAGE / "main.go", go_launch(), "greeting")
    check_full_session(records, GO_PACKAGE / "main.go", json.dumps(GREETING))


@pytest.mark.parametrize("quit_at", ["configuration", "stop"])
@pytest.mark.parametrize("backend", ["python", "go"])
def test_emacs_quits_mid_session(tmp_path, backend, quit_at):
    """Emacs quitting (SIGHUP to the adapter's process group) leaves no process of the session."""
    source, launch = ((PYTHON_PROGRAM, python_launch()) if backend == "python"
                      else (GO_PACKAGE / "main.go", go_launch()))
    records = run_dap_mode(tmp_path, source, launch, "greeting", quit_at=quit_at)
    assert one(records, "quitting")["at"] == quit_at
    assert not events(records, "exited")

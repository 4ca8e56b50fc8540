"""A debug session whose workspace has its own `adapter/` and `pt_decoder/` packages and a
`bisect.py` (issue 16: the workspace is the current directory of everything ptdebug starts):
the adapter started as the VS Code extension starts it, debugpy's adapter, the per-capture
record worker all run ptdebug's and debugpy's code, and none of the workspace's is imported."""
from __future__ import annotations

import pathlib
import re
import sys

import pytest
from conftest import ROOT, top_frame
from record_support import SERVICE, build_kvcache, line_of, record_session
from workspace_support import imported, make_workspace

pytestmark = pytest.mark.timeout(120)


def extension_command() -> list[str]:
    """The interpreter command line vscode-extension/src/adapterCommand.ts builds, read from
    its source so that the two cannot drift apart."""
    source = (ROOT / "vscode-extension" / "src" / "adapterCommand.ts").read_text()
    found = re.search(r"export const SAFE_START = ((?:\"[^\"]*\"\s*\+?\s*)+);", source)
    assert found, "SAFE_START not found in adapterCommand.ts"
    return [sys.executable, "-c", "".join(re.findall(r"\"([^\"]*)\"", found.group(1)))]


def test_record_session_from_a_workspace_with_its_own_adapter_package(start_adapter, tmp_path):
    workspace, markers = make_workspace(tmp_path)
    run = start_adapter(command=extension_command(), cwd=workspace)
    client = run.client
    library = build_kvcache(tmp_path)
    # debugpy's adapter and the record worker start with the workspace as their cwd
    stopped = record_session(client, library, record_condition="request_id == 2",
                             stop_condition="request_id == 3", rounds=10)
    run.track()
    captures = client.events("ptdebug/capture")
    assert len(captures) == 1 and captures[0]["body"]["status"] == "complete", captures
    frame = top_frame(client, stopped["threadId"])
    assert frame["line"] == line_of(SERVICE, "after_request")
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()
    run.assert_nothing_left()
    assert imported(markers) == []
    assert pathlib.Path(workspace / "adapter" / "__init__.py").exists()

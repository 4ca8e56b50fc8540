"""`ptdebug lsp` answers a real LSP client over stdio with code lenses whose numbers match the
bundle: a C fixture recorded by the ptrace stepper, its lines found with addr2line (not the
server's line table) and its cycles from the decoded history."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from collections import Counter

import pytest
from lspclient import LspClient

from adapter.recording.recording import Recording
from pt_decoder import insn_flags

ROOT = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "adapter" / "export"))
from recorded_bundles import (  # noqa: E402, F401 - after the sys.path entry that finds it
    PROGRAMS,
    REQUESTS,
    c_bundle,
    c_program,
    go_bundle,
    go_program,
    marker_line,
    spread_cycles,
)

pytestmark = pytest.mark.timeout(180)
SOURCE = PROGRAMS / "hotpath.c"


def _start(*extra: str) -> LspClient:
    client = LspClient([sys.executable, "-m", "adapter.cli", "lsp", *extra], cwd=str(ROOT),
                       env=dict(os.environ))
    client.request("initialize", {
        "processId": os.getpid(), "rootUri": ROOT.as_uri(),
        "capabilities": {"workspace": {"codeLens": {"refreshSupport": True}},
                         "textDocument": {"hover": {"contentFormat": ["markdown"]}}}})
    client.notify("initialized", {})
    client.notify("textDocument/didOpen", {"textDocument": {
        "uri": SOURCE.as_uri(), "languageId": "c", "version": 1, "text": SOURCE.read_text()}})
    return client


def _expected_lines(bundle, program) -> dict[int, dict]:
    """Per source line of hotpath.c: executions, instructions, cycles, found with addr2line
    and the history's columns by the rules in adapter/lsp/hotlines.py's header."""
    history = Recording.open(bundle).threads[0].history
    ips = list(history.ips())
    distinct = sorted(set(ips))
    out = subprocess.run(["addr2line", "-e", str(program), *[hex(a) for a in distinct]],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    line_of = {}
    for address, text in zip(distinct, out):
        file, _, number = text.rpartition(":")
        number = number.split()[0]
        if file.endswith("hotpath.c") and number.isdigit() and int(number):
            line_of[address] = int(number)
    flags = history.flags_range()
    weights = spread_cycles(history)
    stats: dict[int, Counter] = {}
    previous_line, call_lines, resumes = None, [], None
    for pos, ip in enumerate(ips):
        line = line_of.get(ip)
        if line is not None:
            s = stats.setdefault(line, Counter())
            s["instructions"] += 1
            s["cycles"] += weights[pos]
            if line != previous_line and line != resumes:
                s["executions"] += 1
        previous_line, resumes = line, None
        if flags[pos] & insn_flags.CALL:
            call_lines.append(line)
        elif flags[pos] & insn_flags.RETURN:
            resumes = call_lines.pop() if call_lines else None
    return stats


def test_lenses_match_the_bundle(c_bundle, c_program):
    client = _start()
    try:
        client.notify("ptdebug/openBundle", {"bundle": str(c_bundle)})
        client.expect(lambda m: m.get("method") == "workspace/codeLens/refresh")
        lenses = client.request("textDocument/codeLens",
                                {"textDocument": {"uri": SOURCE.as_uri()}})
        got = {lens["range"]["start"]["line"] + 1: lens["command"]["arguments"][0]
               for lens in lenses}
        expected = _expected_lines(c_bundle, c_program)
        assert set(got) == set(expected)
        for line, numbers in expected.items():
            for key in ("executions", "instructions", "cycles"):
                assert got[line][key] == numbers[key], (line, key, got[line], numbers)
        total = Recording.open(c_bundle).total_instructions
        assert abs(sum(a["share"] for a in got.values()) - 1) < 1e-9  # all lines are in hotpath.c
        hash_line = marker_line(SOURCE, "hash")
        # a stepper recording: the share is of the instructions, its cycles being its ns
        assert {a["clock"] for a in got.values()} == {"stepper"}
        assert got[hash_line]["share"] == pytest.approx(got[hash_line]["instructions"] / total)
        # The loop body of checksum runs once per byte hashed; handle once per request.
        bytes_hashed = sum(8 + (i * 7) % 24 for i in range(REQUESTS))
        assert got[hash_line]["executions"] == bytes_hashed
        assert got[marker_line(SOURCE, "handle")]["executions"] == REQUESTS
        # A call returning into its own line continues that line's execution.
        assert got[marker_line(SOURCE, "request")]["executions"] == REQUESTS
        title = next(lens["command"]["title"] for lens in lenses
                     if lens["range"]["start"]["line"] + 1 == hash_line)
        assert title.startswith(f"{bytes_hashed}× · ") and "% of window" in title
        assert client.shutdown() == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()


def test_hover_shows_the_branches_taken_on_the_line(c_bundle, c_program):
    client = _start("--bundle", str(c_bundle))
    try:
        client.expect(lambda m: m.get("method") == "window/logMessage"
                      and "hot lines of" in m["params"]["message"])
        loop_line = marker_line(SOURCE, "hash") - 1   # `for (long i = 0; i < n; i++)`
        hover = client.request("textDocument/hover", {
            "textDocument": {"uri": SOURCE.as_uri()},
            "position": {"line": loop_line - 1, "character": 8}})
        text = hover["contents"]["value"]
        # The loop condition: taken once per byte, not taken once per request (the exit).
        bytes_hashed = sum(8 + (i * 7) % 24 for i in range(REQUESTS))
        assert f"| {bytes_hashed:,} | {REQUESTS:,} |" in text, text
        call_hover = client.request("textDocument/hover", {
            "textDocument": {"uri": SOURCE.as_uri()},
            "position": {"line": marker_line(SOURCE, "request") - 1, "character": 4}})
        assert f"`handle` ×{REQUESTS}" in call_hover["contents"]["value"]
        nothing = client.request("textDocument/hover", {
            "textDocument": {"uri": SOURCE.as_uri()}, "position": {"line": 0, "character": 0}})
        assert nothing is None
        assert client.shutdown() == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()


def test_a_bad_bundle_is_reported_and_the_last_capture_stays(c_bundle, tmp_path):
    client = _start()
    try:
        result = client.request("workspace/executeCommand",
                                {"command": "ptdebug.lsp.openBundle", "arguments": [str(c_bundle)]})
        assert result["ok"] is True and result["instructions"] > 0
        client.notify("ptdebug/openBundle", {"bundle": str(tmp_path / "missing")})
        shown = client.expect(lambda m: m.get("method") == "window/showMessage")
        assert "missing: not a bundle directory" in shown["params"]["message"]
        lenses = client.request("textDocument/codeLens", {"textDocument": {"uri": SOURCE.as_uri()}})
        assert lenses, "the previous capture is still shown"
        assert client.shutdown() == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()


def test_go_lines_come_from_pclntab(go_bundle):
    source = PROGRAMS / "hotpath.go"
    client = LspClient([sys.executable, "-m", "adapter.cli", "lsp", "--bundle", str(go_bundle)],
                       cwd=str(ROOT), env=dict(os.environ))
    try:
        client.request("initialize", {"processId": os.getpid(), "rootUri": ROOT.as_uri(),
                                      "capabilities": {}})
        client.notify("initialized", {})
        client.expect(lambda m: m.get("method") == "window/logMessage"
                      and "hot lines of" in m["params"]["message"])
        lenses = client.request("textDocument/codeLens", {"textDocument": {"uri": source.as_uri()}})
        got = {lens["range"]["start"]["line"] + 1: lens["command"]["arguments"][0] for lens in lenses}
        bytes_hashed = sum(8 + (i * 7) % 24 for i in range(REQUESTS))
        assert got[marker_line(source, "hash")]["executions"] == bytes_hashed
        # The Go compiler interleaves a line's code with its neighbours': the line of handle's
        # first statement is entered more than once per call, the same number each time.
        for marker in ("handle", "request"):
            runs = got[marker_line(source, marker)]["executions"]
            assert runs >= REQUESTS and runs % REQUESTS == 0, (marker, runs)
        assert sum(a["cycles"] for a in got.values()) == Recording.open(go_bundle).total_cycles
        assert client.shutdown() == 0
    finally:
        if client.process.poll() is None:
            client.process.kill()

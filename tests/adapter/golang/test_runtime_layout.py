"""The runtime layout read from DWARF finds the goroutine real Delve reports: at a breakpoint
in a goroutine, g = *(fs_base + tls_g_offset) and g.goid, read through the Delve-RPC bridge
(ListRegisters, ExamineMemory), equal Delve's current goroutine id; the switch instructions
found in the text are the TLS stores of runtime.gogo and runtime.mcall."""
from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess

import pytest

from adapter.backends.delve_process import find_dlv
from adapter.backends.delve_rpc import DelveRpc
from adapter.golang.runtime_layout import LayoutError, RuntimeLayout

ROOT = pathlib.Path(__file__).resolve().parents[3]
SESSION = ROOT / "tests" / "fixtures" / "programs" / "go_session"


@pytest.fixture(scope="module")
def session_binary(tmp_path_factory):
    go = shutil.which("go") or "/usr/local/go/bin/go"
    package = tmp_path_factory.mktemp("layout") / "go_session"
    shutil.copytree(SESSION, package)
    out = package.parent / "session"
    subprocess.run([go, "build", "-gcflags=all=-N -l", "-o", str(out), "."], cwd=package,
                   check=True, env=dict(os.environ, CGO_ENABLED="0"))
    return out, package / "main.go"


def _marker(path, name):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.rstrip().endswith(f"// @{name}"):
            return number
    raise LookupError(name)


def test_goid_from_dwarf_layout_equals_delves_goroutine(session_binary):
    binary, source = session_binary
    layout = RuntimeLayout.from_elf(str(binary))
    assert layout.tls_g_offset == -8  # internally linked: no PT_TLS
    dlv = subprocess.Popen([find_dlv(), "exec", str(binary), "--headless", "--api-version=2",
                            "--listen=127.0.0.1:0"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT)
    try:
        port = int(re.search(rb"127\.0\.0\.1:(\d+)", dlv.stdout.readline()).group(1))
        rpc = DelveRpc("127.0.0.1", port)
        rpc.call("CreateBreakpoint", Breakpoint={"file": str(source),
                                                 "line": _marker(source, "work")})
        state = rpc.call("Command", timeout=60, name="continue")["State"]
        goid = state["currentGoroutine"]["id"]
        assert goid > 1  # the square goroutine, not main
        regs = rpc.registers(state["currentThread"]["id"])
        g = int.from_bytes(rpc.read_memory(regs["Fs_base"] + layout.tls_g_offset, 8), "little")
        assert g == regs["R14"]  # Go code: R14 holds g too
        read = int.from_bytes(rpc.read_memory(g + layout.goid_offset, 8), "little")
        assert read == goid
        m = int.from_bytes(rpc.read_memory(g + layout.offsets["runtime.g"]["m"], 8), "little")
        curg = int.from_bytes(rpc.read_memory(m + layout.offsets["runtime.m"]["curg"], 8),
                              "little")
        assert curg == g
        rpc.detach(kill=True)
        rpc.close()
    finally:
        dlv.kill()
        dlv.wait()


def test_switch_instructions_are_the_tls_stores_of_gogo_and_mcall(session_binary):
    binary, _ = session_binary
    layout = RuntimeLayout.from_elf(str(binary))
    gogo, mcall = layout.symbols["gogo"], layout.symbols["runtime.mcall"]
    dump = subprocess.run([shutil.which("go") or "/usr/local/go/bin/go", "tool", "objdump",
                           "-s", "^(gogo|runtime.mcall|runtime.systemstack.abi0)$", str(binary)],
                          capture_output=True, text=True, check=True).stdout
    stores = {int(m.group(1), 16) for m in re.finditer(
        r"\s(0x[0-9a-f]+)\s+[0-9a-f]+\s+MOVQ \w+, FS:0xfffffff8", dump)}
    assert stores and stores <= set(layout.g_stores)
    assert any(gogo <= a < gogo + 0x80 for a in stores)
    assert any(mcall <= a < mcall + 0x80 for a in stores)


def test_not_a_go_binary(tmp_path):
    with pytest.raises(LayoutError, match="not a Go binary"):
        RuntimeLayout.from_elf("/bin/true")

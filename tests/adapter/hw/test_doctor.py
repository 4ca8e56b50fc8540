"""`ptdebug doctor` on this machine: says whether intel_pt is there and why
not, that hardware breakpoints work (probed, not assumed), and which backend
`record --backend auto` will use."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

from adapter.commands import doctor
from adapter.hw import cpu

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _run(*args):
    return subprocess.run([sys.executable, "-m", "adapter.cli", "doctor", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_json_report_tells_the_truth_about_this_machine():
    run = _run("--json")
    assert run.returncode == 0, run.stderr
    r = json.loads(run.stdout)
    ident = cpu.cpu_id()
    assert r["cpu"]["family"] == ident.family and r["cpu"]["vendor"] == ident.vendor
    has_pt = pathlib.Path("/sys/bus/event_source/devices/intel_pt").exists()
    assert r["intel_pt"]["available"] == has_pt
    if not has_pt:
        assert r["intel_pt"]["why_not"] and r["intel_pt"]["fix"]
        assert r["recorder"]["backend"] == "stepper"
    bp = r["breakpoints"]
    if bp["available"]:
        assert bp["debug_registers"] == doctor.probe_breakpoints()["count"]
    assert r["kernel"] == cpu.kernel_release()
    with open("/proc/sys/kernel/perf_event_paranoid") as f:
        assert r["perf_event_paranoid"] == int(f.read())


def test_text_report_names_every_no():
    run = _run()
    assert run.returncode == 0
    out = run.stdout
    for key in ("kernel", "cpu", "virtual machine", "perf_event_paranoid", "ptrace_scope",
                "capabilities", "intel_pt", "hw breakpoints", "ptrace", "recorder"):
        assert key in out
    if not pathlib.Path("/sys/bus/event_source/devices/intel_pt").exists():
        assert "intel_pt          no" in out and "  why:" in out and "  fix:" in out


def test_breakpoint_probe_stops_at_the_hardware_limit():
    probe = doctor.probe_breakpoints()
    if probe["count"] == 4:   # x86: DR0-DR3, a fifth gives ENOSPC
        assert probe["error"] == "No space left on device"
    assert 0 <= probe["count"] <= 4


def test_fake_sysfs_with_intel_pt(tmp_path):
    """doctor reads caps and formats from sysfs: a tree laid out like an Intel host's."""
    pmu = tmp_path / "intel_pt"
    (pmu / "caps").mkdir(parents=True)
    (pmu / "format").mkdir()
    (pmu / "type").write_text("8\n")
    (pmu / "caps" / "num_address_ranges").write_text("2\n")
    (pmu / "caps" / "ptwrite").write_text("1\n")
    (pmu / "format" / "tsc").write_text("config:10\n")
    (tmp_path / "breakpoint").mkdir()
    (tmp_path / "breakpoint" / "type").write_text("5\n")
    r = doctor.check(root=tmp_path)
    assert r["intel_pt"]["available"] and r["intel_pt"]["type"] == 8
    assert r["intel_pt"]["caps"] == {"num_address_ranges": 2, "ptwrite": 1}
    assert r["intel_pt"]["format"] == {"tsc": "config:10"}
    if r["intel_pt"].get("usable"):
        assert r["recorder"]["backend"] == "intel_pt"


def test_cpuinfo_parsing():
    text = ("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 85\n"
            "model name\t: Intel(R) Xeon(R)\nstepping\t: 4\nflags\t\t: fpu pt hypervisor\n\n"
            "processor\t: 1\nvendor_id\t: Other\n")
    ident = cpu.cpu_id(text)
    assert (ident.vendor, ident.family, ident.model, ident.stepping) == \
        ("GenuineIntel", 6, 85, 4)
    assert "hypervisor" in ident.flags


def test_tools_found_here_with_their_versions():
    """scripts/bootstrap.sh installs every tool: each is found, with the version it reports."""
    run = _run("--json")
    tools = json.loads(run.stdout)["tools"]
    assert set(tools) == {"go", "dlv", "perf", "cc", "libipt"}  # no gdb: attach by pid needs none
    for name, tool in tools.items():
        assert tool["found"] and tool["path"] and tool["needed_for"], (name, tool)
        assert "fix" not in tool, (name, tool)
    assert tools["dlv"]["version"].startswith("Version: ")
    assert tools["go"]["version"].startswith("go version go1.")
    text = _run().stdout
    assert f"  perf     yes ({tools['perf']['version']})" in text


def test_missing_tools_are_named_with_what_needs_them_and_how_to_get_them(tmp_path):
    """With nothing on PATH and a HOME without ~/go/bin, perf, the C compiler and Delve
    are missing: the report says so, what each is for, and how to install it."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "PTDEBUG_DLV": ""}
    run = subprocess.run([sys.executable, "-m", "adapter.cli", "doctor", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60, env=env)
    assert run.returncode == 0, run.stderr
    tools = json.loads(run.stdout)["tools"]
    for name, fix in (("perf", "apt-get install linux-perf"),
                      ("cc", "apt-get install build-essential")):
        assert tools[name]["found"] is False and tools[name]["path"] is None
        assert tools[name]["fix"] == fix and tools[name]["needed_for"]
    if tools["go"]["found"]:  # /usr/local/go/bin/go is found without PATH; its GOPATH is ~/go
        assert tools["go"]["path"] == "/usr/local/go/bin/go"
    assert tools["dlv"]["found"] is False
    assert "go install github.com/go-delve/delve/cmd/dlv@latest" in tools["dlv"]["fix"]
    text = subprocess.run([sys.executable, "-m", "adapter.cli", "doctor"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60).stdout
    assert "  perf     no: needed for recording Intel PT outside ptdebug" in text
    assert "           fix: apt-get install linux-perf" in text

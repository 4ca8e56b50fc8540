"""The Processor Trace scope says what its time is, through `ptdebug dap` (issue 14, item 8).

A replay (`"request": "launch", "replay": PATH`) of two real recordings, asked for as VS Code
asks at a stop (stackTrace, scopes, variables):
* a C program recorded by `ptdebug record --backend stepper` here: the scope leads with
  instruction counts, names its time "stepper time, not CPU time" and shows no TSC, CYC or IPC;
* DynamoRIO's real Intel PT recording of a static hello on a Skylake-SP (../shared/traces,
  skipped naming PTDEBUG_SHARED where absent): TSC, CYC, cycles and IPC as the CPU counted
  them, with no stepper label.
tests/e2e/test_dap_reverse.py checks the same items at a live stop after a record breakpoint.
"""
from __future__ import annotations

import json
import subprocess

import pytest
from test_replay import HOTPATH, end_session, ptdebug, start_replay, top

from adapter.capture.bundle import BundleWriter

pytestmark = pytest.mark.timeout(240)

STATIC_HELLO = "dynamorio-drpt2trace/test_simple.tracedir-2022-06-22-static-glibc-hello"


@pytest.fixture(scope="module")
def stepper_bundle(tmp_path_factory):
    work = tmp_path_factory.mktemp("scope_stepper")
    program = work / "hotpath"
    subprocess.run(["gcc", "-O0", "-g", "-no-pie", "-o", str(program), str(HOTPATH)], check=True)
    bundle = work / "hotpath.bundle"
    ptdebug("record", "--backend", "stepper", "--from", "serve", "--until-return", "-o",
            str(bundle), "--", str(program), "2")
    return bundle


@pytest.fixture(scope="module")
def intel_pt_bundle(traces_dir, tmp_path_factory):
    """The real PT stream and its binary in a bundle (as tests/adapter/export/
    test_real_intel_pt.py makes it; its CYC packets are the CPU's)."""
    source = traces_dir / STATIC_HELLO
    bundle = tmp_path_factory.mktemp("scope_pt") / "bundle"
    writer = BundleWriter(bundle, "intel_pt",
                          {"vendor": "GenuineIntel", "family": 6, "model": 85, "stepping": 7},
                          timing={"tsc_hz": None, "cyc": True}, command=["hello"],
                          copy_images=False)
    writer.add_stream_bytes(1, (source / "pt.bin").read_bytes(), pid=1)
    writer.add_image(str(source / "hello"), 0x401000, 0x1000, 0x86FB1, kind="elf")
    writer.add_thread(1, 1, "hello")
    writer.finish()
    return bundle


def _trace_scope(run, bundle) -> dict[str, dict]:
    client = run.client
    thread_id = start_replay(run, bundle)["threadId"]
    frame = top(client, thread_id)
    scopes = client.call("scopes", {"frameId": frame["id"]})["scopes"]
    trace = next(s for s in scopes if s["name"] == "Processor Trace")
    variables = client.call("variables", {"variablesReference": trace["variablesReference"]})
    return {v["name"]: v for v in variables["variables"]}


def test_a_stepper_capture_shows_instructions_and_stepper_time(start_adapter, stepper_bundle):
    run = start_adapter()
    items = _trace_scope(run, stepper_bundle)
    names = list(items)
    assert names.index("instructions in window") < names.index("stepper time in window")
    assert int(items["instructions in window"]["value"]) > 100
    for name in ("stepper time since window opened", "stepper time in window", "stepper clock"):
        assert items[name]["type"] == "stepper time, not CPU time", items[name]
    assert "us an instruction" in items["stepper time in window"]["value"]
    assert not {"TSC", "CYC", "cycles in window"} & set(items), names
    assert items["IPC"]["value"].startswith("n/a")
    # the clock, named as the ptdebug/capture event names it (issue 35)
    assert items["clock"]["type"] == "stepper" and "not CPU time" in items["clock"]["value"]
    end_session(run)


def test_an_intel_pt_capture_shows_the_cpus_tsc_and_cycles(start_adapter, intel_pt_bundle):
    run = start_adapter()
    items = _trace_scope(run, intel_pt_bundle)
    assert {"TSC", "CYC", "cycles in window", "ns since window opened", "IPC"} <= set(items)
    assert int(items["cycles in window"]["value"]) > 100_000
    assert 0 < float(items["IPC"]["value"]) < 10
    assert "stepper" not in json.dumps(items)
    assert items["clock"]["type"] == "tsc" and "CYC" in items["clock"]["value"], items["clock"]
    end_session(run)

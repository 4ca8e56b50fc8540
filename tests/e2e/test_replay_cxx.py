"""A C++ capture kept in a captures directory, replayed through `ptdebug dap`: its images come
from the captures store, its recorded frames, disassembly and Processor Trace scope show C++
names demangled (the linkage name in the scope), and while the session replays it the
directory's limit does not remove it (the session's lease); once the session ended it does.
Issue 33."""
from __future__ import annotations

import json
import pathlib
import re

import pytest
from conftest import INITIALIZE
from cxx_fixture import PROGRAMS, build_cxx_service, decoded_ips, ptdebug, record

from adapter.capture.image_store import store_images_in

pytestmark = pytest.mark.timeout(240)

KERNELS = PROGRAMS / "cxx_kernels.cpp"
ADD = "infer::kernels::Accumulator<long>::add(std::vector<long, std::allocator<long> > const&)"
ADD_MANGLED = "_ZN5infer7kernels11AccumulatorIlE3addERKSt6vectorIlSaIlEE"


def marker(path: pathlib.Path, name: str) -> int:
    return next(n for n, text in enumerate(path.read_text().splitlines(), 1)
                if text.rstrip().endswith(f"// @{name}"))


def test_a_cxx_capture_replays_from_the_store_with_readable_names_and_is_kept_meanwhile(
        start_adapter, tmp_path):
    program, library = build_cxx_service(tmp_path / "bin")
    captures = tmp_path / "captures"
    bundle = record(program, captures / "capture-1")
    store_images_in(bundle, sorted(set(decoded_ips(bundle))))
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert any(i["path"] == str(library) and i["file"].startswith("../.store/images/")
               for i in manifest["images"])
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    client.call("launch", {"replay": str(bundle), "stopOnEntry": True})
    client.expect_event("initialized")
    client.call("setBreakpoints", {"source": {"path": str(KERNELS)},
                                   "breakpoints": [{"line": marker(KERNELS, "add")}]})
    client.call("configurationDone", {})
    thread_id = client.expect_stopped("entry")["threadId"]
    # in use: the limit removes nothing of it
    gc = json.loads(ptdebug("captures", "--dir", str(captures), "gc", "--limit", "1",
                            "--json").stdout)
    assert gc["removed"] == [] and gc["over"] is True and (bundle / "manifest.json").is_file()
    client.call("continue", {"threadId": thread_id})
    client.expect_stopped("breakpoint")
    frames = client.call("stackTrace", {"threadId": thread_id, "levels": 20})["stackFrames"]
    assert frames[0]["name"].startswith(ADD + "+0x") or frames[0]["name"].startswith(ADD + " ["), \
        frames[0]["name"]
    assert frames[0]["source"]["path"] == str(KERNELS)
    assert not [f["name"] for f in frames if f["name"].startswith("_Z")], frames
    body = client.call("disassemble", {"memoryReference": frames[0]["instructionPointerReference"],
                                       "instructionCount": 4, "resolveSymbols": True})
    assert body["instructions"][0].get("symbol") == ADD, body["instructions"][0]
    scopes = client.call("scopes", {"frameId": frames[0]["id"]})["scopes"]
    variables = client.call("variables",
                            {"variablesReference": scopes[-1]["variablesReference"]})["variables"]
    shown = {v["name"]: v["value"] for v in variables}
    assert shown["linkage name"] == ADD_MANGLED
    assert re.search(re.escape(ADD) + r"\+0x[0-9a-f]+", shown["IP"]), shown["IP"]
    client.call("disconnect", {})
    assert run.wait_exit() == 0
    # the session ended: nothing holds it any more
    gc = json.loads(ptdebug("captures", "--dir", str(captures), "gc", "--limit", "1",
                            "--json").stdout)
    assert gc["removed"] == ["capture-1"] and not bundle.exists()
    assert list((captures / ".store" / "images").iterdir()) == []

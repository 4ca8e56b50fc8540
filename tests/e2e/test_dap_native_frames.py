"""Native frames on a data-breakpoint stop, through `ptdebug dap` in front of real debugpy: a
thread writes into a numpy array from a C function (built here with gcc -g); the stopped
thread's stackTrace starts with the native frames of the write (the perf sample's IP and call
chain) carrying `instructionPointerReference`, the symbol and the DWARF source line, then
debugpy's Python frames. Every message is checked against the DAP schema by the client."""
from __future__ import annotations

import subprocess

import pytest
from conftest import INITIALIZE, PROGRAMS, evaluate, launch, top_frame
from dapclient import marker_line

pytestmark = pytest.mark.timeout(90)

PROGRAM = PROGRAMS / "dap_native_writer.py"
SOURCE = PROGRAMS / "dap_native.c"
NATIVE_FRAME_IDS = range(1 << 26, 1 << 27)  # docs/protocol.md, "Frame and reference ids"


def test_data_breakpoint_stop_shows_the_native_frames_of_the_write(start_adapter, tmp_path):
    library = tmp_path / "libdapnative.so"
    subprocess.run(["gcc", "-g", "-O0", "-shared", "-fPIC", "-o", str(library), str(SOURCE)],
                   check=True)
    run = start_adapter()
    client = run.client
    launch(client, PROGRAM, args=[str(library)], breakpoints=["armed"])
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    main_thread = client.expect_stopped("breakpoint")["threadId"]
    frame = top_frame(client, main_thread)["id"]
    # before any data-breakpoint stop, stackTrace is debugpy's alone
    assert top_frame(client, main_thread)["name"] == "main"
    function = int(evaluate(client, frame, "__import__('ctypes').cast(lib.scale_in_place, "
                                           "__import__('ctypes').c_void_p).value"))
    info = client.call("dataBreakpointInfo", {"name": "values[2]", "frameId": frame})
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    client.call("continue", {"threadId": main_thread})
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert "from 3 to 30" in stopped["description"] and "scale_in_place" in stopped["description"]

    frames = client.call("stackTrace", {"threadId": stopped["threadId"], "levels": 40})
    stack = frames["stackFrames"]
    native = [f for f in stack if f["id"] in NATIVE_FRAME_IDS]
    assert native and stack[:len(native)] == native, stack  # native frames come first
    top = native[0]
    assert top["name"].startswith("scale_in_place+") and "libdapnative.so" in top["name"]
    assert top["presentationHint"] == "subtle"
    ip = int(top["instructionPointerReference"], 16)
    assert function < ip < function + 0x100, (hex(function), top)
    assert top["source"]["path"] == str(SOURCE)
    scale = marker_line(SOURCE, "scale")
    assert scale <= top["line"] <= scale + 1, top  # the trap comes after the store
    assert all(f.get("instructionPointerReference") for f in native)
    python = stack[len(native)]
    assert python["name"] == "writer" and python["id"] not in NATIVE_FRAME_IDS
    assert python["line"] >= marker_line(PROGRAM, "call")
    assert frames["totalFrames"] == len(stack)

    # paging counts native and Python frames together
    page = client.call("stackTrace", {"threadId": stopped["threadId"], "startFrame": 1,
                                      "levels": len(native)})
    assert [f["name"] for f in page["stackFrames"]] == [f["name"] for f in stack[1:1 + len(native)]]
    assert page["totalFrames"] == len(stack)

    # the native top frame's scope is the sample's registers; evaluate there is refused
    scopes = client.call("scopes", {"frameId": top["id"]})["scopes"]
    assert scopes[0]["presentationHint"] == "registers"
    registers = {v["name"]: v["value"] for v in client.call(
        "variables", {"variablesReference": scopes[0]["variablesReference"]})["variables"]}
    assert int(registers["rip"], 16) == ip
    refused = client.request("evaluate", {"expression": "1", "frameId": top["id"],
                                          "context": "repl"})
    assert not refused["success"] and "native frame" in refused["message"]
    assert evaluate(client, python["id"], "int(values[2])") == "30"  # the session carries on

    client.call("setDataBreakpoints", {"breakpoints": []})
    # once the program continued, the next stop of the writer shows debugpy's frames only
    client.call("setBreakpoints", {"source": {"path": str(PROGRAM)},
                                   "breakpoints": [{"line": marker_line(PROGRAM, "writer_wait")}]})
    client.call("continue", {"threadId": stopped["threadId"]})
    again = client.expect_stopped("breakpoint", timeout=30)
    later = client.call("stackTrace", {"threadId": again["threadId"], "levels": 40})
    assert [f for f in later["stackFrames"] if f["id"] in NATIVE_FRAME_IDS] == []
    assert later["stackFrames"][0]["name"] == "writer"
    client.call("setBreakpoints", {"source": {"path": str(PROGRAM)}, "breakpoints": []})
    client.call("evaluate", {"expression": "globals().update(stop=True)",
                             "frameId": later["stackFrames"][0]["id"], "context": "repl"})
    client.call("continue", {"threadId": again["threadId"]})
    assert client.expect_event("exited", timeout=30)["body"]["exitCode"] == 0
    client.call("disconnect", {})
    assert run.wait_exit() == 0



def test_native_frames_also_when_the_session_has_a_capture(start_adapter, tmp_path):
    """Once a record breakpoint kept a capture, stackTrace also feeds the Processor Trace scope
    (features.trace_scope forwards it): the native frames of a later data-breakpoint stop are
    still put first, and debugpy's Python frames still follow. The capture is of a thread that
    has exited by then: a thread the ptrace stepper recorded keeps its debug-register slots
    reserved until it exits (the kernel frees ptrace breakpoints only then), so no hardware
    watch can be armed on it."""
    library = tmp_path / "libdapnative.so"
    subprocess.run(["gcc", "-g", "-O0", "-shared", "-fPIC", "-o", str(library), str(SOURCE)],
                   check=True)
    run = start_adapter()
    client = run.client
    client.call("initialize", INITIALIZE)
    launch_seq = client.send_request("launch", {
        "program": str(PROGRAM), "args": [str(library)], "console": "internalConsole",
        "recordWindow": {"instructions": 200}})
    client.expect_event("initialized")
    answer = client.call("setBreakpoints", {"source": {"path": str(PROGRAM)}, "breakpoints": [
        {"line": marker_line(PROGRAM, "record"), "mode": "record"},
        {"line": marker_line(PROGRAM, "armed")}]})
    assert [b["verified"] for b in answer["breakpoints"]] == [True, True], answer
    client.call("configurationDone", {})
    assert client.expect_response(launch_seq)["success"]
    capture = client.expect_event("ptdebug/capture", timeout=30)["body"]
    assert capture["instructions"] == 200, capture
    stopped = client.expect_stopped("breakpoint", timeout=30)
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    frame = top_frame(client, stopped["threadId"])["id"]
    info = client.call("dataBreakpointInfo", {"name": "values[2]", "frameId": frame})
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    client.call("continue", {"threadId": stopped["threadId"]})
    hit = client.expect_stopped("data breakpoint", timeout=30)
    stack = client.call("stackTrace", {"threadId": hit["threadId"], "levels": 20})["stackFrames"]
    assert stack[0]["id"] in NATIVE_FRAME_IDS and "scale_in_place" in stack[0]["name"], stack
    python = next(f for f in stack if f["id"] not in NATIVE_FRAME_IDS)
    assert python["name"] == "writer", stack
    client.call("setDataBreakpoints", {"breakpoints": []})
    client.call("disconnect", {"terminateDebuggee": True})
    run.wait_exit()

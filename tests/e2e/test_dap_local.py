"""The standard requests debugpy does not implement are answered by ptdebug itself: real
memory of the debuggee, real disassembly, or a clear error with a stable id; the session then
carries on. The last test shows why: debugpy alone never answers them and stalls."""
from __future__ import annotations

import base64
import struct
import subprocess
import sys

import pytest
from conftest import BASIC, PROGRAMS, evaluate, launch, top_frame
from dapclient import DapClient, marker_line

pytestmark = pytest.mark.timeout(60)

ADDRESS_OF_BUF = ("__import__('ctypes').addressof((__import__('ctypes').c_char * len(buf))"
                  ".from_buffer(buf))")
ADDRESS_OF_GETPID = ("__import__('ctypes').cast(__import__('ctypes').CDLL(None).getpid, "
                     "__import__('ctypes').c_void_p).value")

NOT_YET = 1301       # NotSupportedYet: ptdebug will serve it once the feature is wired
UNSUPPORTED = 1300   # UnsupportedRequest: neither ptdebug nor debugpy implements it


def _stopped(client):
    launch(client, breakpoints=["after_compute"])
    stopped = client.expect_stopped("breakpoint")
    return stopped["threadId"], top_frame(client, stopped["threadId"])["id"]


def _still_answers(client, frame_id):
    assert evaluate(client, frame_id, "result + 1") == "7"


def test_read_and_write_memory_of_the_debuggee(start_adapter):
    client = start_adapter().client
    _, frame = _stopped(client)
    address = int(evaluate(client, frame, ADDRESS_OF_BUF))
    body = client.call("readMemory", {"memoryReference": hex(address), "count": 14})
    assert body["address"] == hex(address)
    assert base64.b64decode(body["data"]) == b"ptdebug-buffer"
    # id() is the object's address in CPython: its second word is the type object's address.
    list_address = int(evaluate(client, frame, "id(numbers)"))
    body = client.call("readMemory", {"memoryReference": str(list_address), "offset": 8,
                                      "count": 8})
    (type_pointer,) = struct.unpack("<Q", base64.b64decode(body["data"]))
    assert type_pointer == int(evaluate(client, frame, "id(list)"))
    written = client.call("writeMemory", {"memoryReference": hex(address), "offset": 8,
                                          "data": base64.b64encode(b"BUFFER").decode()})
    assert written["bytesWritten"] == 6
    memory = client.expect_event("memory")["body"]
    assert (memory["offset"], memory["count"]) == (8, 6)
    assert evaluate(client, frame, "bytes(buf)") == "b'ptdebug-BUFFER'"
    # Page zero is never mapped: nothing readable, and the reply says how much to skip.
    hole = client.call("readMemory", {"memoryReference": "0x0", "count": 64})
    assert base64.b64decode(hole.get("data", "")) == b"" and hole["unreadableBytes"] == 64
    _still_answers(client, frame)


def test_disassemble_gives_instructions_and_symbols(start_adapter):
    client = start_adapter().client
    _, frame = _stopped(client)
    getpid = int(evaluate(client, frame, ADDRESS_OF_GETPID))
    body = client.call("disassemble", {"memoryReference": hex(getpid), "instructionCount": 8})
    instructions = body["instructions"]
    assert len(instructions) == 8
    assert int(instructions[0]["address"], 16) == getpid
    assert "getpid" in instructions[0]["symbol"]
    assert any(i["instruction"] == "syscall" for i in instructions)
    code = base64.b64decode(client.call("readMemory", {"memoryReference": hex(getpid),
                                                       "count": 16})["data"])
    first = bytes.fromhex(instructions[0]["instructionBytes"])
    assert code.startswith(first)
    # Backwards from the address, as VS Code asks when the view scrolls up: exactly
    # instructionCount entries, and the address lands where the offset puts it.
    back = client.call("disassemble", {"memoryReference": hex(getpid), "instructionOffset": -3,
                                       "instructionCount": 10})["instructions"]
    assert len(back) == 10 and int(back[3]["address"], 16) == getpid
    # Unreadable memory is padded with invalid entries, never a short list or an error.
    hole = client.call("disassemble", {"memoryReference": "0x10", "instructionCount": 4})
    assert [i.get("presentationHint") for i in hole["instructions"]] == ["invalid"] * 4
    _still_answers(client, frame)


LACKING = [
    ("setInstructionBreakpoints", {"breakpoints": [{"instructionReference": "0x1000"}]},
     NOT_YET),
    ("stepBack", {"threadId": "THREAD"}, NOT_YET),
    ("reverseContinue", {"threadId": "THREAD"}, NOT_YET),
    ("breakpointLocations", {"source": {"path": str(BASIC)}, "line": 3}, UNSUPPORTED),
    ("loadedSources", {}, UNSUPPORTED),
    ("restartFrame", {"frameId": "FRAME"}, UNSUPPORTED),
    ("terminateThreads", {"threadIds": []}, UNSUPPORTED),
]


def test_requests_debugpy_lacks_are_answered_and_the_session_goes_on(start_adapter):
    """One session, every such request in turn, each followed by an evaluate that answers."""
    client = start_adapter().client
    thread, frame = _stopped(client)
    for command, arguments, error_id in LACKING:
        arguments = {k: frame if v == "FRAME" else thread if v == "THREAD" else v
                     for k, v in arguments.items()}
        response = client.request(command, arguments, timeout=5)
        assert response["success"] is False, response
        assert response["body"]["error"]["id"] == error_id, response
        assert command in response["message"] or "not supported yet" in response["message"]
        _still_answers(client, frame)
    # `cancel` is answered by ptdebug (a hint for a request; a progress it shows stops)
    assert client.call("cancel", {"requestId": 1}, timeout=5) == {}
    _still_answers(client, frame)
    # Data breakpoints have their real implementation (test_dap_data_breakpoints.py),
    # announced once the watchpoint probe on the debuggee succeeded.
    client.expect_event("capabilities",
                        pred=lambda e: "supportsDataBreakpoints" in e["body"]["capabilities"])
    info = client.call("dataBreakpointInfo", {"name": "buf", "frameId": frame}, timeout=5)
    assert info["dataId"] and "bytearray" in info["description"]
    _still_answers(client, frame)
    client.call("setDataBreakpoints", {"breakpoints": []}, timeout=5)
    _still_answers(client, frame)
    client.call("continue", {"threadId": thread})
    assert client.expect_event("exited")["body"]["exitCode"] == 0


def test_debugpy_alone_never_answers_them_and_stalls(dap_schema):
    """The reason for the above (debugpy 1.8.22): a readMemory sent straight to debugpy gets
    no answer, and neither does any request after it."""
    client = DapClient.stdio([sys.executable, "-m", "debugpy.adapter"], dap_schema,
                             stderr=subprocess.DEVNULL)
    try:
        launch(client, breakpoints=["after_compute"])
        stopped = client.expect_stopped("breakpoint")
        frame = top_frame(client, stopped["threadId"])["id"]
        stalled = client.send_request("readMemory", {"memoryReference": "0x1000", "count": 4})
        after = client.send_request("evaluate", {"expression": "1", "frameId": frame,
                                                 "context": "repl"})
        with pytest.raises(TimeoutError):
            client.expect_response(stalled, timeout=2)
        with pytest.raises(TimeoutError):
            client.expect_response(after, timeout=1)
    finally:
        client.proc.kill()
        client.proc.wait(10)
        client.schema_errors.clear()  # debugpy's own messages are not what is tested here
        client.close()


def test_disassemble_native_code_with_source_lines(start_adapter, tmp_path):
    """A C function built with -g: its instructions carry the symbol and their source line
    (DWARF, pt_decoder.lines), as VS Code's disassembly view shows them."""
    source = PROGRAMS / "dap_native.c"
    library = tmp_path / "libdapnative.so"
    subprocess.run(["gcc", "-g", "-O0", "-shared", "-fPIC", "-o", str(library), str(source)],
                   check=True)
    program = PROGRAMS / "dap_native.py"
    client = start_adapter().client
    launch(client, program, args=[str(library)], breakpoints=["after_call"])
    stopped = client.expect_stopped("breakpoint")
    frame = top_frame(client, stopped["threadId"])["id"]
    assert evaluate(client, frame, "total") == "100"
    function = int(evaluate(client, frame, "__import__('ctypes').cast(lib.scale_in_place, "
                                           "__import__('ctypes').c_void_p).value"))
    instructions = client.call("disassemble", {"memoryReference": hex(function),
                                               "instructionCount": 40})["instructions"]
    assert instructions[0]["symbol"] == "scale_in_place"
    assert instructions[0]["location"]["path"].endswith("dap_native.c")
    scale = marker_line(source, "scale")
    assert any(i.get("line") == scale for i in instructions), instructions[:5]
    assert all(i["instruction"] for i in instructions)

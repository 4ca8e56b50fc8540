"""Data breakpoints on what a user clicks in the Variables view, through `ptdebug dap` in front
of real debugpy (tests/fixtures/programs/dap_watch_paths.py): a numpy row and element (children
debugpy names '2' under a range group, with no evaluateName), a dict item, list items,
attributes (`self.cache`, `model.coefs_[0]`), an array.array, a bytearray, a memoryview and a
ctypes array each resolve to the address of their memory; a copy and a value debugpy computed
(an array's min) are refused; a watch set on a clicked element stops its writer."""
from __future__ import annotations

import pytest
from conftest import PROGRAMS, evaluate, launch, python_frame, top_frame
from dapclient import marker_line

pytestmark = pytest.mark.timeout(120)

PATHS = PROGRAMS / "dap_watch_paths.py"
ADDRESS_OF = "__import__('ctypes').addressof(__import__('ctypes').c_char.from_buffer({}))"


def children(client, reference: int) -> dict[str, dict]:
    variables = client.call("variables", {"variablesReference": reference})["variables"]
    return {v["name"].strip(): dict(v, parent=reference) for v in variables}


def info(client, variable: dict) -> dict:
    """dataBreakpointInfo as VS Code asks it for a row of the Variables view."""
    return client.call("dataBreakpointInfo", {"name": variable["name"],
                                              "variablesReference": variable["parent"]})


def items(client, array: dict) -> dict[str, dict]:
    """The items of a numpy array row in the Variables view (under debugpy's range group)."""
    group = next(v for name, v in children(client, array["variablesReference"]).items()
                 if name.startswith("[0:"))
    assert not group.get("evaluateName")
    return children(client, group["variablesReference"])


def test_every_variables_view_path_resolves_and_a_copy_is_refused(start_adapter):
    """Seen before: rows and elements had "no expression ptdebug can evaluate", arrays in
    containers failed with `memoryview: a bytes-like object is required, not 'dict'`, and a
    copy was accepted and watched at a temporary."""
    run = start_adapter()
    client = run.client
    launch(client, PATHS, breakpoints=["armed"])
    main_thread = client.expect_stopped("breakpoint")["threadId"]
    frame = top_frame(client, main_thread)["id"]
    scopes = {s["name"].lower(): s["variablesReference"]
              for s in client.call("scopes", {"frameId": frame})["scopes"]}
    local = children(client, scopes["locals"])
    glob = children(client, scopes["globals"])
    me = children(client, local["self"]["variablesReference"])

    def data_id(expression: str, length: int, address_of: str | None = None) -> str:
        address = int(evaluate(client, frame, address_of or f"{expression}.ctypes.data"))
        return f"{address:#x}/{length}"

    row = items(client, glob["kv"])["2"]
    assert not row.get("evaluateName")  # debugpy names it '2' only
    element = items(client, row)["5"]
    expected = [
        (info(client, row), data_id("kv[2]", 32), "kv[2]: numpy.ndarray int64[8] (memory of "
         "kv), bytes 0..32 of 64 (elements 0..3)"),
        (info(client, element), data_id("kv[2, 5:]", 8), "kv[2][5]: numpy.ndarray int64[]"),
        (info(client, children(client, glob["state"]["variablesReference"])["'w'"]),
         data_id("state['w']", 32), "state['w']: numpy.ndarray float64[6]"),
        (info(client, children(client, glob["model"]["variablesReference"])["coefs_"]),
         None, "model.coefs_: "),
        (info(client, children(client, children(
            client, glob["model"]["variablesReference"])["coefs_"]["variablesReference"])["0"]),
         data_id("model.coefs_[0]", 32), "model.coefs_[0]: numpy.ndarray float32[3, 4], "
         "bytes 0..32 of 48 (elements 0..7)"),
        (info(client, children(client, glob["layers"]["variablesReference"])["0"]),
         data_id("layers[0]", 16), "layers[0]: numpy.ndarray int32[4], all 16 bytes"),
        # debugpy gives `self` and the global `holder` one variablesReference, and their
        # children the evaluateName of the path expanded last: either names the object.
        (info(client, me["cache"]), data_id("self.cache", 32), ("self.cache: ", "holder.cache: ")),
        (info(client, me["counts"]), data_id("self.counts", 32, "self.counts.buffer_info()[0]"),
         ("self.counts: array.array format q", "holder.counts: array.array format q")),
        (info(client, glob["raw"]), data_id("raw", 16, ADDRESS_OF.format("raw")),
         "raw: bytearray format B, all 16 bytes"),
        (info(client, glob["view"]), data_id("view", 16, ADDRESS_OF.format("raw")),
         "view: memoryview format B (memory of view of raw)"),
        (info(client, children(client, glob["counters"]["variablesReference"])["1"]),
         data_id("counters", 8, "__import__('ctypes').addressof(counters) + 8"), "counters[1]: "),
    ]
    for found, data, description in expected:
        if data is None:  # a list is no buffer: refused with the reason
            assert found["dataId"] is None and "cannot watch" in found["description"], found
            continue
        assert found["dataId"] == data, (found, data)
        assert found["description"].startswith(description), (found, description)
    copy = client.call("dataBreakpointInfo", {"name": "kv.astype('float32')", "frameId": frame})
    assert copy["dataId"] is None and "makes a new object" in copy["description"], copy
    minimum = info(client, children(client, glob["kv"]["variablesReference"])["min"])
    assert minimum["dataId"] is None and "computed" in minimum["description"], minimum

    # The element clicked is watched: its writer stops at its write.
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": expected[1][0]
                                                                ["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    client.call("continue", {"threadId": main_thread})
    stopped = client.expect_stopped("data breakpoint", timeout=30)
    assert "kv[2][5] changed from 0 to 99" in stopped["description"], stopped
    threads = {t["id"]: t["name"] for t in client.call("threads")["threads"]}
    assert threads[stopped["threadId"]] == "kv-writer"
    writer = python_frame(client, stopped["threadId"])
    assert writer["line"] == marker_line(PATHS, "write")
    client.call("setDataBreakpoints", {"breakpoints": []})
    client.call("continue", {"threadId": stopped["threadId"]})
    assert client.expect_event("exited", timeout=30)["body"]["exitCode"] == 0
    client.call("disconnect", {})
    assert run.wait_exit() == 0

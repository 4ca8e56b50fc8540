"""A data breakpoint on a scikit-learn model's weights in a threaded service nobody on the
project wrote (tests/fixtures/programs/dap_sklearn_service.py, real debugpy): the watch on
`model.coefs_[0]` is reached from the Variables view through attributes (model -> coefs_ ->
'0'), and the write by scikit-learn's optimizer (`param += update` in a partial_fit on the
learner thread) stops that thread at its writing line, native frames of numpy's add first.
With debugpy's justMyCode (its default) scikit-learn's frames are hidden and the line shown is
the user's `partial_fit` call; without it, scikit-learn's `param += update`."""
from __future__ import annotations

import pathlib
import sys
import time

import pytest
from conftest import PROGRAMS, evaluate, launch, top_frame
from dapclient import marker_line

pytest.importorskip("sklearn")
pytestmark = pytest.mark.timeout(180)

SERVICE = PROGRAMS / "dap_sklearn_service.py"


def by_name(client, reference: int) -> dict[str, dict]:
    return {v["name"]: v for v in client.call("variables",
                                              {"variablesReference": reference})["variables"]}


@pytest.mark.parametrize("stop_all, just_my_code", [(True, True), (False, False)],
                         ids=["stop_all-justMyCode", "writer_only-all_code"])
def test_partial_fit_stops_on_the_learner_at_the_weight_update(start_adapter, stop_all,
                                                                just_my_code):
    run = start_adapter()
    client = run.client
    # python: the test's interpreter, which has scikit-learn (an adapter installed elsewhere,
    # PTDEBUG_TEST_ADAPTER, would run it with its own venv's)
    launch(client, SERVICE, breakpoints=["armed"], stopAllThreadsOnSuspend=stop_all,
           justMyCode=just_my_code, python=sys.executable)
    main_thread = client.expect_stopped("breakpoint", timeout=60)["threadId"]
    frame = top_frame(client, main_thread)["id"]
    scopes = client.call("scopes", {"frameId": frame})["scopes"]
    glob = by_name(client, next(s["variablesReference"] for s in scopes
                                if s["name"].lower().startswith("global")))
    coefs = by_name(client, glob["model"]["variablesReference"])["coefs_"]
    layers = client.call("variables", {"variablesReference": coefs["variablesReference"]})
    first = next(v for v in layers["variables"] if v["name"] == "0")
    info = client.call("dataBreakpointInfo", {"name": first["name"], "variablesReference":
                                              coefs["variablesReference"]})
    address = int(evaluate(client, frame, "model.coefs_[0].ctypes.data"))
    assert info["dataId"] == f"{address:#x}/32", info
    assert info["description"].startswith("model.coefs_[0]: numpy.ndarray float64[8, 16], "
                                           "bytes 0..32 of 1024 (elements 0..3)"), info
    body = client.call("setDataBreakpoints", {"breakpoints": [{"dataId": info["dataId"]}]})
    assert body["breakpoints"][0]["verified"] is True, body
    before = evaluate(client, frame, "model.coefs_[0].ravel()[:4].tolist()")
    client.call("continue", {"threadId": main_thread})

    stopped = client.expect_stopped("data breakpoint", timeout=60)
    assert stopped.get("allThreadsStopped", False) is stop_all, stopped
    threads = {t["id"]: t["name"] for t in client.call("threads")["threads"]}
    assert threads[stopped["threadId"]] == "online-learner", (threads, stopped)
    frames = client.call("stackTrace", {"threadId": stopped["threadId"],
                                        "levels": 60})["stackFrames"]
    native = [f for f in frames if "instructionPointerReference" in f]
    python = [f for f in frames if "instructionPointerReference" not in f]
    assert native and frames[0] is native[0] and "at the write" in native[0]["name"], frames
    assert any("_multiarray_umath" in f["name"] for f in native), native
    writer = python[0]
    learn = next(f for f in python if f["name"] == "learn")
    assert learn["source"]["path"] == str(SERVICE)
    assert learn["line"] == marker_line(SERVICE, "update"), learn
    if just_my_code:
        assert writer is learn, python
    else:
        assert writer["source"]["path"].endswith("_stochastic_optimizers.py"), writer
        source = pathlib.Path(writer["source"]["path"]).read_text().splitlines()
        assert "param += update" in source[writer["line"] - 1], writer
    # The description has the old and the new value of the first 4 weights.
    old_first = before.strip("[]").split(",")[0].strip()
    assert f"model.coefs_[0] changed from [{old_first}" in stopped["description"], stopped
    assert "online-learner" in stopped["description"]
    # numpy's add stores the 32 watched bytes at once: four registers, four perf samples, one
    # write (before: three more reported as writes "while the program was paused").
    time.sleep(1.0)
    assert not [e for e in client.events("output") if "ptdebug:" in e["body"]["output"]]

    client.call("setDataBreakpoints", {"breakpoints": []})
    # in the service's own frame: the writer's globals are scikit-learn's module when
    # justMyCode is off, and the service then ran to its 60 s deadline
    client.call("evaluate", {"expression": "globals().update(stop=True)", "frameId":
                             learn["id"], "context": "repl"})
    client.call("continue", {"threadId": stopped["threadId"]})
    if not stop_all:
        assert "layers=2" in client.expect_event(
            "output", pred=lambda e: "layers=" in e["body"].get("output", ""),
            timeout=60)["body"]["output"]
    assert client.expect_event("exited", timeout=60)["body"]["exitCode"] == 0
    client.call("disconnect", {})
    assert run.wait_exit() == 0

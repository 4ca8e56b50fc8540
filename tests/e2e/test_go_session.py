"""A Go debug session through `ptdebug dap` and real Delve: conditional breakpoint, goroutines
as threads, variables, evaluate, set variable, the goroutine list of the Delve-RPC bridge; and
the session's end leaves nothing running."""
from __future__ import annotations

import pytest
from go_support import GO_SESSION, copy_package, go_marker, output_text, start_go

pytestmark = pytest.mark.timeout(240)


def _end(run):
    run.client.call("disconnect", {}, timeout=15)
    assert run.wait_exit() == 0
    run.assert_nothing_left()


def test_conditional_breakpoint_goroutines_variables_evaluate(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    response = start_go(client, "launch", {"program": str(package), "mode": "debug"},
                        source=source, breakpoints={"work": {"condition": "j.id == 5"}})
    assert response["success"], response
    stopped = client.expect_stopped("breakpoint", timeout=60)
    run.track()
    process = client.expect_event("process")
    assert process["body"]["systemProcessId"] in run.seen

    # goroutines are threads, named by Delve "[Go N] function"
    threads = client.call("threads", {})["threads"]
    assert len(threads) >= 4, threads
    assert all(t["name"].lstrip("* ").startswith("[Go ") for t in threads), threads
    assert stopped["threadId"] in [t["id"] for t in threads]

    frames = client.call("stackTrace", {"threadId": stopped["threadId"], "levels": 20})
    top = frames["stackFrames"][0]
    assert top["name"] == "main.square"
    assert top["line"] == go_marker(source, "work")
    scopes = client.call("scopes", {"frameId": top["id"]})["scopes"]
    local = next(s for s in scopes if s["name"] == "Locals")
    variables = client.call("variables", {"variablesReference": local["variablesReference"]})
    j = next(v for v in variables["variables"] if v["name"] == "j")
    fields = client.call("variables", {"variablesReference": j["variablesReference"]})
    values = {v["name"]: v["value"] for v in fields["variables"]}
    assert values == {"id": "5", "value": "25"}

    def evaluate(expression):
        return client.call("evaluate", {"expression": expression, "frameId": top["id"],
                                        "context": "repl"})["result"]
    assert evaluate("j.value * 2") == "50"
    # set variable (Delve writes the variable's home on the stack)
    client.call("setVariable", {"variablesReference": j["variablesReference"],
                                "name": "value", "value": "100"})
    assert evaluate("j.value") == "100"

    # the bridge: Delve's goroutine list, with the goroutine stopped at the breakpoint
    listed = client.call("ptdebug/goroutines", {})["goroutines"]
    current = next(g for g in listed if g["id"] == stopped["threadId"])
    assert current["userFunction"] == "main.square" and current["threadId"] > 0
    assert {"main.produce", "main.sum"} <= {g["userFunction"] for g in listed}
    producer = next(g for g in listed if g["userFunction"] == "main.produce")
    assert producer["labels"] == {"stage": "produce"}

    # stepping: next stays in the goroutine, on the following line
    client.call("next", {"threadId": stopped["threadId"]})
    client.expect_stopped("step", timeout=30)
    top = client.call("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"][0]
    assert (top["name"], top["line"]) == ("main.square", go_marker(source, "work") + 1)
    # disassembly (answered by ptdebug from the process's memory) at Delve's frame address
    pc = top["instructionPointerReference"]
    listing = client.call("disassemble", {"memoryReference": pc, "instructionCount": 8,
                                          "resolveSymbols": True})["instructions"]
    assert len(listing) == 8 and int(listing[0]["address"], 16) == int(pc, 16)
    assert all(i.get("presentationHint") != "invalid" for i in listing)

    client.call("continue", {"threadId": stopped["threadId"]})
    exited = client.expect_event("exited", timeout=30)
    assert exited["body"]["exitCode"] == 0
    client.expect_event("terminated")
    assert "total 280" in output_text(client)  # 2 * sum(i*i for i < 8), printed by the program
    _end(run)


def test_breakpoint_hit_condition_and_logpoint(start_adapter, tmp_path):
    package = copy_package(GO_SESSION, tmp_path)
    source = package / "main.go"
    run = start_adapter()
    client = run.client
    start_go(client, "launch", {"program": str(package)}, source=source,
             breakpoints={"send": {"logMessage": "sending {i}"},
                          "write_total": {"hitCondition": "3"}})
    stopped = client.expect_stopped("breakpoint", timeout=60)
    frame = client.call("stackTrace", {"threadId": stopped["threadId"]})["stackFrames"][0]
    assert frame["name"] == "main.sum"
    total = client.call("evaluate", {"expression": "total", "frameId": frame["id"],
                                     "context": "repl"})["result"]
    assert total == "2"  # results 0 and 2 were added; the third hit stops before adding 8
    text = output_text(client)
    assert "sending 0" in text and "sending 2" in text
    run.track()
    _end(run)

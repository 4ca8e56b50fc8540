"""The description of a Go data-breakpoint stop for a variable picked in VS Code's Variables
view (issue 35, seen in a real VS Code): Delve's dataId for it is an address expression,
`*(*[8]byte)(0x...)`, which read as bytes said "*(*[8]byte)(0x...) written with the same value
[8]uint8" for `hits` going from 0 to 2 (Delve's RPC `Variable` of an array has no `value`, so
two type names were compared). Now the stop names the variable as the user picked it and its
values in its own type. A stand-in for Delve's JSON-RPC answers `Eval` as Delve 1.26 does."""
from __future__ import annotations

from types import SimpleNamespace

from adapter.golang.data_breakpoints import DelveDataBreakpoints, _shown
from adapter.protocol.schema import DataBreakpointInfoArguments
from adapter.routes import Router

ADDRESS = "0xc000012345"
DATA_ID = f"1,0,*(*[8]byte)({ADDRESS})"


class FakeDelve:
    """Memory of one int at ADDRESS; Eval of `hits` (frame 0 of goroutine 1), of the typed
    address expression, and of Delve's byte-array one."""

    def __init__(self):
        self.value = 0
        self.pid = 1
        self.rpc = SimpleNamespace(call=self.call)
        self.forwarded = []

    def call(self, method, timeout, Scope, Expr):  # Delve's argument names
        assert method == "Eval"
        if Expr in ("hits", f"*(*int)({ADDRESS})"):
            return {"Variable": {"name": Expr, "type": "int", "value": str(self.value)}}
        if Expr == f"*(*[8]byte)({ADDRESS})":
            data = self.value.to_bytes(8, "little")
            return {"Variable": {"type": "[8]uint8", "value": "", "children": [
                {"type": "uint8", "value": str(b)} for b in data]}}
        raise AssertionError(Expr)

    def forward(self, request, observe=None):
        self.forwarded.append(request)
        if observe is not None and request.command == "dataBreakpointInfo":
            observe({"body": {"dataId": DATA_ID, "description": "Locals.hits"}})

    def thread_of(self, goroutine):
        return 10, 0x1000


def _feature(backend):
    session = SimpleNamespace(backend=backend, paused=True, routes=Router())
    return DelveDataBreakpoints(session)


def _request(command, arguments):
    return SimpleNamespace(command=command, raw={"command": command, "arguments": arguments})


def test_a_picked_variable_is_named_and_shown_in_its_type(monkeypatch):
    delve = FakeDelve()
    feature = _feature(delve)
    feature.info(_request("dataBreakpointInfo", {"name": "hits", "variablesReference": 7}),
                 DataBreakpointInfoArguments(name="hits", variablesReference=7))
    assert feature.typed[DATA_ID] == f"*(*int)({ADDRESS})"
    feature.set(_request("setDataBreakpoints", {"breakpoints": [{"dataId": DATA_ID}]}), None)
    delve.value = 2
    assert feature._changes() == "hits changed from 0 to 2"
    assert feature._changes() == "hits written with the same value 2"


def test_an_expression_watch_is_left_as_delve_names_it():
    delve = FakeDelve()
    feature = _feature(delve)
    feature.info(_request("dataBreakpointInfo", {"name": "main.total"}),
                 DataBreakpointInfoArguments(name="main.total"))
    assert feature.names == {} and feature.typed == {}


def test_an_array_value_is_its_elements():
    assert _shown({"type": "[3]uint8", "value": "", "children": [
        {"value": "1"}, {"value": "2"}, {"value": "3"}]}) == "[1, 2, 3]"
    assert _shown({"type": "main.T", "value": ""}) == "main.T"

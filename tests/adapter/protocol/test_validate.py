"""protocol.validate: forwarded arguments checked against the DAP schema debugpy ships."""
from __future__ import annotations

import pytest

from adapter.protocol.errors import InvalidRequest
from adapter.protocol.validate import ArgumentChecker, default_checker


@pytest.fixture(scope="module")
def checker() -> ArgumentChecker:
    found = default_checker()
    assert found is not None, "debugpy (a dependency) ships debugProtocol.json"
    return found


@pytest.mark.parametrize("command, arguments, text", [
    ("evaluate", {"expression": 5}, "arguments.expression must be a string"),
    ("setBreakpoints", {"source": {"path": "a.py"}, "breakpoints": [{"line": "x"}]},
     r"arguments.breakpoints\[0\].line must be an integer"),
    ("setBreakpoints", {"source": 5}, "arguments.source must be an object"),
    ("stackTrace", {}, "arguments.threadId is required"),
    ("stackTrace", None, "arguments.threadId is required"),
    ("next", {"threadId": True}, "arguments.threadId must be an integer"),
    ("setExceptionBreakpoints", {"filters": "raised"}, "arguments.filters must be an array"),
    ("variables", {"variablesReference": 1, "filter": "all"}, "must be one of"),
])
def test_wrong_types_are_named(checker, command, arguments, text):
    with pytest.raises(InvalidRequest, match=text):
        checker.check(command, arguments)


@pytest.mark.parametrize("command, arguments", [
    ("evaluate", {"expression": "x", "frameId": 1, "context": "repl", "extra": [1]}),
    ("setBreakpoints", {"source": {"path": "a.py"}, "breakpoints": [{"line": 3,
                                                                     "condition": "x > 1"}]}),
    ("threads", None),
    ("debugpySystemInfo", {}),          # not in the schema: not checked
    ("continue", {"threadId": 1, "singleThread": False}),
])
def test_valid_arguments_pass(checker, command, arguments):
    checker.check(command, arguments)


def test_recursive_definitions_terminate():
    definitions = {"NodeArguments": {"type": "object", "properties": {
        "child": {"$ref": "#/definitions/NodeArguments"}}}}
    checker = ArgumentChecker(definitions)
    checker.check("node", {"child": {"child": {}}})
    with pytest.raises(InvalidRequest, match="arguments.child must be an object"):
        checker.check("node", {"child": 3})

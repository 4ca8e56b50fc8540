"""protocol.schema: the typed arguments, their checks, and the list of DAP requests."""
from __future__ import annotations

import json

import pytest

from adapter.protocol import schema
from adapter.protocol.errors import InvalidLaunchConfig, InvalidRequest, all_error_classes
from adapter.protocol.messages import Payload


def test_dap_requests_is_the_schemas_list(shared_dir):
    definitions = json.loads((shared_dir / "dap" / "debugAdapterProtocol.json").read_text())[
        "definitions"]
    commands = set()
    for definition in definitions.values():
        parts = definition.get("allOf", [])
        if parts and parts[0].get("$ref") == "#/definitions/Request":
            commands.update(parts[1]["properties"]["command"]["enum"])
    assert commands == schema.DAP_REQUESTS


def test_launch_config_types_and_defaults():
    config = schema.parse(schema.LaunchConfig, {"program": "a.py", "args": ["1"],
                                                "env": {"A": "b", "C": None}, "extra": 1})
    assert (config.program, config.args, config.env, config.stopOnEntry, config.justMyCode) == \
        ("a.py", ["1"], {"A": "b", "C": None}, False, True)


@pytest.mark.parametrize("arguments, text", [
    ({"program": 5}, "arguments.program must be a string"),
    ({"program": "a.py", "args": "x"}, "arguments.args must be an array"),
    ({"program": "a.py", "args": [1]}, r"arguments.args\[0\] must be a string"),
    ({"program": "a.py", "stopOnEntry": 1}, "arguments.stopOnEntry must be a boolean"),
    ({"program": "a.py", "backend": "rust"}, "arguments.backend must be one of"),
    ({}, "needs 'program'"),
    ({"program": "a.py", "capturesLimit": "lots"}, "capturesLimit must be a size such as"),
    ({"program": "a.py", "capturesLimit": 2048}, "arguments.capturesLimit must be a string"),
])
def test_launch_config_errors_name_the_field(arguments, text):
    with pytest.raises(InvalidLaunchConfig, match=text):
        schema.parse(schema.LaunchConfig, arguments)


def test_attach_takes_pid_or_processid_or_connect():
    assert schema.parse(schema.AttachConfig, {"processId": 7}).pid == 7
    connect = schema.parse(schema.AttachConfig, {"connect": {"port": 5678}}).connect
    assert (connect.host, connect.port) == ("127.0.0.1", 5678)
    with pytest.raises(InvalidLaunchConfig, match="exactly one"):
        schema.parse(schema.AttachConfig, {})
    with pytest.raises(InvalidLaunchConfig, match="arguments.connect.port is required"):
        schema.parse(schema.AttachConfig, {"connect": {}})
    assert schema.parse(schema.AttachConfig, {"pid": 7, "capturesLimit": "500MB"}) \
        .capturesLimit == "500MB"
    with pytest.raises(InvalidLaunchConfig, match="capturesLimit must be a size"):
        schema.parse(schema.AttachConfig, {"pid": 7, "capturesLimit": "-1"})


def test_request_arguments_reject_bools_as_integers_and_wrong_enums():
    with pytest.raises(InvalidRequest, match="arguments.count must be an integer"):
        schema.parse(schema.ReadMemoryArguments, {"memoryReference": "0x1", "count": True})
    with pytest.raises(InvalidRequest, match="arguments.breakpoints\\[0\\].accessType"):
        schema.parse(schema.SetDataBreakpointsArguments,
                     {"breakpoints": [{"dataId": "x", "accessType": "execute"}]})
    with pytest.raises(InvalidRequest, match="arguments must be an object"):
        schema.parse(schema.StepBackArguments, None)
    args = schema.parse(schema.StepBackArguments, {"threadId": 1, "granularity": "instruction"})
    assert (args.threadId, args.granularity, args.singleThread) == (1, "instruction", False)


def test_payload_missing_key_is_an_invalid_request_naming_the_path():
    payload = Payload({"source": {"path": "x"}, "n": "1"})
    assert payload["source"]["path"] == "x"
    with pytest.raises(InvalidRequest, match="arguments.source.line is required"):
        payload["source"]["line"]
    with pytest.raises(InvalidRequest, match="arguments.n must be an integer"):
        payload.require("n", int)


def test_error_ids_are_unique_and_stable():
    ids = {cls.__name__: cls.error_id for cls in all_error_classes()}
    assert len(set(ids.values())) == len(ids)
    # A few that clients and docs rely on: never renumber them.
    assert ids["InvalidRequest"] == 1200 and ids["NotSupportedYet"] == 1301
    assert ids["MessageTooLarge"] == 1102 and ids["InternalError"] == 1999

"""The VS Code extension's launch/attach schema (vscode-extension/package.json and
src/schema.ts) follows the adapter's one source, `adapter/protocol/schema.py`, followed by the
keys ptdebug passes through to debugpy and Delve (sync_schema.PASS_THROUGH)."""
from __future__ import annotations

import dataclasses
import json
import pathlib
import subprocess
import sys
import typing

import pytest

from adapter.protocol import schema

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "vscode-extension"


def _sync_schema():
    sys.path.insert(0, str(EXTENSION / "scripts"))
    try:
        import sync_schema
    finally:
        sys.path.pop(0)
    return sync_schema


def _attributes() -> dict:
    package = json.loads((EXTENSION / "package.json").read_text())
    (debugger,) = [d for d in package["contributes"]["debuggers"] if d["type"] == "ptdebug"]
    return debugger["configurationAttributes"]


def _json_types(hint) -> set[str]:
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union or type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return _json_types(inner)
    if origin is typing.Literal:
        return {"string"}
    if origin is list:
        return {"array"}
    if origin is dict or dataclasses.is_dataclass(hint):
        return {"object"}
    return {{str: "string", bool: "boolean", int: "integer", float: "number"}[hint]}


def test_package_json_has_exactly_the_fields_of_the_schema_dataclasses():
    attributes = _attributes()
    for request, cls in (("launch", schema.LaunchConfig), ("attach", schema.AttachConfig)):
        properties = attributes[request]["properties"]
        fields = {f.name: f for f in dataclasses.fields(cls)}
        passed_through = _sync_schema().PASS_THROUGH[request]
        assert not set(passed_through) & set(fields), "a pass-through key shadows schema.py"
        assert list(properties) == list(fields) + list(passed_through), (
            f"{request}: package.json has {sorted(set(properties) - set(fields))} beyond "
            f"schema.py and lacks {sorted(set(fields) - set(properties))}")
        hints = typing.get_type_hints(cls)
        for name, f in fields.items():
            prop = properties[name]
            declared = prop["type"] if isinstance(prop["type"], list) else [prop["type"]]
            assert _json_types(hints[name]) <= set(declared), f"{request}.{name}: {prop['type']}"
            if typing.get_origin(hints[name]) is typing.Literal or any(
                    typing.get_origin(a) is typing.Literal for a in typing.get_args(hints[name])):
                literal = next(h for h in (hints[name], *typing.get_args(hints[name]))
                               if typing.get_origin(h) is typing.Literal)
                assert prop["enum"] == list(typing.get_args(literal)), f"{request}.{name}"
            default = (f.default if f.default is not dataclasses.MISSING else
                       f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else None)
            assert prop.get("default") == default, f"{request}.{name} default"
            assert prop.get("description"), f"{request}.{name} has no description"


def test_generated_files_are_up_to_date():
    result = subprocess.run([sys.executable, str(EXTENSION / "scripts" / "sync_schema.py"),
                             "--check"], capture_output=True, text=True, timeout=60,
                            check=False)
    assert result.returncode == 0, result.stderr


def test_check_notices_a_drift(tmp_path, monkeypatch):
    """--check must fail when schema.py gains a field package.json does not have."""
    sync_schema = _sync_schema()

    @dataclasses.dataclass
    class Grown(schema.LaunchConfig):
        recordOnStart: bool = False
        """Open a trace window at launch."""

    monkeypatch.setattr(schema, "LaunchConfig", Grown)
    package = tmp_path / "package.json"
    package.write_text((EXTENSION / "package.json").read_text())
    monkeypatch.setattr(sync_schema, "PACKAGE_JSON", package)
    monkeypatch.setattr(sync_schema, "SCHEMA_TS", EXTENSION / "src" / "schema.ts")
    assert sync_schema.main(["--check"]) == 1
    assert "recordOnStart" in sync_schema.updated_package_json(package.read_text())


def test_pass_through_keys_reach_the_backends():
    """The Go keys are those adapter/backends/delve.py hands to Delve's `attach`; the Python
    ones reach debugpy because the debugpy backend forwards every key but `backend`."""
    delve = (ROOT / "adapter" / "backends" / "delve.py").read_text()
    go_keys = [k for k in _sync_schema().PASS_THROUGH["launch"]
               if "Delve's option" in _sync_schema().PASS_THROUGH["launch"][k]["description"]]
    assert go_keys
    for key in go_keys:
        assert f'"{key}"' in delve, f"{key} is offered for Go but delve.py does not pass it on"
    debugpy = (ROOT / "adapter" / "backends" / "debugpy.py").read_text()
    assert 'arguments.pop("backend", None)' in debugpy


def test_a_pass_through_key_that_schema_py_defines_is_refused(monkeypatch):
    sync_schema = _sync_schema()

    @dataclasses.dataclass
    class Grown(schema.LaunchConfig):
        console: str = "internalConsole"
        """Now ptdebug's own."""

    monkeypatch.setattr(schema, "LaunchConfig", Grown)
    with pytest.raises(ValueError, match=r"launch: schema.py now defines \['console'\]"):
        sync_schema.configuration_attributes()

"""Keeps the extension's launch/attach schema equal to the adapter's: `adapter/protocol/schema.py`
is the one source; `package.json` (configurationAttributes) and `src/schema.ts` (the launch and
attach interfaces, and the XxxIn / XxxOut pairs of the custom requests) follow it.

Role: a build tool of the VS Code extension. It reads the `LaunchConfig` / `AttachConfig`
dataclasses (fields, types, defaults) and their attribute docstrings (from the source, with
`ast`, since Python drops them at runtime), and writes the JSON schema VS Code validates
launch.json with and the TypeScript interfaces the extension code uses. It knows nothing of
the adapter beyond those dataclasses.

    python vscode-extension/scripts/sync_schema.py          # rewrite both files
    python vscode-extension/scripts/sync_schema.py --check  # exit 1 and say what differs

tests/vscode/test_schema_sync.py runs `--check`, so the two can never drift apart silently.
"""
from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import json
import pathlib
import sys
import textwrap
import types
import typing
from typing import Any, Literal

EXTENSION = pathlib.Path(__file__).resolve().parent.parent
ROOT = EXTENSION.parent
PACKAGE_JSON = EXTENSION / "package.json"
SCHEMA_TS = EXTENSION / "src" / "schema.ts"
REQUESTS = {"launch": "LaunchConfig", "attach": "AttachConfig"}
"""DAP request -> the dataclass of its arguments."""
VARIABLE_PATTERN = r"^\$\{command:[A-Za-z0-9_.]+\}$"
"""A string an integer field may hold in launch.json: a variable VS Code substitutes."""

_PY = "Python (debugpy's option, passed through): "
_GO = "Go (Delve's option, passed through): "
_MAPPINGS = {"type": "array", "items": {
    "type": "object", "required": ["localRoot", "remoteRoot"],
    "properties": {"localRoot": {"type": "string"}, "remoteRoot": {"type": "string"}}}}
_SUBSTITUTE = {"type": "array", "items": {
    "type": "object", "required": ["from", "to"],
    "properties": {"from": {"type": "string"}, "to": {"type": "string"}}}}
_DEBUGPY_COMMON = {
    "pathMappings": {"description": _PY + "source roots on this machine and in the debuggee.",
                     **_MAPPINGS},
    "subProcess": {"description": _PY + "debug the child processes the program starts too.",
                   "type": "boolean", "default": True},
    "django": {"description": _PY + "Django templates and exceptions.", "type": "boolean",
               "default": False},
    "flask": {"description": _PY + "Flask (Jinja) templates and exceptions.",
              "type": "boolean", "default": False},
    "jinja": {"description": _PY + "Jinja templates.", "type": "boolean", "default": False},
    "pyramid": {"description": _PY + "Pyramid applications.", "type": "boolean",
                "default": False},
    "gevent": {"description": _PY + "gevent's monkey-patched threads.", "type": "boolean",
               "default": False},
    "showReturnValue": {"description": _PY + "show the value a function returns.",
                        "type": "boolean", "default": True},
    "redirectOutput": {"description": _PY + "send the program's output to the debug console.",
                       "type": "boolean"},
    "logToFile": {"description": _PY + "write debugpy's logs.", "type": "boolean",
                  "default": False},
}
_DELVE = {
    "substitutePath": {"description": _GO + "rewrite source paths between this machine "
                                            "and the binary's build ({from, to}).",
                       **_SUBSTITUTE},
    "showGlobalVariables": {"description": _GO + "a Globals scope of the package.",
                            "type": "boolean", "default": False},
    "showRegisters": {"description": _GO + "a Registers scope.", "type": "boolean",
                      "default": False},
    "hideSystemGoroutines": {"description": _GO + "list user goroutines only.",
                             "type": "boolean", "default": False},
    "goroutineFilters": {"description": _GO + "which goroutines the Call Stack lists "
                                              "(Delve's `goroutines` filter syntax).",
                         "type": "string"},
    "showPprofLabels": {"description": _GO + "pprof labels of goroutines.",
                        "type": "boolean", "default": False},
    "stackTraceDepth": {"description": _GO + "how many frames a stack trace loads.",
                        "type": "integer", "default": 50},
}
PASS_THROUGH = {
    "launch": {
        "python": {"description": _PY + "the interpreter that runs the program (a path, or "
                                        "a command as a list). Without it: the Python "
                                        "extension's selected interpreter, else the "
                                        "workspace's .venv, else ptdebug's.",
                   "type": ["string", "array"], "items": {"type": "string"}},
        "pythonArgs": {"description": _PY + "interpreter options, e.g. [\"-X\", \"dev\"].",
                       "type": "array", "items": {"type": "string"}, "default": []},
        "console": {"description": _PY + "where the program's input and output go.",
                    "type": "string",
                    "enum": ["internalConsole", "integratedTerminal", "externalTerminal"],
                    "default": "integratedTerminal"},
        "envFile": {"description": "A file of NAME=VALUE lines added to `env` (`env` wins); "
                                   "read by the extension, as ms-python and vscode-go do.",
                    "type": "string"},
        "sudo": {"description": _PY + "run the program with sudo.", "type": "boolean",
                 "default": False},
        **_DEBUGPY_COMMON,
        **_DELVE,
    },
    "attach": {**_DEBUGPY_COMMON, **_DELVE},
}
"""Keys the adapter does not define but forwards to debugpy (all of a launch/attach's other
keys) or Delve (those adapter/backends/delve.py passes to Delve's `attach`), so that
launch.json accepts them: appended after the schema's own fields, never replacing one."""


def _schema_module():
    sys.path.insert(0, str(ROOT))
    from adapter.protocol import schema
    return schema


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (the string right after `name: type = ...`)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body
    docs: dict[str, str] = {}
    for stmt, following in zip(body, body[1:] + [None]):
        if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)):
            docs[stmt.target.id] = " ".join(following.value.value.split())
    return docs


def _json_schema(hint: Any) -> dict:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        # A nested Optional (a dict value, a list item) admits JSON null.
        options = [o for o in typing.get_args(hint) if o is not type(None)]
        if len(options) != 1:
            raise TypeError(f"cannot express union {hint} in the launch.json schema")
        inner = _json_schema(options[0])
        if "type" in inner and "enum" not in inner and len(options) < len(typing.get_args(hint)):
            return {**inner, "type": [inner["type"], "null"]}
        return inner
    if origin is Literal:
        values = list(typing.get_args(hint))
        return {"type": _json_type(type(values[0])), "enum": values}
    if origin is list:
        (item,) = typing.get_args(hint)
        return {"type": "array", "items": _json_schema(item)}
    if origin is dict:
        _, item = typing.get_args(hint)
        return {"type": "object", "additionalProperties": _json_schema(item)}
    if dataclasses.is_dataclass(hint):
        return object_schema(hint)
    return {"type": _json_type(hint)}


def _json_type(python_type: type) -> str:
    return {str: "string", bool: "boolean", int: "integer", float: "number"}[python_type]


def _field_schema(cls: type, f: dataclasses.Field, hint: Any, doc: str | None) -> dict:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(hint):
        # A top-level Optional field: absent means None; its value is the inner type.
        (inner,) = [o for o in typing.get_args(hint) if o is not type(None)]
        schema = _json_schema(inner)
    else:
        schema = _json_schema(hint)
    if schema.get("type") == "integer":
        # VS Code substitutes `${command:pickProcess}` (a string) before the adapter sees the
        # configuration, and the extension turns digit strings into numbers; the editor must
        # not flag the variable as a wrong type meanwhile.
        schema = {"type": ["integer", "string"], "pattern": VARIABLE_PATTERN}
    if doc:
        schema = {"description": doc, **schema}
    default = (f.default if f.default is not dataclasses.MISSING else
               f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
    if default is not None:
        schema["default"] = default
    return schema


def object_schema(cls: type) -> dict:
    """The JSON schema of a dataclass: its fields in declaration order, required ones named."""
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    properties = {f.name: _field_schema(cls, f, hints[f.name], docs.get(f.name))
                  for f in dataclasses.fields(cls)}
    required = [f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    out: dict = {"type": "object"} if cls.__name__ not in REQUESTS.values() else {}
    if required:
        out["required"] = required
    out["properties"] = properties
    return out


def configuration_attributes() -> dict:
    schema = _schema_module()
    attributes = {request: object_schema(getattr(schema, name))
                  for request, name in REQUESTS.items()}
    for request, extra in PASS_THROUGH.items():
        properties = attributes[request]["properties"]
        clash = sorted(set(properties) & set(extra))
        if clash:
            raise ValueError(f"{request}: schema.py now defines {clash}; remove them from "
                             "PASS_THROUGH in sync_schema.py")
        properties.update(extra)
    return attributes


# --- TypeScript ----------------------------------------------------------------------------
def _ts_type(hint: Any, nested: dict[str, type]) -> str:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [_ts_type(o, nested) for o in typing.get_args(hint)]
        return " | ".join(parts)
    if hint is type(None):
        return "null"
    if origin is Literal:
        return " | ".join(json.dumps(v) for v in typing.get_args(hint))
    if origin is list:
        (item,) = typing.get_args(hint)
        inner = _ts_type(item, nested)
        return f"({inner})[]" if "|" in inner else f"{inner}[]"
    if origin is dict:
        key, item = typing.get_args(hint)
        return f"Record<{_ts_type(key, nested)}, {_ts_type(item, nested)}>"
    if dataclasses.is_dataclass(hint):
        nested[hint.__name__] = hint
        return hint.__name__
    return {str: "string", bool: "boolean", int: "number", float: "number"}[hint]


def _ts_interface(cls: type, nested: dict[str, type]) -> list[str]:
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    doc = cls.__doc__ or ""
    if not doc or doc.startswith(cls.__name__ + "("):  # dataclass's generated signature
        doc = f"{cls.__name__} of adapter/protocol/schema.py."
    lines = [f"/** {' '.join(doc.split())} */",
             f"export interface {cls.__name__} {{"]
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        optional = (f.default is not dataclasses.MISSING
                    or f.default_factory is not dataclasses.MISSING)
        if f.name in docs:
            lines.append(f"    /** {docs[f.name]} */")
        lines.append(f"    {f.name}{'?' if optional else ''}: {_ts_type(hint, nested)};")
    lines.append("}")
    return lines


def custom_requests(schema) -> list[type]:
    """The XxxIn / XxxOut dataclass pairs of the adapter's custom requests, in source order."""
    found = [cls for name, cls in vars(schema).items()
             if dataclasses.is_dataclass(cls) and cls.__module__ == schema.__name__
             and name.endswith(("In", "Out"))]
    return sorted(found, key=lambda cls: inspect.getsourcelines(cls)[1])


def typescript() -> str:
    schema = _schema_module()
    nested: dict[str, type] = {}
    roots = [getattr(schema, name) for name in REQUESTS.values()] + custom_requests(schema)
    blocks = [_ts_interface(cls, nested) for cls in roots]
    done = {cls.__name__ for cls in roots}
    while set(nested) - done:
        name = min(set(nested) - done)
        blocks.append(_ts_interface(nested[name], nested))
        done.add(name)
    header = [
        "// Generated by scripts/sync_schema.py from adapter/protocol/schema.py: do not edit.",
        "// The launch/attach arguments the ptdebug adapter accepts (keys not named here are",
        "// forwarded to debugpy or Delve unchanged), and the XxxIn arguments / XxxOut response",
        "// bodies of its custom requests.",
        "",
    ]
    body = "\n\n".join("\n".join(block) for block in blocks)
    return "\n".join(header) + body + "\n\nexport type PtdebugConfiguration = " \
        "(LaunchConfig & { request: \"launch\" }) | (AttachConfig & { request: \"attach\" });\n"


# --- package.json --------------------------------------------------------------------------
def updated_package_json(text: str) -> str:
    package = json.loads(text)
    (debugger,) = [d for d in package["contributes"]["debuggers"] if d["type"] == "ptdebug"]
    debugger["configurationAttributes"] = configuration_attributes()
    return json.dumps(package, indent=2, ensure_ascii=False) + "\n"


def _shown(path: pathlib.Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="do not write; exit 1 when package.json or src/schema.ts is stale")
    options = parser.parse_args(argv)
    wanted = {PACKAGE_JSON: updated_package_json(PACKAGE_JSON.read_text()),
              SCHEMA_TS: typescript()}
    stale = [path for path, text in wanted.items()
             if not path.exists() or path.read_text() != text]
    if options.check:
        for path in stale:
            print(f"{_shown(path)} does not follow adapter/protocol/schema.py; "
                  f"run: python {_shown(pathlib.Path(__file__))}", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.write_text(wanted[path])
        print(f"wrote {_shown(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

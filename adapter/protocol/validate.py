"""Type checks of forwarded requests' arguments against the DAP JSON schema, at the edge.

Layer: protocol. Requests ptdebug only forwards are not modelled (schema.py types only what
ptdebug answers), but their argument *types* are checked before they reach the backend,
because debugpy 1.8.22 does not survive some wrong types: `evaluate` with a numeric
`expression` is never answered, and a `setBreakpoints` with a string `line` breaks the
connection to the debuggee for good (tests/e2e/test_dap_bad_input.py). A wrong type is an
InvalidRequest naming the path (`arguments.breakpoints[0].line must be an integer`).

The schema is the one the backend itself was written against: debugpy ships it inside its
wheel (`debugpy/_vendored/pydevd/_pydevd_bundle/_debug_adapter/debugProtocol.json`). Only the
JSON-schema keywords that file uses for arguments are understood: type, properties, required,
items, $ref, enum (oneOf is accepted without checking). Unknown keys are allowed, as in DAP.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
from collections.abc import Callable
from typing import Any

from .errors import InvalidRequest

log = logging.getLogger("ptdebug.dap")

Checker = Callable[[Any, str], None]

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}
_NESTED = frozenset({"properties", "required", "items", "enum"})
"""Schema keywords below a field that only the full checker follows."""
_ARTICLES = {"integer": "an integer", "object": "an object", "array": "an array"}


def debugpy_schema_path() -> str | None:
    """Where the installed debugpy keeps its copy of the DAP schema, if it does."""
    spec = importlib.util.find_spec("debugpy")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(spec.submodule_search_locations[0], "_vendored", "pydevd",
                        "_pydevd_bundle", "_debug_adapter", "debugProtocol.json")
    return path if os.path.isfile(path) else None


class ArgumentChecker:
    """Checks `arguments` of DAP requests by command; commands the schema lacks pass."""

    def __init__(self, definitions: dict[str, Any]):
        self.definitions = definitions
        self._checkers: dict[str, Checker | None] = {}

    @classmethod
    def from_file(cls, path: str) -> ArgumentChecker:
        with open(path) as f:
            return cls(json.load(f)["definitions"])

    def check(self, command: str, arguments: Any) -> None:
        """Raises InvalidRequest naming the first wrongly typed or missing argument."""
        try:
            checker = self._checkers[command]
        except KeyError:
            definition = self.definitions.get(command[:1].upper() + command[1:] + "Arguments")
            checker = self._compile(definition, set()) if definition else None
            self._checkers[command] = checker
        if checker is not None:
            checker({} if arguments is None else arguments, "arguments")

    def fields(self, command: str) -> list[tuple[str, tuple[str, ...] | None, bool, bool]] | None:
        """The checks of `command`'s arguments flattened to their own fields, for a checker
        that cannot follow nested schemas (the fast relay, relay.py): (field, its JSON type
        names or None for any, required, has a nested schema: properties, items or enum).
        [] when the schema does not know the command (nothing is checked); None when its
        arguments are not a plain object."""
        definition = self.definitions.get(command[:1].upper() + command[1:] + "Arguments")
        if definition is None:
            return []
        definition = self._resolve(definition)
        if set(definition) & _NESTED - {"properties", "required"} or \
                definition.get("type", "object") != "object":
            return None
        properties = definition.get("properties", {})
        required = set(definition.get("required", ()))
        out = []
        for name, sub in properties.items():
            sub = self._resolve(sub)
            kinds = sub.get("type")
            out.append((name, None if kinds is None else
                        (kinds,) if isinstance(kinds, str) else tuple(kinds),
                        name in required, bool(set(sub) & _NESTED)))
        out.extend((name, None, True, False) for name in sorted(required - set(properties)))
        return out

    def _resolve(self, schema: dict) -> dict:
        for _ in range(16):
            ref = schema.get("$ref")
            if not ref:
                break
            schema = self.definitions[ref.rsplit("/", 1)[-1]]
        return schema

    def _compile(self, schema: dict, seen: set[str]) -> Checker:
        ref = schema.get("$ref")
        if ref:
            name = ref.rsplit("/", 1)[-1]
            if name in seen:  # a recursive type: check one level, not forever
                return lambda value, path: None
            return self._compile(self.definitions[name], seen | {name})
        checks: list[Checker] = []
        types = schema.get("type")
        if types:
            names = [types] if isinstance(types, str) else list(types)
            tests = [_JSON_TYPES[t] for t in names if t in _JSON_TYPES]
            words = " or ".join(_ARTICLES.get(t, f"a {t}") for t in names)

            def check_type(value, path, tests=tests, words=words):
                if not any(test(value) for test in tests):
                    raise InvalidRequest(f"{path} must be {words}, got {value!r:.60}")
            checks.append(check_type)
        if "enum" in schema:
            allowed = list(schema["enum"])

            def check_enum(value, path, allowed=allowed):
                if value not in allowed:
                    raise InvalidRequest(f"{path} must be one of {allowed}, got {value!r:.60}")
            checks.append(check_enum)
        properties = {name: self._compile(sub, seen)
                      for name, sub in schema.get("properties", {}).items()}
        required = list(schema.get("required", ()))
        if properties or required:
            def check_object(value, path, properties=properties, required=required):
                if not isinstance(value, dict):
                    return  # the type check (if any) has spoken
                for name in required:
                    if name not in value:
                        raise InvalidRequest(f"{path}.{name} is required")
                for name, check in properties.items():
                    if name in value:
                        check(value[name], f"{path}.{name}")
            checks.append(check_object)
        if "items" in schema:
            item = self._compile(schema["items"], seen)

            def check_items(value, path, item=item):
                if isinstance(value, list):
                    for i, element in enumerate(value):
                        item(element, f"{path}[{i}]")
            checks.append(check_items)
        if len(checks) == 1:
            return checks[0]

        def check_all(value, path, checks=checks):
            for check in checks:
                check(value, path)
        return check_all


def default_checker() -> ArgumentChecker | None:
    """The checker over debugpy's schema, or None (logged) when it cannot be found."""
    path = debugpy_schema_path()
    if path is None:
        log.warning("no DAP schema found in the installed debugpy: forwarded arguments are not "
                    "type-checked")
        return None
    return ArgumentChecker.from_file(path)

"""Walks every module's imports and keeps the layering of docs/architecture.md true.

Reads the source with `ast` (no imports are executed), so a module that does
not build yet is still checked.
"""
from __future__ import annotations

import ast
import os
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Every package (and every module at adapter/'s root) and the parts of ptdebug it may import:
# an allow-list, so a new package or a new dependency is a decision made here, not an accident.
# Read it bottom-up: pt_decoder and the mechanism packages (hw, protocol, spawn) import nothing
# of the adapter; adapter.commands, adapter.session and adapter.cli sit on top. There is no
# cycle (test_the_layers_have_no_cycle): capture uses the Go and CPython probes of golang and
# python, and adapter.recording (one decode of a bundle, for every view) sits above all three.
ALLOWED: dict[str, set[str]] = {
    "pt_decoder": set(),
    "pt_decoder.tools": {"pt_decoder"},
    "adapter": set(),
    "adapter.__main__": {"adapter.cli"},
    "adapter.cli": {"adapter", "adapter.commands"},
    "adapter.spawn": set(),
    "adapter.left_running": set(),  # which launched programs outlive ptdebug (issue 34)
    "adapter.hw": {"pt_decoder"},  # its ELF reading (mappings.load_bias)
    "adapter.protocol": set(),
    "adapter.powers": set(),
    "adapter.routes": set(),  # the route table (which step serves which request)
    "adapter.memory": {"adapter.hw", "adapter.protocol"},
    "adapter.disassemble": {"adapter.memory", "adapter.protocol", "pt_decoder"},
    "adapter.watchpoints": {"adapter.hw"},
    "adapter.watch_traced": {"adapter.hw", "adapter.watchpoints"},
    "adapter.demo_assets": set(),
    "adapter.demo": {"adapter.hw", "adapter.protocol", "adapter.spawn"},
    "adapter.python": {"adapter.hw", "pt_decoder"},
    "adapter.golang": {"adapter.hw", "adapter.protocol",
                       "adapter.routes",  # Delve's data breakpoints plug into the table
                       "pt_decoder"},
    "adapter.capture": {"adapter.golang", "adapter.hw", "adapter.python", "pt_decoder"},
    "adapter.recording": {"adapter.capture", "adapter.golang", "adapter.python", "pt_decoder"},
    "adapter.export": {"adapter.python", "adapter.recording", "pt_decoder"},
    "adapter.lsp": {"adapter.export", "adapter.recording", "pt_decoder"},
    "adapter.backends": {"adapter.disassemble", "adapter.golang", "adapter.hw",
                         "adapter.left_running", "adapter.protocol",
                         "adapter.python",  # starting debugpy in a process (attach by pid)
                         "adapter.recording", "adapter.routes", "adapter.spawn", "pt_decoder"},
    "adapter.features": {"adapter.capture", "adapter.export", "adapter.golang", "adapter.hw",
                         "adapter.memory",
                         "adapter.powers", "adapter.protocol", "adapter.python",
                         "adapter.routes",
                         "adapter.recording", "adapter.spawn", "adapter.watchpoints",
                         "pt_decoder"},
    "adapter.client": {"adapter.backends", "adapter.disassemble", "adapter.memory",
                       "adapter.protocol", "adapter.routes"},
    "adapter.session": {"adapter.backends", "adapter.client", "adapter.disassemble", "adapter.features",
                        "adapter.golang", "adapter.hw", "adapter.memory", "adapter.powers", "adapter.protocol",
                        "adapter.python", "adapter.routes"},
    "adapter.commands": {"adapter", "adapter.capture", "adapter.export", "adapter.hw",
                         "adapter.left_running",
                         "adapter.recording", "adapter.session", "adapter.watch_traced",
                         "adapter.watchpoints", "pt_decoder", "pt_decoder.tools"},
}


def _unit(name: str) -> str | None:
    """The ALLOWED key a module belongs to (its package under pt_decoder/adapter, or the
    root module itself), None for a module that is not ptdebug's."""
    parts = name.split(".")
    if parts[0] == "pt_decoder":
        return "pt_decoder.tools" if parts[1:2] == ["tools"] else "pt_decoder"
    if parts[0] != "adapter":
        return None
    if len(parts) == 1:
        return "adapter"
    below = ROOT / "adapter" / parts[1]
    if below.is_dir() or below.with_suffix(".py").exists():
        return "adapter." + parts[1]
    return "adapter"  # a name defined in adapter/__init__.py (__version__)


# Feature families of adapter/features: each talks to the others only through Session.
FEATURE_FAMILIES = {
    "data breakpoints": ("adapter.features.data_breakpoints", "adapter.features.buffer_probe",
                         "adapter.features.native_frames"),
    "trace": ("adapter.features.record_breakpoints", "adapter.features.reverse",
              "adapter.features.trace_scope", "adapter.features.goroutine_view",
              "adapter.features.captures", "adapter.features.record_window",
              "adapter.features.recorder_worker", "adapter.features.window_ends"),
}


def _module_name(path: pathlib.Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: pathlib.Path, module: str) -> set[str]:
    """Absolute names imported by a .py or .pyx file (relative imports resolved)."""
    text = path.read_text()
    if path.suffix == ".pyx":
        # Cython syntax is not Python; take its plain import lines only.
        names = set()
        for line in text.splitlines():
            s = line.strip()
            if s.startswith("import ") and not s.startswith("import cython"):
                names.add(s.split()[1].rstrip(","))
            elif s.startswith(("from ", "cimport ")) and not s.startswith("from libc"):
                names.add(s.split()[1])
        return {_resolve(n, module, path) for n in names}
    tree = ast.parse(text, filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = "." * node.level + (node.module or "")
            names.add(_resolve(base, module, path))
            # `from adapter import watchpoints` imports a module the base name does not show;
            # for a function or class the extra name falls in the same package anyway
            for alias in node.names:
                names.add(_resolve(base, module, path) + "." + alias.name)
    return names


def _resolve(name: str, module: str, path: pathlib.Path) -> str:
    if not name.startswith("."):
        return name
    level = len(name) - len(name.lstrip("."))
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (level - 1)] if level > 1 else package
    rest = name.lstrip(".")
    return ".".join(base + ([rest] if rest else []))


PROBE = f"_layering_probe_{os.getpid()}"
"""The module name of this process's probe files (the tests that show the walker can fail write
one into the tree for a moment); another test process's probes are not this one's sources."""


def _sources():
    for top in ("pt_decoder", "adapter"):
        for path in sorted((ROOT / top).rglob("*.py*")):
            if path.suffix in (".py", ".pyx") and "node_modules" not in path.parts and not (
                    path.stem.startswith("_layering_probe_")
                    and path.stem not in (PROBE, f"{PROBE}_2")):
                yield path


def _violations():
    found = []
    for path in _sources():
        module = _module_name(path)
        imported = _imports(path, module)
        unit = _unit(module)
        if unit not in ALLOWED:
            found.append(f"{module} is in {unit}, which the allow-list does not name")
            continue
        for name in sorted(imported):
            other = _unit(name)
            if other is not None and other != unit and other not in ALLOWED[unit]:
                found.append(f"{module} imports {name}")
        for family, members in FEATURE_FAMILIES.items():
            if module not in members:
                continue
            for other_family, others in FEATURE_FAMILIES.items():
                if other_family == family:
                    continue
                for name in imported:
                    if any(name == o or name.startswith(o + ".") for o in others):
                        found.append(f"{family} feature {module} imports {other_family} "
                                     f"feature {name}")
    return found


def test_layering_is_respected():
    assert _violations() == []


def test_the_walker_sees_a_violation(tmp_path, monkeypatch):
    """The checker itself can fail: a decoder module importing adapter is caught."""
    fake = ROOT / "pt_decoder" / f"{PROBE}.py"
    fake.write_text("import adapter.cli\n")
    try:
        assert f"pt_decoder.{PROBE} imports adapter.cli" in _violations()
    finally:
        fake.unlink()


def test_the_allow_list_names_every_package_and_nothing_else():
    """A package added without a decision here fails; so does an entry for one that is gone."""
    assert {_unit(_module_name(path)) for path in _sources()} == set(ALLOWED)


def test_the_walker_sees_an_import_the_allow_list_does_not_give(tmp_path):
    """hw is mechanism: a module of it importing the session is caught."""
    fake = ROOT / "adapter" / "hw" / f"{PROBE}.py"
    fake.write_text("from adapter.session import Session\n")
    try:
        assert f"adapter.hw.{PROBE} imports adapter.session" in _violations()
    finally:
        fake.unlink()


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` (unit -> units it may import) as a path [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(unit: str) -> list[str] | None:
        state[unit] = 1
        path.append(unit)
        for other in sorted(graph.get(unit, ())):
            if state.get(other) == 1:
                return path[path.index(other):] + [other]
            if other not in state:
                found = visit(other)
                if found:
                    return found
        path.pop()
        state[unit] = 2
        return None

    for unit in sorted(graph):
        if unit not in state:
            found = visit(unit)
            if found:
                return found
    return None


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (names for annotations, never
    imported when the program runs)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def _runtime_graph() -> dict[str, set[str]]:
    """unit -> the units its modules import when they run (imports for type annotations
    only left out)."""
    graph: dict[str, set[str]] = {}
    for path in _sources():
        if path.suffix != ".py":
            continue
        module = _module_name(path)
        unit = _unit(module)
        for name in _runtime_imports(path, module, members=False):
            other = _unit(name)
            if other is not None and other != unit:
                graph.setdefault(unit, set()).add(other)
    return graph


def _runtime_imports(path: pathlib.Path, module: str, members: bool) -> set[str]:
    """The names a .py file imports anywhere in it (in functions too), but under
    `if TYPE_CHECKING:`; `from a import b` gives a.b with `members`, a without."""
    tree = ast.parse(path.read_text(), filename=str(path))
    hidden = _type_checking_only(tree)
    names = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve("." * node.level + (node.module or ""), module, path)
            if members:
                names.update(base + "." + alias.name for alias in node.names)
            else:
                names.add(base)
    return names


def test_the_layers_have_no_cycle():
    """Every package sits above what it imports when it runs (issue 15 removed the cycles
    capture <-> golang/python and export <-> golang/python with adapter.recording). The
    session's features and handlers never name the Session: they are given it, typed by the
    protocols features/hooks.py and client.py declare (issue 36)."""
    graph = _runtime_graph()
    assert "adapter.recording" in graph["adapter.export"]  # the walker sees the imports
    found = _cycle(graph)
    assert found is None, " -> ".join(found)


def test_the_cycle_finder_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def _private_imports() -> list[str]:
    """`from X import _name` where X is in another package (unit) than the importer: a
    package's private helper used from outside it."""
    found = []
    for path in _sources():
        if path.suffix != ".py":
            continue
        module = _module_name(path)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _resolve("." * node.level + (node.module or ""), module, path)
            if _unit(base) in (None, _unit(module)):
                continue
            found += [f"{module} imports {base}.{alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.startswith("__")]
    return found


def test_no_package_imports_another_packages_private_helpers():
    assert _private_imports() == []


def test_the_walker_sees_a_private_import():
    fake = ROOT / "adapter" / "export" / f"{PROBE}.py"
    fake.write_text("from adapter.recording.recording import _module_label\n")
    try:
        assert (f"adapter.export.{PROBE} imports "
                "adapter.recording.recording._module_label") in _private_imports()
    finally:
        fake.unlink()


def _modules() -> dict[str, pathlib.Path]:
    return {_module_name(path): path for path in _sources()}


def _module_graph() -> dict[str, set[str]]:
    """module -> the modules of ptdebug it imports: at the top, inside functions (where a
    cycle hides) and for annotations alike; only imports under `if TYPE_CHECKING:` are left
    out. An import names the most specific module it reaches (`from adapter.features import
    captures` is adapter.features.captures, `from adapter.backends import Backend` is
    adapter/backends/__init__.py); the packages above a module run first but are not counted
    as imported unless named."""
    modules = _modules()

    def target(name: str) -> str | None:
        parts = name.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        return ".".join(parts) or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        names = (_imports(path, module) if path.suffix == ".pyx"
                 else _runtime_imports(path, module, members=True))
        for name in names:
            other = target(name)
            if other is not None and other != module:
                graph.setdefault(module, set()).add(other)
    return graph


def test_the_modules_have_no_cycle():
    """No module imports, however late or deep in a function, a module that imports it back
    (issue 36): what two modules share lives in the lower one, or is passed in."""
    graph = _module_graph()
    assert "adapter.features.captures" in graph["adapter.features.trace_scope"]
    found = _cycle(graph)
    assert found is None, " -> ".join(found)


def test_the_module_walker_sees_a_cycle_through_a_function():
    fake = ROOT / "adapter" / "hw" / f"{PROBE}.py"
    fake.write_text(f"def f():\n    from adapter.hw import {PROBE}_2\n")
    fake2 = ROOT / "adapter" / "hw" / f"{PROBE}_2.py"
    fake2.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    pass\n"
                     f"from adapter.hw.{PROBE} import f\n")
    try:
        graph = _module_graph()
        assert graph[f"adapter.hw.{PROBE}"] == {f"adapter.hw.{PROBE}_2"}
        assert _cycle(graph) is not None
    finally:
        fake.unlink()
        fake2.unlink()

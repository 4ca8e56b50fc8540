"""Walks every module's imports and keeps the layering of docs/architecture.md true.

Reads the source with `ast` (no imports are executed), so a module that does
not build yet is still checked.
"""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (module prefix, forbidden import prefixes)
RULES = [
    ("pt_decoder", ("adapter",)),
    ("adapter.hw", ("adapter.protocol", "adapter.session", "adapter.backends",
                    "adapter.watchpoints", "adapter.features")),
    ("adapter.protocol", ("adapter.hw", "adapter.capture", "adapter.backends",
                          "adapter.watchpoints", "adapter.features")),
    ("adapter.capture", ("adapter.protocol", "adapter.session")),
    ("adapter.backends", ("adapter.features", "adapter.watchpoints")),
    ("adapter.golang", ("adapter.features", "adapter.backends", "adapter.session")),
]
# Feature families of adapter/features: each talks to the others only through Session.
FEATURE_FAMILIES = {
    "data breakpoints": ("adapter.features.data_breakpoints", "adapter.features.buffer_probe",
                         "adapter.features.native_frames"),
    "trace": ("adapter.features.record_breakpoints", "adapter.features.reverse",
              "adapter.features.trace_scope", "adapter.features.goroutine_view"),
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
            if node.module is None or node.level:
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


def _sources():
    for top in ("pt_decoder", "adapter"):
        for path in sorted((ROOT / top).rglob("*.py*")):
            if path.suffix in (".py", ".pyx") and "node_modules" not in path.parts:
                yield path


def _violations():
    found = []
    for path in _sources():
        module = _module_name(path)
        imported = _imports(path, module)
        for prefix, forbidden in RULES:
            if module == prefix or module.startswith(prefix + "."):
                for name in imported:
                    if any(name == f or name.startswith(f + ".") for f in forbidden):
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
    fake = ROOT / "pt_decoder" / "_layering_probe_tmp.py"
    fake.write_text("import adapter.cli\n")
    try:
        assert "pt_decoder._layering_probe_tmp imports adapter.cli" in _violations()
    finally:
        fake.unlink()

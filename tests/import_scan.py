"""Which modules a source file imports, found with ``ast`` at any depth (module level, inside functions, methods,
``try`` blocks and ``if TYPE_CHECKING:``), relative imports resolved to absolute names.

Why at any depth: a dependency hidden in a function-level (lazy) import is still a dependency (it runs when the
function does), so the layering tests (`tests/test_policy_imports.py`, `tests/outputs/test_outputs_library.py`)
must see it. ``TYPE_CHECKING`` imports are counted too: a layer that names another's types depends on it.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Imported:
    """One imported module: its absolute dotted name, and where (file, line) the import statement is."""

    module: str
    path: Path
    line: int

    @property
    def top(self) -> str:
        return self.module.split(".")[0]

    def __str__(self) -> str:
        return f"{self.path}:{self.line} imports {self.module}"


def module_name(root: Path, path: Path) -> str:
    """Dotted name of the module at ``path`` relative to ``root`` (a package's ``__init__.py`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_in_source(source: str, module: str, is_package: bool, path: Path = Path("<source>")) -> list[Imported]:
    """Every module an ``import`` or ``from ... import`` in ``source`` names, at any depth of the tree.

    ``from pkg import name`` yields ``pkg.name`` as well as ``pkg`` (``name`` may be a submodule); callers match on
    prefixes, so the extra name never hides an edge."""
    found: list[Imported] = []
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend(Imported(alias.name, path, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = module.split(".") if is_package else module.split(".")[:-1]
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append(Imported(base, path, node.lineno))
            found.extend(Imported(f"{base}.{alias.name}", path, node.lineno) for alias in node.names
                         if alias.name != "*")
    return found


def imports_under(root: Path, package: str) -> list[Imported]:
    """Every import in every ``.py`` file under ``root/package`` (the package's own files, any depth)."""
    found: list[Imported] = []
    for path in sorted((root / package).rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        found.extend(imports_in_source(path.read_text(encoding="utf-8"), module_name(root, path),
                                       path.name == "__init__.py", path.relative_to(root)))
    return found


def offending(imports: list[Imported], forbidden: set[str]) -> list[Imported]:
    """The imports whose module is one of ``forbidden`` or lies inside one of them (``fastapi`` catches
    ``fastapi.responses``)."""
    return [imp for imp in imports
            if any(imp.module == name or imp.module.startswith(name + ".") for name in forbidden)]

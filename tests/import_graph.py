"""Import graph of a package's modules, built from the source with ``ast``.

Why: a cycle hidden in a function-level (lazy) import is still a cycle a reader has to follow, so the graph counts
every ``import`` statement in a module, at any depth, except those under ``if TYPE_CHECKING:`` (never executed).
Strongly connected components with more than one module (or a module importing itself) are the cycles.

Run as a script to print the cycles: ``python tests/import_graph.py [--type-checking] [ROOT] [PACKAGE]`` (default:
the repository and ``engine``; ``--type-checking`` counts the imports under ``if TYPE_CHECKING:`` too).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def module_name(root: Path, path: Path) -> str:
    """Dotted name of the module at ``path`` (a package's ``__init__.py`` is the package)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    """True for ``if TYPE_CHECKING:`` and ``if typing.TYPE_CHECKING:``."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree`` at any depth, skipping the bodies of ``if TYPE_CHECKING:`` unless
    ``type_checking``."""
    found: list[ast.Import | ast.ImportFrom] = []
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            continue
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _resolve(current: str, is_package: bool, node: ast.ImportFrom) -> str:
    """Absolute name of the module a ``from ... import`` names (relative imports resolved against ``current``)."""
    if node.level == 0:
        return node.module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _owner(name: str, modules: set[str]) -> str | None:
    """The longest known module that ``name`` is or lies in (``a.b.c`` -> ``a.b`` if only that is a module)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def build_graph(root: Path, package: str, type_checking: bool = False) -> dict[str, set[str]]:
    """Edges module -> modules of ``package`` it imports, for every ``.py`` file under ``root/package``.

    ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``. Importing
    ``a.b.c`` also runs ``a`` and ``a.b``, but those parents are not counted as edges: a package's ``__init__``
    is executed on the way to any of its modules, and counting it would make every package that re-exports a
    submodule look cyclic with it. ``type_checking`` also counts the imports under ``if TYPE_CHECKING:``.
    """
    files = sorted(p for p in (root / package).rglob("*.py") if "__pycache__" not in p.parts)
    names = {module_name(root, p): p for p in files}
    modules = set(names)
    graph: dict[str, set[str]] = {name: set() for name in names}
    for name, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        for node in _imports(tree, type_checking):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(name, is_package, node)
                for alias in node.names:
                    sub = f"{base}.{alias.name}" if base else alias.name
                    targets.append(sub if sub in modules else base)
            for target in targets:
                owner = _owner(target, modules)
                if owner is not None and owner != name:
                    graph[name].add(owner)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, list[str]]] = [(start, sorted(graph[start]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            if children:
                child = children.pop()
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, sorted(graph.get(child, ()))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return sorted(components, key=lambda c: (-len(c), c))


def cycles(root: Path, package: str, type_checking: bool = False) -> list[list[str]]:
    """The import cycles of ``package``: components of more than one module."""
    return [c for c in strongly_connected(build_graph(root, package, type_checking)) if len(c) > 1]


def main(argv: list[str]) -> int:
    type_checking = "--type-checking" in argv
    argv = [a for a in argv if a != "--type-checking"]
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent.parent
    package = argv[1] if len(argv) > 1 else "engine"
    found = cycles(root, package, type_checking)
    for component in found:
        print(f"{len(component)} modules: {' '.join(component)}")
    print(f"{len(found)} cycle(s) in {package}/")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

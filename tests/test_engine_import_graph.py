"""Issue 30: no import cycle in engine/, counting function-level (lazy) imports, and the pipeline flows one way
(nothing below the orchestrator engine.deid imports it)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from import_graph import build_graph, cycles, strongly_connected  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_engine_has_no_import_cycle_counting_function_level_imports():
    assert cycles(ROOT, "engine") == []


def test_engine_has_no_import_cycle_even_through_type_checking_imports():
    assert cycles(ROOT, "engine", type_checking=True) == []


def test_only_the_command_line_imports_the_orchestrator():
    graph = build_graph(ROOT, "engine", type_checking=True)
    importers = sorted(module for module, targets in graph.items() if "engine.deid" in targets)
    assert importers == ["engine.cli"]


def test_the_runs_are_peers_and_the_steps_import_no_run():
    graph = build_graph(ROOT, "engine", type_checking=True)
    runs = {m for m in graph if m.startswith("engine.runs.")}
    assert runs == {"engine.runs.global_recoding", "engine.runs.local_recoding", "engine.runs.partitioned"}
    for run in runs:
        assert not graph[run] & runs, run
    steps = {m for m in graph if m.startswith("engine.pipeline.")}
    assert steps == {f"engine.pipeline.{name}" for name in ("prepare", "apply", "assess", "write", "result")}
    for step in steps:
        assert not {t for t in graph[step] if t.startswith("engine.runs") or t == "engine.deid"}, step


def _package(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from .b import thing\n",
        "pkg/b.py": "def thing():\n    from . import c\n    return c\n",
        "pkg/c.py": "import pkg.a\n",
        "pkg/d.py": "from pkg import a\n",
    })
    assert cycles(tmp_path, "pkg") == [["pkg.a", "pkg.b", "pkg.c"]]


def test_type_checking_imports_count_only_when_asked(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from typing import TYPE_CHECKING\nimport pkg.b\nif TYPE_CHECKING:\n    from .b import B\n",
        "pkg/b.py": "import typing\nif typing.TYPE_CHECKING:\n    from .a import A\nelse:\n    pass\n",
    })
    assert cycles(tmp_path, "pkg") == []
    assert cycles(tmp_path, "pkg", type_checking=True) == [["pkg.a", "pkg.b"]]


def test_relative_imports_resolve_from_packages_and_modules(tmp_path):
    _package(tmp_path, {
        "pkg/__init__.py": "from .sub import x\n",
        "pkg/sub/__init__.py": "from ..top import y\nfrom . import leaf\n",
        "pkg/sub/leaf.py": "from ...pkg.top import y\nfrom .. import top\n",
        "pkg/top.py": "",
    })
    graph = build_graph(tmp_path, "pkg")
    assert graph == {"pkg": {"pkg.sub"}, "pkg.sub": {"pkg.top", "pkg.sub.leaf"}, "pkg.sub.leaf": {"pkg.top"},
                     "pkg.top": set()}


def test_strongly_connected_components_of_a_known_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": set()}
    assert strongly_connected(graph) == [["a", "b", "c"], ["d", "e"], ["f"]]

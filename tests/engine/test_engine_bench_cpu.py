"""benchmarks/engine_bench.py's CPU seconds per search (issue 28: comparisons on a loaded machine)."""
from __future__ import annotations

import sys
import types

import pytest

from tests.benchscript import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("engine_bench.py", "engine_bench") as module:
        yield module


def test_the_clock_times_each_search_where_it_was_imported_and_restores(bench, monkeypatch):
    import engine.search as package

    def busy(*args, **kwargs):
        return sum(range(200_000))

    monkeypatch.setattr(package, "search", busy)
    holder = types.ModuleType("holder_of_search")          # a module that imported `search` by name
    holder.search = busy
    monkeypatch.setitem(sys.modules, "holder_of_search", holder)
    clock = bench.SearchClock()
    clock.install()
    assert holder.search is not busy and package.search is not busy
    assert holder.search() == sum(range(200_000))
    assert clock.last is not None and clock.last > 0
    clock.remove()
    assert holder.search is busy and package.search is busy


def test_the_row_shows_cpu_seconds_or_a_dash(bench):
    row = {"name": "x", "search_seconds": 1.0, "seconds": 1.2, "cold_seconds": 2.0, "checked_transformations": 100,
           "ms_per_check": 10.0, "risk_model_evaluations": 0, "lattice_size": 10, "algorithm": "flash2p",
           "optimal": True, "suppressed_records": 0, "peak_rss_mb": 100.0, "transformation": {"a": 1},
           "optimized_for": "loss", "quality": 0.5, "phases": None}
    assert bench.cells(row, False)[1] == "-"
    row["search_cpu_seconds"] = 0.25
    assert bench.cells(row, False)[1] == "0.250"

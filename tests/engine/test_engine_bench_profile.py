"""benchmarks/engine_bench.py's figures: the cost per check beside ARX's, and the profile's exclusive times."""
from __future__ import annotations

import pytest

from tests.benchscript import benchmark_module


@pytest.fixture(scope="module")
def bench():
    with benchmark_module("engine_bench.py", "engine_bench") as module:
        yield module


def test_cost_per_check_beside_arx(bench):
    row = {"name": "cup-k5-entropy", "search_seconds": 27.6, "checked_transformations": 14098,
           "ms_per_check": round(1000 * 27.6 / 14098, 4)}
    bench.add_arx(row, {"cup-k5-entropy": {"seconds": 53.8, "checked": 14385}})
    assert row["arx_ms_per_check"] == pytest.approx(3.74, abs=0.005)      # issue 28's table: 3.74 / 1.95
    assert row["ms_per_check"] == pytest.approx(1.96, abs=0.005)
    assert row["check_cost_ratio"] == pytest.approx(3.74 / 1.96, abs=0.01)
    assert row["speedup"] == pytest.approx(53.8 / 27.6, abs=0.01)


def test_a_configuration_without_reference_gets_no_arx_columns(bench):
    row = {"name": "adult-pu5", "search_seconds": 1.0, "ms_per_check": 1.0}
    bench.add_arx(row, {"adult-k5": {"seconds": 2.32, "checked": 4777}})
    assert "arx_ms_per_check" not in row and "check_cost_ratio" not in row


class Clock:
    """A fake perf_counter the wrapped functions move forward: the test does not depend on the machine's load."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


CLOCK = Clock()


class Outer:
    def run(self, inner: "Inner") -> None:
        CLOCK.now += 5.0
        inner.work()
        CLOCK.now += 1.0


class Inner:
    def work(self) -> None:
        CLOCK.now += 10.0


def test_the_profile_charges_nested_time_to_the_innermost_part_and_restores(bench, monkeypatch):
    monkeypatch.setattr(bench.time, "perf_counter", CLOCK)
    profile = bench.CheckProfile()
    original = Outer.__dict__["run"], Inner.__dict__["work"]
    profile.wrap(Outer, "run", "decision")
    profile.wrap(Inner, "work", "roll-up")
    profile.wrap(Inner, "missing", "quality")          # a function this version lacks is skipped
    Outer().run(Inner())
    profile.remove()
    assert (Outer.__dict__["run"], Inner.__dict__["work"]) == original
    assert profile.seconds == {"roll-up": 10.0, "decision": 6.0, "quality": 0.0, "risk": 0.0}
    report = profile.report(20.0)                      # 4 s of search outside every check
    assert report["seconds"]["search"] == 4.0
    assert report["share"] == {"roll-up": 0.5, "decision": 0.3, "quality": 0.0, "risk": 0.0, "search": 0.2}


def test_the_row_shows_the_profile_under_it(bench):
    row = {"name": "x", "search_seconds": 1.0, "seconds": 1.2, "cold_seconds": 2.0, "checked_transformations": 100,
           "ms_per_check": 10.0, "risk_model_evaluations": 0, "lattice_size": 10, "algorithm": "flash2p",
           "optimal": True, "suppressed_records": 0, "peak_rss_mb": 100.0, "transformation": {"a": 1},
           "optimized_for": "loss", "quality": 0.5, "phases": None,
           "profile": {"seconds": {"roll-up": 0.6, "decision": 0.1, "quality": 0.1, "risk": 0.0, "search": 0.2},
                       "share": {"roll-up": 0.6, "decision": 0.1, "quality": 0.1, "risk": 0.0, "search": 0.2}}}
    text = bench.format_row(row, 14, with_arx=False)
    first, second = text.splitlines()
    assert "10.000" in first
    assert second.strip() == ("profile: roll-up 60% 0.600 s, decision 10% 0.100 s, quality 10% 0.100 s, "
                              "risk 0% 0.000 s, search 20% 0.200 s")

"""Issue 28: whether the branch and bound rolls up ahead on the worker thread is measured on the search
(engine.search.ahead_policy): the policy picks the mode whose checks cost less, probes again later, and a search
whose modes switch check by check gives exactly the sequential run's result, checks and phases."""
from __future__ import annotations

import itertools
import os
import threading

import pytest

from engine import kernels, load_policy
from engine.deid import encode_policy_table
from engine.privacy.registry import build_models
from engine.quality import make_quality_model
from engine.search import ahead_policy, search
from engine.search.ahead_policy import AheadPolicy
from engine.table import load_input
from tests.engine.conftest import EXAMPLES


class FakeClock:
    """Advances by the cost of the mode the policy chose at its previous tick (what served the check)."""

    def __init__(self, cost: dict[bool, float]) -> None:
        self.cost = cost
        self.now = 0.0
        self.policy: AheadPolicy | None = None

    def __call__(self) -> float:
        if self.policy is not None:
            self.now += self.cost[self.policy.ahead]
        return self.now


def run(cost: dict[bool, float], checks: int) -> tuple[AheadPolicy, list[bool]]:
    clock = FakeClock(cost)
    policy = AheadPolicy(True, clock, measure=True)
    clock.policy = policy
    return policy, [policy.tick() for _ in range(checks)]


def test_no_worker_never_prefetches():
    policy = AheadPolicy(False)
    assert not any(policy.tick() for _ in range(1000)) and policy.chosen == []


@pytest.mark.parametrize("cheaper", [True, False])
def test_the_cheaper_mode_is_chosen_and_kept_longer_while_it_wins(cheaper):
    policy, modes = run({cheaper: 1.0, not cheaper: 3.0}, 5000)
    assert modes[:ahead_policy.WARM_UP] == [True] * ahead_policy.WARM_UP   # ahead until the first probe
    assert policy.chosen and all(choice == cheaper for choice in policy.chosen)
    # Probes interleave both modes; between probes only the chosen one runs, for stretches that double.
    first = ahead_policy.WARM_UP + ahead_policy.PROBE
    stretch = modes[first:first + ahead_policy.FIRST_STRETCH]
    assert stretch == [cheaper] * len(stretch)
    assert len(policy.chosen) < 2 + (5000 - first) // ahead_policy.FIRST_STRETCH
    share = modes.count(cheaper) / len(modes)
    assert share > 0.9


def test_a_change_of_load_is_followed():
    """Cheaper ahead at first, then (the machine got loaded) cheaper without: a later probe switches."""
    clock = FakeClock({True: 1.0, False: 2.0})
    policy = AheadPolicy(True, clock, measure=True)
    clock.policy = policy
    for _ in range(600):
        policy.tick()
    assert policy.chosen[-1] is True
    clock.cost = {True: 5.0, False: 2.0}
    for _ in range(5000):
        policy.tick()
    assert policy.chosen[-1] is False and policy.ahead is False


@pytest.mark.parametrize("example", ["adult-k5.yaml", "adult-tcloseness-equal-02.yaml"])
def test_switching_modes_check_by_check_changes_nothing(monkeypatch, example):
    """Branch and bound (ADULT k=5: Flash2P's second phase; t-closeness: alone) with the worker used at every other
    check, and in runs of three, gives the sequential run's optimum, tie break, checks, phases and pruning; no
    thread is left behind."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no worker thread")
    policy = load_policy(EXAMPLES / example)
    table, _, _ = encode_policy_table(policy, load_input(policy))
    models = build_models(policy)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    runs = {}
    for label, pattern in (("sequential", None), ("alternate", [True, False]), ("runs", [True] * 3 + [False] * 3)):
        monkeypatch.setenv(kernels.THREADS_ENV, "1" if pattern is None else "")
        monkeypatch.setenv(kernels.ROLL_AHEAD_ENV, "0" if pattern is None else "1")
        if pattern is not None:
            modes = itertools.cycle(pattern)
            monkeypatch.setattr(AheadPolicy, "tick", lambda self, modes=modes: self.available and next(modes))
        runs[label] = search(table, models, make_quality_model("loss", table), policy.suppression_limit)
    reference = runs["sequential"]
    for label in ("alternate", "runs"):
        result = runs[label]
        assert result.best.levels == reference.best.levels and result.best.loss == reference.best.loss
        assert result.best.suppressed_records == reference.best.suppressed_records
        assert result.checked == reference.checked and result.phases == reference.phases
        assert result.pruned_by_bound == reference.pruned_by_bound
    assert not [t for t in threading.enumerate() if t.name.startswith("safeshare-rollup")]


@pytest.mark.parametrize("load,measures", [(0.9, False), (1.6, True)])
def test_probes_only_on_a_loaded_machine(monkeypatch, load, measures):
    """With a core idle when the search starts the policy rolls up ahead at every check, with no probe (measured
    cheaper on a quiet machine); with none idle it probes the two modes."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setattr("os.getloadavg", lambda: (load, 0.0, 0.0))
    assert ahead_policy.idle_core() is not measures
    clock = FakeClock({True: 3.0, False: 1.0})   # without the worker cheaper: a probe would turn it off
    policy = AheadPolicy(True, clock)
    clock.policy = policy
    modes = [policy.tick() for _ in range(1000)]
    assert policy.measure is measures
    if measures:
        assert policy.chosen and not all(modes)
    else:
        assert all(modes) and policy.chosen == []


@pytest.mark.parametrize("off,expected", [(0.95, True), (0.85, False)])
def test_a_small_difference_does_not_flip_the_mode(off, expected):
    """The other mode is taken only when it is at least 10 % cheaper (SWITCH_GAIN): probes' noise does not flip."""
    policy, _ = run({True: 1.0, False: off}, 3000)
    assert policy.chosen and all(choice == expected for choice in policy.chosen)

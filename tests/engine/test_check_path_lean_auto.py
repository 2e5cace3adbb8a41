"""`auto` skips its sampled checks when a pessimistic bound of Flash's time fits the limit (engine.search,
`optimal_seconds_bound`): the estimate could not change the decision, and on a search of 200 checks the four sampled
ones cost a tenth of the time. Both sides of the branch, its bound against an independent computation, and that the
search finds the same optimum either way."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine.encoding import encode_table
from engine.lattice import Lattice
from engine.privacy import KAnonymity, PopulationUniquenessModel, PrivacyConfiguration
from engine.privacy.ldiversity import LDiversityModel
from engine.quality import make_quality_model
from engine.search import (BOUND_MARGIN, Evaluator, SearchContext, auto_choice, optimal_seconds_bound, search)
from engine.search.common import Deadline, Incumbent, Progress
from tests.engine.lattice_tables import make_hierarchy, wide_table


def setup(models, limit: float, n: int = 300, d: int = 4, sensitive: bool = False):
    frame, hierarchies = wide_table(5, n, d)
    extra = {}
    if sensitive:
        rng = np.random.default_rng(2)
        frame = frame.assign(disease=[f"s{v}" for v in rng.integers(0, 7, n)])
        extra = {"disease": None}
    encoded = encode_table(frame, hierarchies, sensitive=extra) if sensitive else encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    configuration = PrivacyConfiguration(models, limit)
    lattice = Lattice(tuple(a.min_level for a in encoded.attributes), tuple(a.max_level for a in encoded.attributes))
    evaluator = Evaluator(encoded, configuration, quality)
    context = SearchContext(evaluator, lattice, Incumbent(quality), Deadline(None), Progress(lattice.size, False, ""))
    return encoded, quality, configuration, lattice, evaluator, context


def expected_bound(lattice_size: int, classes: int, cells_per_class: int) -> float:
    """The documented formula, written out: 30 s once, then per transformation 0.1 ms of Flash's own work and a
    check of 2 ms + 100 ns per cell."""
    return 30.0 + lattice_size * (2e-3 + 1e-7 * classes * cells_per_class + 1e-4)


def test_the_bound_is_the_documented_formula():
    encoded, quality, configuration, lattice, evaluator, _ = setup([KAnonymity(3)], 0.0)
    try:
        base_classes = int(np.unique(np.stack([a.records for a in encoded.attributes]), axis=1).shape[1])
        bound = optimal_seconds_bound(evaluator, lattice, configuration, "flash")
        assert lattice.size == 4 ** 4
        assert bound == pytest.approx(expected_bound(256, base_classes, 4), rel=1e-12)
    finally:
        evaluator.close()


def test_distributions_count_every_record_and_sensitive_value():
    """l-diversity reads a histogram of sensitive values per class: the cells are records x (4 attributes + 1
    sensitive attribute + its 7 values), whatever the classes."""
    model = LDiversityModel("disease", 2, "distinct")
    encoded, quality, configuration, lattice, evaluator, _ = setup([model], 0.0, sensitive=True)
    try:
        assert encoded.sensitive[0].cardinality == 7
        bound = optimal_seconds_bound(evaluator, lattice, configuration, "flash")
        assert bound == pytest.approx(expected_bound(256, 300, 4 + 1 + 7), rel=1e-12)
    finally:
        evaluator.close()


def test_no_bound_under_a_risk_model_or_for_a_search_that_prunes_by_the_incumbent():
    _, _, configuration, lattice, evaluator, _ = setup([KAnonymity(3)], 0.0)
    try:
        # Flash2P and branch and bound prune against the incumbent the sampled checks seed: their course depends on it
        assert optimal_seconds_bound(evaluator, lattice, configuration, "flash2p") is None
        assert optimal_seconds_bound(evaluator, lattice, configuration, "bnb") is None
    finally:
        evaluator.close()
    pu = [KAnonymity(2), PopulationUniquenessModel(0.01, 10 ** 6, "pitman")]
    _, _, configuration, lattice, evaluator, _ = setup(pu, 0.0)
    try:
        assert optimal_seconds_bound(evaluator, lattice, configuration, "flash") is None
    finally:
        evaluator.close()


def test_a_limit_the_bound_fits_skips_the_sampled_checks():
    _, quality, configuration, lattice, evaluator, context = setup([KAnonymity(3)], 0.0)
    try:
        bound = optimal_seconds_bound(evaluator, lattice, configuration, "flash")
        chosen, details = auto_choice(context, configuration, quality, BOUND_MARGIN * bound)
        assert chosen == "flash"
        assert evaluator.checked == 0 and not context.evaluated and context.incumbent.best is None
        assert details["reason"].startswith("the optimal search is bound to finish within the time limit")
        assert "no checks were sampled" in details["reason"]
        assert details["bound_optimal_seconds"] == pytest.approx(bound, rel=1e-3)
        assert "seconds_per_check" not in details
    finally:
        evaluator.close()


def test_a_limit_just_below_the_margin_samples():
    _, quality, configuration, lattice, evaluator, context = setup([KAnonymity(3)], 0.0)
    try:
        bound = optimal_seconds_bound(evaluator, lattice, configuration, "flash")
        chosen, details = auto_choice(context, configuration, quality, BOUND_MARGIN * bound * 0.999)
        assert chosen == "flash"   # 256 transformations: the measured estimate fits easily
        assert details["reason"] == "the optimal search is expected to finish within the time limit"
        assert lattice.bottom in context.evaluated and lattice.top in context.evaluated
        assert evaluator.checked == len(context.evaluated) >= 2 and "seconds_per_check" in details
    finally:
        evaluator.close()


def test_flash2p_samples_under_any_limit():
    _, quality, configuration, lattice, evaluator, context = setup([KAnonymity(3)], 0.1)
    try:
        chosen, details = auto_choice(context, configuration, quality, 1e9)
        assert chosen == "flash2p" and details["reason"] == "the optimal search is expected to finish within the " \
                                                           "time limit"
        assert evaluator.checked == len(context.evaluated) >= 2
    finally:
        evaluator.close()


def test_the_search_without_the_samples_finds_the_same_optimum_with_fewer_checks():
    frame, hierarchies = wide_table(5, 300, 4)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    skipped = search(encoded, [KAnonymity(3)], quality, 0.0, time_limit=1e6)
    unlimited = search(encoded, [KAnonymity(3)], quality, 0.0)
    assert skipped.choice["reason"].startswith("the optimal search is bound to finish")
    assert skipped.algorithm == unlimited.algorithm == "flash" and skipped.optimal and unlimited.optimal
    assert skipped.best.levels == unlimited.best.levels and skipped.best.loss == unlimited.best.loss
    assert skipped.checked == unlimited.checked
    sampled = search(encoded, [KAnonymity(3)], quality, 0.0, time_limit=1.0)   # sampled: within 2 x the bound no more
    assert sampled.choice["reason"] == "the optimal search is expected to finish within the time limit"
    assert sampled.best.levels == unlimited.best.levels and sampled.checked >= unlimited.checked


def worker_asked_for(monkeypatch, algorithm: str, limit: float, roll_ahead: str | None) -> list[bool]:
    """Whether the search's evaluator was given a worker thread (`parallel`), with SAFESHARE_ROLL_AHEAD set to
    `roll_ahead` (None: unset) and SAFESHARE_SEARCH_THREADS unset."""
    import engine.search as module
    from engine import kernels

    monkeypatch.delenv(kernels.THREADS_ENV, raising=False)
    if roll_ahead is None:
        monkeypatch.delenv(kernels.ROLL_AHEAD_ENV, raising=False)
    else:
        monkeypatch.setenv(kernels.ROLL_AHEAD_ENV, roll_ahead)
    seen = []

    class Recording(module.Evaluator):
        def __init__(self, *args, parallel=False, **kwargs):
            seen.append(parallel)
            super().__init__(*args, parallel=parallel, **kwargs)

    monkeypatch.setattr(module, "Evaluator", Recording)
    frame, hierarchies = wide_table(5, 300, 4)
    encoded = encode_table(frame, hierarchies)
    quality = make_quality_model("loss", encoded)
    result = search(encoded, [KAnonymity(3)], quality, limit, algorithm=algorithm, time_limit=1e6)
    assert result.optimal
    return seen


@pytest.mark.parametrize("algorithm, limit, rolls_ahead", [("flash", 0.0, False), ("flash2p", 0.1, True),
                                                           ("bnb", 0.1, True), ("auto", 0.0, False)])
def test_only_searches_that_roll_up_ahead_get_a_worker_thread(monkeypatch, algorithm, limit, rolls_ahead):
    """Flash never asks the class cache to roll up ahead, so its evaluator starts no worker thread (a thread start
    and join per search); Flash2P's floor sweep and the branch and bound may."""
    assert worker_asked_for(monkeypatch, algorithm, limit, "1") == [rolls_ahead]


@pytest.mark.parametrize("algorithm", ["flash2p", "bnb"])
def test_no_worker_thread_unless_rolling_ahead_is_asked_for(monkeypatch, algorithm):
    """Rolling up ahead is off by default (kernels.ROLL_AHEAD_ENV: the GIL hand-overs cost more than the cheap
    roll-ups moved): even the searches that could roll up ahead start no worker thread."""
    assert worker_asked_for(monkeypatch, algorithm, 0.1, None) == [False]

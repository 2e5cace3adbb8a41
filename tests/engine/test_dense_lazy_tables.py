"""The dense form's lazy class tables (engine.classes.ClassCache.LAZY_DENSE, `_dense_rows`;
engine._distribution_numba.roll_up_dense_lazy, roll_up_dense_base_lazy, roll_up_dense_lazy_ahead): a rolled-up table
keeps one base class per class (its origin) instead of its codes, with its histogram as before.

What must hold: against the eager dense form (LAZY_DENSE off) and the numpy reference, the same sizes, keys, order
and histogram, and the gathered codes equal bit for bit, whatever the source (cached lazy tables, the base with and
without kept key updates, warmed tables, the worker thread); the decisions and the searches (entropy l-diversity,
t-closeness) those of the eager form, with the same optimum, suppression and checks.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from engine import _distribution_numba, kernels
from engine.classes import ClassCache, LazyCodes, codes_of
from engine.privacy import KAnonymity
from engine.privacy.ldiversity import LDiversityModel
from engine.privacy.tcloseness import TClosenessModel
from engine.quality import make_quality_model
from engine.search import search
from tests.engine.lattice_tables import assert_same_search
from tests.engine.test_dense_class_cache import (assert_same_tables, prefetched_in_turn, three_caches,
                                                 twice_shuffled_with_hints)
from tests.engine.test_lazy_class_tables import assert_rolled_from_warmed_equal
from tests.engine.test_distribution_kernels import (adult_table, assert_same_decision, lattice_of, models_for,
                                                    random_table)

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def eager_dense(monkeypatch, table, budget: int, prefetch: bool = False) -> ClassCache:
    """The dense form with eager codes (LAZY_DENSE off for this cache only)."""
    cache = ClassCache(table, budget_bytes=budget, prefetch=prefetch)
    cache.LAZY_DENSE = False
    assert cache.dense is not None
    return cache


def lazy_dense(monkeypatch, table, budget: int = 1 << 12, prefetch: bool = False):
    """`three_caches` with the dense form's level rows made before the budget is set (they are capped by a quarter
    of it, and a small budget is what makes roll-ups start from varied sources)."""
    lazy, joint, reference = three_caches(monkeypatch, table, budget=1 << 20, prefetch=prefetch)
    assert lazy._dense_rows() is not None
    lazy.budget = budget
    return lazy, joint, reference


def assert_same_entry(lazy: ClassCache, eager: ClassCache, node) -> None:
    """The lazy entry's sizes, keys and histogram are the eager one's (values and dtypes); its codes gathered too."""
    got, expected = lazy._entry(node), eager._entry(node)
    if node != lazy.base[0]:
        assert isinstance(got[0], LazyCodes) and got[0].levels == node
        assert got[0].origin.dtype == np.int32 and got[0].origin.size == got[1].size
        assert not isinstance(expected[0], LazyCodes)
    for a, b in zip(got[1:], expected[1:]):
        assert np.array_equal(a, b) and a.dtype == b.dtype
    codes = codes_of(got[0])
    assert np.array_equal(codes, expected[0]) and codes.dtype == expected[0].dtype


@pytest.mark.parametrize("seed", range(8))
def test_lazy_dense_tables_equal_eager_ones_and_the_reference(monkeypatch, seed):
    """Every node twice over in shuffled orders with the previous node as hint; a small budget evicts, so sources
    vary (hint, direct specialization, the base with its kept key updates)."""
    table = random_table(seed, 1)
    name = table.sensitive[0].name
    lazy, joint, reference = lazy_dense(monkeypatch, table)
    eager = eager_dense(monkeypatch, table, lazy.budget)
    nodes = [tuple(node) for node in lattice_of(table)]
    rng = np.random.default_rng(seed)
    for node, hint in twice_shuffled_with_hints(nodes, rng):
        views = lazy.view(node, hint), joint.view(node, hint), reference.view(node, hint)
        eager.view(node, hint)
        assert_same_entry(lazy, eager, node)
        assert_same_tables(*views, name)
        for model in models_for(name)[::2]:
            assert_same_decision(model, views[0], views[2])
        assert lazy.nbytes <= lazy.budget
    assert lazy._dense_lazy and eager._dense_lazy is False


@pytest.mark.parametrize("seed", range(3))
def test_lazy_dense_roll_ups_from_the_base_without_kept_updates(monkeypatch, seed):
    """No kept key updates (their cap at 0) and nothing cached: every roll-up starts from the eager base, whose
    origins are the base classes at level 0."""
    table = random_table(seed, 1)
    lazy, _, _ = lazy_dense(monkeypatch, table, budget=1 << 16)
    eager = eager_dense(monkeypatch, table, 1 << 16)
    for cache in (lazy, eager):
        cache._base_deltas()   # its row layout made, then the updates refused (as over their cap)
        cache._deltas = False
        cache.budget = 0
    for node in lattice_of(table):
        assert_same_entry(lazy, eager, tuple(node))
    assert len(lazy) == 0


@pytest.mark.parametrize("seed", range(3))
def test_lazy_dense_roll_ups_from_warmed_tables(monkeypatch, seed):
    """Warmed tables keep their codes gathered (their kept key updates are filled from them); the tables rolled up
    from them are lazy and equal the eager ones."""
    table = random_table(seed, 1)
    lazy, _, _ = lazy_dense(monkeypatch, table, budget=1 << 20)
    eager = eager_dense(monkeypatch, table, 1 << 20)
    nodes = [tuple(node) for node in lattice_of(table)]
    assert_rolled_from_warmed_equal(lazy, eager, nodes, np.random.default_rng(seed))


def test_lazy_dense_tables_rolled_up_ahead(monkeypatch):
    """The worker thread's lazy roll-ups, with the value-major copy once the models read it, equal the eager ones."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: no worker thread")
    table = random_table(6, 1)
    name = table.sensitive[0].name
    ahead, joint, reference = lazy_dense(monkeypatch, table, budget=1 << 20, prefetch=True)
    eager = eager_dense(monkeypatch, table, 1 << 20)
    nodes = [tuple(node) for node in lattice_of(table)]
    rng = np.random.default_rng(8)
    try:
        for node in prefetched_in_turn(ahead, nodes, rng):
            view = ahead.view(node)
            assert_same_tables(view, joint.view(node), reference.view(node), name)
            eager.view(node)
            assert_same_entry(ahead, eager, node)
        assert ahead._by_value   # the value-major copies were made ahead too
    finally:
        ahead.close()


def test_lazy_dense_kernels_equal_the_eager_ones(monkeypatch):
    """roll_up_dense_lazy and roll_up_dense_base_lazy from the base (origins: the base classes) give the eager
    kernels' sizes, keys and histograms, and origins whose gathered codes are the eager codes; the ahead kernel
    adds the value-major copy."""
    table = random_table(5, 1)
    cache, _, _ = lazy_dense(monkeypatch, table, budget=1 << 16)
    rows, select, origin = cache._dense_rows()
    _, codes, sizes, key = cache.base
    histogram = cache._base_dense
    deltas = cache._base_deltas()
    levels = np.zeros(len(cache.base[0]), dtype=np.int64)
    compiled = _distribution_numba
    for node in [tuple(node) for node in lattice_of(table)][1:]:
        changed, where = cache._changes(cache.base[0], node)
        delta_rows = np.array([cache._delta_rows[i][node[i]] for i in changed.tolist()], dtype=np.int64)
        expected = compiled.roll_up_dense(codes, sizes, key, histogram, changed, where, cache._flat[0],
                                          cache._places)
        plain = compiled.roll_up_dense_lazy(rows, select, origin, sizes, key, histogram, levels, changed, where,
                                            cache._flat[0], cache._places)
        ahead = compiled.roll_up_dense_lazy_ahead(rows, select, origin, sizes, key, histogram, levels, changed,
                                                  where, cache._flat[0], cache._places)
        based = compiled.roll_up_dense_base_lazy(codes, origin, sizes, key, histogram, changed, where,
                                                 cache._flat[0], cache._places, deltas[0], deltas[1], delta_rows)
        picked = select[np.arange(len(node)), np.array(node)]
        for got in (plain, ahead, based):
            for a, b in zip(got[1:4], expected[1:]):
                assert np.array_equal(a, b) and a.dtype == b.dtype
            assert np.array_equal(cache.kernels.gather_codes(rows, picked, got[0]), expected[0])
        assert np.array_equal(ahead[4], compiled.value_major(expected[3]))


def test_view_codes_are_gathered_once_and_only_when_read(monkeypatch):
    table = random_table(2, 1)
    cache, _, reference = lazy_dense(monkeypatch, table, budget=1 << 20)
    node = tuple(lattice_of(table))[-1]
    view = cache.view(tuple(node))
    assert isinstance(view.held_codes, LazyCodes)
    codes = view.codes
    assert view.codes is codes and isinstance(view.held_codes, np.ndarray)
    assert np.array_equal(codes, reference.view(tuple(node)).codes)


@pytest.mark.parametrize("model", [
    LDiversityModel("occupation", 3, "entropy"),
    TClosenessModel("occupation", 0.2, "equal"),
])
def test_searches_with_lazy_dense_tables_equal_eager_ones_on_adult(monkeypatch, model):
    """The same optimum, loss, suppressed records and checks with lazy and eager dense tables (and the dense form
    is the one searched)."""
    table = adult_table("adult-tcloseness-hierarchical-02.yaml")
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    monkeypatch.setenv(kernels.COMPILED_ENV, "1")
    calls = []
    kernel = _distribution_numba.roll_up_dense_lazy
    monkeypatch.setattr(_distribution_numba, "roll_up_dense_lazy", lambda *a: calls.append(1) or kernel(*a))
    runs = {}
    for lazy in (True, False):
        monkeypatch.setattr(ClassCache, "LAZY_DENSE", lazy)
        before = len(calls)
        runs[lazy] = search(table, [KAnonymity(2), model], make_quality_model("loss", table), 0.05)
        assert (len(calls) > before) == lazy   # the lazy kernel ran in the lazy search only
    assert_same_search(runs[True], runs[False])


def test_held_classes_hand_out_the_lazy_table_ungathered(monkeypatch):
    """`held_classes` (the evaluator's sizes-first reads) gives the lazy table as held; `classes` its gathered codes,
    equal to the reference's."""
    table = random_table(3, 1)
    cache, _, reference = lazy_dense(monkeypatch, table, budget=1 << 20)
    for node in [tuple(node) for node in lattice_of(table)][1:]:
        held, sizes = cache.held_classes(node)
        assert isinstance(held, LazyCodes) and held.kept is None
        codes, same_sizes = cache.classes(node)
        expected_codes, expected_sizes = reference.classes(node)
        assert np.array_equal(codes, expected_codes) and codes.dtype == expected_codes.dtype
        assert sizes is same_sizes and np.array_equal(sizes, expected_sizes)

"""t-closeness (equal distance) decided on the class cache's class-major histogram (engine.privacy.
_distribution_kernels.t_closeness_equal_violating_bounded / _suppression_bounded, here reading every class), which a
view rolled up on the search's thread holds without a value-major copy: the same decisions as the value-major
kernels and the exact distance, at the edges (t equal to a class's distance to the last bit, and one ulp either
side); and the model, handed a view in either layout, suppresses what the reference path does."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.privacy.tcloseness import TClosenessModel
from tests.engine.test_dense_class_cache_decisions import edge_thresholds, exact
from tests.engine.test_distribution_kernels import adult_table, caches, lattice_of, random_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


@pytest.mark.parametrize("seed", range(10))
def test_class_major_decision_equals_the_exact_distance_at_the_edges(seed):
    from engine.privacy import _distribution_kernels as compiled

    rng = np.random.default_rng(50 + seed)
    card = int(rng.integers(1, 40))
    classes = int(rng.integers(1, 400)) if seed else 7   # seed 0: a handful of classes
    q = rng.dirichlet(np.full(card, 0.5))
    dense = (rng.random((card, classes)) < rng.uniform(0.1, 0.9)) * rng.geometric(0.05, (card, classes))
    dense[rng.integers(0, card, classes), np.arange(classes)] += 1   # no empty class
    dense = dense.astype(np.int32)
    by_class = np.ascontiguousarray(dense.T)
    sizes = dense.sum(axis=0).astype(np.int64)
    distance, _ = exact(dense, sizes, q, 0.5)
    near = 0
    for t in edge_thresholds(distance, rng) + list(rng.uniform(0, 1, 5)) + [0.0, 1.0]:
        expected = exact(dense, sizes, q, t)[1]
        assert np.array_equal(compiled.t_closeness_equal_violating_bounded(by_class, sizes, q, t, 1), expected), t
        assert np.array_equal(compiled.t_closeness_equal_violating(dense, sizes, q, t), expected), t
        for minimal in (1, 3):
            chosen, total = compiled.t_closeness_equal_suppression_bounded(by_class, sizes, q, t, minimal, 1)
            assert np.array_equal(chosen, expected | (sizes < minimal))
            assert int(total) == int(sizes[chosen].sum())
        near += int(np.sum(np.abs(distance - t) < 1e-12))
    assert near > 0   # the exact re-sum ran


def assert_both_layouts_suppress_as_the_reference(model, view, reference_view, minimal):
    expected = (reference_view.sizes < minimal) | model.violating(reference_view)
    assert view.counts_by_class is not None and not view._dense_built   # class-major only
    suppressed, count = model.suppression(view, minimal)
    assert not view._dense_built   # decided without the value-major copy
    assert np.array_equal(suppressed, expected) and count == int(reference_view.sizes[expected].sum())
    assert np.array_equal(model.violating(view), model.violating(reference_view))
    view.dense_counts(model.attribute)   # the value-major copy made: the other kernels decide
    assert view._dense_built
    suppressed, count = model.suppression(view, minimal)
    assert np.array_equal(suppressed, expected) and count == int(reference_view.sizes[expected].sum())


@pytest.mark.parametrize("seed", [1, 4, 7])
def test_model_on_either_layout_equals_the_reference_on_random_tables(monkeypatch, seed):
    table = random_table(seed, 1)
    fast, reference = caches(monkeypatch, table)
    name = table.sensitive[0].name
    for node in lattice_of(table):
        node = tuple(node)
        reference_view = reference.view(node)
        distances = TClosenessModel(name, 0.2).distances(reference_view, reference_view.sensitive_attribute(name))
        for t in [0.0, 0.2, 0.45, 1.0] + [float(d) for d in distances[:3]]:
            model = TClosenessModel(name, min(max(t, 0.0), 1.0))
            for minimal in (1, 2, 4):
                view = fast.view(node)
                if view.counts_by_class is None:
                    pytest.skip("this table's cache holds no dense form")
                view._dense, view._dense_built = None, False   # as rolled up on the search's thread
                assert_both_layouts_suppress_as_the_reference(model, view, reference_view, minimal)


def test_model_on_either_layout_equals_the_reference_on_adult(monkeypatch):
    table = adult_table("adult-tcloseness-equal-02.yaml")
    fast, reference = caches(monkeypatch, table, budget=64 << 20)
    nodes = list(lattice_of(table))
    for index in np.random.default_rng(17).choice(len(nodes), 30, replace=False):
        node = tuple(nodes[int(index)])
        reference_view = reference.view(node)
        for t in (0.1, 0.2, 0.35):
            for minimal in (1, 5):
                view = fast.view(node)
                view._dense, view._dense_built = None, False
                assert_both_layouts_suppress_as_the_reference(TClosenessModel("occupation", t), view,
                                                              reference_view, minimal)


def assert_l_diversity_suppresses_as_the_reference(model, view, reference_view, minimal):
    expected = (reference_view.sizes < minimal) | model.violating(reference_view)
    fused = model.suppression(view, minimal)
    assert fused is not None
    suppressed, count = fused
    assert suppressed.dtype == np.bool_ and np.array_equal(suppressed, expected)
    assert isinstance(count, int) and count == int(reference_view.sizes[expected].sum())


@pytest.mark.parametrize("seed", [2, 5, 8])
def test_entropy_l_diversity_suppression_in_one_call_on_random_tables(monkeypatch, seed):
    """Entropy l-diversity's decision, the classes below the smallest size and the records suppressed in one
    compiled call (LDiversityModel.suppression), on either layout, with the tables rebuilt when too short."""
    from engine.privacy.ldiversity import LDiversityModel

    table = random_table(seed, 1)
    fast, reference = caches(monkeypatch, table)
    name = table.sensitive[0].name
    models = [LDiversityModel(name, l, "entropy", estimator) for l in (1.5, 2, 3) for estimator in
              ("shannon", "grassberger")]
    for node in lattice_of(table):
        node = tuple(node)
        reference_view = reference.view(node)
        for model in models:
            for minimal in (1, 2, 4):
                view = fast.view(node)
                view._dense, view._dense_built = None, False   # class-major, as rolled up on the search's thread
                model._table_cache = None
                model._entropy_decision_arguments(table.sensitive[0].cardinality, 3)   # tables too short: rebuilt
                assert_l_diversity_suppresses_as_the_reference(model, view, reference_view, minimal)
                view.dense_counts(name)   # value-major
                assert_l_diversity_suppresses_as_the_reference(model, view, reference_view, minimal)
    assert LDiversityModel(name, 2, "distinct").suppression(fast.view(node), 2) is None


def test_entropy_l_diversity_suppression_in_one_call_on_adult(monkeypatch):
    from engine.privacy.ldiversity import LDiversityModel

    table = adult_table("adult-tcloseness-equal-02.yaml")
    fast, reference = caches(monkeypatch, table, budget=64 << 20)
    nodes = list(lattice_of(table))
    model = LDiversityModel("occupation", 3, "entropy")
    for index in np.random.default_rng(23).choice(len(nodes), 25, replace=False):
        node = tuple(nodes[int(index)])
        reference_view = reference.view(node)
        for minimal in (3, 5):
            view = fast.view(node)
            view._dense, view._dense_built = None, False
            assert_l_diversity_suppresses_as_the_reference(model, view, reference_view, minimal)
            view.dense_counts("occupation")
            assert_l_diversity_suppresses_as_the_reference(model, view, reference_view, minimal)

"""Entropy l-diversity decided on the dense histogram with a bound (engine.privacy._distribution_kernels.
l_diversity_entropy_violating, LDiversityModel._entropy_decision): most classes pass on their collision entropy
log2(N^2 / sum n^2), which is below the entropy, by more than a margin, and only the rest are summed exactly.

The decision must be the numpy reference's to the bit. These tests put the threshold at a class's exact reference
entropy and one ulp either side (where the bound, if unsound or its margin too thin, would wrongly pass a class),
on random matrices, random tables through the class cache, and ADULT, for Shannon's and Grassberger's estimators;
and they show that Grassberger's terms do exceed log2 n (G(2) > ln 2), so the bound without `excess` is wrong.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine import kernels
from engine.privacy.ldiversity import LOG2, LDiversityModel, decision_margin
from tests.engine.test_dense_class_cache import three_caches
from tests.engine.test_distribution_kernels import adult_table, lattice_of, random_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")

ESTIMATORS = ("shannon", "grassberger")


class AtThreshold(LDiversityModel):
    """Entropy l-diversity with its threshold (bits) set directly, so that it can sit on a class's entropy."""

    def __init__(self, attribute: str, l: float, estimator: str, threshold: float) -> None:
        super().__init__(attribute, l, "entropy", estimator)
        self._threshold = threshold

    @property
    def threshold(self) -> float:
        return self._threshold


def random_dense(rng) -> np.ndarray:
    """A (values, classes) int32 histogram with skewed, sparse counts and no empty class."""
    card = int(rng.integers(1, 20))
    classes = int(rng.integers(1, 300))
    rates = rng.uniform(0.1, 5.0, size=(card, 1))
    dense = rng.poisson(rates, size=(card, classes)) * (rng.random((card, classes)) < 0.6)
    dense[0] += dense.sum(axis=0) == 0
    return dense.astype(np.int32)


def reference_entropy(dense: np.ndarray, estimator: str) -> np.ndarray:
    """The entropy per class (bits) by the compiled reference kernel, itself equal to numpy's reference
    (tests/engine/test_distribution_dense.py)."""
    from engine.privacy import _distribution_kernels as compiled

    model = LDiversityModel("s", 1, "entropy", estimator)
    log_table, term_table = model._tables(int(dense.sum()))
    variant = model.VARIANT_CODES[("entropy", estimator)]
    return compiled.l_diversity_dense(dense, variant, 0, 0.0, 0.0, term_table, log_table, LOG2)[0]


def both_layouts(model, dense: np.ndarray, sizes: np.ndarray) -> list[np.ndarray]:
    """The decision on the value-major matrix and on its class-major copy (the class cache's layout)."""
    return [model._entropy_decision(dense, sizes), model._entropy_decision(np.ascontiguousarray(dense.T), sizes,
                                                                           value_major=False)]


def edges(values: np.ndarray, rng, count: int = 12) -> list[float]:
    picked = rng.choice(values, min(count, values.size), replace=False)
    return [float(t) for h in picked for t in (np.nextafter(h, -np.inf), h, np.nextafter(h, np.inf))]


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("seed", range(6))
def test_decision_equals_the_exact_entropy_at_the_edges(estimator, seed):
    rng = np.random.default_rng(seed)
    for _ in range(8):
        dense = random_dense(rng)
        sizes = dense.sum(axis=0).astype(np.int64)
        entropy = reference_entropy(dense, estimator)
        distinct = (dense > 0).sum(axis=0)
        for threshold in edges(entropy, rng):
            for l in (1, 2, 3):
                model = AtThreshold("s", l, estimator, threshold)
                expected = (distinct < model.minimal_size) | (entropy < threshold)
                for got in both_layouts(model, dense, sizes):
                    assert np.array_equal(got, expected), (estimator, threshold, l)


def test_hand_computed_classes_at_one_bit():
    """{x 1, y 1} has exactly 1 bit and passes l = 2; {x 3, y 3} has 0.9999999999999998 bits in the reference's
    arithmetic (ln 6 / ln 2 - 6 x log2 3 / 6) and fails, though its collision entropy is exactly 1 bit."""
    dense = np.array([[1, 3, 4, 1], [1, 3, 0, 3]], np.int32)
    sizes = dense.sum(axis=0).astype(np.int64)
    h = -((3 * (math.log(3) / LOG2) * 2) / 6 - math.log(6) / LOG2)
    assert h < 1.0
    model = LDiversityModel("s", 2, "entropy")
    for got in both_layouts(model, dense, sizes):
        assert got.tolist() == [False, True, True, True]


def test_grassberger_terms_exceed_log2_n_so_the_bound_needs_the_excess():
    """G(2) = psi(2) + (psi(3/2) - psi(1)) / 2 = 0.7296 > ln 2: Grassberger's entropy of {x 2, y 2} is below its
    collision entropy (1 bit). Without the excess, the bound would pass a class that the reference fails."""
    from engine.privacy import _distribution_kernels as compiled

    model = LDiversityModel("s", 2, "entropy", "grassberger")
    dense = np.array([[2], [2]], np.int32)
    sizes = np.array([4], np.int64)
    log_table, term_table = model._tables(4)
    assert term_table[2] > log_table[2]
    entropy = reference_entropy(dense, "grassberger")[0]
    assert entropy < 1.0 - 0.01
    threshold = (entropy + 1.0) / 2
    for got in both_layouts(AtThreshold("s", 2, "grassberger", threshold), dense, sizes):
        assert got.tolist() == [True]
    no_excess = 2.0 ** (threshold + decision_margin(2, 4, model._bound_figures[1]))
    wrong = compiled.l_diversity_entropy_violating(dense, sizes, 2, 2, threshold, term_table, log_table, LOG2,
                                                   no_excess)
    assert wrong.tolist() == [False]
    wrong = compiled.l_diversity_entropy_violating_bounded(np.ascontiguousarray(dense.T), sizes, 2, 2, threshold,
                                                            term_table, log_table, LOG2, no_excess)
    assert wrong.tolist() == [False]


def test_margin_is_tiny_and_grows_with_the_domain():
    assert 0 < decision_margin(14, 30162, 15.0) < 3e-12
    assert decision_margin(10**6, 2**31, 31.0) < 1e-6
    assert decision_margin(100, 1000, 10.0) > decision_margin(10, 1000, 10.0)


def test_tables_rebuilt_for_a_larger_view():
    """The kernel refuses a view whose records its tables do not cover; the model then rebuilds them."""
    rng = np.random.default_rng(3)
    small = random_dense(rng)
    large = small * 50
    model = LDiversityModel("s", 2, "entropy")
    for dense in (small, large, small):
        sizes = dense.sum(axis=0).astype(np.int64)
        expected = ((dense > 0).sum(axis=0) < 2) | (reference_entropy(dense, "shannon") < 1.0)
        for got in both_layouts(model, dense, sizes):
            assert np.array_equal(got, expected)
    assert model._entropy_arguments[5].size > int(large.sum())


@pytest.mark.parametrize("seed", range(4))
def test_model_decides_as_the_reference_on_random_tables(monkeypatch, seed):
    table = random_table(seed, 1)
    name = table.sensitive[0].name
    dense, _, reference = three_caches(monkeypatch, table)
    rng = np.random.default_rng(seed)
    for node in lattice_of(table):
        view, reference_view = dense.view(tuple(node)), reference.view(tuple(node))
        # First as rolled up on the search's thread (class-major only), then with the value-major copy made.
        assert view.dense_layout(name)[1] is False
        for layout in (False, True):
            for estimator in ESTIMATORS:
                entropy = LDiversityModel(name, 2, "entropy", estimator).entropy(reference_view)
                for threshold in edges(entropy, rng, 4) + [1.0, math.log2(3)]:
                    model = AtThreshold(name, 2, estimator, threshold)
                    assert np.array_equal(model.violating(view), model.violating(reference_view)), threshold
                for l in (1.5, 2, 3, 4):
                    model = LDiversityModel(name, l, "entropy", estimator)
                    assert np.array_equal(model.violating(view), model.violating(reference_view)), l
            assert view.dense_layout(name)[1] is layout
            assert view.dense_counts(name) is not None and view.dense_layout(name)[1] is True


def test_model_decides_as_the_reference_on_adult(monkeypatch):
    table = adult_table("adult-tcloseness-hierarchical-02.yaml")
    dense, _, reference = three_caches(monkeypatch, table, budget=16 << 20)
    nodes = [tuple(node) for node in lattice_of(table)]
    rng = np.random.default_rng(4)
    for index in rng.choice(len(nodes), 20, replace=False):
        view, reference_view = dense.view(nodes[int(index)]), reference.view(nodes[int(index)])
        for layout in (False, True):
            assert view.dense_layout("occupation")[1] is layout
            for estimator in ESTIMATORS:
                entropy = LDiversityModel("occupation", 3, "entropy", estimator).entropy(reference_view)
                for threshold in edges(entropy, rng, 6) + [math.log2(3)]:
                    model = AtThreshold("occupation", 3, estimator, threshold)
                    assert np.array_equal(model.violating(view), model.violating(reference_view)), threshold
            view.dense_counts("occupation")

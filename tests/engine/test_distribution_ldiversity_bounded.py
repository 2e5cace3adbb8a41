"""Issue 28, round 3: entropy l-diversity decided class by class on the class-major histogram, with the classes of
fewer records than l's minimal number of values (and than the smallest class size) suppressed unread
(engine.privacy._distribution_kernels.l_diversity_entropy_violating_bounded and
l_diversity_entropy_suppression_bounded): the same decisions as the exact entropy (l_diversity_dense, the
reference's bits) and as the kernels that read every class, at the edges (a threshold on a class's entropy and an
ulp either side, classes of exactly `minimal` records, one value, no classes), the refusal of tables too short for a
class read, and the model on views of random tables, suppressing what the numpy reference path does."""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine import kernels
from engine.privacy.ldiversity import LDiversityModel
from tests.engine.test_distribution_kernels import caches, lattice_of, random_table
from tests.engine.test_ldiversity_entropy_fast import AtThreshold, edges, reference_entropy

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")

ESTIMATORS = ("shannon", "grassberger")


def small_classes(rng) -> np.ndarray:
    """A (values, classes) int32 histogram with most classes of one to four records (as on ADULT, where two classes
    in three hold fewer than three), some large, no empty class."""
    card = int(rng.integers(1, 16))
    columns = []
    for _ in range(int(rng.integers(1, 250))):
        size = int(rng.integers(1, 5)) if rng.random() < 0.6 else int(rng.integers(5, 300))
        columns.append(rng.multinomial(size, rng.dirichlet(np.full(card, 0.7))))
    return np.array(columns, dtype=np.int32).T.copy()


def arguments(model, dense: np.ndarray, records: int | None = None) -> tuple:
    """The bounded kernels' arguments after (counts, sizes[, smallest]), as the model prepares them."""
    return model._entropy_decision_arguments(dense.shape[0], int(dense.sum()) if records is None else records)[1:]


@pytest.mark.parametrize("estimator", ESTIMATORS)
@pytest.mark.parametrize("seed", range(8))
def test_bounded_kernels_equal_the_exact_entropy_at_the_edges(estimator, seed):
    from engine.privacy import _distribution_kernels as compiled

    rng = np.random.default_rng(700 + seed)
    dense = small_classes(rng)
    by_class = np.ascontiguousarray(dense.T)
    sizes = dense.sum(axis=0).astype(np.int64)
    entropy = reference_entropy(dense, estimator)
    distinct = (dense > 0).sum(axis=0)
    for threshold in edges(entropy, rng) + [0.0, 1.0, math.log2(3)]:
        for l in (1, 2, 3, 4.5):
            model = AtThreshold("s", l, estimator, threshold)
            expected = (distinct < model.minimal_size) | (entropy < threshold)
            args = arguments(model, dense)
            got = compiled.l_diversity_entropy_violating_bounded(by_class, sizes, *args)
            assert np.array_equal(got, expected), (threshold, l)
            for smallest in (1, 2, 5):
                chosen, total = compiled.l_diversity_entropy_suppression_bounded(by_class, sizes, smallest, *args)
                assert chosen.dtype == np.bool_ and np.array_equal(chosen, expected | (sizes < smallest))
                assert int(total) == int(sizes[chosen].sum())


def test_classes_below_minimal_are_not_read():
    """A class of fewer records than `minimal` violates whatever its counts say: here counts that would pass
    (two values, one bit) under sizes that say one record; the kernel decides by the size without reading them."""
    from engine.privacy import _distribution_kernels as compiled

    model = LDiversityModel("s", 2, "entropy")
    counts = np.array([[1, 1], [1, 1], [2, 0]], dtype=np.int32)
    args = arguments(model, counts.T, 16)
    honest = np.array([2, 2, 2], dtype=np.int64)
    assert compiled.l_diversity_entropy_violating_bounded(counts, honest, *args).tolist() == [False, False, True]
    told = np.array([1, 2, 2], dtype=np.int64)   # the first class's size below minimal (2): decided unread
    assert compiled.l_diversity_entropy_violating_bounded(counts, told, *args).tolist() == [True, False, True]
    chosen, total = compiled.l_diversity_entropy_suppression_bounded(counts, honest, 3, *args)
    assert chosen.tolist() == [True, True, True] and int(total) == 6   # all below the smallest class size


def test_no_classes_and_tables_too_short():
    from engine.privacy import _distribution_kernels as compiled

    model = LDiversityModel("s", 2, "entropy")
    empty = np.zeros((0, 3), dtype=np.int32)
    none = np.zeros(0, dtype=np.int64)
    args = arguments(model, empty.T, 4)
    assert compiled.l_diversity_entropy_violating_bounded(empty, none, *args).size == 0
    chosen, total = compiled.l_diversity_entropy_suppression_bounded(empty, none, 1, *args)
    assert chosen.size == 0 and int(total) == 0
    # tables for 4 records: a class of 5 read is refused (an empty answer), one of 5 below the smallest size is not
    counts = np.array([[1, 1, 0], [2, 2, 1]], dtype=np.int32)
    sizes = counts.sum(axis=1).astype(np.int64)
    assert compiled.l_diversity_entropy_violating_bounded(counts, sizes, *args).size == 0
    chosen, _ = compiled.l_diversity_entropy_suppression_bounded(counts, sizes, 1, *args)
    assert chosen.size == 0
    chosen, total = compiled.l_diversity_entropy_suppression_bounded(counts, sizes, 6, *args)
    assert chosen.tolist() == [True, True] and int(total) == 7


def test_model_rebuilds_tables_too_short_for_a_class_read():
    model = LDiversityModel("s", 2, "entropy")
    model._entropy_decision_arguments(3, 2)   # tables for two records
    counts = np.array([[3, 3, 0], [1, 0, 0], [40, 41, 39]], dtype=np.int32)
    sizes = counts.sum(axis=1).astype(np.int64)
    expected = ((counts > 0).sum(axis=1) < 2) | (reference_entropy(np.ascontiguousarray(counts.T), "shannon") < 1.0)
    assert expected.tolist() == [True, True, False]   # {3, 3}: 0.9999999999999998 bits (ldiversity's docstring)
    assert np.array_equal(model._entropy_decision(counts, sizes, value_major=False), expected)
    assert model._entropy_arguments[5].size > 120


@pytest.mark.parametrize("seed", [1, 6])
def test_model_suppresses_as_the_reference_on_random_tables(monkeypatch, seed):
    table = random_table(seed, 1)
    fast, reference = caches(monkeypatch, table)
    name = table.sensitive[0].name
    models = [LDiversityModel(name, l, "entropy", estimator) for l in (1.5, 2, 3) for estimator in ESTIMATORS]
    for node in lattice_of(table):
        node = tuple(node)
        reference_view = reference.view(node)
        for model in models:
            expected = model.violating(reference_view)
            for smallest in (1, 3):
                view = fast.view(node)
                view._dense, view._dense_built = None, False
                for built in (False, True):   # class-major only, then with the value-major copy made too
                    if built:
                        view.dense_counts(name)
                    chosen, count = model.suppression(view, smallest)
                    want = expected | (reference_view.sizes < smallest)
                    assert np.array_equal(chosen, want) and count == int(reference_view.sizes[want].sum())
                    assert np.array_equal(model.violating(view), expected)

"""Risk-based suppression's order sorted only as far as it is read (engine.privacy.suppression_order).

Every prefix `enforce` reads must be, as a set, the prefix of ARX's fully sorted order (size, loss, first record),
its running sum of sizes the same integers; and `enforce` must suppress, count and decide exactly as with the fully
sorted array, for every risk model."""
from __future__ import annotations

import numpy as np
import pytest

from engine.classes import Evaluation
from engine.privacy.sample_risk import AverageRiskModel, SampleUniquenessModel
from engine.privacy.suppression_order import SuppressionOrder


def full_order(index: np.ndarray, sizes: np.ndarray, keys: np.ndarray | None) -> np.ndarray:
    """ARX's comparator as the evaluator applied it before: lexsort by size, then loss, then class number."""
    return index[np.lexsort((index, sizes)) if keys is None else np.lexsort((index, keys, sizes))]


def random_case(seed: int, n: int = 400, wide: bool = False):
    rng = np.random.default_rng(seed)
    index = np.sort(rng.choice(3 * n, n, replace=False))
    sizes = rng.integers(1, 9, n) if not wide else rng.integers(1, 200_000, n)   # wide: past 16 bits
    keys = np.round(rng.random(n) * 4) / 4 * sizes   # many ties within a size, and -0.0 never
    return index, sizes, keys


def compiled_or_skip(path: str):
    """engine.kernels' module for the compiled size sort, None for numpy's."""
    if path == "numpy":
        return None
    from engine import kernels

    compiled = kernels.load()
    if compiled is None:
        pytest.skip("numba is missing or the reference path is forced")
    return compiled


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("with_keys", [True, False])
@pytest.mark.parametrize("path", ["numpy", "compiled"])
def test_every_prefix_is_the_sorted_orders_prefix_as_a_set(seed, with_keys, path):
    index, sizes, keys = random_case(seed, wide=seed == 5)
    keys = keys if with_keys else None
    expected = full_order(index, sizes, keys)
    order = SuppressionOrder(index, sizes, keys, compiled_or_skip(path))
    np.testing.assert_array_equal(order.sizes, np.sort(sizes, kind="stable"))
    np.testing.assert_array_equal(order._starts, SuppressionOrder(index, sizes, keys)._starts)
    rng = np.random.default_rng(100 + seed)
    for count in rng.permutation(index.size + 1).tolist():   # prefixes read in any order, each group sorted once
        assert set(order.first(count).tolist()) == set(expected[:count].tolist())
    np.testing.assert_array_equal(order.array(), expected)


def test_a_bisection_sorts_few_groups():
    index = np.arange(1000)
    sizes = np.repeat(np.arange(1, 101), 10)   # 100 groups of 10
    keys = np.random.default_rng(1).random(1000)
    order = SuppressionOrder(index, sizes, keys)
    for count in (500, 250, 375, 312, 343, 328, 335, 331, 333, 334):
        order.first(count)
    assert 0 < int(order._sorted.sum()) <= 10   # prefixes ending inside a group sort that group, no other


@pytest.mark.parametrize("path", ["numpy", "compiled"])
def test_no_classes(path):
    order = SuppressionOrder(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), compiled_or_skip(path))
    assert order.size == 0 and order.first(0).size == 0 and order.array().size == 0


def test_an_array_is_taken_whole():
    sizes = np.array([5, 1, 3, 1])
    order = SuppressionOrder.of(np.array([1, 3, 2]), sizes)
    assert order.size == 3 and order.sizes.tolist() == [1, 1, 3] and order.first(2).tolist() == [1, 3]
    assert SuppressionOrder.of(order, sizes) is order


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("model", [AverageRiskModel(0.2), AverageRiskModel(0.35), SampleUniquenessModel(0.05)],
                         ids=["average-0.2", "average-0.35", "uniqueness-0.05"])
def test_enforce_decides_as_with_the_sorted_array(seed, model):
    rng = np.random.default_rng(seed)
    u = int(rng.integers(20, 300))
    sizes = rng.integers(1, 12, u)
    keys = np.round(rng.random(u) * 3) * sizes
    suppressed = rng.random(u) < 0.1
    visible = ~suppressed & (rng.random(u) < 0.95)
    index = np.flatnonzero(visible)
    limit = int(rng.integers(0, sizes.sum()))

    def evaluation():
        return Evaluation((0,), np.zeros((1, u), np.int32), sizes, suppressed.copy(), int(sizes[suppressed].sum()),
                          True)

    compiled = compiled_or_skip("compiled") if seed % 2 else None
    lazy = model.enforce(evaluation(), lambda: SuppressionOrder(index, sizes[index], keys[index], compiled), limit,
                         visible)
    whole = model.enforce(evaluation(), full_order(index, sizes[index], keys[index]), limit, visible)
    np.testing.assert_array_equal(lazy.suppressed, whole.suppressed)
    assert (lazy.suppressed_records, lazy.solution) == (whole.suppressed_records, whole.solution)
    assert lazy.details == whole.details

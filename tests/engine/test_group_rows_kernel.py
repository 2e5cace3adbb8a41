"""The compiled grouping of the records (engine._kernels_numba.group_rows, the class cache's base classes on the
compiled path) against the numpy reference (engine.grouping.group with unit weights), bit for bit: the same codes
(int32), sizes (int64), keys in the fixed radix and order of first appearance; edge cases: one record, one class,
every record its own class, no records, and a table with a sensitive attribute (its row rides along)."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.classes import ClassCache
from engine.encoding import encode_table
from engine.grouping import group
from tests.engine.lattice_tables import seeded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def radix_of(cards: list[int]) -> np.ndarray:
    places, span = [], 1
    for card in reversed(cards):
        places.append(span)
        span *= max(card, 1)
    return np.array(places[::-1], dtype=np.int64)


def assert_same_as_group(rows: np.ndarray, cards: list[int]) -> None:
    radix = radix_of(cards)
    codes, sizes, keys = kernels.load().group_rows(rows, radix)
    ref_codes, ref_sizes, _ = group(rows, np.ones(rows.shape[1], dtype=np.int64), cards)
    assert codes.dtype == ref_codes.dtype == np.int32 and np.array_equal(codes, ref_codes)
    assert sizes.dtype == ref_sizes.dtype == np.int64 and np.array_equal(sizes, ref_sizes)
    assert np.array_equal(keys, (ref_codes.astype(np.int64) * radix[:, None]).sum(axis=0))
    assert int(sizes.sum()) == rows.shape[1]


@pytest.mark.parametrize("seed", range(6))
def test_random_rows_group_as_the_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 7))
    cards = [int(c) for c in rng.integers(1, 12, size=d)]
    n = int(rng.integers(1, 3000))
    rows = np.stack([rng.integers(0, c, size=n) for c in cards]).astype(np.int64)
    assert_same_as_group(rows, cards)


def test_edge_cases() -> None:
    assert_same_as_group(np.array([[3], [1]], dtype=np.int64), [5, 2])                 # one record
    assert_same_as_group(np.zeros((3, 500), dtype=np.int64), [1, 4, 2])                 # one class
    assert_same_as_group(np.arange(700, dtype=np.int64).reshape(1, -1), [700])          # each record its class
    codes, sizes, keys = kernels.load().group_rows(np.zeros((2, 0), dtype=np.int64), radix_of([3, 3]))
    assert codes.shape == (2, 0) and sizes.size == 0 and keys.size == 0                 # no records


@pytest.mark.parametrize("sensitive", [False, True])
def test_class_cache_base_classes_equal_on_both_paths(sensitive: bool) -> None:
    frame, hierarchies = seeded_table(11)
    if sensitive:
        frame = frame.assign(s=[f"v{i % 4}" for i in range(len(frame))])
    table = encode_table(frame, hierarchies, sensitive={"s": None} if sensitive else None)
    assert len(table.sensitive) == int(sensitive)
    fast = ClassCache(table, compiled=kernels.load())
    reference = ClassCache(table, compiled=None)
    assert (fast.dense is not None) == sensitive   # four sensitive values: the dense form pays
    if fast.dense is not None:
        # The dense form (one small sensitive domain): the base holds the quasi-identifier classes, whose codes and
        # sizes are the reference's projection of its joint base classes, and their (classes, values) histogram.
        bottom = tuple(0 for _ in table.attributes)
        view = reference.view(bottom)
        for a, b in zip(fast.base[1:3], (view.codes, view.sizes)):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        histogram = view.distribution("s")
        expected = np.zeros((view.sizes.size, table.sensitive[0].cardinality), dtype=np.int64)
        expected[histogram.classes, histogram.values] = histogram.counts
        assert np.array_equal(fast._base_dense, expected)
        d = len(table.attributes)
        places = reference.radix[:d] // reference.radix[d - 1]
        assert np.array_equal(fast.base[3], (view.codes.astype(np.int64) * places[:, None]).sum(axis=0))
        return
    for a, b in zip(fast.base[1:3], reference.base[1:3]):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    expected_key = (reference.base[1].astype(np.int64) * reference.radix[:, None]).sum(axis=0)
    assert np.array_equal(fast.base[3], expected_key)

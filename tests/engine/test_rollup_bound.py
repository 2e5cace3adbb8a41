"""The compiled merge sized by the target's key space (engine._kernels_numba._merge's `bound`, the product of the
target levels' cardinalities that engine.classes.ClassCache._bound passes) against the numpy reference and the
unbounded kernel, bit for bit: codes, sizes, keys, their order and the records below k. Edge cases: one class, every
record in one class, a bound exactly the number of classes that result (every slot of the work arrays used, returned
without a copy), a bound one below it (refused, never a full table probed), a bound above the source's classes (the
source's count is used), and the fused gather-and-map of the class codes with no, some and every attribute changed."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine import kernels
from engine.classes import ClassCache
from engine.encoding import encode_table
from engine.lattice import Lattice
from tests.engine.lattice_tables import make_hierarchy, seeded_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def nodes_of(table) -> list[tuple[int, ...]]:
    return list(Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes)))


def assert_same(a: tuple, b: tuple) -> None:
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def reference_classes(codes: np.ndarray, sizes: np.ndarray, maps: list) -> tuple[np.ndarray, np.ndarray]:
    """Independent of the engine: the mapped code tuples, grouped in order of first appearance with a dict."""
    mapped = np.array([codes[i] if m is None else m[codes[i]] for i, m in enumerate(maps)])
    order: dict[tuple[int, ...], int] = {}
    totals: list[int] = []
    for j, column in enumerate(map(tuple, mapped.T.tolist())):
        t = order.setdefault(column, len(order))
        if t == len(totals):
            totals.append(0)
        totals[t] += int(sizes[j])
    new_codes = np.array(list(order), dtype=np.int32).T.reshape(codes.shape[0], len(order))
    return new_codes, np.array(totals, dtype=np.int64)


def kernel_call(cache: ClassCache, source: tuple[int, ...], node: tuple[int, ...], minimal: int, bound: int):
    codes, sizes, key = cache._entry(source)[:3]
    changed, where = cache._changes(source, node)
    return cache.kernels.roll_up(codes, sizes, key, changed, where, cache._flat[0], cache.radix, minimal, bound)


@pytest.mark.parametrize("seed", range(4))
def test_bounded_cache_equals_the_reference_everywhere(seed: int) -> None:
    """Every node from the base (nothing cached) and from its direct specializations, compiled with the bound and
    by the numpy reference: the same classes; the bound is the product of the node's cardinalities."""
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    fast = ClassCache(table, budget_bytes=1 << 16, compiled=kernels.load())
    fast.budget = 0   # every roll-up from the base, with the bound
    reference = ClassCache(table, compiled=None)
    for node in nodes_of(table):
        assert fast._bound(node) == int(np.prod([fast.cards[i][lv] for i, lv in enumerate(node)]))
        assert_same(fast.classes(node), reference.classes(node))
    chained = ClassCache(table, compiled=kernels.load())   # from the cached specializations
    for node in nodes_of(table):
        assert_same(chained.classes(node), reference.classes(node))


def small_table() -> tuple[ClassCache, ClassCache]:
    """Two attributes of 6 and 4 values (levels: 6 -> 3 -> 1 and 4 -> 2 -> 1), every combination present once, in a
    shuffled order, with records of different weights: 24 base classes."""
    rng = np.random.default_rng(5)
    a, b = np.meshgrid(np.arange(6), np.arange(4), indexing="ij")
    pairs = np.stack([a.ravel(), b.ravel()])[:, rng.permutation(24)]
    repeats = rng.integers(1, 4, size=24)
    frame = pd.DataFrame({"a": [f"a{v}" for v in np.repeat(pairs[0], repeats)],
                          "b": [f"b{v}" for v in np.repeat(pairs[1], repeats)]})
    hierarchies = {"a": make_hierarchy("a", 6, 3, 2), "b": make_hierarchy("b", 4, 3, 2)}
    table = encode_table(frame, hierarchies)
    return ClassCache(table, compiled=kernels.load()), ClassCache(table, compiled=None)


def test_bound_at_the_threshold_and_below() -> None:
    fast, reference = small_table()
    assert fast.base[2].size == 24
    for node in nodes_of(fast.table)[1:]:
        bottom = tuple(0 for _ in node)
        expected = reference.classes(node)
        u = expected[1].size
        bound = fast._bound(node)
        assert u == bound   # every combination present: the key space is filled exactly
        unbounded = kernel_call(fast, bottom, node, 3, -1)
        for b in (bound, bound + 1, 24, 25, 1 << 62):
            result = kernel_call(fast, bottom, node, 3, b)
            assert_same(result[:2], expected)
            assert_same(result[:3], unbounded[:3])
            assert result[3] == unbounded[3] == int(expected[1][expected[1] < 3].sum())
        with pytest.raises(ValueError, match="cardinalities"):
            kernel_call(fast, bottom, node, 3, bound - 1)


def test_one_class_and_all_records_in_one_class() -> None:
    fast, reference = small_table()
    top = tuple(len(c) - 1 for c in fast.cards)
    assert fast._bound(top) == 1
    codes, sizes = fast.classes(top)
    assert_same((codes, sizes), reference.classes(top))
    assert sizes.tolist() == [fast.table.n] and codes.shape == (2, 1)
    # a table of one record value: one base class, every node one class
    frame = pd.DataFrame({"a": ["a1"] * 7, "b": ["b2"] * 7})
    hierarchies = {"a": make_hierarchy("a", 6, 3, 2), "b": make_hierarchy("b", 4, 3, 2)}
    table = encode_table(frame, hierarchies)
    one, one_reference = ClassCache(table, compiled=kernels.load()), ClassCache(table, compiled=None)
    for node in nodes_of(table):
        got = one.classes(node)
        assert_same(got, one_reference.classes(node))
        assert got[1].tolist() == [7]


def test_codes_gathered_and_mapped_in_one_pass() -> None:
    """class_codes maps each changed attribute's row while gathering it: the merged classes' codes equal an
    independent grouping for no, one and every attribute changed, from the base and from a coarser source."""
    frame, hierarchies = seeded_table(11)
    table = encode_table(frame, hierarchies)
    cache = ClassCache(table, compiled=kernels.load())
    nodes = nodes_of(table)
    bottom = nodes[0]
    for node in nodes:
        for source in (bottom, *[s for s in nodes if all(x <= y for x, y in zip(s, node))][:3]):
            codes, sizes, _ = cache._entry(source)[:3]
            maps = [None if lo == hi else cache._map(i, lo, hi) for i, (lo, hi) in enumerate(zip(source, node))]
            expected = reference_classes(codes, sizes, maps)
            for bound in (-1, cache._bound(node)):
                got = kernel_call(cache, source, node, 0, bound)
                assert_same(got[:2], expected)


def test_rows_with_all_changed_and_none_changed_from_group_rows() -> None:
    """group_rows (no attribute changes, no bound) equals the independent grouping of the records."""
    frame, hierarchies = seeded_table(2)
    table = encode_table(frame, hierarchies)
    rows = np.stack([a.records for a in table.attributes])
    cache = ClassCache(table, compiled=kernels.load())
    codes, sizes, keys = cache.kernels.group_rows(rows, cache.radix)
    expected = reference_classes(rows, np.ones(rows.shape[1], dtype=np.int64), [None] * rows.shape[0])
    assert_same((codes, sizes), expected)
    assert np.array_equal(keys, (codes.astype(np.int64) * cache.radix[:, None]).sum(axis=0))
    # distinct rows only: every slot used, the arrays returned as they are
    distinct = np.array(sorted(set(map(tuple, rows.T.tolist())))).T.astype(rows.dtype)
    codes, sizes, _ = cache.kernels.group_rows(np.ascontiguousarray(distinct), cache.radix)
    assert sizes.tolist() == [1] * distinct.shape[1] and np.array_equal(codes, distinct)

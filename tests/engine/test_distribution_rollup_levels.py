"""The dense form's roll-ups told by level vectors (engine._distribution_numba.roll_up_dense_levels,
roll_up_dense_base_levels and roll_up_dense_levels_ahead, the counterparts of engine._kernels_numba.roll_up_levels
for the class cache's dense form) against the kernels told by the changed attributes, bit for bit: every
(specialization, node) pair of seeded tables with one sensitive attribute, from the base with its kept key updates,
the records below a minimal class size counted independently, the arrays sized for the product of the target
levels' cardinalities (no copy when every class of it occurs), and a refusal when codes exceed the cardinalities
they are told."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from tests.engine.test_distribution_kernels import caches, lattice_of, random_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def assert_same(a: tuple, b: tuple) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and np.array_equal(x, y)


def dense_cache(monkeypatch, seed: int):
    table = random_table(seed, 1)
    fast, _ = caches(monkeypatch, table, budget=64 << 20)
    if fast.dense is None:
        pytest.skip("this table's cache holds no dense form")
    fast._flat_maps()
    return table, fast


@pytest.mark.parametrize("seed", range(5))
def test_levels_kernels_equal_the_changed_attribute_kernels(monkeypatch, seed: int) -> None:
    table, cache = dense_cache(monkeypatch, seed)
    compiled = cache.dense
    nodes = [tuple(node) for node in lattice_of(table)]
    bottom = cache.base[0]
    deltas = cache._base_deltas()
    assert deltas is not None
    flat, places = cache._flat[0], cache._places
    exact_fits = 0
    for node in nodes:
        levels = np.array(bottom + node, dtype=np.int64)
        codes, sizes, key, counts = cache._base_entry
        changed, where = cache._changes(bottom, node)
        plain = compiled.roll_up_dense(codes, sizes, key, counts, changed, where, flat, places)
        for minimal in (0, 2, 10 ** 6):
            told = compiled.roll_up_dense_levels(codes, sizes, key, counts, levels, cache._starts3, flat, places,
                                                 cache._cards2, minimal)
            based = compiled.roll_up_dense_base_levels(codes, sizes, key, counts, levels, cache._starts3, flat,
                                                       places, cache._cards2, minimal, deltas[0], deltas[1],
                                                       cache._delta_rows2)
            ahead = compiled.roll_up_dense_levels_ahead(codes, sizes, key, counts, levels, cache._starts3, flat,
                                                        places, cache._cards2, minimal)
            expected_below = int(plain[1][plain[1] < minimal].sum())
            for result in (told, based, ahead):
                assert_same(plain, result[:4])
                assert int(result[4]) == expected_below
            assert_same((compiled.value_major(plain[3]),), ahead[5:])
        product = int(np.prod([cache.cards[i][level] for i, level in enumerate(node)]))
        exact_fits += product == plain[1].size   # every combination occurs: the arrays returned uncopied
        # from every cached specialization of the node, too
        for source in nodes:
            if source == node or not all(a <= b for a, b in zip(source, node)):
                continue
            codes, sizes, key, counts = cache._entry(source)
            changed, where = cache._changes(source, node)
            plain = compiled.roll_up_dense(codes, sizes, key, counts, changed, where, flat, places)
            told = compiled.roll_up_dense_levels(codes, sizes, key, counts, np.array(source + node, dtype=np.int64),
                                                 cache._starts3, flat, places, cache._cards2, 3)
            assert_same(plain, told[:4])
            assert int(told[4]) == int(plain[1][plain[1] < 3].sum())
    assert exact_fits > 0   # the top node at least: one class, one combination


def test_codes_beyond_the_cardinalities_told_are_refused(monkeypatch) -> None:
    table, cache = dense_cache(monkeypatch, 1)
    compiled = cache.dense
    bottom = cache.base[0]
    node = tuple(a.max_level - 1 if a.max_level > a.min_level else a.max_level for a in table.attributes)
    codes, sizes, key, counts = cache._base_entry
    levels = np.array(bottom + node, dtype=np.int64)
    honest = compiled.roll_up_dense_levels(codes, sizes, key, counts, levels, cache._starts3, cache._flat[0],
                                           cache._places, cache._cards2, 0)
    assert honest[1].size > 1
    told = np.ones_like(cache._cards2)   # one class at most: wrong, more occur
    with pytest.raises(ValueError, match="more classes than"):
        compiled.roll_up_dense_levels(codes, sizes, key, counts, levels, cache._starts3, cache._flat[0],
                                      cache._places, told, 0)

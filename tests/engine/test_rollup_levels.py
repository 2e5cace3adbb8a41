"""The compiled roll-ups told by level vectors (engine._kernels_numba.roll_up_levels and roll_up_base_levels, the
class cache's roll-up outside the dense form) against the kernels told by the changed attributes and against the
numpy reference, bit for bit: every (specialization, node) pair of seeded tables, from the base with its kept key
updates, from warmed tables (hubs) with theirs (rows counted within the cap once filled), and with the bound they
derive (the product of the target's cardinalities, -1 beyond the source's classes)."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.classes import ClassCache
from engine.encoding import encode_table
from engine.lattice import Lattice
from tests.engine.lattice_tables import seeded_table, wide_table

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def nodes_of(table) -> list[tuple[int, ...]]:
    return list(Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes)))


def assert_same(a: tuple, b: tuple) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and np.array_equal(x, y)
        else:
            assert int(x) == int(y)


def below(lower: tuple[int, ...], upper: tuple[int, ...]) -> bool:
    return all(a <= b for a, b in zip(lower, upper))


@pytest.mark.parametrize("seed", range(6))
def test_levels_kernels_equal_the_changed_attribute_kernels(seed: int) -> None:
    frame, hierarchies = seeded_table(seed)
    table = encode_table(frame, hierarchies)
    cache = ClassCache(table, compiled=kernels.load())
    compiled = cache.kernels
    cache._flat_maps()
    nodes = nodes_of(table)
    bottom = cache.base[0]
    deltas = cache._base_deltas()
    for node in nodes:
        levels = np.array(bottom + node, dtype=np.int64)
        codes, sizes, key = cache.base[1:]
        changed, where = cache._changes(bottom, node)
        rows = np.array([cache._delta_rows[i][node[i]] for i in changed.tolist()], dtype=np.int64)
        bound = cache._bound(node)
        for minimal in (0, 2, 10 ** 6):
            plain = compiled.roll_up(codes, sizes, key, changed, where, cache._flat[0], cache.radix, minimal)
            told = compiled.roll_up_levels(codes, sizes, key, levels, cache._starts3, cache._flat[0], cache.radix,
                                           cache._cards2, minimal)
            based = compiled.roll_up_base_levels(codes, sizes, key, levels, cache._starts3, cache._flat[0],
                                                 cache.radix, cache._cards2, minimal, deltas[0], deltas[1],
                                                 cache._delta_rows2)
            bounded = compiled.roll_up(codes, sizes, key, changed, where, cache._flat[0], cache.radix, minimal,
                                       bound)
            assert_same(plain, told)
            assert_same(plain, based)
            assert_same(plain, bounded)
        # from every cached specialization of the node, too
        for source in nodes:
            if source == node or not below(source, node):
                continue
            codes, sizes, key = cache._entry(source)[:3]
            changed, where = cache._changes(source, node)
            plain = compiled.roll_up(codes, sizes, key, changed, where, cache._flat[0], cache.radix, 3)
            told = compiled.roll_up_levels(codes, sizes, key, np.array(source + node, dtype=np.int64),
                                           cache._starts3, cache._flat[0], cache.radix, cache._cards2, 3)
            assert_same(plain, told)


@pytest.mark.parametrize("seed", range(3))
def test_cache_with_hubs_equals_the_reference(seed: int) -> None:
    """Warmed tables with kept key updates as sources (3 attributes of 8 values, 2,000 records: a hub one level up
    has about half the base's classes): the classes equal the reference's, the hubs' filled rows are counted in
    hub_nbytes exactly once."""
    frame, hierarchies = wide_table(seed, n=2000, d=3)
    table = encode_table(frame, hierarchies)
    reference = ClassCache(table, compiled=None)
    fast = ClassCache(table, compiled=kernels.load())
    nodes = nodes_of(table)
    hubs = [(1, 0, 0), (0, 1, 1)]
    for hub in hubs:
        fast.warm(hub)
    for node in nodes:
        assert_same(fast.classes(node), reference.classes(node))
        fast._cache.clear()   # nothing cached: every roll-up from a hub or the base
        fast.nbytes = 0
    for hub, held in fast._hub_deltas.items():
        if held is None:
            continue
        assert held[3].shape == (len(hub), max(len(c) for c in fast.cards))
        rows_bytes = int(np.count_nonzero(held[1])) * held[0].shape[1] * held[0].itemsize
        assert fast._hub_size(hub) == fast._size(fast._hubs[hub]) + held[1].nbytes + rows_bytes
    assert fast.hub_nbytes == sum(fast._hub_size(h) for h in fast._hubs)
    assert any(held is not None and held[1].any() for held in fast._hub_deltas.values())   # hub rows were used


def test_bound_from_levels_at_the_threshold() -> None:
    """The bound the levels kernel derives: the product of the target's cardinalities while at most the source's
    classes (the table and work arrays sized for it), none beyond; the classes equal the reference either way."""
    frame, hierarchies = seeded_table(9)
    table = encode_table(frame, hierarchies)
    cache = ClassCache(table, compiled=kernels.load(), budget_bytes=0)
    reference = ClassCache(table, compiled=None)
    m = cache.base[2].size
    small = [n for n in nodes_of(table) if cache._bound(n) <= m]
    large = [n for n in nodes_of(table) if cache._bound(n) > m]
    assert small and large
    for node in small + large:
        assert_same(cache.classes(node), reference.classes(node))

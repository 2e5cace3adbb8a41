"""The kept key updates of the base roll-ups (engine._keys_numba.base_keys) hold code moves (mapped code - code) in
the narrow integer type the class cache picks once per table (`ClassCache._delta_layout`: int16 while every
cardinality at and above the source's levels is at most 32,768, int32 otherwise). The roll-ups from them equal the
ones from int64 updates, the incremental compiled roll-up and the numpy reference bit for bit; a table with an
attribute of more than 32,768 values gets int32 updates and still the reference's classes."""
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
        assert np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(x, y)


def wide_valued_table(seed: int = 0, n: int = 36_000) -> tuple[pd.DataFrame, dict]:
    """An attribute of n = 36,000 values, each in one record (more than int16's code moves), beside two small
    ones."""
    rng = np.random.default_rng(seed)
    hierarchies = {"w": make_hierarchy("w", n, 4, 64), "a": make_hierarchy("a", 6, 3, 2),
                   "b": make_hierarchy("b", 9, 3, 3)}
    columns = {"w": [f"w{v}" for v in rng.permutation(n)], "a": [f"a{v}" for v in rng.integers(0, 6, n)],
               "b": [f"b{v}" for v in rng.integers(0, 9, n)]}
    return pd.DataFrame(columns), hierarchies


@pytest.mark.parametrize("seed", range(4))
def test_every_update_type_rolls_up_the_same_classes(seed: int) -> None:
    """One set of kept updates per integer type, filled on first use and reused node after node: the same codes,
    sizes, keys and records below as the plain compiled roll-up."""
    table = encode_table(*seeded_table(seed))
    cache = ClassCache(table, compiled=kernels.load())
    compiled = kernels.load()
    _, codes, sizes, key = cache.base
    assert cache._base_deltas()[0].dtype == np.int16
    count = cache._base_deltas()[0].shape[0]
    held = {dtype: (np.empty((count, sizes.size), dtype), np.zeros(count, np.bool_))
            for dtype in (np.int16, np.int32, np.int64)}
    for node in nodes_of(table)[1:]:
        changed, where = cache._changes(cache.base[0], node)
        rows = np.array([cache._delta_rows[i][node[i]] for i in changed.tolist()], dtype=np.int64)
        plain = compiled.roll_up(codes, sizes, key, changed, where, cache._flat[0], cache.radix, 2)
        for deltas, ready in held.values():
            assert_same(plain, compiled.roll_up_base(codes, sizes, key, changed, where, cache._flat[0], cache.radix,
                                                     2, deltas, ready, rows))
    int16, int32, int64 = (deltas for deltas, _ in held.values())
    assert np.array_equal(int16, int32) and np.array_equal(int32, int64)   # the same code moves in each type


def test_a_wide_attribute_gets_int32_updates_and_the_reference_classes() -> None:
    table = encode_table(*wide_valued_table())
    fast = ClassCache(table, budget_bytes=1 << 24, compiled=kernels.load())
    deltas = fast._base_deltas()
    assert deltas is not None and deltas[0].dtype == np.int32
    assert max(fast.cards[0]) > 32_768
    fast.budget = 0   # nothing cached: every roll-up starts from the base, on the int32 updates
    reference = ClassCache(table, compiled=None)
    for node in nodes_of(table)[1:]:
        assert_same(fast.classes(node), reference.classes(node))
    assert fast._deltas[1].all()
    moves = fast._deltas[0][fast._delta_rows[0][1]]   # attribute w to level 1: moves beyond int16
    assert np.abs(moves.astype(np.int64)).max() > np.iinfo(np.int16).max


def test_a_hub_above_the_wide_levels_gets_int16_updates() -> None:
    """The type is chosen per source table: above the wide attribute's level 0 every cardinality is small."""
    table = encode_table(*wide_valued_table())
    cache = ClassCache(table, compiled=kernels.load())
    assert cache._delta_layout((0, 0, 0))[2] == np.int32
    assert cache._delta_layout((1, 0, 0))[2] == np.int16

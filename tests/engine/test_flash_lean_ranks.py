"""Flash's strategy keys from the compiled pass (engine._flash_numba.strategy_keys, used on the compiled path) equal
the numpy reference (engine.search.flash.Strategy._ranks with outer sums and argsort dense ranks) to the last rank,
on random lattices with tied and untied float keys, and both order as the key tuples themselves."""
from __future__ import annotations

import numpy as np
import pytest

from engine.lattice import Lattice
from engine.search.flash import Strategy, _compiled_dense_rank, _dense_rank

pytest.importorskip("numba")
from engine import _flash_numba  # noqa: E402  (needs numba)


class Attribute:
    def __init__(self, cards: list[int]) -> None:
        self.cards = cards
        self.levels = len(cards)

    def cardinality(self, level: int) -> int:
        return self.cards[level]


class Evaluator:
    def __init__(self, attributes, compiled: bool) -> None:
        self.table = type("Table", (), {"attributes": attributes})()
        self.kernels = object() if compiled else None


def random_attributes(rng: np.random.Generator) -> list[Attribute]:
    attributes = []
    for _ in range(int(rng.integers(1, 8))):
        levels = int(rng.integers(1, 6))
        if rng.random() < 0.4:   # few cardinalities: many equal float sums (ties)
            cards = sorted((int(c) for c in rng.choice([1, 2, 4, 8], size=levels)), reverse=True)
        else:
            cards = sorted((int(c) for c in rng.integers(1, 60, size=levels)), reverse=True)
        attributes.append(Attribute(cards))
    return attributes


@pytest.mark.parametrize("seed", range(40))
def test_compiled_ranks_equal_the_reference(seed):
    rng = np.random.default_rng(seed)
    attributes = random_attributes(rng)
    lattice = Lattice(tuple(0 for _ in attributes), tuple(a.levels - 1 for a in attributes))
    compiled = Strategy(Evaluator(attributes, True), lattice)
    reference = Strategy(Evaluator(attributes, False), lattice)
    assert compiled.compiled and not reference.compiled
    assert np.array_equal(compiled.ranks, reference.ranks)
    assert np.array_equal(compiled.order, reference.order)
    assert compiled.rank_starts == reference.rank_starts
    nodes = list(lattice)
    assert sorted(nodes, key=compiled.tuple_key) == sorted(nodes, key=compiled.key)


@pytest.mark.parametrize("seed", range(20))
def test_the_compiled_dense_rank_equals_numpys(seed):
    """Few distinct values (the hash table's path) and mostly distinct ones (numpy's argsort)."""
    rng = np.random.default_rng(100 + seed)
    pool = int(rng.integers(1, 50)) if seed % 2 else 10_000
    values = rng.choice(rng.random(pool), size=int(rng.integers(1, 400)))
    ranks, count = _compiled_dense_rank(_flash_numba, values)
    expected, expected_count = _dense_rank(values)
    assert count == expected_count and np.array_equal(ranks, expected)
    found, which = _flash_numba.distinct_values(values)
    assert np.array_equal(found[which], values)
    assert found.size == np.unique(values).size


def test_the_keys_are_the_left_to_right_sums():
    """Two attributes: (0, 0.5, 1) x (0, 1) relative levels and their distinct shares, worked by hand."""
    relative = np.array([[0.0, 0.5, 1.0], [0.0, 1.0, 0.0]])
    distinct = np.array([[1.0, 0.5, 0.1], [1.0, 0.2, 0.0]])
    levels, precision, lost = _flash_numba.strategy_sums(relative, distinct, np.array([3, 2]))
    assert levels.tolist() == [0, 1, 1, 2, 2, 3]
    assert precision.tolist() == [0.0, 0.5, 0.5 / 2, 1.5 / 2, 0.5, 1.0]
    assert lost.tolist() == [1.0 - 2.0 / 2, 1.0 - 1.2 / 2, 1.0 - 1.5 / 2, 1.0 - (0.5 + 0.2) / 2, 1.0 - 1.1 / 2,
                             1.0 - (0.1 + 0.2) / 2]

"""Issue 28, cheaper per-search set-up: Flash's strategy ranks (and the sweep's successor table beside them) are
remembered per process, keyed by everything they are computed from (the lattice's shape, the per-level floats the
keys sum, the path). A second strategy of the same lattice and cardinalities reuses the same arrays, which equal a
fresh computation; a change of any input (one cardinality, the shape, the path) gets its own ranks."""
from __future__ import annotations

import numpy as np
import pytest

from engine.lattice import Lattice
from engine.search import flash
from engine.search.flash import Strategy
from tests.engine.test_flash_lean_ranks import Attribute, Evaluator, random_attributes


def lattice_of(attributes) -> Lattice:
    return Lattice(tuple(0 for _ in attributes), tuple(a.levels - 1 for a in attributes))


def fresh(attributes, compiled: bool) -> Strategy:
    """A strategy computed without the memo (it is emptied first)."""
    flash._REMEMBERED_RANKS.clear()
    return Strategy(Evaluator(attributes, compiled), lattice_of(attributes))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_a_second_strategy_reuses_ranks_equal_to_a_fresh_computation(seed: int, compiled: bool) -> None:
    if compiled:
        pytest.importorskip("numba")
    attributes = random_attributes(np.random.default_rng(seed))
    first = fresh(attributes, compiled)
    expected = (first.ranks.copy(), first.order.copy(), list(first.rank_starts))
    second = Strategy(Evaluator(attributes, compiled), lattice_of(attributes))
    assert second.ranks is first.ranks and second.order is first.order
    assert np.array_equal(second.ranks, expected[0]) and np.array_equal(second.order, expected[1])
    assert second.rank_starts == expected[2]


def test_any_changed_input_gets_its_own_ranks() -> None:
    pytest.importorskip("numba")
    attributes = [Attribute([9, 3, 1]), Attribute([4, 2, 1]), Attribute([5, 1])]
    base = fresh(attributes, True)
    changed_card = [Attribute([9, 2, 1]), Attribute([4, 2, 1]), Attribute([5, 1])]
    other = Strategy(Evaluator(changed_card, True), lattice_of(changed_card))
    assert other.ranks is not base.ranks
    assert np.array_equal(other.ranks, fresh(changed_card, True).ranks)
    reference = Strategy(Evaluator(attributes, False), lattice_of(attributes))
    assert reference.ranks is not base.ranks and np.array_equal(reference.ranks, base.ranks)
    shorter = Lattice((0, 0, 0), (1, 2, 1))   # the same attributes, a smaller lattice
    assert Strategy(Evaluator(attributes, True), shorter).ranks.shape == (2, 3, 2)


def test_the_memo_stays_bounded() -> None:
    flash._REMEMBERED_RANKS.clear()
    for cards in range(2, 4 + flash.RANKS_REMEMBERED):
        attributes = [Attribute([cards, 1]), Attribute([3, 1])]
        Strategy(Evaluator(attributes, False), lattice_of(attributes))
    assert len(flash._REMEMBERED_RANKS) == flash.RANKS_REMEMBERED


def test_the_sweep_table_is_kept_beside_the_ranks() -> None:
    """`FlashSearch._flat_tables` computes the successor table once per remembered strategy."""
    pytest.importorskip("numba")
    from engine import _flash_numba

    attributes = [Attribute([6, 3, 1]), Attribute([4, 2, 1]), Attribute([5, 1])]
    strategy = fresh(attributes, True)
    search = object.__new__(flash.FlashSearch)
    search.strategy = strategy
    search.anonymous = type("Tags", (), {"flags": np.zeros((3, 3, 2), dtype=bool)})()
    tables = search._flat_tables()
    assert search._flat_tables() is tables
    expected = _flash_numba.successor_table(strategy.ranks.reshape(-1), np.array([3, 3, 2], dtype=np.int64))
    assert all(np.array_equal(a, b) for a, b in zip(tables, expected))
    again = Strategy(Evaluator(attributes, True), lattice_of(attributes))
    search.strategy = again
    assert search._flat_tables() is tables

"""Flash's strategy keys precomputed as integer ranks (engine.search.flash.Strategy) order the transformations
exactly as the key tuples do (ARX's FLASHStrategy plus the negated level vector), and the explicit tags' cached
slices tag exactly the up-set or down-set; with them whole Flash searches keep their optimum and checks."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.lattice import Lattice
from engine.search import flash
from engine.search.flash import Strategy
from engine.search.tags import ExplicitTags


class Attribute:
    def __init__(self, cards: list[int]) -> None:
        self.cards = cards
        self.levels = len(cards)

    def cardinality(self, level: int) -> int:
        return self.cards[level]


class Table:
    def __init__(self, attributes) -> None:
        self.attributes = attributes


class Evaluator:
    def __init__(self, attributes) -> None:
        self.table = Table(attributes)


def random_strategy(seed: int) -> tuple[Strategy, Lattice]:
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 7))
    attributes = []
    for _ in range(d):
        levels = int(rng.integers(1, 6))
        cards = sorted((int(c) for c in rng.integers(1, 40, size=levels)), reverse=True)
        cards[-1] = 1 if levels > 1 and rng.random() < 0.7 else cards[-1]
        attributes.append(Attribute(cards))
    lattice = Lattice(tuple(0 for _ in attributes), tuple(a.levels - 1 for a in attributes))
    return Strategy(Evaluator(attributes), lattice), lattice


@pytest.mark.parametrize("seed", range(25))
def test_ranks_order_as_the_key_tuples(seed: int) -> None:
    strategy, lattice = random_strategy(seed)
    assert strategy.ranks is not None
    nodes = list(lattice)
    assert sorted(nodes, key=strategy.tuple_key) == sorted(nodes, key=strategy.key)
    assert sorted(strategy.key(n) for n in nodes) == list(range(len(nodes)))   # unique ranks


def test_equal_floats_fall_back_to_the_levels() -> None:
    """Two attributes alike: transformations that mirror each other tie on every float; the levels decide."""
    attributes = [Attribute([9, 3, 1]), Attribute([9, 3, 1]), Attribute([4, 1])]
    lattice = Lattice((0, 0, 0), (2, 2, 1))
    strategy = Strategy(Evaluator(attributes), lattice)
    nodes = list(lattice)
    assert sorted(nodes, key=strategy.tuple_key) == sorted(nodes, key=strategy.key)
    assert strategy.key((1, 0, 0)) < strategy.key((0, 1, 0))   # negated levels: (-1, 0, 0) < (0, -1, 0)


def test_no_ranks_above_the_limit_or_with_lower_levels(monkeypatch) -> None:
    attributes = [Attribute([5, 2, 1]), Attribute([3, 1])]
    shifted = Strategy(Evaluator(attributes), Lattice((1, 0), (2, 1)))
    assert shifted.ranks is None and shifted.key((1, 0)) == shifted.tuple_key((1, 0))
    monkeypatch.setattr(flash, "RANK_LIMIT", 3)
    large = Strategy(Evaluator(attributes), Lattice((0, 0), (2, 1)))
    assert large.ranks is None


@pytest.mark.parametrize("upward", [True, False])
@pytest.mark.parametrize("lower", [(0, 0, 0), (1, 0, 2)])
def test_explicit_tags_tag_the_same_sets(upward: bool, lower) -> None:
    lattice = Lattice(lower, (3, 2, 4))
    tags = ExplicitTags(lattice, upward)
    rng = np.random.default_rng(3)
    every = list(lattice)
    tagged: set = set()
    for index in rng.choice(len(every), size=6, replace=False):
        node = every[int(index)]
        tags.tag(node)
        tagged |= {n for n in every
                   if all((a >= b) if upward else (a <= b) for a, b in zip(n, node))}
    assert {n for n in every if n in tags} == tagged

"""Issue 28, round 3: the branch and bound keeps the nodes it has seen as their number in the lattice's mixed radix
(engine.search.bnb._strides): every node of a lattice gets its own number, and a successor's number is its node's
plus the place of the attribute raised, so a successor is looked up before its tuple is built. Same order of checks
and the same optimum as before: tests/engine/test_search_*.py and the exhaustive optimum tests compare those."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.lattice import Lattice
from engine.search.bnb import _strides


@pytest.mark.parametrize("seed", range(8))
def test_numbers_are_one_to_one_and_successors_add_the_place(seed):
    rng = np.random.default_rng(400 + seed)
    d = int(rng.integers(1, 6))
    upper = tuple(int(x) for x in rng.integers(0, 5, d))
    lower = tuple(int(rng.integers(0, u + 1)) for u in upper)
    lattice = Lattice(lower, upper)
    strides = _strides(upper)
    number = {node: sum(level * place for level, place in zip(node, strides)) for node in lattice}
    assert len(set(number.values())) == len(number)   # one number per node
    for node in lattice:
        for i, level in enumerate(node):
            if level < upper[i]:
                successor = node[:i] + (level + 1,) + node[i + 1:]
                assert number[successor] == number[node] + strides[i]


def test_strides_of_a_small_lattice():
    assert _strides((1, 2, 3)) == (12, 4, 1)
    assert _strides((0,)) == (1,)
    assert sorted(sum(a * b for a, b in zip(node, _strides((1, 2))))
                  for node in itertools.product(range(2), range(3))) == list(range(6))

"""The floor sweep's table of generalization terms (engine.search.floor._generalization_table) asks Non-Uniform
Entropy once per level height instead of once per attribute and level: every term equals, bit for bit, the term
of that attribute at that level with the others at their top (the per-attribute calls it replaces), on lattices
with and without shifted lower levels."""
from __future__ import annotations

import numpy as np
import pytest

from engine.lattice import Lattice
from engine.quality import make_quality_model
from engine.search.floor import _generalization_table
from tests.engine.lattice_tables import random_encoded_table


def per_attribute_calls(quality, lattice: Lattice) -> list[np.ndarray]:
    top = tuple(lattice.upper)
    return [np.array([quality.generalization_terms(top[:axis] + (level,) + top[axis + 1:])[axis]
                      for level in range(lo, hi + 1)])
            for axis, (lo, hi) in enumerate(zip(lattice.lower, lattice.upper))]


@pytest.mark.parametrize("seed", range(10))
def test_one_call_per_height_gives_the_per_attribute_terms(seed):
    encoded = random_encoded_table(700 + seed, d=2 + seed % 4, records=(30, 200))
    quality = make_quality_model("non_uniform_entropy", encoded)
    rng = np.random.default_rng(seed)
    upper = tuple(a.max_level for a in encoded.attributes)
    lower = tuple(int(rng.integers(0, hi + 1)) if seed % 2 else 0 for hi in upper)
    for lattice in (Lattice(tuple(0 for _ in upper), upper), Lattice(lower, upper)):
        found, expected = _generalization_table(quality, lattice), per_attribute_calls(quality, lattice)
        assert len(found) == len(expected)
        for a, b in zip(found, expected):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert np.array_equal(a.view(np.uint64), b.view(np.uint64))   # the same bits

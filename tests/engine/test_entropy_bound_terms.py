"""Non-Uniform Entropy's lower bound from precomputed normalized terms (engine.quality.entropy.lower_bound) equals,
to the last bit, the formula it replaced: the per-attribute generalization terms normalized by the maximum entropy
(0 where that is 0) and averaged with numpy's mean, on every transformation of random tables (1 to 9 attributes, so
numpy's pairwise summation over 8 or more terms is covered) and of an attribute with a single value."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.quality.entropy import NonUniformEntropy
from tests.engine.lattice_tables import random_encoded_table


def old_bound(model: NonUniformEntropy, levels) -> float:
    raw = np.array([g[lv] for g, lv in zip(model._generalization, levels)])
    with np.errstate(divide="ignore", invalid="ignore"):
        normalized = np.where(model._maximum > 0, raw / model._maximum, 0.0)
    return float(normalized.mean())


@pytest.mark.parametrize("d", [1, 3, 7, 8, 9])
@pytest.mark.parametrize("seed", range(3))
def test_bound_equals_the_normalized_mean_bit_for_bit(d: int, seed: int) -> None:
    table = random_encoded_table(seed * 10 + d, d)
    model = NonUniformEntropy(table)
    for levels in itertools.product(*(range(a.min_level, a.max_level + 1) for a in table.attributes)):
        assert model.lower_bound(levels) == old_bound(model, levels)
        assert model.bound(levels) == old_bound(model, levels)

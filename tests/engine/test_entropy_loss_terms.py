"""Non-Uniform Entropy's loss with suppression, computed with one log2 pass over every attribute's suppressed values
and a divisor without numpy's error state (engine.quality.entropy), equals to the last bit the per-attribute formula
it replaced, on random classes of random tables (attributes with a single value and maxima of 0 included), on the
compiled and the reference counts."""
from __future__ import annotations

import numpy as np
import pytest

from engine.quality.entropy import NonUniformEntropy
from tests.engine.lattice_tables import random_encoded_table


def old_suppression_raw(model: NonUniformEntropy, levels, codes, sizes, suppressed) -> np.ndarray:
    raw = np.zeros(model.d)
    total = float(sizes[suppressed].sum())
    if total > 0:
        cards = [a.cardinality(lv) for a, lv in zip(model.table.attributes, levels)]
        offsets = np.concatenate([[0], np.cumsum(cards)[:-1]])
        flat = (codes[:, suppressed] + offsets[:, None]).ravel()
        counted = np.bincount(flat, weights=np.tile(sizes[suppressed], model.d), minlength=int(sum(cards)))
        for i in range(model.d):
            per_value = counted[offsets[i]:offsets[i] + cards[i]]
            per_value = per_value[per_value > 0.5]
            raw[i] = float(np.dot(per_value, np.log2(total / per_value)))
    return raw


def old_loss(model: NonUniformEntropy, levels, codes, sizes, suppressed) -> float:
    generalization = np.array([g[lv] for g, lv in zip(model._generalization, levels)])
    raw = generalization + old_suppression_raw(model, levels, codes, sizes, suppressed)
    with np.errstate(divide="ignore", invalid="ignore"):
        normalized = np.where(model._maximum > 0, raw / model._maximum, 0.0)
    return float(normalized.mean())


def classes_of(table, levels):
    columns = np.array([a.to_level[lv][a.records] for a, lv in zip(table.attributes, levels)])
    unique, first, sizes = np.unique(columns, axis=1, return_index=True, return_counts=True)
    order = np.argsort(first)
    return unique[:, order].astype(np.int32), sizes[order].astype(np.int64)


@pytest.mark.parametrize("reference", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_loss_and_suppression_terms_bit_for_bit(seed: int, reference: bool, monkeypatch) -> None:
    if reference:
        monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    else:
        monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
        from engine import kernels

        kernels.load()
    d = 1 + seed % 9
    table = random_encoded_table(seed, d, records=(50, 400), values=(1, 12))
    model = NonUniformEntropy(table)
    rng = np.random.default_rng(100 + seed)
    for _ in range(40):
        levels = tuple(int(rng.integers(a.min_level, a.max_level + 1)) for a in table.attributes)
        codes, sizes = classes_of(table, levels)
        for k in (2, 3, 5):
            suppressed = sizes < k
            if rng.random() < 0.3:
                suppressed = rng.random(sizes.size) < 0.5
            expected = old_loss(model, levels, codes, sizes, suppressed)
            assert model.loss(levels, codes, sizes, suppressed) == expected
            raw = old_suppression_raw(model, levels, codes, sizes, suppressed)
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = np.where(model._maximum > 0, raw / model._maximum, 0.0)
            assert np.array_equal(model.suppression_terms(levels, codes, sizes, suppressed), terms)

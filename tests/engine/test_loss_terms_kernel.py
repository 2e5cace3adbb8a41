"""Issue 28, cheaper checks: Loss's per-attribute terms with suppression computed in one compiled call
(engine._kernels_numba.loss_terms: the kept classes' hierarchy-row sums and their normalization) equal the numpy
reference's to the last bit, for every aggregation and weighting of generalization against suppression, on random
classes of random tables (attributes with one value, nothing suppressed, everything suppressed included), and the
reference itself equals the formula written out here."""
from __future__ import annotations

import numpy as np
import pytest

from engine import kernels
from engine.quality.loss import Loss
from tests.engine.lattice_tables import random_encoded_table
from tests.engine.test_entropy_loss_terms import classes_of

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


def formula(model: Loss, levels, codes, sizes, suppressed) -> np.ndarray:
    """The normalized Loss per attribute straight from the definition (engine.quality.loss's module docstring):
    shares of the kept records' labels summed, suppressed records cost 1 each, weighted, normalized, clipped."""
    out = []
    removed = float(sizes[suppressed].sum())
    for i, (attribute, level) in enumerate(zip(model.table.attributes, levels)):
        rows = np.rint(attribute.share[level] * attribute.domain_size).astype(np.int64)
        kept = float(int(np.dot(np.where(suppressed, 0, sizes).astype(np.int64), rows[codes[i]])))
        total = model.generalization_weight * (kept / attribute.domain_size) + model.suppression_weight * removed
        floor = model.n / attribute.domain_size
        span = model.n - floor
        out.append(min(max((total - floor) / span, 0.0), 1.0) if span > 0 else 0.0)
    return np.array(out)


def both(table, aggregation: str, gs: float, monkeypatch) -> tuple[Loss, Loss]:
    monkeypatch.delenv(kernels.REFERENCE_ENV, raising=False)
    kernels.load()
    fast = Loss(table, aggregation, gs)
    monkeypatch.setenv(kernels.REFERENCE_ENV, "1")
    reference = Loss(table, aggregation, gs)
    monkeypatch.delenv(kernels.REFERENCE_ENV)
    return fast, reference


@pytest.mark.parametrize("aggregation", ["geometric_mean", "arithmetic_mean", "sum"])
@pytest.mark.parametrize("seed", range(5))
def test_compiled_terms_equal_the_reference_bit_for_bit(seed: int, aggregation: str, monkeypatch) -> None:
    d = 1 + (seed * 2) % 9
    table = random_encoded_table(seed, d, records=(50, 400), values=(1, 12))
    rng = np.random.default_rng(200 + seed)
    for gs in (0.0, 0.3, 0.5, 0.8, 1.0):
        fast, reference = both(table, aggregation, gs, monkeypatch)
        assert fast._compiled() is not None and reference._compiled() is None
        for _ in range(15):
            levels = tuple(int(rng.integers(a.min_level, a.max_level + 1)) for a in table.attributes)
            codes, sizes = classes_of(table, levels)
            masks = [sizes < k for k in (2, 3, 5)] + [np.zeros(sizes.size, bool), np.ones(sizes.size, bool),
                                                      rng.random(sizes.size) < 0.5]
            for suppressed in masks:
                terms = fast._attribute_array(levels, codes, sizes, suppressed)
                expected = reference._attribute_array(levels, codes, sizes, suppressed)
                assert terms.dtype == np.float64 and terms.tobytes() == expected.tobytes()
                assert fast.loss(levels, codes, sizes, suppressed) == reference.loss(levels, codes, sizes, suppressed)
                assert np.allclose(expected, formula(reference, levels, codes, sizes, suppressed), rtol=1e-12,
                                   atol=1e-12)


def test_terms_at_the_edges(monkeypatch) -> None:
    """Nothing kept: every attribute at full loss (1 after clipping); nothing suppressed at level 0: no loss."""
    table = random_encoded_table(3, 4, records=(100, 101), values=(3, 6))
    fast, reference = both(table, "geometric_mean", 0.5, monkeypatch)
    levels = tuple(a.min_level for a in table.attributes)
    codes, sizes = classes_of(table, levels)
    everything = fast._attribute_array(levels, codes, sizes, np.ones(sizes.size, bool))
    expected = reference._attribute_array(levels, codes, sizes, np.ones(sizes.size, bool))
    assert everything.tobytes() == expected.tobytes()
    assert np.all((everything == 1.0) | (reference._span <= 0))
    nothing = fast._attribute_array(levels, codes, sizes, np.zeros(sizes.size, bool))
    expected = reference._attribute_array(levels, codes, sizes, np.zeros(sizes.size, bool))
    assert nothing.tobytes() == expected.tobytes()
    assert np.all(nothing == 0.0)


@pytest.mark.parametrize("seed", range(4))
def test_suppression_and_terms_in_one_call(seed: int, monkeypatch) -> None:
    """engine._kernels_numba.suppress_and_loss_terms: the classes below the size and their records as
    suppress_below gives them, and the terms exactly when some and at most `limit` records are suppressed."""
    compiled = kernels.load()
    table = random_encoded_table(50 + seed, 1 + seed * 2, records=(80, 300), values=(1, 10))
    fast, reference = both(table, "geometric_mean", 0.5, monkeypatch)
    rng = np.random.default_rng(seed)
    for _ in range(20):
        levels = tuple(int(rng.integers(a.min_level, a.max_level + 1)) for a in table.attributes)
        codes, sizes = classes_of(table, levels)
        for minimal in (1, 2, 4):
            below = sizes < minimal
            count = int(sizes[below].sum())
            for limit in sorted({0, max(count - 1, 0), count, count + 5, table.n}):
                suppressed, total, terms = compiled.suppress_and_loss_terms(
                    codes, sizes, minimal, limit, *fast.compiled_loss_arguments(levels))
                assert np.array_equal(suppressed, below) and int(total) == count
                if 0 < count <= limit:
                    expected = reference._attribute_array(levels, codes, sizes, below)
                    assert terms.tobytes() == expected.tobytes()
                    assert fast.loss_from_terms(terms) == reference.loss(levels, codes, sizes, below)
                else:
                    assert terms.size == 0
    assert reference.compiled_loss_arguments(levels) is None

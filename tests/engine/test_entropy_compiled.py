"""Non-Uniform Entropy's compiled terms (engine._entropy_numba, used by engine.quality.entropy once numba is loaded)
equal the numpy reference to the last bit: the replayed BLAS dot product against np.dot on vectors of every length
class (blocks of 16 and tails), and the model's loss, per-attribute losses and suppression terms against a model
built on the forced reference path, on random tables whose attributes hold up to a few hundred values (so the
suppressed values of an attribute fill several blocks), and with numpy's dot product beyond DOT_LIMIT values."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine import kernels
from engine.encoding import encode_table
from engine.quality.entropy import NonUniformEntropy
from tests.engine.lattice_tables import make_hierarchy, random_encoded_table

numba_entropy = pytest.importorskip("engine._entropy_numba")
# the single-pass kernel (libm's log2, Haswell's dot order) runs only where it replays numpy here; elsewhere
# the model takes numpy's logs (tests/engine/test_entropy_numpy_logs.py)
single_pass = pytest.mark.skipif(not numba_entropy.agrees_with_numpy(),
                                 reason="numpy's log2 or dot product is not the single pass's here")


def classes_of(table, levels):
    columns = np.array([a.to_level[lv][a.records] for a, lv in zip(table.attributes, levels)])
    unique, first, sizes = np.unique(columns, axis=1, return_index=True, return_counts=True)
    order = np.argsort(first)
    return np.ascontiguousarray(unique[:, order].astype(np.int32)), sizes[order].astype(np.int64)


def both_models(monkeypatch, table) -> tuple[NonUniformEntropy, NonUniformEntropy]:
    """A model on the compiled path and one on the forced reference path, for the same table."""
    monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    reference = NonUniformEntropy(table)
    monkeypatch.delenv("SAFESHARE_REFERENCE_PATH")
    monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    kernels.load()
    return NonUniformEntropy(table), reference


@single_pass
def test_replayed_dot_product_is_numpys_for_every_length():
    rng = np.random.default_rng(5)
    for n in list(range(1, 100)) + [255, 256, 257, 1000, 4099, numba_entropy.DOT_LIMIT]:
        counts = rng.integers(1, 50_000, n).astype(np.int64)
        total = float(counts.sum())
        values = counts.astype(np.float64)
        expected = float(np.dot(values, np.log2(total / values)))
        assert float(numba_entropy.blas_dot_of_logs(counts, total)) == expected, n
    # the order matters: a left-to-right sum of the same rounded products differs from np.dot on some of these
    differs = 0
    for n in range(16, 200):
        counts = rng.integers(1, 50_000, n).astype(np.int64)
        values = counts.astype(np.float64)
        logs = np.log2(float(counts.sum()) / values)
        plain = 0.0
        for product in (values * logs).tolist():
            plain += product
        differs += plain != float(np.dot(values, logs))
    assert differs > 0


@pytest.mark.parametrize("seed", range(8))
def test_loss_and_terms_equal_the_reference_bit_for_bit(monkeypatch, seed):
    d = 1 + seed % 5
    table = random_encoded_table(seed, d, records=(300, 3000), values=(1, 400))
    fast, reference = both_models(monkeypatch, table)
    rng = np.random.default_rng(200 + seed)
    used = 0
    for _ in range(25):
        levels = tuple(int(rng.integers(a.min_level, a.max_level + 1)) for a in table.attributes)
        codes, sizes = classes_of(table, levels)
        for k in (2, 3, 5, 50):
            suppressed = sizes < k
            if rng.random() < 0.3:
                suppressed = rng.random(sizes.size) < rng.random()
            if fast._fast_terms(levels, codes, sizes, suppressed) is not None:
                used += 1
            assert fast.loss(levels, codes, sizes, suppressed) == reference.loss(levels, codes, sizes, suppressed)
            assert fast.attribute_losses(levels, codes, sizes, suppressed) == \
                reference.attribute_losses(levels, codes, sizes, suppressed)
            # right after the loss (remembered terms) and on their own
            assert np.array_equal(fast.suppression_terms(levels, codes, sizes, suppressed),
                                  reference.suppression_terms(levels, codes, sizes, suppressed))
            fresh = suppressed.copy()
            assert np.array_equal(fast.suppression_terms(levels, codes, sizes, fresh),
                                  reference.suppression_terms(levels, codes, sizes, fresh))
    assert used > 0 and reference._fast is None   # the compiled terms ran; the reference model never loads them


def test_more_values_than_replayed_use_numpys_dot_product(monkeypatch):
    """An attribute whose suppressed records hold more than DOT_LIMIT values: OpenBLAS may split that dot product
    over threads, so the kernel leaves that attribute to numpy (from its counts) and computes the others."""
    n = numba_entropy.DOT_LIMIT + 500
    rng = np.random.default_rng(3)
    frame = pd.DataFrame({"a": [f"a{v}" for v in range(n)], "b": [f"b{v}" for v in rng.integers(0, 4, n)]})
    table = encode_table(frame, {"a": make_hierarchy("a", n, 3, 16), "b": make_hierarchy("b", 4, 2, 2)})
    fast, reference = both_models(monkeypatch, table)
    levels = (0, 0)
    codes, sizes = classes_of(table, levels)
    suppressed = sizes < 2   # every record is unique in a: all suppressed, n values
    assert fast.loss(levels, codes, sizes, suppressed) == reference.loss(levels, codes, sizes, suppressed)
    module, cardinalities, generalization, totals, starts = fast._fast
    pending = module.entropy_terms(codes, sizes, suppressed, np.array(levels, dtype=np.int64), cardinalities,
                                   generalization, fast._maximum, totals, starts)[3]
    assert pending.tolist() == [True, False]
    assert fast.attribute_losses(levels, codes, sizes, suppressed) == \
        reference.attribute_losses(levels, codes, sizes, suppressed)
    assert np.array_equal(fast.suppression_terms(levels, codes, sizes, suppressed.copy()),
                          reference.suppression_terms(levels, codes, sizes, suppressed.copy()))
    few = np.zeros(sizes.size, dtype=bool)
    few[:100] = True
    assert fast._fast_terms(levels, codes, sizes, few) is not None
    assert fast.loss(levels, codes, sizes, few) == reference.loss(levels, codes, sizes, few)

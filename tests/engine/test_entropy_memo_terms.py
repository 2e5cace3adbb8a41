"""Non-Uniform Entropy's compiled terms with their per-transformation log memo and the values they lay out for numpy
(engine._entropy_numba.entropy_terms): the log term of a count below MEMO is computed once per transformation and
read afterwards, and an attribute with more than DOT_LIMIT suppressed values gets its values and log terms laid out
for numpy's own dot product. Both must leave the reference's bits unchanged: counts just below, at and above MEMO,
a count equal to all suppressed records (log term 0), repeated counts (memo reads), both counting sides (suppressed
classes, or the totals minus the kept classes), nothing suppressed, and the laid-out values and logs against numpy's
log2 of the counts computed independently here."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine import kernels
from engine.encoding import encode_table
from engine.quality.entropy import NonUniformEntropy
from tests.engine.lattice_tables import make_hierarchy

numba_entropy = pytest.importorskip("engine._entropy_numba")
# the single-pass kernel (libm's log2, Haswell's dot order) runs only where it replays numpy here; elsewhere
# the model takes numpy's logs (tests/engine/test_entropy_numpy_logs.py)
single_pass = pytest.mark.skipif(not numba_entropy.agrees_with_numpy(),
                                 reason="numpy's log2 or dot product is not the single pass's here")


def both_models(monkeypatch, table) -> tuple[NonUniformEntropy, NonUniformEntropy]:
    """A model on the compiled path and one on the forced reference path, for the same table."""
    monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    reference = NonUniformEntropy(table)
    monkeypatch.delenv("SAFESHARE_REFERENCE_PATH")
    monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    kernels.load()
    return NonUniformEntropy(table), reference


def classes_of(table, levels):
    columns = np.array([a.to_level[lv][a.records] for a, lv in zip(table.attributes, levels)])
    unique, first, sizes = np.unique(columns, axis=1, return_index=True, return_counts=True)
    order = np.argsort(first)
    return np.ascontiguousarray(unique[:, order].astype(np.int32)), sizes[order].astype(np.int64)


def table_with_counts(counts: list[int], seed: int = 0):
    """Attribute a holds value v counts[v] times; attribute b splits every record into its own class (so every class
    has one record and k = 2 suppresses everything)."""
    values = np.repeat(np.arange(len(counts)), counts)
    n = values.size
    frame = pd.DataFrame({"a": [f"a{v}" for v in values], "b": [f"b{v}" for v in np.random.default_rng(seed)
                                                                 .permutation(n)]})
    return encode_table(frame, {"a": make_hierarchy("a", len(counts), 3, 4), "b": make_hierarchy("b", n, 2, n)})


def assert_same(fast, reference, levels, codes, sizes, suppressed):
    assert fast.loss(levels, codes, sizes, suppressed) == reference.loss(levels, codes, sizes, suppressed)
    assert fast.attribute_losses(levels, codes, sizes, suppressed) == \
        reference.attribute_losses(levels, codes, sizes, suppressed)
    fresh = suppressed.copy()
    assert np.array_equal(fast.suppression_terms(levels, codes, sizes, fresh),
                          reference.suppression_terms(levels, codes, sizes, fresh))


@pytest.mark.parametrize("counts", [
    [numba_entropy.MEMO - 1, numba_entropy.MEMO, numba_entropy.MEMO + 1, 1, 1, 2, 2, 3, 3, 3],
    [5],                                  # one value holding every suppressed record: log2(S / S) = 0
    [1] * 40 + [2] * 30 + [7] * 20,        # few distinct counts, read from the memo again and again
    [1, numba_entropy.MEMO * 3, 4, 4],    # a count far above the memo
])
def test_memo_counts_keep_the_reference_bits(monkeypatch, counts):
    table = table_with_counts(counts)
    fast, reference = both_models(monkeypatch, table)
    for levels in [(0, 0), (1, 0), (2, 0), (0, 1)]:
        codes, sizes = classes_of(table, levels)
        everything = sizes < 2 if levels[1] == 0 else np.ones(sizes.size, dtype=bool)
        for suppressed in (everything, np.zeros(sizes.size, dtype=bool)):
            assert_same(fast, reference, levels, codes, sizes, suppressed)
        assert fast._fast_terms(levels, codes, sizes, everything) is not None


@pytest.mark.parametrize("seed", range(4))
def test_both_counting_sides_keep_the_reference_bits(monkeypatch, seed):
    """Few classes suppressed (counted directly) and most suppressed (totals minus the kept), with counts on both
    sides of MEMO."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 3 * numba_entropy.MEMO, 12).tolist() + rng.integers(1, 6, 60).tolist()
    table = table_with_counts(counts, seed)
    fast, reference = both_models(monkeypatch, table)
    codes, sizes = classes_of(table, (0, 0))
    for share in (0.05, 0.5, 0.95):
        suppressed = rng.random(sizes.size) < share
        assert_same(fast, reference, (0, 0), codes, sizes, suppressed)


@single_pass
def test_pending_values_and_logs_are_numpys():
    """More than DOT_LIMIT suppressed values in attribute 0: its positive counts in value order as float64 and
    numpy's log2 of the total over each, laid out at bounds[0]:bounds[1]; the other attribute computed (no layout)."""
    n = numba_entropy.DOT_LIMIT + 300
    rng = np.random.default_rng(9)
    cards = np.array([[n, 0], [3, 0]], dtype=np.int64)
    codes = np.stack([np.arange(n), rng.integers(0, 3, n)]).astype(np.int32)
    sizes = rng.integers(1, 5, n).astype(np.int64)
    suppressed = np.ones(n, dtype=bool)
    suppressed[::97] = False   # kept classes: their values drop out (count 0), the rest stay positive
    totals = np.concatenate([np.bincount(codes[0], weights=sizes, minlength=n).astype(np.int64),
                             np.bincount(codes[1], weights=sizes, minlength=3).astype(np.int64)])
    starts = np.array([[0, 0], [n, 0]], dtype=np.int64)
    generalization = np.zeros((2, 2))
    maximum = np.ones(2)
    terms, removed, waiting, pending, values, logs, bounds = numba_entropy.entropy_terms(
        codes, sizes, suppressed, np.zeros(2, dtype=np.int64), cards, generalization, maximum, totals, starts)
    assert waiting == 1 and pending.tolist() == [True, False]
    assert removed == int(sizes[suppressed].sum())
    expected = np.bincount(codes[0][suppressed], weights=sizes[suppressed], minlength=n)
    expected = expected[expected > 0]
    assert bounds.tolist() == [0, expected.size, expected.size]
    assert np.array_equal(values, expected)
    assert np.array_equal(logs, np.log2(float(removed) / expected))
    second = np.bincount(codes[1][suppressed], weights=sizes[suppressed], minlength=3)
    second = second[second > 0]
    assert terms[1, 1] == float(np.dot(second, np.log2(float(removed) / second)))


def test_nothing_suppressed_lays_out_nothing():
    codes = np.zeros((2, 3), dtype=np.int32)
    sizes = np.array([2, 3, 4], dtype=np.int64)
    cards = np.array([[1], [1]], dtype=np.int64)
    terms, removed, waiting, pending, values, logs, bounds = numba_entropy.entropy_terms(
        codes, sizes, np.zeros(3, dtype=bool), np.zeros(2, dtype=np.int64), cards, np.zeros((2, 1)), np.ones(2),
        np.array([9, 9], dtype=np.int64), np.array([[0], [1]], dtype=np.int64))
    assert removed == 0 and waiting == 0 and values.size == 0 and logs.size == 0
    assert bounds.tolist() == [0, 0, 0] and terms.tolist() == [[0.0, 0.0], [0.0, 0.0]]


@single_pass
def test_replayed_dot_with_repeated_and_large_counts_is_numpys():
    rng = np.random.default_rng(2)
    for n in (1, 15, 16, 17, 200, 3000):
        counts = np.concatenate([rng.integers(1, 4, n), rng.integers(numba_entropy.MEMO - 2,
                                                                      numba_entropy.MEMO + 2, n)])
        counts = rng.permutation(counts).astype(np.int64)
        total = float(counts.sum())
        values = counts.astype(np.float64)
        assert float(numba_entropy.blas_dot_of_logs(counts, total)) == float(np.dot(values,
                                                                                     np.log2(total / values)))

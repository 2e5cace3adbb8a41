"""Non-Uniform Entropy's compiled terms where numpy's float64 log2 is not the C library's (numpy's AVX-512 build
computes it with its own vector code): the compiled counts and layout (engine._entropy_numba.suppressed_values),
numpy's log2 between, and the dot products replayed in the order of the BLAS kernel this CPU runs
(`dot_order`: Haswell's or SkylakeX's) and split as OpenBLAS splits long ones over its threads (`threads_agree`).
The terms must be the numpy reference's bits: the replayed dot product against np.dot on every length class and
beyond the threaded length, a wrong thread count or order told apart, and the model on this path against the forced
reference on random tables, with attributes past DOT_LIMIT and past the threaded length, replayed or left to numpy."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine import kernels
from engine.encoding import encode_table
from engine.quality import entropy
from engine.quality.entropy import NonUniformEntropy
from tests.engine.lattice_tables import make_hierarchy, random_encoded_table

numba_entropy = pytest.importorskip("engine._entropy_numba")
ORDER = numba_entropy.dot_order()
# OpenBLAS's thread count is asked when a test runs, not at collection: in a long test session it is not always
# the count the process started with, and the model replays only the count OpenBLAS runs with at the time


def threads_now() -> int:
    return numba_entropy.blas_threads()
needs_order = pytest.mark.skipif(not ORDER, reason="this BLAS's dot product order is not one replayed")


def classes_of(table, levels):
    columns = np.array([a.to_level[lv][a.records] for a, lv in zip(table.attributes, levels)])
    unique, first, sizes = np.unique(columns, axis=1, return_index=True, return_counts=True)
    order = np.argsort(first)
    return np.ascontiguousarray(unique[:, order].astype(np.int32)), sizes[order].astype(np.int64)


def two_call_models(monkeypatch, table, threads: int) -> tuple[NonUniformEntropy, NonUniformEntropy]:
    """A model forced onto the numpy-logs path (replaying `threads`' split, 0: long dot products to numpy) and one
    on the forced reference path, for the same table."""
    monkeypatch.setenv("SAFESHARE_REFERENCE_PATH", "1")
    reference = NonUniformEntropy(table)
    monkeypatch.delenv("SAFESHARE_REFERENCE_PATH")
    monkeypatch.setenv("SAFESHARE_COMPILED_PATH", "1")
    kernels.load()
    monkeypatch.setattr(entropy, "_FAST_AGREES", False)
    monkeypatch.setattr(entropy, "_DOT_ORDER", ORDER)
    monkeypatch.setattr(entropy, "_THREADS", threads)
    return NonUniformEntropy(table), reference


def assert_same(fast, reference, levels, codes, sizes, suppressed):
    assert fast.loss(levels, codes, sizes, suppressed) == reference.loss(levels, codes, sizes, suppressed)
    assert fast.attribute_losses(levels, codes, sizes, suppressed) == \
        reference.attribute_losses(levels, codes, sizes, suppressed)
    fresh = suppressed.copy()   # not the classes of the loss just computed: computed again
    assert np.array_equal(fast.suppression_terms(levels, codes, sizes, fresh),
                          reference.suppression_terms(levels, codes, sizes, fresh))


@needs_order
def test_replayed_order_is_npdots_for_every_length():
    rng = np.random.default_rng(5)
    for n in list(range(0, 100)) + [255, 256, 257, 1000, 4099, numba_entropy.DOT_LIMIT, numba_entropy.THREADED]:
        counts = rng.integers(1, 50_000, n).astype(np.int64)
        values = counts.astype(np.float64)
        logs = np.log2(float(counts.sum() + 1) / values)
        assert float(numba_entropy.dot_in_order(values, logs, ORDER)) == float(np.dot(values, logs)), n
    # the other order differs from np.dot on some of these: the detection can fail
    other = numba_entropy.HASWELL if ORDER == numba_entropy.SKYLAKEX else numba_entropy.SKYLAKEX
    differs = 0
    for n in range(3, 120):
        values = rng.integers(1, 50_000, n).astype(np.float64)
        logs = np.log2(float(values.sum()) / values)
        differs += float(numba_entropy.dot_in_order(values, logs, other)) != float(np.dot(values, logs))
    assert differs > 0


@needs_order
def test_threaded_split_is_npdots_and_a_wrong_count_is_told_apart():
    threads = threads_now()
    if threads < 2:
        pytest.skip("OpenBLAS runs on one thread here: nothing is split")
    assert numba_entropy.threads_agree(ORDER, threads)
    assert not numba_entropy.threads_agree(ORDER, 1)
    assert not numba_entropy.threads_agree(ORDER, threads + 1)


def test_suppressed_values_lay_out_the_reference_counts():
    rng = np.random.default_rng(1)
    d, u = 3, 500
    cards = np.array([[40, 5], [7, 2], [300, 1]], dtype=np.int64)
    levels = np.array([0, 1, 0], dtype=np.int64)
    codes = np.stack([rng.integers(0, cards[i, levels[i]], u) for i in range(d)]).astype(np.int32)
    sizes = rng.integers(1, 6, u).astype(np.int64)
    starts = np.array([[0, 40], [45, 52], [54, 354]], dtype=np.int64)
    totals = np.zeros(355, dtype=np.int64)
    for i in range(d):
        begin = starts[i, levels[i]]
        totals[begin:begin + cards[i, levels[i]]] = np.bincount(codes[i], weights=sizes,
                                                                minlength=cards[i, levels[i]])
    for suppressed in (rng.random(u) < 0.1, rng.random(u) < 0.9, np.zeros(u, dtype=bool)):
        removed, values, bounds = numba_entropy.suppressed_values(codes, sizes, suppressed, levels, cards, totals,
                                                                  starts)
        assert removed == int(sizes[suppressed].sum())
        runs = []
        for i in range(d):
            counted = np.bincount(codes[i][suppressed], weights=sizes[suppressed], minlength=cards[i, levels[i]])
            runs.append(counted[counted > 0] if removed else counted[:0])
        assert bounds.tolist() == np.concatenate([[0], np.cumsum([r.size for r in runs])]).tolist()
        assert np.array_equal(values, np.concatenate(runs))


@needs_order
@pytest.mark.parametrize("seed", range(6))
def test_loss_and_terms_equal_the_reference_bit_for_bit(monkeypatch, seed):
    d = 1 + seed % 5
    table = random_encoded_table(seed, d, records=(300, 3000), values=(1, 400))
    fast, reference = two_call_models(monkeypatch, table, threads_now())
    rng = np.random.default_rng(300 + seed)
    for _ in range(20):
        levels = tuple(int(rng.integers(a.min_level, a.max_level + 1)) for a in table.attributes)
        codes, sizes = classes_of(table, levels)
        for k in (2, 5, 50):
            suppressed = sizes < k
            if rng.random() < 0.3:
                suppressed = rng.random(sizes.size) < rng.random()
            assert_same(fast, reference, levels, codes, sizes, suppressed)
    assert fast._dot_order == ORDER and reference._fast is None


@needs_order
@pytest.mark.parametrize("which", ["none verified", "the count now", "another count"])
def test_long_attributes_replayed_or_left_to_numpy(monkeypatch, which):
    """An attribute whose suppressed records hold more values than DOT_LIMIT and than OpenBLAS's threaded length:
    replayed with the verified thread count's split, or (none verified, or OpenBLAS running with another count
    than the one verified) given numpy's own dot product."""
    n = numba_entropy.THREADED + 3777
    rng = np.random.default_rng(3)
    # every value of a at least once, most several times (counts that differ, so the order of the sum shows)
    a = np.concatenate([np.arange(n), rng.integers(0, n, 2 * n)])
    frame = pd.DataFrame({"a": [f"a{v}" for v in a], "b": [f"b{v}" for v in rng.integers(0, 4, a.size)]})
    table = encode_table(frame, {"a": make_hierarchy("a", n, 3, 16), "b": make_hierarchy("b", 4, 2, 2)})
    now = threads_now()
    threads = {"none verified": 0, "the count now": now, "another count": now + 1}[which]
    fast, reference = two_call_models(monkeypatch, table, threads)
    for levels in [(0, 0), (1, 0), (0, 1)]:
        codes, sizes = classes_of(table, levels)
        for suppressed in (sizes < 2, sizes < 3, np.ones(sizes.size, dtype=bool), rng.random(sizes.size) < 0.9):
            assert_same(fast, reference, levels, codes, sizes, suppressed)
    assert fast._threads == (threads if threads == now else 0)

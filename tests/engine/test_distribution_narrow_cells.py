"""The class cache's dense histogram in int16 cells (engine._distribution_numba.cell_dtype): tables of at most
NARROW_RECORDS records group, roll up and decide on int16 cells, larger ones on int32, with the same classes, counts
and decisions bit for bit; and the row merge of `_merged_dense` equals numpy's scatter-add."""
from __future__ import annotations

import numpy as np
import pytest

from engine import _distribution_numba as compiled
from engine.privacy import _distribution_kernels as decisions


def test_cell_dtype_narrows_only_while_every_count_fits():
    assert compiled.cell_dtype(0) == np.int16
    assert compiled.cell_dtype(compiled.NARROW_RECORDS) == np.int16
    assert compiled.NARROW_RECORDS == np.iinfo(np.int16).max
    assert compiled.cell_dtype(compiled.NARROW_RECORDS + 1) == np.int32


def random_base(rng, m: int, cards: np.ndarray, values: int, largest: int):
    """Distinct joint classes: quasi-identifier codes (d, m) int32, sizes in 1..largest, a value each, and the
    quasi-identifier places of the fixed radix."""
    codes = np.stack([rng.integers(0, c, m) for c in cards]).astype(np.int32)
    places = np.ones(cards.size, dtype=np.int64)
    for i in range(cards.size - 2, -1, -1):
        places[i] = places[i + 1] * int(cards[i + 1])
    sizes = rng.integers(1, largest + 1, m).astype(np.int64)
    return codes, sizes, rng.integers(0, values, m).astype(np.int64), places


def reference_group(codes, sizes, values, places, cardinality):
    """numpy: classes of equal keys in order of first appearance, their sizes and histogram (int64)."""
    keys = (codes.astype(np.int64) * places[:, None]).sum(axis=0)
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty(first.size, dtype=np.int64)
    rank[np.argsort(first)] = np.arange(first.size)
    inverse = rank[inverse.ravel()]
    counts = np.zeros((first.size, cardinality), dtype=np.int64)
    np.add.at(counts, (inverse, values), sizes)
    return np.sort(first), np.bincount(inverse, weights=sizes).astype(np.int64), counts


@pytest.mark.parametrize("seed", range(6))
def test_group_dense_cells_follow_the_records_and_hold_the_reference_counts(seed):
    rng = np.random.default_rng(seed)
    cards = rng.integers(1, 7, int(rng.integers(1, 4)))
    values = int(rng.integers(1, 20))
    for largest in (3, 40_000):   # a narrow table (int16) and one whose records do not fit (int32)
        codes, sizes, value, places = random_base(rng, int(rng.integers(1, 400)), cards, values, largest)
        new_codes, new_sizes, new_keys, counts = compiled.group_dense(codes, sizes, value, places, values)
        assert counts.dtype == compiled.cell_dtype(int(sizes.sum()))
        first, expected_sizes, expected = reference_group(codes, sizes, value, places, values)
        assert np.array_equal(new_codes, codes[:, first]) and np.array_equal(new_sizes, expected_sizes)
        assert np.array_equal(counts.astype(np.int64), expected)
        assert np.array_equal(new_keys, (codes[:, first].astype(np.int64) * places[:, None]).sum(axis=0))


def one_level_up(rng, codes, cards):
    """One attribute's code map to a coarser level (codes halved), flattened as the roll-ups take it."""
    attribute = int(rng.integers(0, cards.size))
    code_map = (np.arange(int(cards[attribute])) // 2).astype(np.int32)
    return np.array([attribute], dtype=np.int64), np.array([0], dtype=np.int64), code_map


@pytest.mark.parametrize("seed", range(8))
def test_roll_ups_on_int16_cells_equal_those_on_int32_cells_and_numpy(seed):
    """roll_up_dense, roll_up_dense_base and roll_up_dense_ahead keep the source's cells and give the same classes,
    keys and counts on int16 as on int32 cells; the counts equal numpy's scatter-add of the source rows."""
    rng = np.random.default_rng(100 + seed)
    cards = rng.integers(2, 9, int(rng.integers(1, 4)))
    values = int(rng.integers(1, 16))
    codes, sizes, value, places = random_base(rng, int(rng.integers(1, 3000)), cards, values, 5)
    base = compiled.group_dense(codes, sizes, value, places, values)
    assert base[3].dtype == np.int16
    changed, starts, maps = one_level_up(rng, base[0], cards)
    wide = base[:3] + (base[3].astype(np.int32),)
    narrow_out = compiled.roll_up_dense(*base, changed, starts, maps, places)
    wide_out = compiled.roll_up_dense(*wide, changed, starts, maps, places)
    assert narrow_out[3].dtype == np.int16 and wide_out[3].dtype == np.int32
    for narrow_part, wide_part in zip(narrow_out, wide_out):
        assert np.array_equal(narrow_part, wide_part)
    # the merged histogram is numpy's scatter-add of the source rows into their new classes
    new_keys = narrow_out[2]
    rolled = base[0].copy()
    rolled[changed[0]] = maps[rolled[changed[0]]]
    source_keys = (rolled.astype(np.int64) * places[:, None]).sum(axis=0)
    where = {int(k): c for c, k in enumerate(new_keys)}
    expected = np.zeros((new_keys.size, values), dtype=np.int64)
    np.add.at(expected, np.array([where[int(k)] for k in source_keys], dtype=np.int64), base[3].astype(np.int64))
    assert np.array_equal(narrow_out[3].astype(np.int64), expected)
    ahead = compiled.roll_up_dense_ahead(*base, changed, starts, maps, places)
    assert all(np.array_equal(a, b) for a, b in zip(ahead[:4], narrow_out))
    assert ahead[4].dtype == np.int16 and np.array_equal(ahead[4], narrow_out[3].T)
    deltas = np.zeros((1, base[1].size), dtype=np.int64)
    ready = np.zeros(1, dtype=np.bool_)
    rows = np.zeros(1, dtype=np.int64)
    from_base = compiled.roll_up_dense_base(*base, changed, starts, maps, places, deltas, ready, rows)
    assert all(np.array_equal(a, b) for a, b in zip(from_base, narrow_out)) and from_base[3].dtype == np.int16


def adult_like_counts(rng, classes: int, values: int) -> tuple[np.ndarray, np.ndarray]:
    """Class-major int32 counts, most classes of one to four records, a few large ones."""
    counts = np.zeros((classes, values), dtype=np.int32)
    for k in range(classes):
        size = int(rng.integers(1, 5)) if rng.random() < 0.8 else int(rng.integers(5, 400))
        np.add.at(counts[k], rng.integers(0, values, size), 1)
    return counts, counts.sum(axis=1).astype(np.int64)


@pytest.mark.parametrize("seed", range(4))
def test_bounded_decisions_on_int16_cells_equal_those_on_int32_cells(seed):
    """The search's bounded decisions (t-closeness equal, entropy l-diversity) read int16 cells as int32 ones."""
    rng = np.random.default_rng(200 + seed)
    values = int(rng.integers(2, 15))
    counts, sizes = adult_like_counts(rng, int(rng.integers(1, 2000)), values)
    narrow = counts.astype(np.int16)
    q = rng.random(values) + 0.01
    q /= q.sum()
    for t in (0.05, 0.2, 0.5):
        smallest_read = decisions.equal_smallest_read(q, t)
        wide_result = decisions.t_closeness_equal_suppression_bounded(counts, sizes, q, t, 2, smallest_read)
        narrow_result = decisions.t_closeness_equal_suppression_bounded(narrow, sizes, q, t, 2, smallest_read)
        assert np.array_equal(wide_result[0], narrow_result[0]) and wide_result[1] == narrow_result[1]
    top = int(sizes.max()) + 1
    log_table = np.log(np.maximum(np.arange(top, dtype=np.float64), 1.0))
    table = log_table / np.log(2.0)
    for minimal, threshold in ((2, 1.0), (3, np.log2(3.0))):
        arguments = (1, minimal, threshold, table, log_table, np.log(2.0), 0.9)
        wide_result = decisions.l_diversity_entropy_suppression_bounded(counts, sizes, 2, *arguments)
        narrow_result = decisions.l_diversity_entropy_suppression_bounded(narrow, sizes, 2, *arguments)
        assert wide_result[0].size == sizes.size
        assert np.array_equal(wide_result[0], narrow_result[0]) and wide_result[1] == narrow_result[1]

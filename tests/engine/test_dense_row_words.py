"""The dense roll-ups' histogram merge on machine words (engine._distribution_numba._merged_dense): rows of whole
uint32 words, at most ROW_WORDS of them, are summed as words during the grouping, at a width fixed when compiled
(`_hash_by_width`), others cell by cell after it. Every roll-up kernel must give numpy's scatter-add of the source
rows, in the source's cells, for every row width on each side of the word path (odd and even cards, int16 and int32
cells), and with counts up to the cell type's largest value next to each other in a word (a carry across cells would
change the neighbour)."""
from __future__ import annotations

import numpy as np
import pytest

from engine import _distribution_numba as compiled
from tests.engine.test_distribution_narrow_cells import one_level_up, random_base


def scatter_reference(source_keys: np.ndarray, new_keys: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """numpy: each source row added to the row of its new class (int64)."""
    where = {int(k): c for c, k in enumerate(new_keys)}
    expected = np.zeros((new_keys.size, counts.shape[1]), dtype=np.int64)
    np.add.at(expected, np.array([where[int(k)] for k in source_keys], dtype=np.int64), counts.astype(np.int64))
    return expected


def full_counts(rng, classes: int, values: int, cell: type) -> np.ndarray:
    """Class-major counts in `cell` whose column sums reach the cell type's largest value: every cell of the
    merged rows is at its limit in some columns, zero or small in others."""
    top = np.iinfo(cell).max
    counts = np.zeros((classes, values), dtype=np.int64)
    for v in range(values):
        if v % 2 == 0:   # a column summing to exactly the cell type's largest value
            parts = np.sort(rng.integers(0, top + 1, classes - 1)) if classes > 1 else np.empty(0, np.int64)
            counts[:, v] = np.diff(np.concatenate(([0], parts, [top])))
        else:
            counts[:, v] = rng.integers(0, 3, classes)
    return counts.astype(cell)


@pytest.mark.parametrize("cell", [np.int16, np.int32])
@pytest.mark.parametrize("values", [1, 2, 3, 4, 5, 7, 8, 13, 14, 15, 16, 17, 20])
def test_every_dense_roll_up_adds_rows_as_numpy_does(values, cell):
    """roll_up_dense, roll_up_dense_base, roll_up_dense_ahead, roll_up_dense_lazy and roll_up_dense_base_lazy: the
    same classes and keys, the histogram numpy's scatter-add in the source's cells (columns summing to the cell
    type's largest value next to small ones in the same word)."""
    rng = np.random.default_rng(values * 7 + (cell == np.int32))
    cards = np.array([4, 3, 5])
    codes, sizes, value, places = random_base(rng, 600, cards, values, 3)
    base = compiled.group_dense(codes, sizes, value, places, values)
    classes = base[1].size
    counts = full_counts(rng, classes, values, cell)
    codes_u, sizes_u, keys_u = base[:3]
    changed, starts, maps = one_level_up(rng, codes_u, cards)
    rolled = codes_u.copy()
    rolled[changed[0]] = maps[rolled[changed[0]]]
    source_keys = (rolled.astype(np.int64) * places[:, None]).sum(axis=0)
    out = compiled.roll_up_dense(codes_u, sizes_u, keys_u, counts, changed, starts, maps, places)
    assert out[3].dtype == cell and out[3].flags.c_contiguous
    assert np.array_equal(out[3].astype(np.int64), scatter_reference(source_keys, out[2], counts))
    # a coarser map (the changed attribute to one code): fewer, larger classes, sums nearer the cell type's limit
    coarse = np.zeros(int(cards[changed[0]]), dtype=np.int32)
    merged = codes_u.copy()
    merged[changed[0]] = 0
    merged_keys = (merged.astype(np.int64) * places[:, None]).sum(axis=0)
    whole = compiled.roll_up_dense(codes_u, sizes_u, keys_u, counts, changed, starts, coarse, places)
    assert whole[3].dtype == cell
    assert np.array_equal(whole[3].astype(np.int64), scatter_reference(merged_keys, whole[2], counts))
    ahead = compiled.roll_up_dense_ahead(codes_u, sizes_u, keys_u, counts, changed, starts, maps, places)
    assert all(np.array_equal(a, b) for a, b in zip(ahead[:4], out)) and np.array_equal(ahead[4], out[3].T)
    deltas = np.zeros((1, classes), dtype=np.int64)
    ready = np.zeros(1, dtype=np.bool_)
    rows = np.zeros(1, dtype=np.int64)
    from_base = compiled.roll_up_dense_base(codes_u, sizes_u, keys_u, counts, changed, starts, maps, places,
                                            deltas, ready, rows)
    assert all(np.array_equal(a, b) for a, b in zip(from_base, out)) and from_base[3].dtype == cell
    origin = np.arange(classes, dtype=np.int32)
    lazy_base = compiled.roll_up_dense_base_lazy(codes_u, origin, sizes_u, keys_u, counts, changed, starts, maps,
                                                 places, deltas, ready, rows)
    assert all(np.array_equal(a, b) for a, b in zip(lazy_base[1:], out[1:])) and lazy_base[3].dtype == cell
    # a lazy table at the base's levels: its level rows are the base codes, one row per attribute
    select = np.arange(cards.size, dtype=np.int64)[:, None]
    levels = np.zeros(cards.size, dtype=np.int64)
    lazy = compiled.roll_up_dense_lazy(codes_u, select, origin, sizes_u, keys_u, counts, levels, changed, starts,
                                       maps, places)
    assert all(np.array_equal(a, b) for a, b in zip(lazy[1:], out[1:])) and lazy[3].dtype == cell


@pytest.mark.parametrize("values", [1, 2, 3, 14, 16])
def test_a_word_sum_never_carries_into_the_next_cell(values):
    """Two int16 rows whose cells sum to exactly 32,767 and 0 side by side, and 32,767 in every cell: the merged row
    holds each cell's sum, none spilled into its neighbour."""
    top = np.iinfo(np.int16).max
    codes = np.zeros((1, 2), dtype=np.int32)
    codes[0, 1] = 1
    places = np.ones(1, dtype=np.int64)
    first = np.array([top - 1 if v % 2 == 0 else 0 for v in range(values)], dtype=np.int16)
    second = np.array([1 if v % 2 == 0 else top for v in range(values)], dtype=np.int16)
    counts = np.stack([first, second])
    sizes = counts.astype(np.int64).sum(axis=1)
    keys = np.array([0, 1], dtype=np.int64)
    maps = np.zeros(2, dtype=np.int32)   # both classes into one
    out = compiled.roll_up_dense(codes, sizes, keys, counts, np.array([0], np.int64), np.array([0], np.int64), maps,
                                 places)
    assert out[3].dtype == np.int16 and out[3].shape == (1, values)
    assert np.array_equal(out[3][0], np.full(values, top, dtype=np.int16))

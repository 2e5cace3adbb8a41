"""Micro-data for the output-checking tests, built from integer codes as the reference study built its acro cases:
one record per unit of a count, each with the integer code of its row (and column)."""
from __future__ import annotations

import numpy as np

from outputs.checks import CellStats, cell_stats


def codes_from_counts(counts) -> list[np.ndarray]:
    """Integer codes per axis of a table of counts: cell (i, j) with count n becomes n records coded (i, j)."""
    table = np.asarray(counts, dtype=np.int64)
    cells = np.repeat(np.arange(table.size), table.reshape(-1))
    return [c.astype(np.int64) for c in np.unravel_index(cells, table.shape)]


def labels_for(shape, names=("sex", "region")) -> list[list[str]]:
    return [[f"{names[a] if a < len(names) else a}{i}" for i in range(n)] for a, n in enumerate(shape)]


def count_stats(counts, labels=None, **kwargs) -> CellStats:
    table = np.asarray(counts)
    labels = labels or labels_for(table.shape)
    return cell_stats(codes_from_counts(table), labels, **kwargs)


def magnitude_stats(values_per_cell: dict, shape: tuple[int, ...], labels=None) -> CellStats:
    """Micro-data with a value per record: values_per_cell[(i, j)] is the list of that cell's contributions."""
    codes = [[] for _ in shape]
    values: list[float] = []
    for cell, contributions in values_per_cell.items():
        for value in contributions:
            for axis, code in enumerate(cell):
                codes[axis].append(code)
            values.append(value)
    arrays = [np.array(c, dtype=np.int64) for c in codes]
    order = np.random.default_rng(7).permutation(len(values))   # records in no particular order
    return cell_stats([a[order] for a in arrays], labels or labels_for(shape), values=np.array(values)[order])

"""Dense codes of a column's values in sorted text order: the one encoding of raw values that the quasi-identifiers
(engine.encoding), the sensitive attributes (engine.sensitive) and the partitioned runs share, kept below all of them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


def sorted_codes(column: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`np.unique(column.astype(str), return_inverse=True)`: the distinct values as text in sorted order and each
    record's position among them, by hashing (pandas' factorize) and sorting only the distinct values, which is an
    order of magnitude faster than sorting a million strings."""
    codes, uniques = pd.factorize(np.asarray(column, dtype=object), sort=False)
    uniques = np.asarray(uniques, dtype=object).astype(str)
    if (codes < 0).any() or np.unique(uniques).size != uniques.size:
        # A missing value, or values that differ but read the same as text (1 and "1"): the plain way.
        return np.unique(np.asarray(column).astype(str), return_inverse=True)
    order = np.argsort(uniques, kind="stable")
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size)
    return uniques[order], rank[codes]

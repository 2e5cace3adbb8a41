"""Equivalence classes by vectorized grouping.

A class table is (codes, counts): codes has one row per attribute and one column per class. Grouping combines the
attribute codes into one int64 key (mixed radix, re-densified whenever the radix product would overflow) and
factorizes it with a hash table, so the cost is linear in the number of input rows: the input is either the records
or, much smaller, the classes of a more specific transformation (roll-up).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

_KEY_LIMIT = 1 << 62


def combined_key(codes: np.ndarray, cardinalities: Sequence[int]) -> np.ndarray:
    """One int64 per column of `codes` that is equal exactly when the columns are equal."""
    key = codes[0].astype(np.int64, copy=True)
    span = int(cardinalities[0])
    for row, card in zip(codes[1:], cardinalities[1:]):
        card = int(card)
        if span * card >= _KEY_LIMIT:
            key, uniques = pd.factorize(key)
            key = key.astype(np.int64)
            span = len(uniques)
        key *= card
        key += row
        span *= card
    return key


def group(codes: np.ndarray, weights: np.ndarray, cardinalities: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group the columns of `codes` (d, m) weighted by `weights` (m,).

    Returns the class codes (d, u), class sizes (u,) and the class index of every input column (m,). Classes are
    numbered in order of first appearance, which keeps every later step deterministic.
    """
    key = combined_key(codes, cardinalities)
    inverse, uniques = pd.factorize(key, sort=False)
    u = len(uniques)
    member = np.empty(u, dtype=np.int64)
    member[inverse] = np.arange(inverse.size)  # any member represents its class: all members share the codes
    sizes = np.bincount(inverse, weights=weights, minlength=u).astype(np.int64)
    return codes[:, member].astype(np.int32, copy=False), sizes, inverse

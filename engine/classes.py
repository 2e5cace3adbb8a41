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


def roll_up(codes: np.ndarray, sizes: np.ndarray, maps: Sequence[np.ndarray | None], cardinalities: Sequence[int]
            ) -> tuple[np.ndarray, np.ndarray]:
    """Classes of a generalization, from the classes (codes, sizes) of a specialization.

    `maps[i]` sends attribute i's codes to the coarser level (None: unchanged). The generalized codes are never
    materialized for every source class: the key is built on the fly and only one member per new class is mapped.
    """
    key: np.ndarray | None = None
    span = 1
    for row, mapping, card in zip(codes, maps, cardinalities):
        column = row if mapping is None else mapping[row]
        card = int(card)
        if key is None:
            key = column.astype(np.int64)
        else:
            if span * card >= _KEY_LIMIT:
                key, uniques = pd.factorize(key)
                key = key.astype(np.int64)
                span = len(uniques)
            key *= card
            key += column
        span *= card
    inverse, uniques = pd.factorize(key, sort=False)
    u = len(uniques)
    member = np.empty(u, dtype=np.int64)
    member[inverse] = np.arange(inverse.size)
    new_codes = np.empty((codes.shape[0], u), dtype=np.int32)
    for i, (row, mapping) in enumerate(zip(codes, maps)):
        picked = row[member]
        new_codes[i] = picked if mapping is None else mapping[picked]
    new_sizes = np.bincount(inverse, weights=sizes, minlength=u).astype(np.int64)
    return new_codes, new_sizes

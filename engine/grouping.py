"""Grouping of code columns into equivalence classes, and rolling classes up to a coarser transformation.

The pure array functions under the class cache (engine.classes): they need neither an encoded table nor the
sensitive-value distributions, so the modules that do (engine.encoding, engine.distributions) can use them without
importing the cache. Grouping combines the attribute codes into one int64 key (mixed radix, re-densified whenever the
radix product would overflow) and factorizes it with a hash table, so the cost is linear in the number of input rows.
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


def _merge(codes: np.ndarray, sizes: np.ndarray, maps: Sequence[np.ndarray | None], key: np.ndarray
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Merge the classes (codes, sizes) whose generalized key is equal: the new classes' codes (one member per class
    mapped, never every source class), sizes, and keys, in order of first appearance."""
    inverse, uniques = pd.factorize(key, sort=False)
    u = len(uniques)
    member = np.empty(u, dtype=np.int64)
    member[inverse] = np.arange(inverse.size)
    new_codes = codes[:, member].astype(np.int32, copy=False)
    for i, mapping in enumerate(maps):
        if mapping is not None:
            new_codes[i] = mapping[new_codes[i]]
    new_sizes = np.bincount(inverse, weights=sizes, minlength=u).astype(np.int64)
    return new_codes, new_sizes, np.asarray(uniques, dtype=np.int64)


def roll_up_keyed(codes: np.ndarray, sizes: np.ndarray, key: np.ndarray, maps: Sequence[np.ndarray | None],
                  radix: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`roll_up` for class tables that carry their key in a fixed mixed radix (one place per attribute, wide enough
    for its level-0 codes): only the attributes that change touch the key, one pass each, instead of rebuilding it
    from every attribute. Returns codes, sizes and the new classes' keys."""
    key = key.copy()
    for row, mapping, place in zip(codes, maps, radix):
        if mapping is not None:
            key += (mapping[row] - row) * place
    return _merge(codes, sizes, maps, key)


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
    new_codes, new_sizes, _ = _merge(codes, sizes, maps, key)
    return new_codes, new_sizes

"""Splitting a table into partitions and harmonizing the partitions' transformations (P4, digest P3.2-P3.3).

Sorted partitioning (the one P4 implements) orders the records lexicographically by their quasi-identifier values
and cuts the order into p runs of floor(n / p) records, the first n mod p runs one longer: similar records land in the
same partition, so each partition's optimum generalizes little. Random partitioning assigns each record uniformly.

Harmonization gives every partition one transformation: the per-attribute average of the partitions' levels,
rounded as Java's `Math.round` does (half up), or their minimum.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd


def partition_sizes(n: int, p: int) -> list[int]:
    if p < 1:
        raise ValueError("at least one partition")
    if n < max(2, p):
        raise ValueError(f"{n} records cannot be split into {p} partitions (P4 needs n >= 2 and n >= p)")
    base, extra = divmod(n, p)
    return [base + (1 if i < extra else 0) for i in range(p)]


def sorted_partitions(frame: pd.DataFrame, quasi_identifiers: Sequence[str], p: int) -> list[np.ndarray]:
    """Row positions of each partition, records sorted by their quasi-identifier values as text."""
    # Sorting integer ranks (factorized in text order) instead of the strings themselves: the same order, far faster.
    ranks = [pd.factorize(frame[name].astype(str), sort=True)[0] for name in reversed(list(quasi_identifiers))]
    order = np.lexsort(ranks)
    bounds = np.cumsum([0] + partition_sizes(len(frame), p))
    return [np.sort(order[bounds[i]:bounds[i + 1]]) for i in range(p)]


def random_partitions(n: int, p: int, seed: int = 0) -> list[np.ndarray]:
    """Each record to a uniformly drawn partition (P4's RANDOM); an empty partition is left out."""
    partition_sizes(n, p)
    assignment = random_assignment(np.arange(n, dtype=np.uint64), p, seed)
    return [rows for rows in (np.flatnonzero(assignment == i) for i in range(p)) if rows.size]


def random_assignment(rows: np.ndarray, p: int, seed: int) -> np.ndarray:
    """The partition of each record, drawn from its position and the seed alone (SplitMix64's mixing function), so a
    worker holding any chunk of the table draws exactly what the whole table would."""
    with np.errstate(over="ignore"):
        z = rows.astype(np.uint64) + np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(p)).astype(np.int64)


def java_round(value: float) -> int:
    """Java's Math.round: half up (2.5 -> 3, -2.5 -> -2)."""
    return int(math.floor(value + 0.5))


def harmonize(levels: Sequence[Sequence[int]], how: str = "average") -> tuple[int, ...]:
    """One transformation for every partition from the partitions' own optima."""
    if not levels:
        raise ValueError("no partition found a solution to harmonize")
    matrix = np.array(levels, dtype=float)
    if how == "average":
        return tuple(java_round(v) for v in matrix.mean(axis=0))
    if how == "minimum":
        return tuple(int(v) for v in matrix.min(axis=0))
    raise ValueError(f"unknown harmonization {how!r}")

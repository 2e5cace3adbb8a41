"""Differencing: a new count or table whose cohort differs from an earlier output's cohort by a few records.

Two outputs on the same release whose cohorts differ by fewer than `safe_threshold` records let a reader subtract
one from the other and learn about those few records (cohort A, then "A without three records": the difference of
the two tables is the three records' table). ACRO only notes the risk; here a new output fails when, for an earlier
output of the same recipient on the same release, the records in one cohort and not the other number between 1 and
`safe_threshold - 1` (either way round: nested cohorts are the common case, and overlapping cohorts whose one-sided
differences are small isolate those records just as well). An identical cohort differences nothing and passes.

Cohorts are boolean masks over the release's records or collections of record indices; the work is numpy
(`count_nonzero` of mask differences), one pass per earlier output.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .checks import FAIL, PASS, Check
from .rules import DEFAULT_RULES, RuleSet

DIFFERENCING = "differencing"


@dataclass(frozen=True)
class EarlierOutput:
    """An output the recipient made before: its id and name, the release it was made on and its cohort."""

    id: str
    name: str
    release: str
    cohort: np.ndarray | Sequence[int] | set[int]


def as_mask(cohort: np.ndarray | Iterable[int], records: int) -> np.ndarray:
    """A cohort as a boolean mask over `records` records (a mask is checked for length; indices for range)."""
    array = np.asarray(list(cohort) if isinstance(cohort, (set, frozenset)) else cohort)
    if array.dtype == bool:
        if array.shape != (records,):
            raise ValueError(f"a cohort mask needs {records} entries, got {array.shape}")
        return array
    indices = array.astype(np.int64, copy=False).reshape(-1)
    if indices.size and (indices.min() < 0 or indices.max() >= records):
        raise ValueError(f"cohort record indices outside 0..{records - 1}")
    mask = np.zeros(records, dtype=bool)
    mask[indices] = True
    return mask


def check_differencing(cohort: np.ndarray | Iterable[int], release: str, earlier: Iterable[EarlierOutput],
                       records: int, rules: RuleSet = DEFAULT_RULES) -> Check:
    """`fail` naming every earlier output on `release` whose cohort differs from `cohort` by 1 to threshold - 1
    records on either side; `pass` otherwise. `records`: the release's record count (the masks' length)."""
    t = rules.safe_threshold
    new = as_mask(cohort, records)
    clashes: list[str] = []
    cells: list[tuple[str, ...]] = []
    for output in earlier:
        if output.release != release:
            continue
        old = as_mask(output.cohort, records)
        removed = int(np.count_nonzero(old & ~new))
        added = int(np.count_nonzero(new & ~old))
        small = [f"{n} record(s) {how}" for n, how in ((removed, "fewer"), (added, "more")) if 0 < n < t]
        if small:
            clashes.append(f"earlier output {output.id} ({output.name!r}): this cohort has "
                           + " and ".join(small) + f", fewer than {t}")
            cells.append((output.id,))
    if clashes:
        return Check(DIFFERENCING, FAIL, tuple(cells), reason="; ".join(clashes)
                     + ": subtracting the two outputs would describe those records")
    return Check(DIFFERENCING, PASS, reason=f"no earlier output on this release has a cohort within {t - 1} records "
                                            f"of this one")


__all__ = ["DIFFERENCING", "EarlierOutput", "as_mask", "check_differencing"]

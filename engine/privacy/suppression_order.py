"""The order in which risk-based suppression takes classes, sorted only as far as it is read.

ARX's order (`HashGroupifyDistribution`'s comparator) is class size, then the quality model's per-class loss, then
first record. `RiskBasedModel.enforce` reads it in two ways only: the sizes in that order (their running sums, the
records each prefix suppresses) and the set of classes in a prefix (the mask it suppresses). Within one size the
sizes are equal, so the running sums need no loss at all, and the set of a prefix depends on the loss order only in
the one size group the prefix ends inside. So the classes are sorted by size alone (a radix sort where sizes fit 16
bits), and a size group is sorted by loss, stably, the first time a prefix ends inside it: a bisection reads about
log2 n prefixes, so most groups are never sorted. Every prefix is the fully sorted order's prefix as a set, and its
running sum the same integer, so `enforce` decides, suppresses and reports exactly as with the full sort, which cost
most of a check under average risk, sample uniqueness and population uniqueness on ADULT.
"""
from __future__ import annotations

import numpy as np


class SuppressionOrder:
    """Classes `index` ordered by `sizes` (theirs, aligned with `index`), ties by `keys` (aligned, or None: class
    order alone), then by their order in `index` (ascending class numbers: the first record's)."""

    def __init__(self, index: np.ndarray, sizes: np.ndarray, keys: np.ndarray | None = None,
                 compiled=None) -> None:
        """`compiled`: engine.kernels' module where numba is loaded (the size sort is then a compiled counting sort,
        engine._suppression_numba.by_size), else None."""
        if compiled is not None and sizes.size:
            from .. import _suppression_numba

            by_size, self.sizes, starts = _suppression_numba.by_size(sizes)
        else:
            narrow = sizes.size == 0 or int(sizes.max()) < (1 << 16)
            by_size = np.argsort(sizes.astype(np.uint16) if narrow else sizes, kind="stable")   # radix when narrow
            self.sizes = np.asarray(sizes)[by_size]
            starts = np.concatenate([[0], np.flatnonzero(np.diff(self.sizes)) + 1, [self.sizes.size]])
        self.classes = np.asarray(index)[by_size]
        self._keys = None if keys is None else np.asarray(keys)[by_size]
        # size groups: [starts[g], starts[g + 1]); `_sorted[g]` once sorted by key
        self._starts = starts
        self._sorted = np.zeros(self._starts.size - 1, dtype=bool) if keys is not None else None

    @classmethod
    def of(cls, order: "SuppressionOrder | np.ndarray", sizes: np.ndarray) -> "SuppressionOrder":
        """An order as `enforce` takes it: given whole (classes, first to go first, and every class's size)."""
        if isinstance(order, SuppressionOrder):
            return order
        whole = cls.__new__(cls)
        whole.classes = np.asarray(order)
        whole.sizes = sizes[whole.classes]
        whole._keys = whole._sorted = None
        return whole

    @property
    def size(self) -> int:
        return int(self.classes.size)

    def first(self, count: int) -> np.ndarray:
        """The first `count` classes (as a set, those of the fully sorted order)."""
        if self._sorted is not None and 0 < count < self.classes.size:
            group = int(np.searchsorted(self._starts, count, side="right")) - 1
            if self._starts[group] != count and not self._sorted[group]:   # the prefix ends inside this group
                self._sort_group(group)
        return self.classes[:count]

    def array(self) -> np.ndarray:
        """The whole order, every size group sorted."""
        if self._sorted is not None:
            for group in np.flatnonzero(~self._sorted).tolist():
                self._sort_group(group)
        return self.classes

    def _sort_group(self, group: int) -> None:
        lo, hi = int(self._starts[group]), int(self._starts[group + 1])
        within = np.argsort(self._keys[lo:hi], kind="stable")
        self.classes[lo:hi] = self.classes[lo:hi][within]
        self._keys[lo:hi] = self._keys[lo:hi][within]
        self._sorted[group] = True

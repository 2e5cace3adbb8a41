"""The class-size histogram: everything the super-population models need to know about a sample.

The models only see how many classes have each size (F_i), never the classes themselves, so every model works on the
distinct sizes and their counts. That keeps each evaluation proportional to the number of distinct sizes (tens to
hundreds) rather than to the number of records or classes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SizeHistogram:
    """F_i for the distinct class sizes i of a sample (sizes ascending, counts > 0)."""

    sizes: np.ndarray    # distinct class sizes i, int64, ascending
    counts: np.ndarray   # F_i, int64

    @classmethod
    def from_class_sizes(cls, class_sizes: np.ndarray) -> "SizeHistogram":
        class_sizes = np.asarray(class_sizes, dtype=np.int64).ravel()
        if class_sizes.size and class_sizes.min() < 1:
            raise ValueError("class sizes must be positive")
        sizes, counts = np.unique(class_sizes, return_counts=True)
        return cls(sizes.astype(np.int64), counts.astype(np.int64))

    @classmethod
    def from_counts(cls, histogram: dict[int, int]) -> "SizeHistogram":
        """From {size: number of classes}, as written in papers and tests."""
        items = sorted((int(s), int(c)) for s, c in histogram.items() if c)
        return cls(np.array([s for s, _ in items], dtype=np.int64), np.array([c for _, c in items], dtype=np.int64))

    @property
    def n(self) -> int:
        """Records in the sample."""
        return int((self.sizes * self.counts).sum())

    @property
    def u(self) -> int:
        """Equivalence classes in the sample."""
        return int(self.counts.sum())

    def classes_of_size(self, size: int) -> int:
        hit = np.flatnonzero(self.sizes == size)
        return int(self.counts[hit[0]]) if hit.size else 0

    @property
    def c1(self) -> int:
        return self.classes_of_size(1)

    @property
    def c2(self) -> int:
        return self.classes_of_size(2)

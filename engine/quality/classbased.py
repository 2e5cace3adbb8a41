"""Quality models defined on the equivalence classes: Discernibility, AECS, and Precision (Sweeney).

Discernibility (Bayardo and Agrawal 2005): every record costs the size of its class, a suppressed record costs n;
normalized between n (all classes of size 1) and n^2. AECS (LeFevre et al. 2006): the average class size n / classes,
with all suppressed records counted as one class; normalized between 1 and n. Both bound their loss for every
generalization by the classes without suppression, since merging classes never lowers either quantity.

Precision (Sweeney 2002): each value costs level / height of its hierarchy, a suppressed value costs 1; the mean over
records and attributes. Its bound needs only the levels.
"""
from __future__ import annotations

import numpy as np

from ..encoding import EncodedTable
from .base import Levels, QualityModel


class Discernibility(QualityModel):
    name = "discernibility"

    def _normalize(self, value: float) -> float:
        n = float(self.n)
        return 0.0 if n <= 1 else float(min(1.0, max(0.0, (value - n) / (n * n - n))))

    def lower_bound(self, levels: Levels) -> float:
        return 0.0

    def lower_bound_from_classes(self, sizes: np.ndarray) -> float:
        return self._normalize(float(np.dot(sizes, sizes)))

    def loss(self, levels, codes, sizes, suppressed) -> float:
        kept = sizes[~suppressed].astype(float)
        value = float(np.dot(kept, kept)) + float(sizes[suppressed].sum()) * self.n
        return self._normalize(value)


class AECS(QualityModel):
    name = "aecs"

    def _normalize(self, classes: float) -> float:
        n = float(self.n)
        if n <= 1 or classes <= 0:
            return 0.0 if n <= 1 else 1.0
        return float(min(1.0, max(0.0, (n / classes - 1.0) / (n - 1.0))))

    def lower_bound(self, levels: Levels) -> float:
        return 0.0

    def lower_bound_from_classes(self, sizes: np.ndarray) -> float:
        return self._normalize(float(sizes.size))

    def loss(self, levels, codes, sizes, suppressed) -> float:
        classes = int((~suppressed).sum()) + (1 if suppressed.any() else 0)
        return self._normalize(float(classes))


class Precision(QualityModel):
    name = "precision"

    def __init__(self, table: EncodedTable) -> None:
        super().__init__(table)
        self._heights = np.array([max(a.hierarchy.max_level, 1) for a in table.attributes], dtype=float)

    def lower_bound(self, levels: Levels) -> float:
        return float((np.asarray(levels, dtype=float) / self._heights).mean())

    def loss_without_suppression(self, levels: Levels) -> float:
        return float((np.asarray(levels, dtype=float) / self._heights * 1.0 + 0.0).mean())

    def _attribute_array(self, levels, sizes, suppressed) -> np.ndarray:
        share_suppressed = float(sizes[suppressed].sum()) / self.n
        fraction = np.asarray(levels, dtype=float) / self._heights
        return fraction * (1.0 - share_suppressed) + share_suppressed

    def loss(self, levels, codes, sizes, suppressed) -> float:
        return float(self._attribute_array(levels, sizes, suppressed).mean())

    def attribute_losses(self, levels, codes, sizes, suppressed) -> dict[str, float]:
        values = self._attribute_array(levels, sizes, suppressed)
        return {a.name: float(v) for a, v in zip(self.table.attributes, values)}

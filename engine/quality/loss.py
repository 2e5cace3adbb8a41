"""Loss (Iyengar 2002), in the normalized form of ARX.

The share of a generalized value is the fraction of the hierarchy's rows beneath its label; a suppressed record costs
1 per attribute. Per attribute, S_a sums the shares over all n input records and is normalized between the original
data (every share 1/|D_a|, so S_a = n/|D_a|) and full suppression (S_a = n). Attributes are aggregated by geometric
mean (default), arithmetic mean or sum. The gs factor weighs generalization against suppression; 0.5 is neutral:
generalization costs are scaled by min(1, 2 gs), suppression costs by min(1, 2 (1 - gs)).
"""
from __future__ import annotations

import numpy as np

from ..encoding import EncodedTable
from .base import Levels, QualityModel


class Loss(QualityModel):
    name = "loss"

    def __init__(self, table: EncodedTable, aggregation: str = "geometric_mean", gs_factor: float = 0.5) -> None:
        super().__init__(table)
        if aggregation not in {"geometric_mean", "arithmetic_mean", "sum"}:
            raise ValueError(f"unknown aggregation {aggregation!r}")
        self.aggregation = aggregation
        self.generalization_weight = min(1.0, 2.0 * gs_factor)
        self.suppression_weight = min(1.0, 2.0 * (1.0 - gs_factor))
        self._bound_weight = min(self.generalization_weight, self.suppression_weight)
        n = float(self.n)
        self._floor = np.array([n / a.domain_size for a in table.attributes])
        self._span = np.array([n - f for f in self._floor])
        # S_a from generalization alone, per attribute and level.
        self._generalized_sum = [
            np.array([float(np.dot(a.counts[lv], a.share[lv])) for lv in range(a.levels)]) for a in table.attributes
        ]

    def _normalize(self, sums: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            loss = np.where(self._span > 0, (sums - self._floor) / self._span, 0.0)
        return np.clip(loss, 0.0, 1.0)

    def aggregate(self, per_attribute: np.ndarray) -> float:
        if self.aggregation == "geometric_mean":
            return float(np.prod(per_attribute + 1.0) ** (1.0 / per_attribute.size) - 1.0)
        if self.aggregation == "arithmetic_mean":
            return float(per_attribute.mean())
        return float(per_attribute.sum())

    def suppression_keys(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """ARX's per-class loss (`MetricMDNMLoss` for one class): size x share per attribute, un-normalized, through
        the configured aggregation, so classes are ordered exactly as ARX orders them for risk-based suppression."""
        values = np.empty((codes.shape[0], codes.shape[1]))
        for i, (attribute, level) in enumerate(zip(self.table.attributes, levels)):
            values[i] = sizes * attribute.share[level][codes[i]]
        if self.aggregation == "geometric_mean":
            return np.prod(values + 1.0, axis=0) ** (1.0 / values.shape[0]) - 1.0
        if self.aggregation == "arithmetic_mean":
            return values.mean(axis=0)
        return values.sum(axis=0)

    def loss_without_suppression(self, levels: Levels) -> float:
        sums = np.array([s[lv] for s, lv in zip(self._generalized_sum, levels)]) * self.generalization_weight + 0.0
        return self.aggregate(self._normalize(sums))

    def lower_bound(self, levels: Levels) -> float:
        sums = np.array([s[lv] for s, lv in zip(self._generalized_sum, levels)]) * self._bound_weight
        return self.aggregate(self._normalize(sums))

    def _attribute_array(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray, suppressed: np.ndarray) -> np.ndarray:
        n_suppressed = float(sizes[suppressed].sum())
        # Sum shares over whichever side has fewer classes: the kept classes directly, or all records minus the
        # suppressed ones (the all-records sum per level is precomputed).
        count_suppressed = int(np.count_nonzero(suppressed))
        from_kept = count_suppressed * 2 > suppressed.size
        side = ~suppressed if from_kept else suppressed
        side_codes, side_sizes = codes[:, side], sizes[side].astype(float)
        sums = np.empty(self.d)
        for i, (attribute, level) in enumerate(zip(self.table.attributes, levels)):
            side_share = float(np.dot(side_sizes, attribute.share[level][side_codes[i]])) if side_sizes.size else 0.0
            kept = side_share if from_kept else self._generalized_sum[i][level] - side_share
            sums[i] = self.generalization_weight * kept + self.suppression_weight * n_suppressed
        return self._normalize(sums)

    def loss(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray, suppressed: np.ndarray) -> float:
        return self.aggregate(self._attribute_array(levels, codes, sizes, suppressed))

    def attribute_losses(self, levels, codes, sizes, suppressed) -> dict[str, float]:
        values = self._attribute_array(levels, codes, sizes, suppressed)
        return {a.name: float(v) for a, v in zip(self.table.attributes, values)}

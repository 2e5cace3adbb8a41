"""Table-level re-identification risks measured on the sample itself, with ARX's semantics.

* Average re-identification risk (`AverageReidentificationRisk`): the mean over released records of 1 / class size,
  which equals classes / records; ARX tests 1 / (records / classes) <= threshold on the risk distribution (released
  classes, completely generalized classes left out, suppressed records excluded).
* Sample uniqueness (`SampleUniqueness`): the share of released records that are alone in their class, <= threshold.

Both are enforced like population uniqueness (engine.privacy.base.RiskBasedModel): when the released table fails,
whole classes are suppressed, smallest first, until it holds. ARX declares both monotone with and without
suppression. Over the classes they see that would be true (merging lowers the class count and never creates a
unique), but risk models do not see completely generalized classes (ARX's rule, engine.search.evaluator): when a
hierarchy reaches `*` below its top level, a generalization can hide a large class and leave small ones visible, so
a transformation holds and its generalization does not (tests/engine/test_privacy_monotonicity.py keeps such
tables). Both therefore declare no monotonicity, and the search checks what ARX would prune.
"""
from __future__ import annotations

import numpy as np

from .base import RiskBasedModel
from .registry import register


class AverageRiskModel(RiskBasedModel):
    name = "average_risk"
    monotone_with_suppression = False
    monotone_without_suppression = False

    def __init__(self, threshold: float) -> None:
        super().__init__()
        if not 0 < threshold <= 1:
            raise ValueError("the average risk threshold is in (0, 1]")
        self.threshold = float(threshold)

    @staticmethod
    def measure(kept_sizes: np.ndarray) -> float:
        records, classes = float(kept_sizes.sum()), float(kept_sizes.size)
        return 1.0 / (records / classes)

    def assess(self, kept_sizes: np.ndarray) -> tuple[bool, dict | None]:
        risk = self.measure(kept_sizes)
        return risk <= self.threshold, {"average_risk": risk, "classes": int(kept_sizes.size),
                                        "records": int(kept_sizes.sum())}

    def describe(self) -> dict:
        return {"model": self.name, "threshold": self.threshold}


class SampleUniquenessModel(RiskBasedModel):
    name = "sample_uniqueness"
    monotone_with_suppression = False
    monotone_without_suppression = False

    def __init__(self, threshold: float) -> None:
        super().__init__()
        if not 0 <= threshold <= 1:
            raise ValueError("the sample uniqueness threshold is in [0, 1]")
        self.threshold = float(threshold)

    @staticmethod
    def measure(kept_sizes: np.ndarray) -> float:
        return float((kept_sizes == 1).sum()) / float(kept_sizes.sum())

    def assess(self, kept_sizes: np.ndarray) -> tuple[bool, dict | None]:
        share = self.measure(kept_sizes)
        return share <= self.threshold, {"sample_uniqueness": share, "records": int(kept_sizes.sum())}

    def describe(self) -> dict:
        return {"model": self.name, "threshold": self.threshold}


@register("average_risk")
def _average_from_spec(spec, source: str | None, index: int, context: dict | None = None) -> AverageRiskModel:
    return AverageRiskModel(spec.threshold)


@register("sample_uniqueness")
def _uniqueness_from_spec(spec, source: str | None, index: int, context: dict | None = None) -> SampleUniquenessModel:
    return SampleUniquenessModel(spec.threshold)

"""Population uniqueness as a privacy model, with risk-based suppression (Prasser et al., JBHI 2018, section VI).

The criterion holds when the estimated share of the population that is unique (engine.risk) is at most the
threshold. Unlike k-anonymity it is not decided per class and it is not monotone, so it runs after the class-level
models on what they left: when the estimate is too high, whole classes are suppressed in a fixed order (smallest
classes first, then the most specific ones, i.e. those whose records lose least under the quality model, then first
appearance in the input), and the shortest prefix of that order that meets the threshold is found by binary search
over the prefix length, evaluating the risk model only at the probed cut points.

A model that finds no solution counts as "criterion not met": the transformation is not a solution (fail closed).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..quality.base import QualityModel
from ..search import Evaluation


def class_specificity_loss(quality: QualityModel, levels, codes: np.ndarray) -> np.ndarray:
    """Per class, the mean hierarchy share of its generalized values: small means specific (risky) classes."""
    table = quality.table
    total = np.zeros(codes.shape[1])
    for i, (attribute, level) in enumerate(zip(table.attributes, levels)):
        total += attribute.share[level][codes[i]]
    return total / max(len(table.attributes), 1)


@dataclass
class PopulationUniquenessModel:
    threshold: float
    population_size: float
    estimator: str = "dankar"
    evaluations: int = 0   # risk-model evaluations, for benchmarks

    def estimate(self, kept_sizes: np.ndarray):
        from ..risk import population_uniqueness

        self.evaluations += 1
        return population_uniqueness(kept_sizes, self.population_size, estimator=self.estimator)

    def meets(self, estimate) -> bool:
        return bool(estimate.solved) and estimate.population_uniqueness <= self.threshold

    def __call__(self, evaluation: Evaluation, quality: QualityModel, max_suppressed: int) -> Evaluation:
        sizes, suppressed = evaluation.sizes, evaluation.suppressed
        kept = np.flatnonzero(~suppressed)
        if kept.size == 0:
            evaluation.details["population_uniqueness"] = None
            return evaluation  # everything suppressed: nothing is released, so nothing is unique
        estimate = self.estimate(sizes[kept])
        if self.meets(estimate):
            evaluation.details["population_uniqueness"] = estimate.to_dict()
            return evaluation
        # Risk-based suppression order among the kept classes.
        specificity = class_specificity_loss(quality, evaluation.levels, evaluation.codes[:, kept])
        order = kept[np.lexsort((kept, specificity, sizes[kept]))]
        suppressed_records = np.cumsum(sizes[order]) + evaluation.suppressed_records
        allowed = int(np.searchsorted(suppressed_records, max_suppressed, side="right"))  # longest prefix allowed
        lo, hi = 1, allowed
        found, best_estimate = None, None
        while lo <= hi:
            mid = (lo + hi) // 2
            remaining = sizes[order[mid:]]
            candidate = self.estimate(remaining) if remaining.size else None
            if candidate is None or self.meets(candidate):
                found, best_estimate, hi = mid, candidate, mid - 1
            else:
                lo = mid + 1
        if found is None:
            evaluation.solution = False
            evaluation.details["population_uniqueness"] = estimate.to_dict()
            return evaluation
        new_suppressed = suppressed.copy()
        new_suppressed[order[:found]] = True
        evaluation.suppressed = new_suppressed
        evaluation.suppressed_records = int(sizes[new_suppressed].sum())
        evaluation.details["population_uniqueness"] = best_estimate.to_dict() if best_estimate is not None else None
        return evaluation


def population_uniqueness_model(spec, source: str | None, index: int) -> PopulationUniquenessModel:
    from ..errors import InputError
    from ..risk import resolve_population

    try:
        size = resolve_population(spec.population)
    except InputError as exc:
        raise InputError(source, f"privacy[{index}].population", exc.problem) from None
    return PopulationUniquenessModel(spec.threshold, size, spec.estimator)

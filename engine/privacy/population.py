"""Population uniqueness as a privacy model (Prasser et al., JBHI 2018, section VI), with risk-based suppression.

The model holds when the estimated share of the population that is unique (engine.risk) is at most the threshold;
with ARX's semantics an estimate of exactly 0 holds only when the sample has no uniques, an estimator without a
solution means "does not hold" (fail closed), and Dankar's rule does not fall back to Zayatz when Pitman has no
solution (`PopulationUniqueness` calls `getFractionOfUniqueTuplesDankar(false)`; risk analysis does fall back). It is
decided on the whole released table and is monotone neither with nor without suppression (Pitman's estimate can rise
when classes merge), so the search may use no predictive property from it. When it does not hold, classes are
suppressed in the quality model's order (`QualityModel.suppression_keys`) through `RiskBasedModel.enforce`.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from .base import RiskBasedModel
from .registry import register


class PopulationUniquenessModel(RiskBasedModel):
    name = "population_uniqueness"

    def __init__(self, threshold: float, population_size: float, estimator: str = "dankar") -> None:
        super().__init__()
        self.threshold = float(threshold)
        self.population_size = float(population_size)
        self.estimator = estimator

    def assess(self, kept_sizes: np.ndarray) -> tuple[bool, dict | None]:
        from ..risk import population_uniqueness

        estimate = population_uniqueness(kept_sizes, self.population_size, estimator=self.estimator)
        pu = estimate.population_uniqueness
        holds = bool(estimate.solved) and pu is not None and (
            0 < pu <= self.threshold or (pu == 0 and estimate.sample_uniques == 0))
        if estimate.parameters.get("fallback_from") == "pitman":
            holds = False   # ARX's criterion uses Dankar's rule without the Zayatz fallback (risk analysis uses it)
        return holds, estimate.to_dict()

    def describe(self) -> dict:
        return {"model": self.name, "threshold": self.threshold, "population_size": self.population_size,
                "estimator": self.estimator}


@register("population_uniqueness")
def population_uniqueness_model(spec, source: str | None, index: int, context: dict | None = None
                                ) -> PopulationUniquenessModel:
    from ..risk import resolve_population

    try:
        size = resolve_population(spec.population)
    except InputError as exc:
        raise InputError(source, f"privacy[{index}].population", exc.problem) from None
    return PopulationUniquenessModel(spec.threshold, size, spec.estimator)

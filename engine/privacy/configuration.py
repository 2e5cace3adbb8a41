"""What a set of privacy models, a suppression limit and a quality model let the search assume.

Kohlmayer et al. (2015) sort privacy problems into three kinds, and ARX's `FLASHAlgorithm.create` decides the same
way from each model's declarations:

* privacy FULL: every model is monotone under the limit, so "satisfies the models" is inherited by generalizations
  and "violates them" by specializations;
* privacy PARTIAL: not every model is, but together they imply a smallest class size m > 1, and m-anonymity is
  monotone even with suppression (merging a class of at least m records with any other gives one of at least m);
* privacy NONE: nothing predictive holds, only the quality bound prunes.

Quality is FULL when the quality model is monotone under the limit (without suppression every model here is), else
NONE.
"""
from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

from .base import ClassModel, PrivacyModel, RiskBasedModel


class Monotonicity(str, enum.Enum):
    FULL = "full"
    PARTIAL = "partial"
    NONE = "none"


@dataclass(frozen=True)
class PrivacyConfiguration:
    models: tuple[PrivacyModel, ...]
    suppression_limit: float

    def __init__(self, models: Sequence[PrivacyModel], suppression_limit: float) -> None:
        if not 0 <= suppression_limit <= 1:
            raise ValueError("the suppression limit is a fraction in [0, 1]")
        object.__setattr__(self, "models", tuple(models))
        object.__setattr__(self, "suppression_limit", float(suppression_limit))

    @property
    def class_models(self) -> list[ClassModel]:
        return [m for m in self.models if isinstance(m, ClassModel)]

    @property
    def risk_models(self) -> list[RiskBasedModel]:
        return [m for m in self.models if isinstance(m, RiskBasedModel)]

    @property
    def minimal_class_size(self) -> int:
        return max((m.minimal_class_size for m in self.models), default=1)

    def max_suppressed(self, records: int) -> int:
        return int(math.floor(self.suppression_limit * records + 1e-9))

    @property
    def privacy_monotonicity(self) -> Monotonicity:
        if self.models and all(m.is_monotone(self.suppression_limit) for m in self.models):
            return Monotonicity.FULL
        if self.minimal_class_size > 1:
            return Monotonicity.PARTIAL
        return Monotonicity.NONE

    def quality_monotonicity(self, quality) -> Monotonicity:
        return Monotonicity.FULL if quality.is_monotone(self.suppression_limit) else Monotonicity.NONE

    @property
    def risk_evaluations(self) -> int:
        return sum(m.evaluations for m in self.risk_models)

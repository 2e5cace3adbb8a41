"""Per-record re-identification risk as a privacy model: "no released record above r", "at most e expected
re-identifications" (engine.risk.individual, the negative-binomial model of Benedetti and Franconi with equal
sampling weights N / n, where n is the number of released records).

Decided on the whole released table like population uniqueness, and enforced the same way: when it does not hold,
whole classes are suppressed in the quality model's order until it does (engine.privacy.base.RiskBasedModel). With
equal weights a record's risk falls with its class size, so merging classes lowers every risk; but suppression
lowers n and so raises p = n / N for every key, and risk models do not see completely generalized classes (see
engine.privacy.sample_risk): the model declares no monotonicity, and the search checks what it would prune.
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from .base import RiskBasedModel
from .registry import register


class IndividualRiskModel(RiskBasedModel):
    name = "individual_risk"
    monotone_with_suppression = False
    monotone_without_suppression = False

    def __init__(self, population_size: float, max_record_risk: float | None = None,
                 max_expected_reidentifications: float | None = None) -> None:
        super().__init__()
        if max_record_risk is None and max_expected_reidentifications is None:
            raise ValueError("individual_risk needs max_record_risk, max_expected_reidentifications or both")
        if max_record_risk is not None and not 0 < max_record_risk <= 1:
            raise ValueError("max_record_risk is in (0, 1]")
        if max_expected_reidentifications is not None and not max_expected_reidentifications >= 0:
            raise ValueError("max_expected_reidentifications is at least 0")
        self.population_size = float(population_size)
        self.max_record_risk = None if max_record_risk is None else float(max_record_risk)
        self.max_expected_reidentifications = (None if max_expected_reidentifications is None
                                               else float(max_expected_reidentifications))

    def assess(self, kept_sizes: np.ndarray) -> tuple[bool, dict | None]:
        figures = measure(kept_sizes, self.population_size, self.max_record_risk)
        holds = within(figures, self.max_record_risk, self.max_expected_reidentifications)
        return holds, figures

    def describe(self) -> dict:
        return {"model": self.name, "population_size": self.population_size, "max_record_risk": self.max_record_risk,
                "max_expected_reidentifications": self.max_expected_reidentifications}


def measure(kept_sizes: np.ndarray, population_size: float, max_record_risk: float | None = None) -> dict:
    """The figures a limit is checked against: the highest record risk, the expected re-identifications, the
    global risk and, with a record limit, how many records are above it."""
    from ..risk.individual import key_risk, records_above

    sizes = np.asarray(kept_sizes, dtype=np.int64)
    n = int(sizes.sum())
    if n == 0:
        figures = {"model": "negative_binomial", "records": 0, "max_risk": 0.0, "expected_reidentifications": 0.0,
                   "global_risk": 0.0}
        if max_record_risk is not None:
            figures["records_above_limit"] = 0
        return figures
    risk = key_risk(sizes, population_size)
    expected = float(np.dot(sizes, risk))
    figures = {"model": "negative_binomial", "records": n, "max_risk": float(risk.max()),
               "expected_reidentifications": expected, "global_risk": expected / n}
    if max_record_risk is not None:
        figures["records_above_limit"] = records_above(sizes, risk, max_record_risk)
    return figures


def within(figures: dict, max_record_risk: float | None, max_expected_reidentifications: float | None) -> bool:
    """Whether the figures meet both limits (a limit of None is no limit; a NaN never meets one: fail closed)."""
    if max_record_risk is not None and not figures["max_risk"] <= max_record_risk:
        return False
    if max_expected_reidentifications is not None and not (
            figures["expected_reidentifications"] <= max_expected_reidentifications):
        return False
    return True


@register("individual_risk")
def individual_risk_model(spec, source: str | None, index: int, context: dict | None = None) -> IndividualRiskModel:
    from ..risk import resolve_population

    try:
        size = float(resolve_population(spec.population))
    except InputError as exc:
        raise InputError(source, f"privacy[{index}].population", exc.problem) from None
    records = (context or {}).get("records")
    if records is not None:
        from ..sitegate import check_population

        check_population(size, int(records), source, f"privacy[{index}].population")
    return IndividualRiskModel(size, spec.max_record_risk, spec.max_expected_reidentifications)

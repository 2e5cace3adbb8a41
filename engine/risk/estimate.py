"""One entry point for every super-population model, Dankar's rule for choosing among them, and `calibrated`
(engine.risk.calibrated: the smallest of Pitman, Zayatz and SNB plus ten sample records' worth of population uniques,
measured never below the truth on benchmarks/risk_accuracy.py).

Dankar et al. (BMC Med Inform Decis Mak 2012) found Pitman most accurate for small sampling fractions and the
smaller of Zayatz and SNB otherwise. Whichever model is chosen is reported, because an auditor must be able to
reproduce the number. A model without a solution yields ``solved=False``; nothing here substitutes zero.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields


from .calibrated import calibrated_uniques
from .histogram import SizeHistogram
from .pitman_arx import arx_pitman_uniques
from .snb import fit_snb
from .zayatz import zayatz_uniques

ESTIMATORS = ("pitman", "zayatz", "snb", "dankar", "calibrated")
DANKAR_PITMAN_MAX_FRACTION = 0.1


@dataclass
class RiskEstimate:
    """Estimated population uniqueness of a sample; stable field names (they go into manifest.json)."""

    estimator: str
    model_used: str | None
    solved: bool
    population_size: float
    sampling_fraction: float
    records: int
    sample_uniques: int
    sample_uniqueness: float
    population_uniques: float | None
    population_uniqueness: float | None
    parameters: dict = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict:
        """`dataclasses.asdict`'s result (nested dicts, lists and tuples copied), made without its deep copy of every
        number: a search under population uniqueness asks for one per risk estimate (3 % of a genetic run on
        MACH2019)."""
        return {item.name: _copied(getattr(self, item.name)) for item in fields(self)}

    @property
    def alpha(self) -> float | None:
        return self.parameters.get("alpha")

    @property
    def theta(self) -> float | None:
        return self.parameters.get("theta")


def _copied(value):
    """A copy of plain containers as asdict makes it; numbers, strings and None are shared (immutable)."""
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is dict:
        return {_copied(k): _copied(v) for k, v in value.items()}
    if type(value) in (list, tuple):
        return type(value)(_copied(v) for v in value)
    return copy.deepcopy(value)


def _estimate(histogram: SizeHistogram, population_size: float, model: str) -> tuple[float | None, dict]:
    if model == "pitman":
        return arx_pitman_uniques(histogram, population_size)
    if model == "zayatz":
        return zayatz_uniques(histogram, population_size), {}
    if model == "snb":
        fit = fit_snb(histogram, population_size)
        return fit.population_uniques if fit.solved else None, {
            "alpha": fit.alpha, "beta": fit.beta, "non_empty_classes": fit.non_empty_classes}
    raise ValueError(f"unknown estimator {model!r}; expected one of {', '.join(ESTIMATORS)}")


def _dankar(histogram: SizeHistogram, population_size: float, f: float) -> tuple[str | None, float | None, dict]:
    if f <= DANKAR_PITMAN_MAX_FRACTION:
        uniques, parameters = _estimate(histogram, population_size, "pitman")
        if uniques is not None:
            return "pitman", uniques, parameters
        uniques, parameters = _estimate(histogram, population_size, "zayatz")
        return "zayatz", uniques, {**parameters, "fallback_from": "pitman"}
    zayatz, _ = _estimate(histogram, population_size, "zayatz")
    snb, snb_parameters = _estimate(histogram, population_size, "snb")
    valid = [(value, name, params) for value, name, params in
             ((zayatz, "zayatz", {}), (snb, "snb", snb_parameters)) if value is not None]
    if not valid:
        return None, None, {}
    value, name, params = min(valid, key=lambda item: item[0])
    return name, value, params


def population_uniqueness(class_sizes, population_size: float, estimator: str = "dankar") -> RiskEstimate:
    """Estimate the share of the population that is unique from the sizes of the sample's equivalence classes."""
    histogram = class_sizes if isinstance(class_sizes, SizeHistogram) else SizeHistogram.from_class_sizes(class_sizes)
    if estimator not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; expected one of {', '.join(ESTIMATORS)}")
    population_size = float(population_size)
    n, c1 = histogram.n, histogram.c1
    if n > population_size:
        raise ValueError(f"sample of {n} records is larger than the population ({population_size:g})")
    f = n / population_size
    base = dict(estimator=estimator, population_size=population_size, sampling_fraction=f, records=n,
                sample_uniques=c1, sample_uniqueness=c1 / n if n else 0.0)
    if c1 == 0:
        # Without sample uniques no released record can be unique in the population.
        return RiskEstimate(model_used=estimator, solved=True, population_uniques=0.0, population_uniqueness=0.0,
                            note="no sample uniques", **base)
    if estimator == "dankar":
        model, uniques, parameters = _dankar(histogram, population_size, f)
    elif estimator == "calibrated":
        model, uniques, parameters = calibrated_uniques(histogram, population_size)
    else:
        model = estimator
        uniques, parameters = _estimate(histogram, population_size, estimator)
    solved = uniques is not None
    return RiskEstimate(model_used=model, solved=solved, population_uniques=uniques,
                        population_uniqueness=uniques / population_size if solved else None,
                        parameters=parameters, note=None if solved else f"{model or estimator}: no solution", **base)

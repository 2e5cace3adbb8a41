"""k-map (Sweeney) and delta-presence (Nergiz et al. 2007): models that look past the sample to the population.

* k-map with a research subset: the input table is the population and the subset is what is released; every
  released class must match at least k records of the population table (ARX: `entry.pcount >= k`). Monotone with and
  without suppression (a merge only grows the population count), implying no class size.
* k-map with an estimator (El Emam and Dankar 2008): no population table, only its size N. ARX turns k-map into
  k'-anonymity once, with k' the smallest class size at which a class of the sample is, at significance alpha,
  unlikely to match fewer than k people: with lambda = (n / N) k, Poisson (D3, Pannekoek 1999): k' = 1 + the first
  c with P(X <= c - 1) >= 1 - alpha (`calculateKPoisson` counts c from 0 and returns c + 1 after the increment);
  zero-truncated Poisson (D4): the first c >= 2 where the truncated CDF up to c - 1 reaches 1 - alpha. Either search
  stops at k (then k' = k + 1 or k, as ARX's loop gives it), and k' is capped by n and by k.
* delta-presence with a research subset: for every class, delta_min <= (subset records) / (population records)
  <= delta_max. Classes of the population table with no subset record have delta 0; when that is below delta_min they
  cannot be suppressed (they release nothing) and the transformation fails, as in ARX's `HashGroupify`. Monotone
  without suppression (a merged ratio lies between the merged ones), not with it.
"""
from __future__ import annotations

import numpy as np
from scipy.stats import poisson

from .base import ClassModel
from .registry import register


def derived_k(k: int, sample_size: int, population_size: float, estimator: str, significance: float) -> int:
    """ARX's k' for k-map with an estimator (`KMap.initialize`)."""
    lam = (sample_size / population_size) * k
    threshold = 1.0 - significance
    if estimator == "poisson":
        counter, value = 0, 0.0
        while value < threshold:
            value = float(poisson.cdf(counter, lam))
            counter += 1
            if counter >= k:
                break
        result = counter + 1
    elif estimator == "zero_truncated_poisson":
        truncated = 1.0 - float(poisson.pmf(0, lam))
        counter, value = 1, 0.0
        while value < threshold:
            value += float(poisson.pmf(counter, lam)) / truncated
            counter += 1
            if counter >= k:
                break
        result = counter
    else:
        raise ValueError(f"unknown estimator {estimator!r}")
    return min(k, min(result, sample_size))


class KMapModel(ClassModel):
    name = "k_map"
    monotone_with_suppression = True
    monotone_without_suppression = True

    def __init__(self, k: int, population_size: float | None = None, estimator: str | None = None,
                 significance: float = 0.01, sample_size: int | None = None) -> None:
        if k < 1:
            raise ValueError("k must be at least 1")
        self.k = int(k)
        self.estimator = estimator
        self.population_size = population_size
        self.significance = float(significance)
        self.derived_k: int | None = None
        if estimator is not None:
            if population_size is None or sample_size is None:
                raise ValueError("k-map with an estimator needs the population and sample sizes")
            self.derived_k = derived_k(self.k, sample_size, population_size, estimator, self.significance)
            self.minimal_class_size = self.derived_k

    @property
    def uses_population_table(self) -> bool:
        return self.estimator is None

    def violating(self, classes) -> np.ndarray:
        if self.derived_k is not None:
            return classes.sizes < self.derived_k
        return classes.population_counts().sizes < self.k

    def describe(self) -> dict:
        out = {"model": self.name, "k": self.k}
        if self.estimator is not None:
            out.update(estimator=self.estimator, population_size=self.population_size,
                       significance=self.significance, derived_k=self.derived_k)
        return out


class DeltaPresenceModel(ClassModel):
    name = "delta_presence"
    monotone_with_suppression = False
    monotone_without_suppression = True
    uses_population_table = True

    def __init__(self, delta_min: float, delta_max: float) -> None:
        if not 0 <= delta_min <= delta_max <= 1:
            raise ValueError("0 <= delta_min <= delta_max <= 1")
        self.delta_min = float(delta_min)
        self.delta_max = float(delta_max)

    def presence(self, classes) -> np.ndarray:
        """Per class, subset records / population records."""
        return classes.sizes / classes.population_counts().sizes.astype(np.float64)

    def violating(self, classes) -> np.ndarray:
        delta = self.presence(classes)
        return ~((delta >= self.delta_min) & (delta <= self.delta_max))

    def blocks_release(self, classes) -> bool:
        return self.delta_min > 0 and classes.population_counts().unmatched_sizes.size > 0

    def describe(self) -> dict:
        return {"model": self.name, "delta_min": self.delta_min, "delta_max": self.delta_max}


@register("k_map")
def _kmap_from_spec(spec, source: str | None, index: int, context: dict | None = None) -> KMapModel:
    if spec.subset is not None:
        return KMapModel(spec.k)
    from ..errors import InputError
    from ..risk import resolve_population

    try:
        size = float(resolve_population(spec.population))
    except InputError as exc:
        raise InputError(source, f"privacy[{index}].population", exc.problem) from None
    records = (context or {}).get("records")
    if records is None:
        raise InputError(source, f"privacy[{index}]", "k-map with an estimator needs the table's size")
    return KMapModel(spec.k, size, spec.estimator, spec.significance, records)


@register("delta_presence")
def _presence_from_spec(spec, source: str | None, index: int, context: dict | None = None) -> DeltaPresenceModel:
    return DeltaPresenceModel(spec.delta_min, spec.delta_max)

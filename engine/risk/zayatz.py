"""Zayatz (1991): the share of sample uniques that are population uniques, from hypergeometric draws.

The sample's class-size distribution stands in for the population's: a sample unique came from a population class of
size i with weight (F_i / u) P(i), where P(i) is the probability that a population class of size i contributes exactly
one record to a sample of n drawn from N. P(i) / P(1) is a product of i - 1 factors, so it is accumulated in log space
once up to the largest class size instead of through binomial coefficients of N (which would cancel catastrophically
for N in the hundreds of millions).
"""
from __future__ import annotations

import numpy as np

from .histogram import SizeHistogram


def single_draw_ratio(sizes: np.ndarray, n: float, population_size: float) -> np.ndarray:
    """P(i) / P(1) for each class size i: i * prod_{j=1}^{i-1} (N - n - j + 1) / (N - j)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    largest = int(sizes.max()) if sizes.size else 1
    j = np.arange(1, largest, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        factors = (population_size - n - j + 1.0) / (population_size - j)
        logs = np.where(factors > 0, np.log(np.where(factors > 0, factors, 1.0)), -np.inf)
    cumulative = np.concatenate(([0.0], np.cumsum(logs)))
    return sizes * np.exp(cumulative[sizes - 1])


def zayatz_uniques(histogram: SizeHistogram, population_size: float) -> float | None:
    """Estimated population uniques, c1 / f times the conditional share; None when undefined."""
    c1, n, u = histogram.c1, float(histogram.n), float(histogram.u)
    if c1 == 0:
        return 0.0
    if not population_size >= n:
        return None
    f = n / population_size
    ratio = single_draw_ratio(histogram.sizes, n, population_size)
    denominator = float((histogram.counts / u) @ ratio)
    share = (c1 / u) / denominator   # P(1) cancels: both sides were divided by it
    value = c1 / f * share
    return value if np.isfinite(value) and 0.0 <= value <= population_size else None

"""Per-record re-identification risk under the negative-binomial model (Benedetti and Franconi), as in mu-Argus and
sdcMicro's `indivRisk` / `measure_risk`.

A record in key (equivalence class) k is re-identified by an intruder who matches its key against the population
and picks one of the F_k population units that share it at random: its risk is E(1/F_k | f_k), given the sample
frequency f_k. Benedetti and Franconi take F_k | f_k as f_k plus a negative binomial with success probability
p_k = f_k / F^_k, where F^_k is the sum of the sampling weights in the key; with equal weights w = N / n every key has
p_k = n / N, the sampling fraction. Then

    r_k = sum_{h >= f_k} (1/h) * C(h-1, f_k-1) * p^f_k * (1-p)^(h-f_k)

which has closed forms (Franconi and Polettini 2004; q = 1 - p)

    f = 1:  r = p/q * log(1/p)
    f = 2:  r = p/q^2 * (q + p log p)
    f = 3:  r = p/(2 q^3) * (q (1 - 3p) - 2 p^2 log p)

and for every f the hypergeometric series r = (p/f) * 2F1(1, 1; f+1; q) = (p/f) * sum_j j! q^j / ((f+1)...(f+j)),
used here for f >= 4 and wherever the closed forms lose digits to cancellation (q close to 0). mu-Argus (manual 4.1)
sums seven terms of that series; sdcMicro's `indivRisk` (method "approx", its default) and `measure_risk` take
p / (f - q) for f >= 3, and `measure_risk` also lowers p by 0.0001 first. Summing the series to the end gives the
exact expectation, slightly below p / (f - q) (a relative gap of about p q / f^2 wherever measured). A key whose weights add up to its sample frequency (p = 1: the sample is the
population there) has r = 1/f exactly, as in sdcMicro.

The global measures are those of sdcMicro's `measure_risk`: the expected number of re-identifications, the sum of the
per-record risks (sum over keys of f_k r_k), and the global risk, that sum as a share of the records. The records
"with a higher risk than the main part of the data" follow sdcMicro's rule: risk above median + 3 MAD (the MAD
scaled to the normal's standard deviation, as R's `mad`) and above 0.1.
"""
from __future__ import annotations

import numpy as np
from scipy.special import hyp2f1

# Below this q the closed forms for f = 2 and 3 cancel badly (q^2, q^3 in the denominators); the series is exact.
_CLOSED_FORM_MIN_Q = 1e-2
# From this f on the series is summed here (its terms fall at least as fast as 8! j! / (j+8)!, so a few hundred
# terms reach double precision whatever q); scipy's hyp2f1 returns NaN for large f (c = f + 1 in the hundreds).
_SUMMED_FROM_F = 8
_SERIES_TERMS = 2000
# Histogram of per-record risk: upper edges of the intervals ]lower, upper], lowest first.
RISK_BINS = (0.0, 0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
HIGH_RISK_FLOOR = 0.1   # sdcMicro: a record is "high risk" only above this, whatever the median and MAD say


def equal_weight_totals(sizes: np.ndarray, population: float) -> np.ndarray:
    """F^_k with equal sampling weights w = N / n: each key's sample frequency times N / n."""
    sizes = np.asarray(sizes, dtype=np.float64)
    n = float(sizes.sum())
    if n <= 0:
        return sizes.copy()
    if not np.isfinite(population) or population < n:
        raise ValueError(f"a population of {population!r} cannot hold the {n:g} records of the sample")
    return sizes * (float(population) / n)


def negative_binomial_risk(f: np.ndarray, weight_totals: np.ndarray) -> np.ndarray:
    """E(1/F_k | f_k) for every key, from its sample frequency f_k >= 1 and the sum of its weights F^_k >= f_k."""
    f = np.asarray(f, dtype=np.float64)
    totals = np.asarray(weight_totals, dtype=np.float64)
    if f.shape != totals.shape:
        raise ValueError("one weight total per key")
    if f.size and (f.min() < 1 or np.any(totals < f * (1 - 1e-12))):
        raise ValueError("every key needs f_k >= 1 and a weight total F^_k >= f_k")
    p = np.minimum(f / totals, 1.0) if f.size else f
    q = 1.0 - p
    risk = np.empty_like(f)
    census = q <= 0.0
    risk[census] = 1.0 / f[census]
    rest = ~census
    closed = rest & (q >= _CLOSED_FORM_MIN_Q)
    with np.errstate(divide="ignore", invalid="ignore"):
        one = closed & (f == 1)
        risk[one] = p[one] / q[one] * -np.log(p[one])
        two = closed & (f == 2)
        risk[two] = p[two] / q[two] ** 2 * (q[two] + p[two] * np.log(p[two]))
        three = closed & (f == 3)
        pt, qt = p[three], q[three]
        risk[three] = pt / (2 * qt ** 3) * (qt * (1 - 3 * pt) - 2 * pt ** 2 * np.log(pt))
    series = rest & ~(one | two | three)
    small = series & (f < _SUMMED_FROM_F)
    risk[small] = p[small] / f[small] * hyp2f1(1.0, 1.0, f[small] + 1.0, q[small])
    large = series & (f >= _SUMMED_FROM_F)
    risk[large] = p[large] / f[large] * _series_2f1_11(f[large], q[large])
    return risk


def _series_2f1_11(f: np.ndarray, q: np.ndarray) -> np.ndarray:
    """2F1(1, 1; f+1; q) = sum_j j! q^j / ((f+1)...(f+j)) for f >= 8 and 0 <= q < 1, summed term by term (every term
    positive, no cancellation) until the terms no longer change the sums; vectorized over keys."""
    total = np.ones_like(f)
    term = np.ones_like(f)
    active = np.arange(f.size)
    for j in range(_SERIES_TERMS):
        term[active] *= q[active] * (j + 1) / (f[active] + 1 + j)
        total[active] += term[active]
        active = active[term[active] > total[active] * 1e-17]
        if active.size == 0:
            return total
    raise ArithmeticError("the negative-binomial series did not converge")   # not reached for f >= 8, q < 1


def key_risk(sizes: np.ndarray, population: float) -> np.ndarray:
    """Per-key negative-binomial risk with equal weights N / n (the records of key k share risk[k]). Every key has
    the same p = n / N, so the risk is computed once per distinct class size."""
    sizes = np.asarray(sizes, dtype=np.int64)
    if sizes.size == 0:
        return np.zeros(0)
    distinct, inverse = np.unique(sizes, return_inverse=True)
    n = float(sizes.sum())
    if not np.isfinite(population) or population < n:
        raise ValueError(f"a population of {population!r} cannot hold the {n:g} records of the sample")
    return negative_binomial_risk(distinct, distinct * (float(population) / n))[inverse]


def high_risk_threshold(sizes: np.ndarray, risk: np.ndarray) -> float:
    """sdcMicro's bound for "higher risk than the main part of the data": max(median + 3 MAD, 0.1), over records."""
    if risk.size == 0:
        return HIGH_RISK_FLOOR
    order = np.argsort(risk, kind="stable")
    values, weights = risk[order], np.asarray(sizes, dtype=np.int64)[order]
    median = _weighted_median(values, weights)
    deviations = np.abs(values - median)
    by_deviation = np.argsort(deviations, kind="stable")
    mad = 1.4826 * _weighted_median(deviations[by_deviation], weights[by_deviation])
    return max(median + 3 * mad, HIGH_RISK_FLOOR)


def _weighted_median(sorted_values: np.ndarray, weights: np.ndarray) -> float:
    """Median of the records (each value repeated `weights` times), as R's median: the mean of the two middle ones
    when the count is even."""
    cumulative = np.cumsum(weights)
    total = int(cumulative[-1])
    lower = sorted_values[np.searchsorted(cumulative, (total - 1) // 2, side="right")]
    upper = sorted_values[np.searchsorted(cumulative, total // 2, side="right")]
    return float((lower + upper) / 2)


def risk_histogram(sizes: np.ndarray, risk: np.ndarray, bins: tuple[float, ...] = RISK_BINS) -> list[dict]:
    """Records per risk interval ]lower, upper] (the first interval is [0, upper]), lowest risk first."""
    sizes = np.asarray(sizes, dtype=np.int64)
    n = int(sizes.sum())
    edges = np.asarray(bins, dtype=np.float64)
    index = np.clip(np.searchsorted(edges, risk, side="left") - 1, 0, edges.size - 2)
    counts = np.bincount(index, weights=sizes, minlength=edges.size - 1).astype(np.int64)
    return [{"lower": float(lo), "upper": float(hi), "records": int(c), "share": (int(c) / n) if n else 0.0}
            for lo, hi, c in zip(edges[:-1], edges[1:], counts)]


def summarize(sizes: np.ndarray, risk: np.ndarray) -> dict:
    """The global measures of per-key risks `risk` over keys of `sizes` records each (sdcMicro's measure_risk)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    n = int(sizes.sum())
    if n == 0:
        return {"records": 0, "expected_reidentifications": 0.0, "global_risk": 0.0, "max_risk": 0.0,
                "mean_risk": 0.0, "median_risk": 0.0, "high_risk_threshold": HIGH_RISK_FLOOR,
                "high_risk_records": 0, "histogram": risk_histogram(sizes, risk)}
    expected = float(np.dot(sizes, risk))
    threshold = high_risk_threshold(sizes, risk)
    order = np.argsort(risk, kind="stable")
    return {
        "records": n,
        "expected_reidentifications": expected,
        "global_risk": expected / n,
        "max_risk": float(risk.max()),
        "mean_risk": expected / n,
        "median_risk": _weighted_median(risk[order], sizes[order]),
        "high_risk_threshold": threshold,
        "high_risk_records": int(sizes[risk > threshold].sum()),
        "histogram": risk_histogram(sizes, risk),
    }


def records_above(sizes: np.ndarray, risk: np.ndarray, limit: float) -> int:
    """How many records carry a risk above `limit`."""
    return int(np.asarray(sizes, dtype=np.int64)[risk > limit].sum())


def individual_risk(sizes: np.ndarray, population: float) -> dict:
    """The negative-binomial per-record risk of a sample with these class sizes drawn from `population`, summarized
    (equal weights N / n): what `safeshare risk`, the report and the gate show."""
    sizes = np.asarray(sizes, dtype=np.int64)
    risk = key_risk(sizes, population)
    n = int(sizes.sum())
    return {"model": "negative_binomial", "population_size": float(population),
            "sampling_fraction": (n / float(population)) if n else 0.0, **summarize(sizes, risk)}

"""Skinner and Shlomo's log-linear Poisson model of population cell sizes, with its per-key and global risk measures.

Skinner and Shlomo (JASA 2008, "Assessing identification risk in survey microdata using log-linear models") take each
cell k of the quasi-identifiers' cross-classification to hold F_k ~ Poisson(lambda_k) population units, each sampled
with probability pi = n / N, so that f_k ~ Poisson(pi lambda_k) and, given f_k, F_k - f_k ~ Poisson((1 - pi) lambda_k)
independently. lambda_k is borrowed from the neighbouring cells through a log-linear model fitted to the sample's
contingency table (every cell, the empty ones too): log(pi lambda_k) = main effects of the attributes' values
(independence), optionally with every two-way interaction. With a_k = (1 - pi) lambda^_k:

    P(F_k = 1 | f_k = 1) = exp(-a_k)
    E(1/F_k | f_k)       = sum_m Poisson(m; a_k) / (f_k + m) = 1F1(1; f_k + 1; -a_k) / f_k   ((1 - exp(-a))/a for f = 1)

and the global measures over the sample uniques tau1 = sum P(F_k = 1 | f_k = 1) (expected population uniques among
the sample uniques) and tau2 = sum E(1/F_k | f_k = 1) (expected correct matches of sample uniques).

The main-effects fit needs no table: its maximum-likelihood fit is n times the product of the attributes' marginal
shares, evaluated at the sample's keys only, so it scales to any number of cells. The two-way model has no closed
form; it is fitted by iterative proportional fitting on the dense table (the Poisson likelihood's maximum matches the
sample's two-way margins), which bounds the table at `MAX_DENSE_CELLS` cells. Tests check both against statsmodels'
Poisson GLM on the full table.
"""
from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations

import numpy as np
from scipy.special import hyp1f1

MAX_DENSE_CELLS = 5_000_000
INTERACTIONS = ("main", "two_way")


class LogLinearError(ValueError):
    """The model cannot be fitted as asked (too many cells for the two-way fit, no records)."""


def fit_main_effects(codes: np.ndarray, cardinalities: Sequence[int], keys: np.ndarray) -> np.ndarray:
    """Fitted expected sample counts mu_k = n * prod_j share_j(value) at the keys `keys` (d, K) from record codes
    (d, n): the independence model's maximum-likelihood fit (its margins equal the sample's)."""
    codes = np.asarray(codes)
    n = codes.shape[1]
    if n == 0:
        raise LogLinearError("no records to fit the log-linear model to")
    log_mu = np.full(keys.shape[1], np.log(n), dtype=np.float64)
    for row, key_row, card in zip(codes, keys, cardinalities):
        counts = np.bincount(row, minlength=int(card)).astype(np.float64)
        log_mu += np.log(counts[key_row] / n)
    return np.exp(log_mu)


def fit_two_way(codes: np.ndarray, cardinalities: Sequence[int], keys: np.ndarray, tolerance: float = 1e-9,
                max_iterations: int = 500) -> np.ndarray:
    """Fitted expected sample counts at `keys` under the model of all two-way interactions, by iterative proportional
    fitting of the dense table to every pair's sample margin (a single attribute: its own margin)."""
    codes = np.asarray(codes, dtype=np.int64)
    shape = tuple(int(c) for c in cardinalities)
    cells = int(np.prod(shape, dtype=np.float64))
    if cells > MAX_DENSE_CELLS:
        raise LogLinearError(f"the two-way model needs the full table of {cells:,} cells, above the limit of "
                             f"{MAX_DENSE_CELLS:,}; use main effects")
    n = codes.shape[1]
    if n == 0:
        raise LogLinearError("no records to fit the log-linear model to")
    d = len(shape)
    observed = np.zeros(shape, dtype=np.float64)
    np.add.at(observed, tuple(codes), 1.0)
    pairs = list(combinations(range(d), 2)) or [(0,)]
    targets = [observed.sum(axis=tuple(a for a in range(d) if a not in pair), keepdims=True) for pair in pairs]
    fitted = np.full(shape, n / cells, dtype=np.float64)
    for _ in range(max_iterations):
        worst = 0.0
        for pair, target in zip(pairs, targets):
            margin = fitted.sum(axis=tuple(a for a in range(d) if a not in pair), keepdims=True)
            with np.errstate(divide="ignore", invalid="ignore"):
                factor = np.where(margin > 0, target / margin, 0.0)
            worst = max(worst, float(np.max(np.abs(margin - target))))
            fitted *= factor
        if worst <= tolerance * n:
            break
    return fitted[tuple(np.asarray(keys, dtype=np.int64))]


def fit(codes: np.ndarray, cardinalities: Sequence[int], keys: np.ndarray, interactions: str = "main") -> np.ndarray:
    if interactions == "main":
        return fit_main_effects(codes, cardinalities, keys)
    if interactions == "two_way":
        return fit_two_way(codes, cardinalities, keys)
    raise LogLinearError(f"unknown log-linear model {interactions!r}; use one of {', '.join(INTERACTIONS)}")


def expected_inverse(f: np.ndarray, a: np.ndarray) -> np.ndarray:
    """E(1/F | f) with F - f ~ Poisson(a): 1F1(1; f+1; -a) / f, with the f = 1 closed form (1 - e^-a) / a."""
    f = np.asarray(f, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    out = np.empty(np.broadcast(f, a).shape, dtype=np.float64)
    f, a = np.broadcast_arrays(f, a)
    one = f == 1
    small = a < 1e-8
    with np.errstate(divide="ignore", invalid="ignore"):
        out[one] = np.where(small[one], 1.0 - a[one] / 2, -np.expm1(-a[one]) / a[one])
    rest = ~one
    out[rest] = hyp1f1(1.0, f[rest] + 1.0, -a[rest]) / f[rest]
    return out


def poisson_measures(sizes: np.ndarray, mu: np.ndarray, sampling_fraction: float) -> dict:
    """Per-key and global Skinner-Shlomo measures from class sizes f_k, fitted sample means mu_k = pi lambda_k and
    the sampling fraction pi = n / N."""
    sizes = np.asarray(sizes, dtype=np.int64)
    mu = np.asarray(mu, dtype=np.float64)
    pi = float(sampling_fraction)
    if not 0 < pi <= 1:
        raise LogLinearError(f"the sampling fraction is in (0, 1], got {pi!r}")
    a = (1.0 - pi) * mu / pi
    risk = expected_inverse(sizes, a)
    unique = sizes == 1
    p_unique = np.exp(-a[unique])
    return {"a": a, "risk": risk, "population_unique_given_sample_unique": p_unique,
            "tau1": float(p_unique.sum()), "tau2": float(risk[unique].sum())}


def loglinear_risk(codes: np.ndarray, cardinalities: Sequence[int], population: float,
                   interactions: str = "main") -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:
    """Fit the model to record codes (d, n) and return (summary, key codes (d, K), class sizes (K,), per-key risk).

    The summary holds tau1, tau2, the expected re-identifications (sum over records of E(1/F_k | f_k)) and the
    global risk (that sum over n)."""
    from ..classes import group

    codes = np.asarray(codes)
    n = codes.shape[1]
    keys, sizes, _ = group(codes, np.ones(n, dtype=np.int64), cardinalities)
    mu = fit(codes, cardinalities, keys, interactions)
    measures = poisson_measures(sizes, mu, n / float(population))
    expected = float(np.dot(sizes, measures["risk"]))
    summary = {"model": "loglinear_poisson", "interactions": interactions, "population_size": float(population),
               "sampling_fraction": n / float(population), "sample_uniques": int((sizes == 1).sum()),
               "tau1": measures["tau1"], "tau2": measures["tau2"],
               "expected_reidentifications": expected, "global_risk": expected / n if n else 0.0,
               "max_risk": float(measures["risk"].max()) if sizes.size else 0.0}
    return summary, keys, sizes, measures["risk"]

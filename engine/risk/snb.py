"""The slide negative binomial model (Chen and McNulty 1998).

The population has K non-empty classes whose sizes are 1 + X with X negative binomial (alpha, beta), so K beta^alpha
of them are unique. Sampling each record with probability f (Bernoulli thinning) gives, with d = (1 - f)(1 - beta),

    E[c1] = K f (beta / (1 - d))^alpha (1 + alpha d / (1 - d))
    E[c2] = K alpha beta^alpha f^2 (1 - beta) (2 - (1 - alpha) d) / (2 (1 - d)^(alpha + 2))

(thinning NB(alpha, beta) by f gives NB(alpha, beta / (1 - d)); the c2 term divides by (1 - d)^(alpha + 2), which one
published implementation multiplies by instead). K is Shlosser's estimator of the number of non-empty classes. The two
moment equations are solved for (alpha, beta) in log/logit coordinates so every iterate stays in alpha > 0,
0 < beta < 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import root

from .histogram import SizeHistogram

START_ALPHAS = (1.0, 0.1, 10.0, 0.01, 100.0)
START_BETAS = (0.5, 0.1, 0.9, 0.01, 0.99)
TOLERANCE = 1e-6   # relative residual of the moment equations


@dataclass(frozen=True)
class SNBFit:
    solved: bool
    alpha: float | None
    beta: float | None
    non_empty_classes: float | None
    population_uniques: float | None


def shlosser_classes(histogram: SizeHistogram, f: float) -> float:
    """Shlosser's estimate of the number K of non-empty population classes (as in Haas et al.)."""
    i = histogram.sizes.astype(np.float64)
    F = histogram.counts.astype(np.float64)
    c1 = float(histogram.c1)
    q = 1.0 - f
    with np.errstate(all="ignore"):
        numerator_a = float((i * f * f * (1.0 - f * f) ** (i - 1.0) * F).sum())
        denominator_a = float((q ** i * ((1.0 + f) ** i - 1.0) * F).sum())
        numerator_b = float((q ** i * F).sum())
        denominator_b = float((i * f * q ** (i - 1.0) * F).sum())
        return histogram.u + c1 * (numerator_a / denominator_a) * (numerator_b / denominator_b) ** 2


def expected_c1_c2(alpha: float, beta: float, K: float, f: float) -> tuple[float, float]:
    d = (1.0 - f) * (1.0 - beta)
    c1 = K * f * (beta / (1.0 - d)) ** alpha * (1.0 + alpha * d / (1.0 - d))
    c2 = K * alpha * beta ** alpha * f * f * (1.0 - beta) * (2.0 - (1.0 - alpha) * d) / (2.0 * (1.0 - d) ** (alpha + 2.0))
    return c1, c2


def fit_snb(histogram: SizeHistogram, population_size: float) -> SNBFit:
    c1, c2, n = float(histogram.c1), float(histogram.c2), float(histogram.n)
    if c1 == 0:
        return SNBFit(True, None, None, None, 0.0)
    f = n / population_size
    if not 0.0 < f <= 1.0:
        return SNBFit(False, None, None, None, None)
    K = shlosser_classes(histogram, f)
    if not (np.isfinite(K) and K > 0):
        return SNBFit(False, None, None, K if np.isfinite(K) else None, None)

    def residuals(x: np.ndarray) -> np.ndarray:
        alpha, beta = np.exp(x[0]), 1.0 / (1.0 + np.exp(-x[1]))
        e1, e2 = expected_c1_c2(alpha, beta, K, f)
        return np.array([(e1 - c1) / max(c1, 1.0), (e2 - c2) / max(c2, 1.0)])

    for alpha0 in START_ALPHAS:
        for beta0 in START_BETAS:
            x0 = np.array([np.log(alpha0), np.log(beta0 / (1.0 - beta0))])
            with np.errstate(all="ignore"):
                solution = root(residuals, x0, method="hybr")
                r = residuals(solution.x)
            if not (np.all(np.isfinite(r)) and np.max(np.abs(r)) <= TOLERANCE):
                continue
            alpha, beta = float(np.exp(solution.x[0])), float(1.0 / (1.0 + np.exp(-solution.x[1])))
            uniques = K * beta ** alpha
            if np.isfinite(uniques) and 0.0 <= uniques <= population_size:
                return SNBFit(True, alpha, beta, K, float(uniques))
    return SNBFit(False, None, None, K, None)

"""Pitman's super-population model (Hoshino 2001): population uniques from the two-parameter Poisson-Dirichlet law.

The maximum-likelihood equations for (theta, alpha) are sums over up to n terms. They have closed forms in digamma
(and trigamma for the Jacobian), so a Newton-Raphson step costs a handful of special-function calls plus one vector
operation over the *distinct* class sizes, however large the sample. Closed forms lose accuracy in corners (tiny
alpha, huge theta / alpha), so every root is verified against the original finite sums and, when it does not hold
there, the finite sums are solved directly: the three steps of Prasser et al. (JBHI 2018, section VI-B).

theta >= 0 and 0 < alpha < 1 are enforced by step halving. A result outside [0, N] is no solution. When no start
point yields a verified root the model says so (``solved=False``); callers must treat that as "risk unknown".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import math

import numpy as np
from scipy.special import gammaln, psi, zeta

from .histogram import SizeHistogram

TOLERANCE = 1e-6          # largest |residual| of either equation accepted as a root
MAX_ITERATIONS = 100      # Newton steps per start point and method
PATIENCE = 20             # steps without halving the residual before a start point is given up
GRID_ALPHAS = (0.1, 0.5, 0.9)
GRID_THETAS = (1.0, 100.0, 10000.0)

Equations = Callable[[float, float], tuple[float, float, float, float, float]]


@dataclass(frozen=True)
class PitmanFit:
    solved: bool
    theta: float | None
    alpha: float | None
    population_uniques: float | None
    method: str | None           # "closed-form" or "finite-sums"
    start: str | None            # "hoshino" or "grid"
    iterations: int


class PitmanEquations:
    """Residuals (f1, f2) and Jacobian of the ML equations for one histogram, in closed and in finite form."""

    def __init__(self, histogram: SizeHistogram):
        self.u = float(histogram.u)
        self.n = float(histogram.n)
        multi = histogram.sizes >= 2
        self.sizes = histogram.sizes[multi].astype(np.float64)
        self.counts = histogram.counts[multi].astype(np.float64)
        self._max_size = int(histogram.sizes.max()) if histogram.sizes.size else 0

    # -- closed forms -----------------------------------------------------------------------------------------
    def closed(self, theta: float, alpha: float) -> tuple[float, float, float, float, float]:
        """Residuals and Jacobian from digamma/trigamma: one vectorized call of each per Newton step."""
        u, n = self.u, self.n
        t = theta / alpha
        args = np.concatenate(([u + t, 1.0 + t, n + theta, 1.0 + theta, 1.0 - alpha], self.sizes - alpha))
        dig = psi(args)
        tri = zeta(2.0, args)                                      # trigamma(x) = Hurwitz zeta(2, x)
        s1 = (dig[0] - dig[1]) / alpha                             # sum_{i<u} 1/(theta + i alpha)
        q = (tri[1] - tri[0]) / (alpha * alpha)                    # sum_{i<u} 1/(theta + i alpha)^2
        return self._assemble(theta, alpha, s1, q,
                              t1=dig[2] - dig[3],                  # sum_{i<n} 1/(theta + i)
                              dt1=tri[3] - tri[2],                 # sum_{i<n} 1/(theta + i)^2
                              t2=float(self.counts @ (dig[5:] - dig[4])),
                              w=float(self.counts @ (tri[4] - tri[5:])))

    # -- the original sums ------------------------------------------------------------------------------------
    def finite(self, theta: float, alpha: float) -> tuple[float, float, float, float, float]:
        i = np.arange(1.0, self.u)
        inv = 1.0 / (theta + i * alpha)
        j = 1.0 / (theta + np.arange(1.0, self.n))
        k = 1.0 / (np.arange(1.0, max(self._max_size, 1)) - alpha)    # 1/(j - alpha), j = 1 .. max size - 1
        cum1 = np.concatenate(([0.0], np.cumsum(k)))
        cum2 = np.concatenate(([0.0], np.cumsum(k * k)))
        idx = self.sizes.astype(np.int64) - 1
        return self._assemble(theta, alpha, float(inv.sum()), float((inv * inv).sum()),
                              t1=float(j.sum()), dt1=float((j * j).sum()),
                              t2=float(self.counts @ cum1[idx]), w=float(self.counts @ cum2[idx]))

    def _assemble(self, theta, alpha, s1, q, t1, dt1, t2, w):
        """(f1, f2, df1/dtheta, df1/dalpha = df2/dtheta, df2/dalpha) from the partial sums."""
        u = self.u
        s2 = ((u - 1.0) - theta * s1) / alpha                      # sum i/(theta + i alpha)
        r2 = (s1 - theta * q) / alpha                              # sum i/(theta + i alpha)^2
        r3 = ((u - 1.0) - 2.0 * theta * s1 + theta * theta * q) / (alpha * alpha)   # sum i^2/(theta + i alpha)^2
        return float(s1 - t1), float(s2 - t2), float(dt1 - q), float(-r2), float(-r3 - w)

    def residuals(self, theta: float, alpha: float, closed: bool = True) -> np.ndarray:
        values = (self.closed if closed else self.finite)(theta, alpha)
        return np.array(values[:2])

    def jacobian(self, theta: float, alpha: float, closed: bool = True) -> np.ndarray:
        _, _, j11, j12, j22 = (self.closed if closed else self.finite)(theta, alpha)
        return np.array([[j11, j12], [j12, j22]])


def hoshino_start(histogram: SizeHistogram) -> tuple[float, float]:
    """Hoshino's moment estimates (theta0, alpha0), the usual starting point."""
    # numpy scalars, so that a zero denominator gives inf/nan under errstate (and the start is skipped) instead of
    # raising as Python floats do
    n, u, c1 = np.float64(histogram.n), np.float64(histogram.u), np.float64(histogram.c1)
    c2 = np.float64(histogram.c2 or 1.0)
    c = c1 * (c1 - 1.0) / c2
    with np.errstate(all="ignore"):
        theta = (n * u * c - c1 * (n - 1.0) * (2.0 * u + c)) / (2.0 * c1 * u + c1 * c - n * c)
        alpha = (theta * (c1 - n) + (n - 1.0) * c1) / (n * u)
    return float(theta), float(alpha)


def _in_domain(theta: float, alpha: float) -> bool:
    return math.isfinite(theta) and math.isfinite(alpha) and theta >= 0.0 and 0.0 < alpha < 1.0


def newton(equations: Equations, theta: float, alpha: float, max_iterations: int = MAX_ITERATIONS,
           patience: int = PATIENCE) -> tuple[float, float, int] | None:
    """Newton-Raphson from (theta, alpha); steps leaving the domain are halved.

    None when it does not converge: non-finite values, a singular Jacobian, the iteration limit, or no halving of the
    residual within `patience` steps (iterates sliding to the boundary of the domain, where there is no root).
    """
    best, best_at = math.inf, 0
    for iteration in range(1, max_iterations + 1):
        with np.errstate(all="ignore"):
            f1, f2, j11, j12, j22 = equations(theta, alpha)
        size = max(abs(f1), abs(f2))
        if not (math.isfinite(size) and math.isfinite(j11) and math.isfinite(j12) and math.isfinite(j22)):
            return None
        if size <= TOLERANCE:
            return theta, alpha, iteration
        if size < 0.5 * best:
            best, best_at = size, iteration
        elif iteration - best_at > patience:
            return None
        det = j11 * j22 - j12 * j12
        if det == 0.0 or not math.isfinite(det):
            return None
        d_theta = (j22 * f1 - j12 * f2) / det
        d_alpha = (j11 * f2 - j12 * f1) / det
        scale = 1.0
        while not _in_domain(theta - scale * d_theta, alpha - scale * d_alpha):
            scale *= 0.5
            if scale < 1e-12:
                return None
        theta, alpha = theta - scale * d_theta, alpha - scale * d_alpha
    return None


def population_uniques(theta: float, alpha: float, population_size: float) -> float | None:
    """Gamma(theta + 1) / Gamma(theta + alpha) * N^alpha via log-gamma; None outside [0, N]."""
    if not _in_domain(theta, alpha):
        return None
    with np.errstate(all="ignore"):
        value = float(np.exp(gammaln(theta + 1.0) - gammaln(theta + alpha) + alpha * np.log(population_size)))
    return value if np.isfinite(value) and 0.0 <= value <= population_size else None


def _start_points(histogram: SizeHistogram):
    theta0, alpha0 = hoshino_start(histogram)
    if np.isfinite(theta0) and np.isfinite(alpha0):
        yield "hoshino", max(theta0, 0.0), float(np.clip(alpha0, 1e-3, 1.0 - 1e-3))
    for alpha in GRID_ALPHAS:
        for theta in GRID_THETAS:
            yield "grid", theta, alpha


def fit_pitman(histogram: SizeHistogram, population_size: float) -> PitmanFit:
    """Solve the ML equations (closed forms, verified by the finite sums, finite sums as fallback) and estimate PU.

    The finite-sum Newton costs O(n) per step, so it runs from Hoshino's start and to polish closed-form roots that
    failed verification; the grid of further start points uses the closed forms.
    """
    if histogram.c1 == 0:
        return PitmanFit(True, None, None, 0.0, None, None, 0)
    if histogram.c1 == histogram.u:
        # Only uniques: f2 = sum i / (theta + i alpha) > 0 has no root, whatever the start.
        return PitmanFit(False, None, None, None, None, None, 0)
    equations = PitmanEquations(histogram)
    total = 0

    def verified(root) -> bool:
        with np.errstate(all="ignore"):
            f1, f2, *_ = equations.finite(root[0], root[1])
        return math.isfinite(f1) and math.isfinite(f2) and max(abs(f1), abs(f2)) <= TOLERANCE

    for start, theta0, alpha0 in _start_points(histogram):
        candidates = []
        root = newton(equations.closed, theta0, alpha0)
        if root is not None:
            total += root[2]
            if verified(root):
                candidates.append((root, "closed-form"))
            else:
                polished = newton(equations.finite, root[0], root[1])
                if polished is not None:
                    total += polished[2]
                    candidates.append((polished, "finite-sums"))
        elif start == "hoshino":
            root = newton(equations.finite, theta0, alpha0)
            if root is not None:
                total += root[2]
                candidates.append((root, "finite-sums"))
        for (theta, alpha, _), method in candidates:
            uniques = population_uniques(theta, alpha, population_size)
            if uniques is not None:
                return PitmanFit(True, float(theta), float(alpha), uniques, method, start, total)
    return PitmanFit(False, None, None, None, None, None, total)

"""A faithful port of ARX's Pitman population-uniqueness estimator (ARX v3.9.2).

Ports, as closely as double arithmetic in Python allows:

* ``org.deidentifier.arx.risk.ModelPitman``: Hoshino's moment estimates as the start point; the maximum-likelihood
  score equations solved first in closed form (digamma/trigamma); if that yields NaN, solved again with the finite
  ("iterative") sums from the same start; otherwise the closed-form root is checked against the finite sums and, if
  either residual is NaN or exceeds the accuracy, the finite sums are solved from the Hoshino start instead. The
  estimate is Gamma(theta + 1) / Gamma(theta + alpha) * N^alpha, computed via log-gamma and via gamma; each value is
  kept only inside [0, N], the larger valid one wins, NaN if none is valid or theta/alpha is NaN or alpha == 0.
* ``org.deidentifier.arx.risk.Gamma``: digamma and trigamma *including ARX's trigamma bug*: the recurrence runs up to
  x >= 8 while the asymptotic tail is only added for x >= 12, so for 1e-4 < x < 12 the tail is missing (exactly 0 for
  8 <= x < 12). It only enters the closed-form Jacobian, but it changes the Newton path and therefore which roots are
  found. Log-gamma and gamma follow commons-math3 semantics (log-gamma NaN for x <= 0, gamma NaN at poles) but use
  Python's ``math`` implementations, which may differ in the last ulp.
* ``de.linearbits.newtonraphson.NewtonRaphson2D`` (newtonraphson-0.0.1) with ARX's default ``ARXSolverConfiguration``:
  accuracy 1e-6, 1000 iterations per try, the 16 deterministic start values {0, .33, .66, .99}^2 for (theta, alpha),
  total iterations (16 + 1) * 1000, constraint theta >= 0. Try 0 starts from the given point, try k >= 1 from start
  value k - 1. Per iteration: evaluate; converged when |g1| <= acc and |g2| <= acc; otherwise x <- x - J^-1 g with the
  explicit 2x2 inverse (no damping; a singular J yields inf/NaN); then abort *everything* with NaN if the prepared
  start values are exhausted (so the last start value only has its initial point tested); next try if theta >= 0
  fails; next try if x is NaN or the per-try iteration budget is used up.

**Deviation, deliberate:** ARX also stops a try after 100 ms and the whole solve after 1000 ms of wall-clock time. Those
limits make ARX's results machine-dependent; this port ignores them and uses the iteration limits only, so it is
deterministic. Where ARX would have hit a time limit (slow machine, very large samples solved with the finite sums),
ARX may report NaN where this port finds a root, or a root from a different start value.

Sums over class sizes run in the order of ARX's loops (``np.cumsum``); the long sums over 1..u and 1..n use numpy's
pairwise summation, which differs from Java's left-to-right loop only in the last bits (see `PitmanSystem._last`).

With numba installed (extra `fast`), `arx_pitman_fit` runs the same solve-and-verify compiled
(engine.risk.pitman_kernel): the closed-form path bit for bit, the finite sums added left to right as in ARX (blocked
so that their divisions vectorize, engine.risk.pitman_finite). This module stays the reference and the fallback.
`arx_pitman_uniques`, which the estimators call, remembers the roots of the histograms it has solved (`FITS`).
"""
from __future__ import annotations

import math
import os
from functools import cached_property

import numpy as np

from . import arx_gamma, pitman_kernel
from .histogram import SizeHistogram
from .memo import BoundedMemo

ACCURACY = 1e-6
ITERATIONS_PER_TRY = 1000
SCALAR_KEYS = 12          # up to this many distinct class sizes >= 2, the closed form loops in Python, not numpy

_NAN = float("nan")
_INF = float("inf")


def _default_start_values() -> tuple[tuple[float, float], ...]:
    """ARXSolverConfiguration.getDefaultStartValues(): a double loop with accumulated steps of 0.33 (theta outer)."""
    values = []
    d1 = 0.0
    while d1 < 1.0:
        d2 = 0.0
        while d2 < 1.0:
            values.append((d1, d2))
            d2 += 0.33
        d1 += 0.33
    return tuple(values)


START_VALUES = _default_start_values()


# -- Gamma.java (engine.risk.arx_gamma, shared with the compiled path) -------------------------------------------------
_div = arx_gamma.div
arx_digamma = arx_gamma.digamma
arx_trigamma = arx_gamma.trigamma
_S3, _S4, _S5, _S6, _S7 = arx_gamma.S3, arx_gamma.S4, arx_gamma.S5, arx_gamma.S6, arx_gamma.S7
_B2, _B4, _B6, _B8, _B10 = arx_gamma.B2, arx_gamma.B4, arx_gamma.B6, arx_gamma.B8, arx_gamma.B10
_LARGE_DIGAMMA, _LARGE_TRIGAMMA = arx_gamma.LARGE_DIGAMMA, arx_gamma.LARGE_TRIGAMMA
_SMALL_DIGAMMA, _SMALL_TRIGAMMA = arx_gamma.SMALL_DIGAMMA, arx_gamma.SMALL_TRIGAMMA


def _shifted(x: np.ndarray, steps: int) -> np.ndarray:
    """Rows x, x+1, x+1+1, ... accumulated one addition at a time, as ARX's ``x++`` loops do (shape k x steps+1)."""
    buf = np.ones((x.size, steps + 1))
    buf[:, 0] = x
    return np.cumsum(buf, axis=1, out=buf)


# The C library's log, elementwise: numpy's own SIMD log (AVX512 builds) differs from it in the last bit for about 1
# value in 5,000, and the scalar path and the compiled kernel (engine.risk.pitman_kernel) use the C library's. The
# Newton-Raphson on ill-conditioned histograms amplifies one bit into a root that differs in the 7th digit.
_libm_log = np.frompyfunc(math.log, 1, 1)


def _digamma_vec(x: np.ndarray) -> np.ndarray:
    """Elementwise ARX digamma: the same operations, in the same order, as the scalar version."""
    x = np.asarray(x, dtype=np.float64)
    if not (x.size and np.isfinite(x).all() and x.min() > _SMALL_DIGAMMA):
        return np.array([arx_digamma(float(v)) for v in x])
    steps = 12
    shifted = _shifted(x, steps)                     # the reduction needs at most 12 steps for x > 1e-6
    below = shifted[:, :steps] < _LARGE_DIGAMMA      # True for a prefix of each row
    terms = np.where(below, -1.0 / shifted[:, :steps], 0.0)
    result = np.cumsum(terms, axis=1)[:, -1]         # result -= 1/x, sequentially
    xr = shifted[np.arange(x.size), below.sum(axis=1)]
    r = 1.0 / xr
    result = result + (_libm_log(xr).astype(np.float64) - 0.5 * r)
    r = r * r
    return result - r * (_S3 - r * (_S4 - r * (_S5 - r * (_S6 - r * _S7))))


def _trigamma_vec(x: np.ndarray) -> np.ndarray:
    """Elementwise ARX trigamma, bug included (the tail only where no reduction step was taken, i.e. x >= 12)."""
    x = np.asarray(x, dtype=np.float64)
    if not (x.size and np.isfinite(x).all() and x.min() > _SMALL_TRIGAMMA):
        return np.array([arx_trigamma(float(v)) for v in x])
    steps = 8
    shifted = _shifted(x, steps)                     # at most 8 steps for x > 1e-4
    below = shifted[:, :steps] < _LARGE_TRIGAMMA
    sq = shifted[:, :steps] * shifted[:, :steps]
    terms = np.where(below, 1.0 / sq, 0.0)
    result = np.cumsum(terms, axis=1)[:, -1]
    tail = x >= _LARGE_DIGAMMA
    if tail.any():
        xt = x[tail]
        r = 1.0 / (xt * xt)
        result[tail] = result[tail] + (0.5 * r + (1.0 + r * (_B2 + r * (_B4 + r * (_B6 + r * (_B8 + r * _B10)))))
                                       / xt)
    return result


def _log_gamma(x: float) -> float:
    """commons-math3 Gamma.logGamma semantics: NaN for x <= 0 or NaN."""
    if x != x or x <= 0.0:
        return _NAN
    if x == _INF:
        return _INF
    return math.lgamma(x)


def _gamma(x: float) -> float:
    """commons-math3 Gamma.gamma semantics: NaN at the poles, +-inf on overflow."""
    if x != x:
        return _NAN
    try:
        return math.gamma(x)
    except ValueError:
        return _NAN
    except OverflowError:
        return _INF


def _exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:
        return _INF


def _pow(x: float, y: float) -> float:
    try:
        return math.pow(x, y)
    except OverflowError:
        return _INF
    except ValueError:
        return _NAN


def _mul(x: float, y: float) -> float:
    return x * y


def arx_result(theta: float, alpha: float, population_size: float) -> float:
    """ModelPitman.getResult: expected population uniques, NaN when invalid."""
    t, a, p = theta, alpha, float(population_size)
    if a != a or t != t or a == 0.0:
        return _NAN
    with np.errstate(all="ignore"):
        lg = float(np.float64(_log_gamma(t + 1.0)) - np.float64(_log_gamma(t + a)))
        val1 = _mul(_exp(lg) if lg == lg else _NAN, _pow(p, a))
        val1 = val1 if 0.0 <= val1 <= p else _NAN
        val2 = float(np.float64(_gamma(t + 1.0)) / np.float64(_gamma(t + a))) * _pow(p, a)
        val2 = val2 if 0.0 <= val2 <= p else _NAN
    if val1 != val1 and val2 != val2:
        return _NAN
    if val1 == val1 and val2 == val2:
        return max(val1, val2)
    return val2 if val1 != val1 else val1


# -- ModelPitman's functions -----------------------------------------------------------------------------------------
class PitmanSystem:
    """The score equations g = (g1, g2) and their Jacobian for one histogram, closed form and finite sums."""

    def __init__(self, histogram: SizeHistogram):
        sizes = np.asarray(histogram.sizes, dtype=np.int64)
        counts = np.asarray(histogram.counts, dtype=np.int64)
        order = np.argsort(sizes, kind="stable")
        sizes, counts = sizes[order], counts[order]
        self.u = float(counts.sum())
        self.n = float((sizes * counts).sum())
        keep = sizes != 1
        self.keys = sizes[keep]
        self.values = counts[keep].astype(np.float64)
        self.keys_f = self.keys.astype(np.float64)
        self._scalar_keys = ([(float(k), float(v)) for k, v in zip(self.keys, self.values)]
                             if self.keys.size <= SCALAR_KEYS else None)
        max_key = int(self.keys.max()) if self.keys.size else 1
        self._j = np.arange(1.0, float(max_key))              # j = 1 .. max key - 1
        self._idx = self.keys - 2                             # prefix index of sum_{j=1}^{key-1}

    # The O(u) and O(n) index arrays and scratch buffers, made on first use (the compiled path never needs them).
    @cached_property
    def _i_u(self) -> np.ndarray:
        return np.arange(1.0, self.u) if self.u > 1 else np.zeros(0)   # i = 1 .. u - 1 (i < u)

    @cached_property
    def _i_n(self) -> np.ndarray:
        return np.arange(1.0, self.n) if self.n > 1 else np.zeros(0)   # i = 1 .. n - 1 (i < n)

    @cached_property
    def _bu(self) -> np.ndarray:
        return np.empty((4, self._i_u.size))

    @cached_property
    def _bn(self) -> np.ndarray:
        return np.empty((3, self._i_n.size))

    # closed form ------------------------------------------------------------------------------------------------
    def closed(self, t: float, a: float) -> tuple[float, float, float, float, float, float]:
        """getMasterFunctionClosed: (g1, g2, J11, J12, J21, J22), operation order as in ARX."""
        u, n = self.u, self.n
        val0 = u - 1.0
        ta = _div(t, a)
        val1 = arx_digamma(val0 + ta + 1.0)
        val2 = arx_trigamma(_div(a + t + a * val0, a))
        val3 = arx_trigamma(ta + 1.0)
        val4 = arx_digamma(ta + 1.0)
        val5 = a * a
        d1 = _div(val3 - val2, val5)
        d5 = _div(((a * val1) + (t * val2)) - (a * val4) - (t * val3), val5 * a)
        d3 = _div(((((val5 * val0) - (t * t * val2)) + (t * t * val3)) - (2.0 * a * t * val1)) + (2.0 * a * t * val4),
                  val5 * val5)
        o1 = _div(val1 - val4, a)
        o3 = _div((-t * val1) + (a * val0) + (t * val4), a * a)
        o2 = arx_digamma(n + t) - arx_digamma(t + 1.0)
        d2 = arx_trigamma(t + 1.0) - arx_trigamma(n + t)
        d4 = o4 = 0.0
        if self._scalar_keys is not None:                    # few distinct sizes: plain loop, ARX's order
            val6 = arx_digamma(1.0 - a)
            val7 = arx_trigamma(1.0 - a)
            for key, value in self._scalar_keys:
                d4 += value * (val7 - arx_trigamma(key - a))
                o4 += value * (arx_digamma(key - a) - val6)
        elif self.keys.size:
            val6 = arx_digamma(1.0 - a)
            val7 = arx_trigamma(1.0 - a)
            with np.errstate(all="ignore"):
                x = self.keys_f - a
                d4 = float(np.cumsum(self.values * (val7 - _trigamma_vec(x)))[-1])
                o4 = float(np.cumsum(self.values * (_digamma_vec(x) - val6))[-1])
        return o1 - o2, o3 - o4, d2 - d1, 0.0 - d5, 0.0 - d5, 0.0 - d3 - d4

    # finite sums ------------------------------------------------------------------------------------------------
    def _class_sums(self, a: float, derivatives: bool):
        if not self.keys.size:
            return 0.0, 0.0
        k = self._j - a
        with np.errstate(all="ignore"):
            o4 = float(np.cumsum(self.values * np.cumsum(1.0 / k)[self._idx])[-1])
            d4 = float(np.cumsum(self.values * np.cumsum(1.0 / (k * k))[self._idx])[-1]) if derivatives else 0.0
        return o4, d4

    @staticmethod
    def _last(x: np.ndarray, buf: np.ndarray) -> float:
        """The sum of the O(u) and O(n) terms. numpy's pairwise summation, not Java's left-to-right loop: it is several
        times faster than a cumulative sum over up to n terms and differs only in the last bits (relative 1e-16 on
        sums of order 10, against a convergence test at 1e-6), so it cannot change which root is accepted."""
        return float(x.sum()) if x.size else 0.0

    def _u_sums(self, t: float, a: float, derivatives: bool):
        i = self._i_u
        val0 = np.multiply(i, a, out=self._bu[0])
        val0 += t                                             # t + i * a
        val1 = np.divide(1.0, val0, out=self._bu[1])
        scratch = self._bu[2]
        o1 = self._last(val1, scratch)
        o3 = self._last(np.multiply(i, val1, out=self._bu[3]), scratch)
        if not derivatives:
            return o1, o3, 0.0, 0.0, 0.0
        val3 = np.multiply(val0, val0, out=self._bu[0])
        np.divide(1.0, val3, out=val3)                        # 1 / (t + i a)^2
        val4 = np.multiply(i, val3, out=self._bu[1])
        d1 = self._last(val3, scratch)
        d5 = self._last(val4, scratch)
        d3 = self._last(np.multiply(i, val4, out=self._bu[3]), scratch)
        return o1, o3, d1, d5, d3

    def _n_sums(self, t: float, derivatives: bool):
        v = np.add(self._i_n, t, out=self._bn[0])
        scratch = self._bn[2]
        o2 = self._last(np.divide(1.0, v, out=self._bn[1]), scratch)
        if not derivatives:
            return o2, 0.0
        sq = np.multiply(v, v, out=self._bn[1])
        d2 = self._last(np.divide(1.0, sq, out=sq), scratch)
        return o2, d2

    def iterative(self, t: float, a: float) -> tuple[float, float, float, float, float, float]:
        """getMasterFunctionIterative: finite sums with the exact Jacobian."""
        with np.errstate(all="ignore"):
            o1, o3, d1, d5, d3 = self._u_sums(t, a, True)
            o4, d4 = self._class_sums(a, True)
            o2, d2 = self._n_sums(t, True)
        return o1 - o2, o3 - o4, d2 - d1, 0.0 - d5, 0.0 - d5, 0.0 - d3 - d4

    def objective(self, t: float, a: float) -> tuple[float, float]:
        """getObjectFunctionsIterative: the finite-sum residuals only."""
        with np.errstate(all="ignore"):
            o1, o3, *_ = self._u_sums(t, a, False)
            o4, _ = self._class_sums(a, False)
            o2, _ = self._n_sums(t, False)
        return o1 - o2, o3 - o4


def hoshino_start(histogram: SizeHistogram) -> tuple[float, float]:
    """ModelPitman's initial guess, with c2 := 1 when there are no classes of size 2."""
    c1 = float(histogram.c1)
    c2 = float(histogram.c2)
    u = float(histogram.u)
    n = float(histogram.n)
    c2 = c2 if c2 != 0.0 else 1.0
    c = _div(c1 * (c1 - 1.0), c2)
    t = _div((n * u * c) - (c1 * (n - 1.0) * ((2.0 * u) + c)), ((2.0 * c1 * u) + (c1 * c)) - (n * c))
    a = _div((t * (c1 - n)) + ((n - 1.0) * c1), n * u)
    return t, a


# -- NewtonRaphson2D._solve -----------------------------------------------------------------------------------------
def newton_raphson_2d(master, start: tuple[float, float], start_values=START_VALUES, accuracy: float = ACCURACY,
                      iterations_per_try: int = ITERATIONS_PER_TRY) -> tuple[float, float, int | None, int]:
    """Returns (theta, alpha, try index, evaluations); (NaN, NaN, None, evaluations) when no root is found.

    Try 0 is the given start, try k >= 1 is ``start_values[k - 1]``. Wall-clock limits are not modelled.
    """
    iterations_total = (len(start_values) + 1) * iterations_per_try
    total = 0
    offset = 0
    first = True
    while total <= iterations_total:
        iterations = 0
        if first:
            t, a = float(start[0]), float(start[1])
            try_index = 0
            first = False
        else:
            t, a = start_values[offset]
            offset += 1
            try_index = offset
        while True:
            total += 1
            g1, g2, x1, x2, y1, y2 = master(t, a)
            if abs(g1) <= accuracy and abs(g2) <= accuracy:
                return t, a, try_index, total
            det = x1 * y2 - x2 * y1
            scalar = _div(1.0, det)
            i11, i12, i21, i22 = y2 * scalar, -x2 * scalar, -y1 * scalar, x1 * scalar
            t -= i11 * g1 + i12 * g2
            a -= i21 * g1 + i22 * g2
            if offset == len(start_values):
                return _NAN, _NAN, None, total
            if not t >= 0.0:                                   # constraint theta >= 0 (NaN fails it as well)
                break
            if t != t or a != a or iterations >= iterations_per_try:
                break
            iterations += 1
    return _NAN, _NAN, None, total


def _fit_python(system: PitmanSystem, start: tuple[float, float], solve: dict):
    """ModelPitman's solve-and-verify on the Python path (see `arx_pitman_fit`)."""
    t, a, found, evaluations = newton_raphson_2d(system.closed, start, **solve)
    method = "closed-form"
    verified = None
    if t != t or a != a:
        t, a, found, more = newton_raphson_2d(system.iterative, start, **solve)
        evaluations += more
        method = "finite-sums"
    else:
        g1, g2 = system.objective(t, a)
        verified = (g1, g2)
        if g1 != g1 or g2 != g2 or abs(g1) > solve["accuracy"] or abs(g2) > solve["accuracy"]:
            t, a, found, more = newton_raphson_2d(system.iterative, start, **solve)
            evaluations += more
            method = "finite-sums"
    return t, a, found, evaluations, method, verified


# -- ModelPitman ------------------------------------------------------------------------------------------------------
def _solve_histogram(histogram: SizeHistogram, accuracy: float, iterations_per_try: int, start_values
                     ) -> tuple[float, float, dict]:
    """ModelPitman's solve-and-verify: (theta, alpha, parameters), NaN where no root is found."""
    system = PitmanSystem(histogram)
    t0, a0 = hoshino_start(histogram)
    solve = dict(start_values=start_values, accuracy=accuracy, iterations_per_try=iterations_per_try)

    if pitman_kernel.available():   # the same computation, compiled (finite sums added left to right, as ARX does)
        t, a, start, evaluations, method, verified = pitman_kernel.fit(
            (t0, a0), system.u, system.n, system.keys_f, system.values, **solve)
    else:
        t, a, start, evaluations, method, verified = _fit_python(system, (t0, a0), solve)
    solved = t == t and a == a
    params = {
        "theta": float(t) if solved else None,
        "alpha": float(a) if solved else None,
        "method": method if solved else None,
        "start": start,
        "hoshino_start": (t0, a0),
        "closed_form_residual": verified,
        "evaluations": evaluations,
    }
    return t, a, params


def arx_pitman_fit(histogram: SizeHistogram, population_size: float, *, accuracy: float = ACCURACY,
                   iterations_per_try: int = ITERATIONS_PER_TRY, start_values=START_VALUES) -> tuple[float, dict]:
    """ModelPitman's constructor: (uniques or NaN, parameters). Solves every time (`arx_pitman_uniques` remembers)."""
    t, a, params = _solve_histogram(histogram, accuracy, iterations_per_try, start_values)
    return arx_result(t, a, population_size), params


# Solves of the default configuration by histogram (engine.risk.memo): 16 bytes of key per distinct class size. The
# memo lasts as long as the process, so warm benchmark runs (benchmarks/engine_bench.py) find the histograms of the
# runs before them: SAFESHARE_PITMAN_MEMO=0 turns it off to time single searches.
MEMO = os.environ.get("SAFESHARE_PITMAN_MEMO", "1").strip() != "0"
FITS: BoundedMemo[tuple[float, float, dict]] = BoundedMemo(max_entries=8192, max_key_bytes=32 << 20)


def _memo_key(histogram: SizeHistogram) -> bytes:
    """The histogram's bytes, and which solver path answers (compiled or not: their finite sums may differ in the
    last bits)."""
    sizes = np.ascontiguousarray(histogram.sizes, dtype=np.int64).tobytes()
    counts = np.ascontiguousarray(histogram.counts, dtype=np.int64).tobytes()
    return (b"c" if pitman_kernel.available() else b"p") + len(sizes).to_bytes(8, "little") + sizes + counts


def arx_pitman_uniques(histogram: SizeHistogram, population_size: float) -> tuple[float | None, dict]:
    """Estimated population uniques as ARX's ModelPitman computes them (default solver configuration).

    Returns ``(None, params)`` where ARX's value is NaN (no root, or no valid Gamma-ratio result). A finite 0.0 is
    returned as is; ARX's criterion (PU == 0 is fulfilled only without sample uniques) is left to the caller, as is
    the PU fraction (uniques / N). ``params``: theta, alpha, method ("closed-form" / "finite-sums"), start (0 =
    Hoshino start, k >= 1 = prepared start value k - 1), plus diagnostics. The root of a histogram solved before in
    this process is remembered (`FITS`); the population enters only the final Gamma ratio.
    """
    if MEMO:
        t, a, params = FITS.get_or_compute(
            _memo_key(histogram), lambda: _solve_histogram(histogram, ACCURACY, ITERATIONS_PER_TRY, START_VALUES))
    else:
        t, a, params = _solve_histogram(histogram, ACCURACY, ITERATIONS_PER_TRY, START_VALUES)
    uniques = arx_result(t, a, population_size)
    return (None if uniques != uniques else float(uniques)), dict(params)

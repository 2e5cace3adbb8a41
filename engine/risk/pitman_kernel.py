"""Newton–Raphson on Pitman's closed-form score equations, compiled with numba when it is installed.

Why: a heuristic search under population uniqueness fits Pitman's model several times per transformation (ARX's
bisection over the classes to suppress), and one fit takes tens of Newton steps, up to 16 start values with 1000 steps
each. In Python each step costs about 0.3 ms (digamma and trigamma over every distinct class size), so on
MACH2019 three quarters of a check went into the solver. Compiled, a step costs microseconds.

The compiled code is the same computation as `engine.risk.pitman_arx` (ARX's `ModelPitman.getMasterFunctionClosed`,
`Gamma.digamma/trigamma` with ARX's trigamma bug from `engine.risk.arx_gamma`, `NewtonRaphson2D._solve`): the same IEEE operations in the same
order, one class size after the other as ARX's loop does, so the root and the try that finds it are the same; tests
compare the two paths. Without numba (the optional `fast` extra) `available()` is False and the caller uses the
Python path. numba runs without `fastmath` and with numpy's error model, so a division by zero gives inf or NaN as
in Java instead of raising.
"""
from __future__ import annotations

import math
import os

import numpy as np

from . import arx_gamma, pitman_finite

try:   # optional: `pip install safeshare[fast]`
    if os.environ.get("SAFESHARE_NO_NUMBA"):
        raise ImportError("disabled by SAFESHARE_NO_NUMBA")
    import numba
except ImportError:   # pragma: no cover - depends on the installation
    numba = None



def available() -> bool:
    return numba is not None


_digamma = arx_gamma.digamma     # registered as compilable when numba is present
_trigamma = arx_gamma.trigamma


def _closed(t: float, a: float, u: float, n: float, keys: np.ndarray, values: np.ndarray, out: np.ndarray) -> None:
    """pitman_arx.PitmanSystem.closed into out = (g1, g2, J11, J12, J21, J22)."""
    val0 = u - 1.0
    ta = t / a
    val1 = _digamma(val0 + ta + 1.0)
    val2 = _trigamma((a + t + a * val0) / a)
    val3 = _trigamma(ta + 1.0)
    val4 = _digamma(ta + 1.0)
    val5 = a * a
    d1 = (val3 - val2) / val5
    d5 = (((a * val1) + (t * val2)) - (a * val4) - (t * val3)) / (val5 * a)
    d3 = ((((val5 * val0) - (t * t * val2)) + (t * t * val3)) - (2.0 * a * t * val1) + (2.0 * a * t * val4)) \
        / (val5 * val5)
    o1 = (val1 - val4) / a
    o3 = ((-t * val1) + (a * val0) + (t * val4)) / (a * a)
    o2 = _digamma(n + t) - _digamma(t + 1.0)
    d2 = _trigamma(t + 1.0) - _trigamma(n + t)
    d4 = 0.0
    o4 = 0.0
    if keys.size:
        val6 = _digamma(1.0 - a)
        val7 = _trigamma(1.0 - a)
        for i in range(keys.size):
            d4 += values[i] * (val7 - _trigamma(keys[i] - a))
            o4 += values[i] * (_digamma(keys[i] - a) - val6)
    out[0] = o1 - o2
    out[1] = o3 - o4
    out[2] = d2 - d1
    out[3] = 0.0 - d5
    out[4] = 0.0 - d5
    out[5] = 0.0 - d3 - d4


def _solve(t0: float, a0: float, u: float, n: float, keys: np.ndarray, values: np.ndarray, starts: np.ndarray,
           accuracy: float, iterations_per_try: int, finite: bool) -> tuple[float, float, int, int]:
    """pitman_arx.newton_raphson_2d with the closed form (or the finite sums, as the scalar loop of before: the
    reference); the try index is -1 when no root is found."""
    return _search(t0, a0, u, n, keys, values, starts, accuracy, iterations_per_try, finite, False, _NO_TABLES)


def _search(t0: float, a0: float, u: float, n: float, keys: np.ndarray, values: np.ndarray, starts: np.ndarray,
            accuracy: float, iterations_per_try: int, finite: bool, blocked: bool,
            tables: np.ndarray) -> tuple[float, float, int, int]:
    """`_solve`, with the finite sums blocked (`pitman_finite.finite`, the same bits as the scalar loop) when
    `blocked`, and the first evaluation of try k >= 1 resumed from `tables[k - 1]` (the checkpoints of start value
    k - 1, `pitman_finite.START_TABLES`) when tables has a row per start value."""
    g = np.empty(6)
    acc = np.empty(pitman_finite.U_SUMS + pitman_finite.N_SUMS)
    buf = np.empty((7, pitman_finite.BLOCK))
    resume = finite and blocked and tables.shape[0] == starts.shape[0]
    count = starts.shape[0]
    iterations_total = (count + 1) * iterations_per_try
    total = 0
    offset = 0
    first = True
    t, a, try_index = t0, a0, 0
    while total <= iterations_total:
        iterations = 0
        if first:
            t, a, try_index = t0, a0, 0
            first = False
        else:
            t, a = starts[offset, 0], starts[offset, 1]
            offset += 1
            try_index = offset
        # Brent's cycle detection: a point this try already went through (bit for bit) makes it go round the same
        # cycle until its iteration budget is spent, never converging (every point of the cycle was evaluated and
        # failed the test) and never leaving (every step of it passed the checks): its remaining evaluations are
        # counted without being made.
        saved_t, saved_a = t, a
        power, steps = 1, 0
        while True:
            total += 1
            if not finite:
                _closed(t, a, u, n, keys, values, g)
            elif not blocked:
                _finite_scalar(t, a, u, n, keys, values, True, g)
            elif resume and try_index > 0 and iterations == 0:
                pitman_finite.finite_resumed(t, a, u, n, keys, values, g, acc, buf, tables[try_index - 1])
            else:
                pitman_finite.finite(t, a, u, n, keys, values, True, g, acc, buf)
            g1, g2, x1, x2, y1, y2 = g[0], g[1], g[2], g[3], g[4], g[5]
            if abs(g1) <= accuracy and abs(g2) <= accuracy:
                return t, a, try_index, total
            det = x1 * y2 - x2 * y1
            scalar = 1.0 / det
            i11, i12, i21, i22 = y2 * scalar, -x2 * scalar, -y1 * scalar, x1 * scalar
            t -= i11 * g1 + i12 * g2
            a -= i21 * g1 + i22 * g2
            if offset == count:
                return math.nan, math.nan, -1, total
            if not t >= 0.0:
                break
            if t != t or a != a or iterations >= iterations_per_try:
                break
            iterations += 1
            if _same_point(t, a, saved_t, saved_a):
                total += iterations_per_try + 1 - iterations   # the evaluations left of the try's budget
                break
            steps += 1
            if steps == power:
                saved_t, saved_a = t, a
                power *= 2
                steps = 0
    return math.nan, math.nan, -1, total


_NO_TABLES = np.zeros((0, 1, pitman_finite.U_SUMS + pitman_finite.N_SUMS))


def _same_point(t: float, a: float, saved_t: float, saved_a: float) -> bool:
    """The same point bit for bit: equal and neither coordinate a zero (0.0 == -0.0, but t / a tells them apart);
    NaN is never the same point."""
    return t == saved_t and a == saved_a and t != 0.0 and a != 0.0


def _finite_scalar(t: float, a: float, u: float, n: float, keys: np.ndarray, values: np.ndarray, derivatives: bool,
                   out: np.ndarray) -> None:
    """pitman_arx.PitmanSystem.iterative (derivatives) or .objective into out: the finite sums, each element as the
    Python path computes it, added left to right as ARX's Java loops do (the Python path sums pairwise). One term
    after the other: the reference for `pitman_finite.finite`, which computes the same bits blocked."""
    o1 = o3 = d1 = d5 = d3 = 0.0
    i = 1.0
    while i < u:
        val0 = i * a + t
        val1 = 1.0 / val0
        o1 += val1
        o3 += i * val1
        if derivatives:
            val3 = 1.0 / (val0 * val0)
            val4 = i * val3
            d1 += val3
            d5 += val4
            d3 += i * val4
        i += 1.0
    o2 = d2 = 0.0
    i = 1.0
    while i < n:
        v = i + t
        o2 += 1.0 / v
        if derivatives:
            d2 += 1.0 / (v * v)
        i += 1.0
    o4 = d4 = 0.0
    if keys.size:
        largest = int(keys[keys.size - 1])
        prefix1 = np.empty(max(largest - 1, 1))
        prefix2 = np.empty(max(largest - 1, 1))
        s1 = s2 = 0.0
        for j in range(1, largest):
            k = float(j) - a
            s1 += 1.0 / k
            s2 += 1.0 / (k * k)
            prefix1[j - 1] = s1
            prefix2[j - 1] = s2
        for index in range(keys.size):
            o4 += values[index] * prefix1[int(keys[index]) - 2]
            if derivatives:
                d4 += values[index] * prefix2[int(keys[index]) - 2]
    out[0] = o1 - o2
    out[1] = o3 - o4
    out[2] = d2 - d1
    out[3] = 0.0 - d5
    out[4] = 0.0 - d5
    out[5] = 0.0 - d3 - d4


def _fit(t0: float, a0: float, u: float, n: float, keys: np.ndarray, values: np.ndarray, starts: np.ndarray,
         accuracy: float, iterations_per_try: int, blocked: bool,
         tables: np.ndarray) -> tuple[float, float, int, int, int, float, float]:
    """pitman_arx.arx_pitman_fit without the result: (theta, alpha, try or -1, evaluations, method, the finite-sum
    residuals at the closed-form root). Method 0: the closed-form root, verified; 1: finite sums because the closed
    form found no root (no residuals); 2: finite sums because the closed-form root failed the check. `blocked` and
    `tables` as in `_search` (False and no tables: the scalar finite sums of before, the reference)."""
    t, a, start, evaluations = _search(t0, a0, u, n, keys, values, starts, accuracy, iterations_per_try, False,
                                       blocked, tables)
    g = np.empty(6)
    r1 = r2 = math.nan
    method = 0
    if t != t or a != a:
        redo = True
        method = 1
    else:
        if blocked:
            pitman_finite.finite(t, a, u, n, keys, values, False, g, np.empty(pitman_finite.U_SUMS
                                                                              + pitman_finite.N_SUMS),
                                 np.empty((7, pitman_finite.BLOCK)))
        else:
            _finite_scalar(t, a, u, n, keys, values, False, g)
        r1, r2 = g[0], g[1]
        redo = r1 != r1 or r2 != r2 or abs(r1) > accuracy or abs(r2) > accuracy
    if redo:
        t, a, start, more = _search(t0, a0, u, n, keys, values, starts, accuracy, iterations_per_try, True,
                                    blocked, tables)
        evaluations += more
        method = method or 2
    return t, a, start, evaluations, method, r1, r2


if numba is not None:
    _jit = numba.njit(cache=True, error_model="numpy", nogil=True)
    _closed = _jit(_closed)
    _finite_scalar = _jit(_finite_scalar)
    _same_point = _jit(_same_point)
    _search = _jit(_search)
    _solve = _jit(_solve)
    _fit = _jit(_fit)


def fit(start: tuple[float, float], u: float, n: float, keys: np.ndarray, values: np.ndarray, start_values,
        accuracy: float, iterations_per_try: int, reference: bool = False
        ) -> tuple[float, float, int | None, int, str, tuple | None]:
    """ARX's solve-and-verify: (theta, alpha, try index or None, evaluations, "closed-form" or "finite-sums", the
    finite-sum residuals at the closed-form root or None), as `pitman_arx.arx_pitman_fit` computes them.

    The finite sums run blocked and the first evaluation of each prepared start value resumes from its checkpoints
    (`engine.risk.pitman_finite`); `reference=True` runs them one term after the other from i = 1, as before. Both
    give the same bits."""
    starts = np.asarray(start_values, dtype=np.float64).reshape(-1, 2)
    if reference:
        tables = _NO_TABLES
    else:
        tables = pitman_finite.START_TABLES.for_starts(starts, pitman_finite.terms_count(max(float(u), float(n))))
    t, a, try_index, total, method, r1, r2 = _fit(
        float(start[0]), float(start[1]), float(u), float(n), np.ascontiguousarray(keys, dtype=np.float64),
        np.ascontiguousarray(values, dtype=np.float64), starts, float(accuracy), int(iterations_per_try),
        not reference, tables)
    residual = None if method == 1 else (float(r1), float(r2))
    return (float(t), float(a), None if try_index < 0 else int(try_index), int(total),
            "finite-sums" if method else "closed-form", residual)

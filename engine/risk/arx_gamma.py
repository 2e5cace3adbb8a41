"""ARX's `org.deidentifier.arx.risk.Gamma` (Minka's lightspeed digamma and trigamma), bug included, in one place for
both solver paths: plain Python in `engine.risk.pitman_arx`, compiled in `engine.risk.pitman_kernel`.

The trigamma bug: the recurrence runs up to x >= 8 while the asymptotic tail is only added for x >= 12, so for
1e-4 < x < 12 the tail is missing (exactly 0 for 8 <= x < 12). It only enters the closed-form Jacobian of Pitman's
score equations, but it changes the Newton path and therefore which roots are found, so it is kept.

With numba installed the functions are also registered as compilable (`register_jitable`): compiled callers inline
them, Python callers get the same functions uncompiled. Divisions go through `_div` so that Python returns inf and
NaN where Java does instead of raising.
"""
from __future__ import annotations

import math
import os

try:   # optional: `pip install safeshare[fast]`
    if os.environ.get("SAFESHARE_NO_NUMBA"):
        raise ImportError("disabled by SAFESHARE_NO_NUMBA")
    from numba.extending import register_jitable as jitable
except ImportError:   # pragma: no cover - depends on the installation
    def jitable(function):
        return function

NAN = math.nan
INF = math.inf
DIGAMMA_1 = -0.57721566490153286060651209008240243104215933593992
TRIGAMMA_1 = math.pi * math.pi / 6.0
TETRAGAMMA_1 = -2.0 * 1.202056903159594285399738161511449990764986292
S3, S4, S5, S6, S7 = 1.0 / 12.0, 1.0 / 120.0, 1.0 / 252.0, 1.0 / 240.0, 1.0 / 132.0
B2, B4, B6, B8, B10 = 1.0 / 6.0, -1.0 / 30.0, 1.0 / 42.0, -1.0 / 30.0, 5.0 / 66.0
LARGE_DIGAMMA = 12.0
LARGE_TRIGAMMA = 8.0
SMALL_DIGAMMA = 1e-6
SMALL_TRIGAMMA = 1e-4


@jitable
def div(x: float, y: float) -> float:
    """x / y with Java's semantics for y == 0 (signed infinity, or NaN for 0/0 and NaN/0)."""
    if y == 0.0:
        if x == 0.0 or x != x:
            return NAN
        return math.copysign(INF, x) * math.copysign(1.0, y)
    return x / y


@jitable
def _digamma_positive(x: float) -> float:
    if x <= SMALL_DIGAMMA:
        return (DIGAMMA_1 - 1.0 / x) + TRIGAMMA_1 * x
    result = 0.0
    while x < LARGE_DIGAMMA:
        result -= 1.0 / x
        x += 1.0
    r = 1.0 / x
    result += math.log(x) - 0.5 * r
    r *= r
    result -= r * (S3 - r * (S4 - r * (S5 - r * (S6 - r * S7))))
    return result


@jitable
def digamma(x: float) -> float:
    """Gamma.digamma: NaN for NaN and infinities, -inf at 0, the reflection formula below 0."""
    if x != x or x == INF or x == -INF:
        return NAN
    if x == 0.0:
        return -INF
    if x < 0.0:
        return _digamma_positive(1.0 - x) + div(math.pi, math.tan(-math.pi * x))
    return _digamma_positive(x)


@jitable
def _trigamma_positive(x: float) -> float:
    if x <= SMALL_TRIGAMMA:
        return div(1.0, x * x) + TRIGAMMA_1 + TETRAGAMMA_1 * x
    result = 0.0
    while x < LARGE_TRIGAMMA:
        result += 1.0 / (x * x)
        x += 1.0
    if x >= LARGE_DIGAMMA:
        r = 1.0 / (x * x)
        result += 0.5 * r + (1.0 + r * (B2 + r * (B4 + r * (B6 + r * (B8 + r * B10))))) / x
    return result


@jitable
def trigamma(x: float) -> float:
    """Gamma.trigamma, bug included (see the module docstring)."""
    if x != x or x == INF or x == -INF:
        return NAN
    if x == 0.0:
        return -INF
    if x < 0.0:
        r = div(math.pi, math.sin(-math.pi * x))
        return -_trigamma_positive(1.0 - x) + r * r
    return _trigamma_positive(x)

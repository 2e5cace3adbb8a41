"""`estimator: calibrated`: the smallest of Pitman, Zayatz and SNB, raised to a 99 % upper bound for sampling noise.

Why this combination (measured by benchmarks/risk_accuracy.py on census-income-kdd and on a ten-million-record
synthetic population, issue 29): every classical model mostly overestimates the population uniques, so the smallest
solved estimate is usually the closest (Dankar's rule takes the smaller of Zayatz and SNB above a 10 % sampling
fraction for the same reason). But where the population holds few uniques (tens to hundreds) each model also falls
below the truth in some samples: the estimate then rests on a handful of sample records that are population uniques,
and sampling noise alone moves it by tens of percent. A gate must not rest on such a figure, so the chosen estimate is
widened by the noise of the count behind it.

An estimate v of the population uniques implies k = f v of them in the sample (f = n / N). Drawn without replacement,
that count has mean mu and variance mu (1 - f); the one-sided score bound (k - mu)^2 = z^2 (1 - f) mu gives the
largest mean consistent with k at confidence 99 %:

    mu_upper = k + w^2 / 2 + w sqrt(k + w^2 / 4),    w = z sqrt(1 - f),  z = Phi^-1(0.99) = 2.3263...

and the estimate is mu_upper / f (capped at N). For a large count the bound adds about w / sqrt(k) (under 3 % above
ten thousand sample-level uniques); for a small one it dominates: where the models are least reliable the estimate is
most conservative. A model without a solution is left out; with none solved the estimate is unsolved (fail closed).

The rule was chosen on the benchmark it is measured on (two populations, four QI sets of 3 to 9 attributes, sampling
fractions 0.1 % to 30 %, five seeds); it was never below the truth there, which is evidence, not a proof, that it is
conservative elsewhere (engine/risk/accuracy.json and README say where it was measured).
"""
from __future__ import annotations

import math

from .histogram import SizeHistogram
from .pitman_arx import arx_pitman_uniques
from .snb import fit_snb
from .zayatz import zayatz_uniques

CONFIDENCE = 0.99
Z = 2.3263478740408408   # scipy.stats.norm.ppf(0.99)


def count_upper_bound(count: float, fraction: float, z: float = Z) -> float:
    """The largest mean mu >= count with (count - mu)^2 <= z^2 (1 - fraction) mu: the score bound for a count drawn
    with variance mu (1 - fraction) (a Poisson count when fraction is 0)."""
    if not count >= 0:
        raise ValueError(f"a count must be non-negative, got {count!r}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"a sampling fraction lies in [0, 1], got {fraction!r}")
    w = z * math.sqrt(1.0 - fraction)
    return count + w * w / 2.0 + w * math.sqrt(count + w * w / 4.0)


def calibrated_uniques(histogram: SizeHistogram, population_size: float) -> tuple[str | None, float | None, dict]:
    """(model, population uniques, parameters): the smallest solved estimate of Pitman, Zayatz and SNB raised to its
    upper bound; (None, None, parameters) when none solves. The model names the base estimate."""
    n, c1 = float(histogram.n), histogram.c1
    if c1 == 0:
        return "calibrated", 0.0, {}
    f = n / population_size
    pitman, _ = arx_pitman_uniques(histogram, population_size)
    snb = fit_snb(histogram, population_size)
    candidates = {"pitman": pitman, "zayatz": zayatz_uniques(histogram, population_size),
                  "snb": snb.population_uniques if snb.solved else None}
    parameters: dict = {**candidates, "confidence": CONFIDENCE, "z": Z}
    solved = {name: value for name, value in candidates.items() if value is not None}
    if not solved:
        return None, None, parameters
    base = min(solved, key=lambda name: solved[name])
    upper = min(count_upper_bound(f * solved[base], f) / f, population_size)
    parameters.update(base=base, base_population_uniques=solved[base])
    return f"{base} (99% upper bound)", upper, parameters

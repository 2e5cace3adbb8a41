"""`estimator: calibrated`: the smallest of Pitman, Zayatz and SNB, raised by a 99 % upper bound for sampling noise
of at most ten sample records.

Why this combination (measured by benchmarks/risk_accuracy.py on census-income-kdd and on a ten-million-record
synthetic population, issue 29): every classical model mostly overestimates the population uniques, so the smallest
solved estimate is usually the closest (Dankar's rule takes the smaller of Zayatz and SNB above a 10 % sampling
fraction for the same reason). But where the population holds few uniques (tens to hundreds) each model also falls
below the truth in some samples: the estimate then rests on a handful of sample records that are population uniques,
and sampling noise or a misfit alone moves it by tens of percent. A gate must not rest on such a figure, so the chosen
estimate is widened where the count behind it is small.

An estimate v of the population uniques implies k = f v of them in the sample (f = n / N). Drawn without replacement,
that count has mean mu and variance mu (1 - f); the one-sided score bound (k - mu)^2 = z^2 (1 - f) mu gives the
largest mean consistent with k at confidence 99 %:

    mu_upper = k + w^2 / 2 + w sqrt(k + w^2 / 4),    w = z sqrt(1 - f),  z = Phi^-1(0.99) = 2.3263...

The allowance mu_upper - k is capped at ten sample records (ALLOWANCE_CAP), so the estimate is

    (k + min(mu_upper - k, 10)) / f        (capped at N).

The bound reaches ten at k of about 8.5; below that (few population uniques, where the models fell below the truth:
up to 7.9 sample records short on the benchmark, census QI A+ at f = 2 %, where SNB's moment fit lands at about
half the truth) the full bound applies. Above it the count behind the estimate is large and every model was above the
truth in every run of the benchmark: there the uncapped bound only added error (about +20 % on census QI A+ at
f = 20-30 %, +10 % on the 9-attribute set at 0.5 %), which made the uncapped rule less accurate than Dankar's on
census-income-kdd. Caps from 8 to 30 records were all never below the truth and more accurate than Dankar's rule on
both populations, in the tuned runs and in the out-of-sample check; 10 leaves a margin above the largest shortfall.
A model without a solution is left out; with none solved the estimate is unsolved (fail closed).

The rule was chosen on the benchmark it is measured on (two populations, four QI sets of 3 to 9 attributes, sampling
fractions 0.1 % to 30 %, five seeds) and checked on other seeds and another synthetic population; it was never below
the truth there, which is evidence, not a proof, that it is conservative elsewhere (engine/risk/accuracy.json and
README say where it was measured). Elsewhere, a large count whose model is below the truth is protected by ten sample
records only.
"""
from __future__ import annotations

import math

from .histogram import SizeHistogram
from .pitman_arx import arx_pitman_uniques
from .snb import fit_snb
from .zayatz import zayatz_uniques

CONFIDENCE = 0.99
Z = 2.3263478740408408   # scipy.stats.norm.ppf(0.99)
ALLOWANCE_CAP = 10.0     # sample records: the most the bound adds to the count behind the estimate


def count_upper_bound(count: float, fraction: float, z: float = Z) -> float:
    """The largest mean mu >= count with (count - mu)^2 <= z^2 (1 - fraction) mu: the score bound for a count drawn
    with variance mu (1 - fraction) (a Poisson count when fraction is 0)."""
    if not count >= 0:
        raise ValueError(f"a count must be non-negative, got {count!r}")
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"a sampling fraction lies in [0, 1], got {fraction!r}")
    w = z * math.sqrt(1.0 - fraction)
    return count + w * w / 2.0 + w * math.sqrt(count + w * w / 4.0)


def capped_count_upper_bound(count: float, fraction: float, cap: float = ALLOWANCE_CAP, z: float = Z) -> float:
    """count plus the score bound's allowance, at most `cap`: the full bound for small counts, count + cap above."""
    return count + min(count_upper_bound(count, fraction, z) - count, cap)


def calibrated_uniques(histogram: SizeHistogram, population_size: float) -> tuple[str | None, float | None, dict]:
    """(model, population uniques, parameters): the smallest solved estimate of Pitman, Zayatz and SNB raised by its
    capped upper bound; (None, None, parameters) when none solves. The model names the base estimate."""
    n, c1 = float(histogram.n), histogram.c1
    if c1 == 0:
        return "calibrated", 0.0, {}
    f = n / population_size
    pitman, _ = arx_pitman_uniques(histogram, population_size)
    snb = fit_snb(histogram, population_size)
    candidates = {"pitman": pitman, "zayatz": zayatz_uniques(histogram, population_size),
                  "snb": snb.population_uniques if snb.solved else None}
    parameters: dict = {**candidates, "confidence": CONFIDENCE, "z": Z, "allowance_cap": ALLOWANCE_CAP}
    solved = {name: value for name, value in candidates.items() if value is not None}
    if not solved:
        return None, None, parameters
    base = min(solved, key=lambda name: solved[name])
    count = f * solved[base]
    allowance = capped_count_upper_bound(count, f) - count
    upper = min((count + allowance) / f, population_size)
    parameters.update(base=base, base_population_uniques=solved[base], sample_allowance=allowance,
                      capped=allowance >= ALLOWANCE_CAP)
    return f"{base} (99% upper bound)", upper, parameters

"""Super-population risk models against values computed independently here (plain loops, scipy root finding,
scipy's hypergeometric and negative binomial distributions)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import optimize, stats

from engine.errors import InputError
from engine.risk import SizeHistogram, population_uniqueness, presets, resolve_population
from engine.risk.pitman_arx import PitmanSystem, arx_pitman_fit, hoshino_start
from engine.risk.snb import fit_snb, shlosser_classes
from engine.risk.zayatz import zayatz_uniques

# A long-tailed sample: many uniques, some large classes (n = 1,290).
HISTOGRAM = {1: 300, 2: 80, 3: 40, 4: 20, 5: 10, 8: 5, 20: 2, 150: 1, 400: 1}
# Pitman has no root with theta >= 0, 0 < alpha < 1 here (the likelihood runs to the alpha = 0 boundary).
NO_PITMAN_ROOT = {1: 400, 2: 50, 3: 10}   # no root with 0 < alpha < 1; ARX's solver finds one with alpha < 0
ARX_PITMAN_FAILS = {1: 100, 2: 50, 3: 20, 10: 5}   # ARX: Pitman invalid at every population size (arx-notes 7.1)


def class_sizes(histogram: dict[int, int]) -> np.ndarray:
    return np.repeat(np.array(list(histogram), dtype=np.int64), list(histogram.values()))


def n_u(histogram):
    return sum(s * c for s, c in histogram.items()), sum(histogram.values())


def pitman_equations_by_loops(histogram, theta, alpha):
    """The two ML equations of Hoshino (2001) as plain finite sums."""
    n, u = n_u(histogram)
    f1 = sum(1 / (theta + i * alpha) for i in range(1, u)) - sum(1 / (theta + i) for i in range(1, n))
    f2 = sum(i / (theta + i * alpha) for i in range(1, u)) - sum(
        count * sum(1 / (j - alpha) for j in range(1, size)) for size, count in histogram.items() if size >= 2)
    return [f1, f2]


def test_histogram_counts():
    h = SizeHistogram.from_class_sizes(class_sizes(HISTOGRAM))
    assert (h.n, h.u, h.c1, h.c2) == (n_u(HISTOGRAM)[0], n_u(HISTOGRAM)[1], 300, 80)


def test_closed_forms_equal_finite_sums():
    """ARX's closed forms give the ML equations of the loops; its finite-sum Jacobian is their derivative (the
    closed-form Jacobian is not compared: it carries ARX's trigamma bug, which only changes the Newton path)."""
    system = PitmanSystem(SizeHistogram.from_counts(HISTOGRAM))
    for theta, alpha in [(0.0, 0.3), (5.0, 0.5), (250.0, 0.9), (3000.0, 0.05)]:
        closed = system.closed(theta, alpha)[:2]
        finite = system.iterative(theta, alpha)
        np.testing.assert_allclose(closed, pitman_equations_by_loops(HISTOGRAM, theta, alpha), rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(finite[:2], pitman_equations_by_loops(HISTOGRAM, theta, alpha), rtol=1e-9,
                                   atol=1e-10)
        h = 1e-6
        numeric = np.column_stack([
            (np.array(pitman_equations_by_loops(HISTOGRAM, theta + h, alpha))
             - np.array(pitman_equations_by_loops(HISTOGRAM, max(theta - h, 0.0), alpha))) / (theta + h - max(theta - h, 0.0)),
            (np.array(pitman_equations_by_loops(HISTOGRAM, theta, alpha + h))
             - np.array(pitman_equations_by_loops(HISTOGRAM, theta, alpha - h))) / (2 * h)])
        np.testing.assert_allclose(np.array(finite[2:]).reshape(2, 2), numeric, rtol=1e-4, atol=1e-6)


def test_hoshino_start_matches_the_moment_formulas():
    n, u = n_u(HISTOGRAM)
    c1, c2 = 300, 80
    c = c1 * (c1 - 1) / c2
    theta = (n * u * c - c1 * (n - 1) * (2 * u + c)) / (2 * c1 * u + c1 * c - n * c)
    alpha = (theta * (c1 - n) + (n - 1) * c1) / (n * u)
    assert hoshino_start(SizeHistogram.from_counts(HISTOGRAM)) == pytest.approx((theta, alpha), rel=1e-12)


@pytest.mark.parametrize("population", [1e5, 318.9e6])
def test_pitman_matches_scipy_root_of_the_finite_sums(population):
    uniques, fit = arx_pitman_fit(SizeHistogram.from_counts(HISTOGRAM), population)
    assert fit["theta"] is not None
    reference = optimize.root(lambda x: pitman_equations_by_loops(HISTOGRAM, x[0], x[1]), [50.0, 0.5], tol=1e-13)
    assert reference.success
    theta, alpha = reference.x
    assert theta >= 0 and 0 < alpha < 1
    assert fit["theta"] == pytest.approx(theta, rel=1e-6)
    assert fit["alpha"] == pytest.approx(alpha, rel=1e-6)
    expected = math.gamma(theta + 1) / math.gamma(theta + alpha) * population ** alpha if theta < 150 else \
        math.exp(math.lgamma(theta + 1) - math.lgamma(theta + alpha)) * population ** alpha
    assert uniques == pytest.approx(expected, rel=1e-6)
    estimate = population_uniqueness(class_sizes(HISTOGRAM), population, "pitman")
    assert estimate.model_used == "pitman" and estimate.solved
    assert estimate.population_uniqueness == pytest.approx(expected / population, rel=1e-6)


def test_pitman_without_a_root_reports_no_solution():
    # Independently: the least-squares minimum over the whole domain leaves a residual far above the tolerance.
    best = min((optimize.least_squares(lambda x: pitman_equations_by_loops(NO_PITMAN_ROOT, x[0], x[1]), [t0, a0],
                                       bounds=([0, 1e-9], [np.inf, 1 - 1e-9]))
                for a0 in (0.05, 0.5, 0.95) for t0 in (0.0, 100.0, 1e4)), key=lambda r: r.cost)
    assert np.max(np.abs(best.fun)) > 1e-5
    # ARX constrains only theta >= 0, and the root it finds has alpha < 0 (a finite population of classes).
    extended = population_uniqueness(class_sizes(NO_PITMAN_ROOT), 318.9e6, "pitman")
    assert extended.solved and extended.alpha < 0
    for population in (1e3, 1e6, 3e8):
        estimate = population_uniqueness(class_sizes(ARX_PITMAN_FAILS), population, "pitman")
        assert estimate.solved is False and estimate.population_uniqueness is None
        assert "no solution" in estimate.note
    # Only uniques: no root either.
    assert population_uniqueness(np.ones(50, dtype=int), 1e6, "pitman").solved is False


def test_no_sample_uniques_means_no_population_uniques():
    for estimator in ("pitman", "zayatz", "snb", "dankar"):
        estimate = population_uniqueness(np.array([2, 3, 5, 5]), 1e6, estimator)
        assert estimate.solved and estimate.population_uniques == 0.0


@pytest.mark.parametrize("population", [1_500.0, 12_900.0, 318.9e6])
def test_zayatz_matches_the_hypergeometric_sum(population):
    n, u = n_u(HISTOGRAM)
    c1 = HISTOGRAM[1]
    N = int(population)
    # Exact hypergeometric P(exactly one of the class's i members is drawn), in integer arithmetic.
    p = {size: Fraction(size * math.comb(N - size, n - 1), math.comb(N, n)) for size in HISTOGRAM}
    share = (Fraction(c1, u) * p[1]) / sum(Fraction(count, u) * p[size] for size, count in HISTOGRAM.items())
    expected = float(c1 / Fraction(n, N) * share)
    assert zayatz_uniques(SizeHistogram.from_counts(HISTOGRAM), population) == pytest.approx(expected, rel=1e-9)
    if N < 10**6:  # scipy agrees where its floating-point pmf is accurate
        assert stats.hypergeom.pmf(1, N, 3, n) == pytest.approx(float(p[3]), rel=1e-9)


def shlosser_by_loops(histogram, f):
    c1 = histogram.get(1, 0)
    u = sum(histogram.values())
    a = sum(i * f * f * (1 - f * f) ** (i - 1) * F for i, F in histogram.items())
    b = sum((1 - f) ** i * ((1 + f) ** i - 1) * F for i, F in histogram.items())
    c = sum((1 - f) ** i * F for i, F in histogram.items())
    d = sum(i * f * (1 - f) ** (i - 1) * F for i, F in histogram.items())
    return u + c1 * (a / b) * (c / d) ** 2


def sample_class_probability(size, alpha, beta, f, terms=4000):
    """P(a non-empty population class shows `size` records in the sample): its population size is 1 + X with
    X ~ NB(alpha, beta), and each member is sampled with probability f. Summed directly over population sizes."""
    x = np.arange(terms)
    return float((stats.nbinom.pmf(x, alpha, beta) * stats.binom.pmf(size, x + 1, f)).sum())


@pytest.mark.parametrize("f", [0.05, 0.3])
def test_snb_solves_the_moment_equations_from_the_distribution(f):
    population = n_u(HISTOGRAM)[0] / f
    h = SizeHistogram.from_counts(HISTOGRAM)
    K = shlosser_classes(h, f)
    assert K == pytest.approx(shlosser_by_loops(HISTOGRAM, f), rel=1e-12)
    fit = fit_snb(h, population)
    assert fit.solved
    # The fitted model reproduces the observed sample uniques and pairs (computed from scipy's distributions).
    assert K * sample_class_probability(1, fit.alpha, fit.beta, f) == pytest.approx(HISTOGRAM[1], rel=1e-5)
    assert K * sample_class_probability(2, fit.alpha, fit.beta, f) == pytest.approx(HISTOGRAM[2], rel=1e-5)
    assert fit.population_uniques == pytest.approx(K * stats.nbinom.pmf(0, fit.alpha, fit.beta), rel=1e-9)


def test_dankar_uses_pitman_for_small_fractions_and_zayatz_when_pitman_fails():
    small = population_uniqueness(class_sizes(HISTOGRAM), 318.9e6, "dankar")
    pitman = population_uniqueness(class_sizes(HISTOGRAM), 318.9e6, "pitman")
    assert small.model_used == "pitman" and small.population_uniques == pitman.population_uniques
    fallback = population_uniqueness(class_sizes(ARX_PITMAN_FAILS), 318.9e6, "dankar")
    zayatz = population_uniqueness(class_sizes(ARX_PITMAN_FAILS), 318.9e6, "zayatz")
    assert fallback.model_used == "zayatz" and fallback.population_uniques == zayatz.population_uniques


def test_dankar_takes_the_smaller_of_zayatz_and_snb_above_ten_percent():
    n = n_u(HISTOGRAM)[0]
    population = n / 0.3
    estimate = population_uniqueness(class_sizes(HISTOGRAM), population, "dankar")
    zayatz = population_uniqueness(class_sizes(HISTOGRAM), population, "zayatz")
    snb = population_uniqueness(class_sizes(HISTOGRAM), population, "snb")
    assert zayatz.solved and snb.solved
    smaller = min((zayatz, snb), key=lambda e: e.population_uniques)
    assert estimate.model_used == smaller.model_used
    assert estimate.population_uniques == pytest.approx(smaller.population_uniques)
    assert estimate.sampling_fraction == pytest.approx(0.3)


def test_population_presets_name_source_and_year():
    table = presets()
    for name in ("USA", "California", "Los Angeles", "UK", "Germany", "EU"):
        assert table[name]["size"] > 0 and table[name]["source"] and 1990 < table[name]["year"] < 2030
    assert resolve_population("usa") == 318_900_000
    assert resolve_population("1e6") == resolve_population(1_000_000) == 1e6
    with pytest.raises(InputError, match="unknown preset 'Atlantis'.*USA"):
        resolve_population("Atlantis")
    with pytest.raises(InputError, match="positive"):
        resolve_population(-5)


def test_sample_larger_than_population_is_an_error():
    with pytest.raises(ValueError, match="larger than the population"):
        population_uniqueness(np.ones(10, dtype=int), 5, "zayatz")

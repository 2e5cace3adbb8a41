"""Per-record risk (engine.risk.individual, engine.risk.loglinear) against values computed independently: sdcMicro's
published test figures, the negative-binomial series summed term by term, the Poisson measures summed over F, and
statsmodels' Poisson GLM fitted to the full contingency table."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import gammaln

from engine.risk.individual import (high_risk_threshold, individual_risk, key_risk, negative_binomial_risk,
                                    records_above, risk_histogram, summarize)
from engine.risk.loglinear import (LogLinearError, expected_inverse, fit_main_effects, fit_two_way, loglinear_risk,
                                   poisson_measures)


# --- negative binomial (Benedetti and Franconi) ------------------------------------------------------------------
def nb_series(f: int, p: float) -> float:
    """E(1/F | f) summed term by term over h = f, f+1, ... until the terms no longer matter."""
    q = 1.0 - p
    mean = f / p
    h = np.arange(f, int(mean * 40 + 5000), dtype=np.float64)
    log_pmf = gammaln(h) - gammaln(f) - gammaln(h - f + 1) + f * np.log(p) + (h - f) * np.log(q)
    return float(np.sum(np.exp(log_pmf) / h))


def test_sdcmicro_published_example_exact_method():
    """sdcMicro's tests/testthat/test_indivRisk.R: three keys A, B, C with sampling weights, method = "exact"
    (f = 1, 2 exact there; f = 3 by its exact recursion). Keys: (2,3,1) f=3 F=18+39+51, (3,3,3) f=1 F=45.5,
    (2,3,2) f=1 F=17, (3,3,1) f=2 F=92+8, (1,4,1) f=1 F=123.5."""
    f = np.array([3, 1, 3, 1, 2, 2, 1, 3])
    totals = np.array([108.0, 45.5, 108.0, 17.0, 100.0, 100.0, 123.5, 108.0])
    published = [0.01355297, 0.08579129, 0.01355297, 0.17707583, 0.01877883, 0.01877883, 0.03931625, 0.01355297]
    assert negative_binomial_risk(f, totals) == pytest.approx(published, abs=5e-9)


def test_sdcmicro_approximation_for_larger_keys_is_close_but_not_used():
    """sdcMicro's default ("approx") takes p / (f - q) for f >= 3 (0.01369863 in the published example); the engine
    sums the exact series, which is smaller."""
    p = 3 / 108
    exact = float(negative_binomial_risk(np.array([3]), np.array([108.0]))[0])
    assert p / (3 - (1 - p)) == pytest.approx(0.01369863, abs=5e-9)
    assert exact < p / (3 - (1 - p))
    assert exact == pytest.approx(p / (3 - (1 - p)), rel=0.02)


@pytest.mark.parametrize("f", [1, 2, 3, 4, 5, 8, 20, 60])
@pytest.mark.parametrize("p", [0.002, 0.01, 0.05, 0.2, 0.5, 0.9, 0.995, 0.99999])
def test_closed_forms_and_series_equal_the_summed_negative_binomial(f, p):
    totals = np.array([f / p])
    got = float(negative_binomial_risk(np.array([f]), totals)[0])
    assert got == pytest.approx(nb_series(f, p), rel=1e-9)


@pytest.mark.parametrize("f", [7, 8, 9, 120, 400])
@pytest.mark.parametrize("p", [0.3, 0.7, 0.999])
def test_large_classes_equal_the_summed_negative_binomial(f, p):
    """The series summed in numpy from f = 8 on (scipy's hyp2f1 returns NaN there for large f), on both sides."""
    got = float(negative_binomial_risk(np.array([f]), np.array([f / p]))[0])
    assert got == pytest.approx(nb_series(f, p), rel=1e-9)


@pytest.mark.parametrize("f", [500, 5_000, 200_000])
@pytest.mark.parametrize("p", [1e-6, 1e-3, 0.05, 0.5, 0.99])
def test_very_large_classes_follow_the_asymptote(f, p):
    """For large f, E(1/F | f) = p / (f - q) + O(q^2 p / f^3) (sdcMicro's approximation becomes exact): finite,
    positive, never above 1/f, whatever the sampling fraction."""
    got = float(negative_binomial_risk(np.array([f]), np.array([f / p]))[0])
    assert got == pytest.approx(p / (f - (1 - p)), rel=4 / f ** 2)
    assert 0 < got <= 1 / f


@pytest.mark.parametrize("f", [4, 5, 10, 50])
@pytest.mark.parametrize("p", [0.3, 0.7, 0.95])
def test_mu_argus_truncated_series_agrees_to_its_truncation_error(f, p):
    """The mu-Argus manual (4.1, as sdcMicro's measure_risk C++ code carries it) sums seven terms of
    (p/f) * (1 + q/(f+1) + 2q^2/((f+1)(f+2)) + ...) for f > 3; the engine sums the series to the end, so the two
    differ by at most the tail after seven terms."""
    q = 1 - p
    term, total, denominator = 1.0, 1.0, 1.0
    for j in range(1, 8):
        denominator *= f + j
        term = math.factorial(j) * q ** j / denominator
        total += term
    truncated = p / f * total
    next_term = math.factorial(8) * q ** 8 / (denominator * (f + 8))
    got = float(negative_binomial_risk(np.array([f]), np.array([f / p]))[0])
    assert truncated <= got <= truncated + p / f * next_term / (1 - q) + 1e-15


def test_closed_forms_written_as_sdcmicro_writes_them():
    """f = 1: p/q log(1/p); f = 2: p/q - (p/q)^2 log(1/p) (sdcMicro's spelling of the same closed form)."""
    p = np.array([0.03, 0.3, 0.7])
    q = 1 - p
    assert negative_binomial_risk(np.ones(3), 1 / p) == pytest.approx(p / q * np.log(1 / p), rel=1e-12)
    assert negative_binomial_risk(np.full(3, 2.0), 2 / p) == pytest.approx(
        p / q - (p / q) ** 2 * np.log(1 / p), rel=1e-12)


def test_census_keys_have_risk_one_over_f_and_tiny_fractions_stay_finite():
    f = np.array([1, 2, 7, 1, 4])
    totals = np.array([1.0, 2.0, 7.0, 1e9, 4e9])
    risk = negative_binomial_risk(f, totals)
    assert risk[:3] == pytest.approx([1.0, 0.5, 1 / 7], rel=1e-12)
    assert np.all(np.isfinite(risk)) and np.all(risk > 0)
    # p -> 0: E(1/F) ~ p log(1/p) for f = 1, ~ p / (f - 1) for f >= 2
    assert risk[3] == pytest.approx(1e-9 * np.log(1e9), rel=1e-6)
    assert risk[4] == pytest.approx(1e-9 / 3, rel=1e-6)


def test_risk_falls_with_the_class_size_and_the_sampling_fraction():
    sizes = np.arange(1, 40)
    risk = key_risk(sizes, 10_000.0)
    assert np.all(np.diff(risk) < 0)
    assert np.all(key_risk(sizes, 1e6) < risk)
    assert np.all(risk <= 1 / sizes + 1e-15)   # never above the prosecutor risk 1/f


def test_bad_keys_are_refused():
    with pytest.raises(ValueError):
        negative_binomial_risk(np.array([0]), np.array([5.0]))
    with pytest.raises(ValueError):
        negative_binomial_risk(np.array([3]), np.array([2.0]))
    with pytest.raises(ValueError):
        key_risk(np.array([5, 5]), 9.0)


def test_global_measures_sum_per_record_risks():
    sizes = np.array([1, 1, 2, 5, 30])
    population = 2_000.0
    risk = key_risk(sizes, population)
    summary = individual_risk(sizes, population)
    by_record = np.repeat(risk, sizes)
    assert summary["expected_reidentifications"] == pytest.approx(by_record.sum(), rel=1e-12)
    assert summary["global_risk"] == pytest.approx(by_record.mean(), rel=1e-12)
    assert summary["max_risk"] == pytest.approx(by_record.max())
    assert summary["median_risk"] == pytest.approx(float(np.median(by_record)))
    assert summary["sampling_fraction"] == pytest.approx(39 / 2000)
    assert sum(row["records"] for row in summary["histogram"]) == 39
    assert records_above(sizes, risk, risk[2]) == 2


def test_histogram_counts_records_in_their_interval():
    sizes = np.array([3, 4, 5])
    risk = np.array([0.0005, 0.15, 1.0])
    rows = {(row["lower"], row["upper"]): row["records"] for row in risk_histogram(sizes, risk)}
    assert rows[(0.0, 0.001)] == 3 and rows[(0.1, 0.2)] == 4 and rows[(0.5, 1.0)] == 5
    assert sum(rows.values()) == 12


def test_high_risk_rule_is_median_plus_three_mad_and_above_a_tenth():
    """sdcMicro: risk > median + 3 * mad (R's mad, scaled by 1.4826) and > 0.1, over records."""
    sizes = np.array([10, 10, 1])
    risk = np.array([0.01, 0.02, 0.9])
    values = np.repeat(risk, sizes)
    median = np.median(values)
    mad = 1.4826 * np.median(np.abs(values - median))
    assert high_risk_threshold(sizes, risk) == pytest.approx(max(median + 3 * mad, 0.1))
    assert summarize(sizes, risk)["high_risk_records"] == 1
    assert high_risk_threshold(np.array([5]), np.array([0.01])) == 0.1


# --- Skinner and Shlomo's log-linear Poisson model -----------------------------------------------------------------
def poisson_expected_inverse(f: int, a: float) -> float:
    """E(1/F | f) with F - f ~ Poisson(a), summed over F directly."""
    m = np.arange(0, int(a + 60 * np.sqrt(a) + 400), dtype=np.float64)
    log_pmf = -a + m * np.log(a) - gammaln(m + 1)
    return float(np.sum(np.exp(log_pmf) / (f + m)))


@pytest.mark.parametrize("f", [1, 2, 3, 7, 40, 600, 5_000])
@pytest.mark.parametrize("a", [1e-6, 0.01, 0.5, 3.0, 40.0, 900.0, 20_000.0])
def test_poisson_expected_inverse_equals_the_direct_sum(f, a):
    assert float(expected_inverse(np.array([f]), np.array([a]))[0]) == pytest.approx(
        poisson_expected_inverse(f, a), rel=1e-9)


def test_sample_unique_measures_and_taus_equal_direct_sums():
    sizes = np.array([1, 1, 2, 1, 5])
    mu = np.array([0.2, 1.5, 2.0, 0.01, 4.0])
    pi = 0.05
    measures = poisson_measures(sizes, mu, pi)
    a = (1 - pi) * mu / pi
    unique = sizes == 1
    p_direct = [np.exp(-x) for x in a[unique]]               # P(F - 1 = 0) under Poisson(a)
    assert measures["population_unique_given_sample_unique"] == pytest.approx(p_direct, rel=1e-12)
    assert measures["tau1"] == pytest.approx(sum(p_direct), rel=1e-12)
    assert measures["tau2"] == pytest.approx(sum(poisson_expected_inverse(1, x) for x in a[unique]), rel=1e-9)
    assert measures["risk"] == pytest.approx([poisson_expected_inverse(int(f), x) for f, x in zip(sizes, a)],
                                             rel=1e-9)


def _sample_codes(seed: int, n: int, cards: tuple[int, ...]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    first = rng.integers(0, cards[0], n)
    rows = [first]
    for card in cards[1:]:   # dependent attributes, so that the two-way model differs from independence
        shift = rng.integers(0, 2, n)
        rows.append((rows[-1] + shift + rng.integers(0, card, n) * (rng.random(n) < 0.4)) % card)
    return np.stack(rows)


def _glm_fitted(codes: np.ndarray, cards: tuple[int, ...], two_way: bool) -> np.ndarray:
    """statsmodels' Poisson GLM on every cell of the table (dummy coding), fitted counts in C order."""
    import statsmodels.api as sm

    grid = np.stack(np.meshgrid(*[np.arange(c) for c in cards], indexing="ij")).reshape(len(cards), -1)
    counts = np.zeros(cards)
    np.add.at(counts, tuple(codes), 1.0)
    columns = [np.ones(grid.shape[1])]
    dummies = [[(grid[j] == v).astype(float) for v in range(1, c)] for j, c in enumerate(cards)]
    for group in dummies:
        columns += group
    if two_way:
        for i in range(len(cards)):
            for j in range(i + 1, len(cards)):
                columns += [x * y for x in dummies[i] for y in dummies[j]]
    design = np.column_stack(columns)
    result = sm.GLM(counts.reshape(-1), design, family=sm.families.Poisson()).fit(tol=1e-12, maxiter=500)
    return result.fittedvalues.reshape(cards)


def test_main_effects_fit_is_statsmodels_poisson_glm():
    cards = (4, 3, 5)
    codes = _sample_codes(1, 300, cards)
    keys = np.unique(codes, axis=1)
    glm = _glm_fitted(codes, cards, two_way=False)
    assert fit_main_effects(codes, cards, keys) == pytest.approx(glm[tuple(keys)], rel=1e-6)


def test_two_way_fit_is_statsmodels_poisson_glm():
    cards = (3, 4, 3)
    codes = _sample_codes(2, 400, cards)
    keys = np.unique(codes, axis=1)
    glm = _glm_fitted(codes, cards, two_way=True)
    ours = fit_two_way(codes, cards, keys)
    assert ours == pytest.approx(glm[tuple(keys)], rel=1e-4, abs=1e-6)
    assert not np.allclose(ours, fit_main_effects(codes, cards, keys), rtol=1e-3)


def test_loglinear_risk_summary_and_limits():
    cards = (4, 3, 5)
    codes = _sample_codes(3, 200, cards)
    summary, keys, sizes, risk = loglinear_risk(codes, cards, 20_000.0)
    assert sizes.sum() == 200 and keys.shape[1] == sizes.size
    assert summary["expected_reidentifications"] == pytest.approx(float(np.dot(sizes, risk)))
    assert summary["global_risk"] == pytest.approx(summary["expected_reidentifications"] / 200)
    assert 0 <= summary["tau1"] <= summary["tau2"] <= summary["sample_uniques"]
    with pytest.raises(LogLinearError, match="cells"):
        fit_two_way(np.zeros((3, 5), dtype=np.int64), (1000, 1000, 1000), np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(LogLinearError):
        loglinear_risk(codes, cards, 20_000.0, interactions="three_way")

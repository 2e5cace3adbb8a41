"""The ARX port of Pitman's estimator reproduces ARX 3.9.2's numbers (arx-notes section 7.1) and its CUP optimum."""
from __future__ import annotations

import math

import pytest
import scipy.special

from tests.engine.conftest import EXAMPLES

from engine.risk.histogram import SizeHistogram
from engine.risk.pitman_arx import (START_VALUES, arx_digamma, arx_pitman_fit, arx_pitman_uniques, arx_trigamma, hoshino_start,
                                    newton_raphson_2d, PitmanSystem)

ADULT = {1: 15512, 2: 2098, 3: 754, 4: 375, 5: 189, 6: 155, 7: 97, 8: 73, 9: 39, 10: 37, 11: 29, 12: 18, 13: 23,
         14: 14, 15: 15, 16: 9, 17: 11, 18: 10, 19: 10, 20: 5, 21: 3, 22: 4, 23: 3, 24: 2, 25: 1, 26: 3, 27: 5, 29: 1,
         30: 2, 32: 1, 34: 1, 35: 1, 36: 1, 45: 1}


def _uniques(histogram: dict[int, int], population: float):
    return arx_pitman_uniques(SizeHistogram.from_counts(histogram), population)


@pytest.mark.parametrize("population, expected", [
    (317_238_626, 12_339_373.4063),
    (318_900_000, 12_385_733.8806),
    (39_140_000, 2_746_920.3028),
    (4_031_000, 537_132.0876),
    (150_810, 50_766.87),
    (60_324, 26_295.40),
])
def test_raw_adult_matches_arx(population, expected):
    uniques, params = _uniques(ADULT, population)
    assert uniques == pytest.approx(expected, rel=1e-6)
    assert params["method"] == "closed-form" and params["start"] == 0
    assert params["theta"] == pytest.approx(3176.2335, rel=1e-7)
    assert params["alpha"] == pytest.approx(0.7179489, rel=1e-6)


@pytest.mark.parametrize("histogram, population, expected", [
    # The notes' "Pitman 0.300836" is a number of uniques, not a PU fraction: the root has alpha < 0.
    ({1: 10, 2: 40, 5: 100, 20: 30}, 5e4, 0.300836),
    ({1: 10, 2: 40, 5: 100, 20: 30}, 1e6, 0.006458),
    ({1: 3000, 2: 100, 3: 10}, 1e6, 187_483.1066),
    ({1: 3000, 2: 100, 3: 10}, 3e8, 5_557_197.5399),
])
def test_synthetic_histograms_match_arx(histogram, population, expected):
    uniques, _ = _uniques(histogram, population)
    assert uniques == pytest.approx(expected, rel=1e-6, abs=5e-7)   # the notes print 4 / 6 decimals


def test_negative_alpha_root_is_accepted_like_arx():
    _, params = _uniques({1: 10, 2: 40, 5: 100, 20: 30}, 5e4)
    assert params["alpha"] < 0 and params["theta"] > 0 and params["start"] == 2   # prepared start value (0, 0.33)


@pytest.mark.parametrize("population", [1e3, 1e4, 1e6, 3e8])
def test_histogram_without_valid_estimate_fails(population):
    uniques, _ = _uniques({1: 100, 2: 50, 3: 20, 10: 5}, population)
    assert uniques is None


def test_only_uniques_has_no_estimate():
    assert _uniques({1: 500}, 1e6)[0] is None


def test_start_values_are_arx_defaults():
    assert len(START_VALUES) == 16
    assert [round(t, 2) for t, _ in START_VALUES[::4]] == [0.0, 0.33, 0.66, 0.99]
    assert [round(a, 2) for _, a in START_VALUES[:4]] == [0.0, 0.33, 0.66, 0.99]


def test_digamma_matches_scipy():
    for x in (1e-7, 1e-3, 0.3, 1.0, 2.5, 7.9, 11.99, 12.0, 50.0, 1e6, -0.5, -3.1):
        assert arx_digamma(x) == pytest.approx(float(scipy.special.psi(x)), rel=1e-10, abs=1e-10)


def test_trigamma_reproduces_arx_bug():
    assert arx_trigamma(10.0) == 0.0                          # 8 <= x < 12: no tail at all
    assert arx_trigamma(1.0) == pytest.approx(1.5118, abs=1e-4)   # true value pi^2/6 = 1.6449
    assert arx_trigamma(20.0) == pytest.approx(float(scipy.special.polygamma(1, 20.0)), rel=1e-12)
    x = 1e-5
    assert arx_trigamma(x) == 1.0 / (x * x) + math.pi ** 2 / 6 - 2 * 1.2020569031595942 * x


def test_vectorized_closed_form_equals_scalar_loop():
    """The numpy per-class-size path (many distinct sizes) and the plain loop give the same residuals."""
    system = PitmanSystem(SizeHistogram.from_counts(ADULT))
    assert system._scalar_keys is None
    scalar = PitmanSystem(SizeHistogram.from_counts(ADULT))
    scalar._scalar_keys = [(float(k), float(v)) for k, v in zip(scalar.keys, scalar.values)]
    for theta, alpha in ((3000.0, 0.7), (0.5, 0.2), (10.0, -1.5), (1e6, 0.99), (5.0, 3.7)):
        a, b = system.closed(theta, alpha), scalar.closed(theta, alpha)
        for x, y in zip(a, b):
            assert x == pytest.approx(y, rel=1e-13, abs=1e-13) or (math.isnan(x) and math.isnan(y))


def test_finite_sums_agree_with_closed_form_residuals():
    system = PitmanSystem(SizeHistogram.from_counts(ADULT))
    for theta, alpha in ((3000.0, 0.7), (100.0, 0.3)):
        closed = system.closed(theta, alpha)[:2]
        finite = system.objective(theta, alpha)
        assert closed == pytest.approx(finite, rel=1e-9, abs=1e-9)
        assert system.iterative(theta, alpha)[:2] == finite


def test_last_start_value_only_has_its_initial_point_tested():
    calls = []

    def never(theta, alpha):                                   # never converges; each Newton step is theta += 1
        calls.append((theta, alpha))
        return -1.0, 0.0, 1.0, 0.0, 0.0, 1.0

    theta, alpha, start, evaluations = newton_raphson_2d(never, (5.0, 0.5))
    assert math.isnan(theta) and math.isnan(alpha) and start is None
    # 16 tries (Hoshino start + start values 0..14) of 1 + 1000 evaluations each, then one evaluation of the last one
    assert evaluations == 16 * 1001 + 1 == len(calls)
    assert calls[-1] == START_VALUES[-1] and calls[-2] == (START_VALUES[-2][0] + 1000, START_VALUES[-2][1])


def test_small_iteration_budget_never_reaches_the_last_start_values():
    """With iterationsPerTry(k) the total budget (16 + 1) * k runs out first, as in the 2016 benchmark (k = 10)."""
    calls = []

    def never(theta, alpha):
        calls.append((theta, alpha))
        return -1.0, 0.0, 1.0, 0.0, 0.0, 1.0

    *_, evaluations = newton_raphson_2d(never, (5.0, 0.5), iterations_per_try=10)
    assert evaluations == 16 * 11                             # the loop test 176 > 170 stops before start value 15
    assert START_VALUES[14] in calls and START_VALUES[15] not in calls


def test_cup_optimum_is_admissible_with_arx_pitman(data_dir):
    """ARX's published CUP optimum (PU <= 1 %, Pitman, N = 318.9M) is (1,3,0,0,0,1,0,0) with nothing suppressed."""
    from engine import load_policy
    from engine.classes import ClassCache
    from engine.encoding import encode_table
    from engine.table import load_input

    policy = load_policy(EXAMPLES / "cup-pu1.yaml")
    loaded = load_input(policy)
    table = encode_table(loaded.frame, loaded.hierarchies)
    _, sizes = ClassCache(table).classes((1, 3, 0, 0, 0, 1, 0, 0))
    histogram = SizeHistogram.from_class_sizes(sizes)
    uniques, params = arx_pitman_uniques(histogram, 318.9e6)
    assert uniques is not None
    assert 0.0 < uniques / 318.9e6 <= 0.01
    assert params["method"] == "finite-sums"                 # the closed form finds no root here
    assert uniques == pytest.approx(2_943_502.5147, rel=1e-6)
    assert hoshino_start(histogram)[0] > 0
    # the 2016 benchmark's solver budget (iterationsPerTry(10)) reaches the same root
    assert arx_pitman_fit(histogram, 318.9e6, iterations_per_try=10)[0] == pytest.approx(uniques, rel=1e-12)

"""The compiled Pitman solver (engine.risk.pitman_kernel) against the Python port of ARX (engine.risk.pitman_arx).

The closed-form path must give the very same root, from the same try after the same number of evaluations: the two
run the same IEEE operations in the same order. The finite-sum path differs only in the order of the long additions
(the kernel adds left to right as ARX's Java loops do, the Python path pairwise), so its roots agree to 1e-9
relative or better except on ill-conditioned systems, and everything else (try, evaluations, method) is the same.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.risk import pitman_arx, pitman_kernel
from engine.risk.histogram import SizeHistogram

pytestmark = pytest.mark.skipif(not pitman_kernel.available(), reason="numba is not installed (extra `fast`)")

SOLVE = dict(start_values=pitman_arx.START_VALUES, accuracy=pitman_arx.ACCURACY,
             iterations_per_try=pitman_arx.ITERATIONS_PER_TRY)


def random_histograms(seed: int, count: int, max_records: int = 40_000):
    """Histograms with sample uniques, a few to many distinct sizes, small enough for the Python finite sums."""
    rng = np.random.default_rng(seed)
    made = 0
    while made < count:
        sizes = np.unique(rng.integers(1, int(rng.choice([4, 30, 300])), size=int(rng.integers(1, 40))))
        sizes = np.union1d([1], sizes)
        counts = rng.integers(1, int(rng.choice([3, 40, 400])), size=sizes.size)
        if int((sizes * counts).sum()) > max_records:
            continue
        made += 1
        yield SizeHistogram(sizes.astype(np.int64), counts.astype(np.int64))


def both(histogram: SizeHistogram):
    system = pitman_arx.PitmanSystem(histogram)
    start = pitman_arx.hoshino_start(histogram)
    python = pitman_arx._fit_python(system, start, SOLVE)
    compiled = pitman_kernel.fit(start, system.u, system.n, system.keys_f, system.values, **SOLVE)
    return python, compiled


def same_float(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or x == y


def test_the_closed_form_root_is_bit_identical_and_the_finite_sums_agree():
    methods = {"closed-form": 0, "finite-sums": 0}
    for histogram in random_histograms(seed=7, count=120):
        python, compiled = both(histogram)
        (t1, a1, try1, evals1, method1, residual1), (t2, a2, try2, evals2, method2, residual2) = python, compiled
        assert (try1, evals1, method1) == (try2, evals2, method2), (histogram, python, compiled)
        methods[method1] += 1
        if method1 == "closed-form":
            assert same_float(t1, t2) and same_float(a1, a2), (histogram, python, compiled)
        elif math.isnan(t1):
            assert math.isnan(t2)
        else:
            # ill-conditioned roots (theta ~ 1e8, alpha far below 0) move most: 4e-7 relative on this sample
            assert t2 == pytest.approx(t1, rel=1e-6) and a2 == pytest.approx(a1, rel=1e-6, abs=1e-9)
        assert (residual1 is None) == (residual2 is None)
    assert methods["closed-form"] > 50 and methods["finite-sums"] > 5   # both paths were exercised


def test_the_estimate_from_either_path_is_the_same(monkeypatch):
    """Through the public entry point, on random histograms: the population uniques agree to 1e-9 relative."""
    for histogram in random_histograms(seed=11, count=40):
        compiled = pitman_arx.arx_pitman_uniques(histogram, 318.9e6)
        with monkeypatch.context() as patch:
            patch.setattr(pitman_kernel, "available", lambda: False)
            python = pitman_arx.arx_pitman_uniques(histogram, 318.9e6)
        if python[0] is None:
            assert compiled[0] is None
        else:
            assert compiled[0] == pytest.approx(python[0], rel=1e-9)
        assert compiled[1]["method"] == python[1]["method"] and compiled[1]["start"] == python[1]["start"]


def test_digamma_and_trigamma_match_arx_everywhere_the_solver_goes():
    """Including ARX's trigamma bug (no tail for 8 <= x < 12), the small-x branches, negative x and the poles."""
    xs = [-2.5, -0.5, -1e-7, 0.0, 1e-8, 1e-5, 5e-4, 0.3, 1.0, 7.99, 8.0, 9.5, 11.999, 12.0, 50.0, 1e6,
          float("nan"), float("inf"), -float("inf")]
    import numba

    from engine.risk import arx_gamma

    # The compiled solver inlines arx_gamma's functions; compile them the same way and compare with the Python run.
    digamma = numba.njit(error_model="numpy")(lambda x: arx_gamma.digamma(x))
    trigamma = numba.njit(error_model="numpy")(lambda x: arx_gamma.trigamma(x))
    for x in xs:
        assert same_float(digamma(x), pitman_arx.arx_digamma(x)), x
        assert same_float(trigamma(x), pitman_arx.arx_trigamma(x)), x
    assert pitman_arx.arx_digamma(9.5) > 0 and pitman_arx.arx_trigamma(9.5) == 0.0   # the bug, kept


def test_no_root_is_reported_as_none_by_both():
    """All classes unique except one pair: Hoshino's start and every prepared start fail; both paths say NaN."""
    histogram = SizeHistogram.from_counts({1: 1, 2: 1})
    python, compiled = both(histogram)
    assert math.isnan(python[0]) == math.isnan(compiled[0])
    assert python[2] == compiled[2] and python[3] == compiled[3]


def test_the_vectorized_gamma_functions_are_the_scalar_ones_bit_for_bit():
    """numpy's SIMD log (AVX512 builds) differs from the C library's in the last bit for about 1 value in 5,000; the
    vectorized digamma must use the C library's, as the scalar path and the compiled kernel do."""
    from engine.risk.arx_gamma import digamma, trigamma

    x = np.random.default_rng(1).uniform(0.5, 500.0, 100_000)
    assert np.array_equal(pitman_arx._digamma_vec(x), np.array([digamma(float(v)) for v in x]))
    assert np.array_equal(pitman_arx._trigamma_vec(x), np.array([trigamma(float(v)) for v in x]))

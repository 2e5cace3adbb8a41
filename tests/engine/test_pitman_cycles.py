"""The compiled Pitman solver's cycle detection (engine.risk.pitman_kernel._solve) changes nothing but the work done.

On CUP's class-size histograms a Newton try of the closed form sometimes lands on a point it already went through (a
fixed point one ulp off the root, or a cycle of tens of points) and goes round it until its 1,000 iterations are
spent. The compiled solver stops such a try as soon as it sees the repeated point and counts the evaluations left;
the Python port (engine.risk.pitman_arx, the reference) makes them all. Root, try, evaluation count and method must
be the same.
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

# Class-size histograms of CUP transformations (63,441 records) whose closed-form tries cycle: try 0 of the first
# settles on a fixed point after about 100 iterations, try 0 of the second after about 290 (no try finds a root), try
# 0 of the third goes round a cycle of 71 points.
CYCLING = [
    {1: 22082, 2: 7384, 3: 3265, 4: 1542, 5: 829, 6: 445, 7: 213, 8: 122, 9: 70, 10: 28, 11: 17, 12: 8, 13: 5, 14: 3,
     15: 2, 16: 1},
    {1: 50781, 2: 5054, 3: 717, 4: 82, 5: 11, 6: 3},
    {1: 9650, 2: 4227, 3: 2531, 4: 1621, 5: 1028, 6: 729, 7: 517, 8: 369, 9: 273, 10: 207, 11: 147, 12: 127, 13: 89,
     14: 68, 15: 56, 16: 51, 17: 34, 18: 36, 19: 29, 20: 20, 21: 11, 22: 6, 23: 7, 24: 11, 25: 8, 26: 7, 27: 1, 28: 1,
     29: 3, 31: 1, 33: 1, 35: 1, 36: 1, 38: 2, 42: 1},
]


def python_closed_try_outcomes(histogram: SizeHistogram) -> list[str]:
    """Each closed-form try of the reference, run on its own: 'root', 'left' (theta < 0, NaN) or 'cycle' (a point
    seen before in the same try, before its budget ran out)."""
    system = pitman_arx.PitmanSystem(histogram)
    outcomes = []
    for t, a in [pitman_arx.hoshino_start(histogram), *pitman_arx.START_VALUES[:-1]]:
        seen = set()
        outcome = "budget"
        for _ in range(pitman_arx.ITERATIONS_PER_TRY + 1):
            g1, g2, x1, x2, y1, y2 = system.closed(t, a)
            if abs(g1) <= pitman_arx.ACCURACY and abs(g2) <= pitman_arx.ACCURACY:
                outcome = "root"
                break
            if (t, a) in seen:
                outcome = "cycle"
                break
            seen.add((t, a))
            scalar = pitman_arx._div(1.0, x1 * y2 - x2 * y1)
            t -= y2 * scalar * g1 + -x2 * scalar * g2
            a -= -y1 * scalar * g1 + x1 * scalar * g2
            if not t >= 0.0 or a != a:
                outcome = "left"
                break
        outcomes.append(outcome)
    return outcomes


def same(x: float, y: float) -> bool:
    return (math.isnan(x) and math.isnan(y)) or x == y


@pytest.mark.parametrize("counts", CYCLING, ids=["fixed-point", "no-root", "cycle-71"])
def test_a_cycling_try_is_cut_short_with_the_same_result(counts):
    histogram = SizeHistogram.from_counts(counts)
    assert "cycle" in python_closed_try_outcomes(histogram)        # the case the detection is for
    system = pitman_arx.PitmanSystem(histogram)
    start = pitman_arx.hoshino_start(histogram)
    reference = pitman_arx.newton_raphson_2d(system.closed, start, **SOLVE)
    compiled = pitman_kernel._solve(start[0], start[1], float(system.u), float(system.n), system.keys_f,
                                    system.values, np.asarray(pitman_arx.START_VALUES), pitman_arx.ACCURACY,
                                    pitman_arx.ITERATIONS_PER_TRY, False)
    assert same(compiled[0], reference[0]) and same(compiled[1], reference[1])
    assert compiled[2] == (-1 if reference[2] is None else reference[2])
    assert compiled[3] == reference[3]          # the evaluations the cut-short try would have made are counted


def test_the_whole_fit_agrees_on_the_cycling_histograms():
    """Through solve-and-verify (the finite sums run after a closed form without root): same method, try, count."""
    for counts in CYCLING:
        histogram = SizeHistogram.from_counts(counts)
        system = pitman_arx.PitmanSystem(histogram)
        start = pitman_arx.hoshino_start(histogram)
        python = pitman_arx._fit_python(system, start, SOLVE)
        compiled = pitman_kernel.fit(start, system.u, system.n, system.keys_f, system.values, **SOLVE)
        assert (python[2], python[3], python[4]) == (compiled[2], compiled[3], compiled[4])
        if python[4] == "closed-form":
            assert same(python[0], compiled[0]) and same(python[1], compiled[1])
        else:
            assert compiled[0] == pytest.approx(python[0], rel=1e-6) or (math.isnan(python[0]) and
                                                                          math.isnan(compiled[0]))


def test_zero_coordinates_are_never_taken_for_a_repeated_point():
    """0.0 == -0.0 in floating point, but t / a tells them apart: the detection must not treat them as one point."""
    assert not pitman_kernel._same_point(0.0, 0.5, -0.0, 0.5)
    assert not pitman_kernel._same_point(1.0, 0.0, 1.0, -0.0)
    assert not pitman_kernel._same_point(math.nan, 0.5, math.nan, 0.5)
    assert pitman_kernel._same_point(1.5, 0.25, 1.5, 0.25)

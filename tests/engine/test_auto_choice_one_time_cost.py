"""`auto` weighs the optimal search by the cost of a check, not by the one-time cost of loading or compiling the
compiled kernels that the first sampled check of a process pays (a fresh clone's first ADULT k = 5 search sampled
2.04, 0.0017, 0.0008 and 0.0007 s, took that for 0.51 s a check and ran the genetic algorithm for 600 s)."""
from __future__ import annotations

import pytest

from engine.search import ONE_TIME_FACTOR, typical_check_seconds


def test_a_compile_on_the_first_check_is_left_out() -> None:
    assert typical_check_seconds([2.042, 0.0017, 0.0008, 0.0007]) == pytest.approx((0.0017 + 0.0008 + 0.0007) / 3)


def test_a_kernel_load_on_the_first_check_is_left_out() -> None:
    assert typical_check_seconds([0.2923, 0.0017, 0.0007, 0.0007]) == pytest.approx(0.0031 / 3)


def test_the_checks_own_spread_is_kept() -> None:
    costs = [0.0015, 0.0016, 0.0011, 0.0012]
    assert typical_check_seconds(costs) == pytest.approx(sum(costs) / 4)
    spread = [0.001, 0.002, 0.01, 0.015]   # the top dearer than the bottom, within the factor of the median
    assert max(spread) <= ONE_TIME_FACTOR * 0.006
    assert typical_check_seconds(spread) == pytest.approx(sum(spread) / 4)


def test_a_single_sample_is_its_own_cost() -> None:
    assert typical_check_seconds([0.5]) == 0.5


def test_checks_that_compiled_a_kernel_are_left_out_however_many() -> None:
    """A fresh clone after the roll-up-source kernel landed: two of the four sampled checks compiled (the roll-up at
    the first, the source choice at the second), so the median was itself a compile and `auto` ran the genetic
    algorithm for the whole 600 s limit (CI's fresh-clone test timed out). Checks during which a kernel compiled
    are left out whatever the median."""
    costs = [2.1, 1.4, 0.0008, 0.0006]
    assert typical_check_seconds(costs) > 0.5   # the median alone cannot tell them
    assert typical_check_seconds(costs, [True, True, False, False]) == pytest.approx(0.0007)
    assert typical_check_seconds(costs, [True, True, True, True]) == typical_check_seconds(costs)


def test_compiled_signatures_grow_when_a_kernel_compiles() -> None:
    """The counter `auto` reads: it grows when a numba function of an engine module compiles a new signature."""
    numba = pytest.importorskip("numba")
    import numpy as np

    import engine.risk.pitman_kernel as module
    from engine import kernels

    before = kernels.compiled_signatures()
    probe = numba.njit(lambda x: x + 1)
    module._signature_probe = probe   # an engine module's numba function, as the kernels are
    try:
        assert kernels.compiled_signatures() == before
        probe(np.int64(1))
        assert kernels.compiled_signatures() == before + 1
    finally:
        del module._signature_probe

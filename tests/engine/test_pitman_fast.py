"""Issue 28, Pitman: the blocked finite sums, the checkpoints at the prepared start values and the memo of solved
histograms change the time of a solve, never its result.

The reference is the solver of before: the scalar finite-sum loop (`pitman_kernel._finite_scalar`, one term after the
other from i = 1) and a fresh solve per call. Everything is compared bit for bit: sums, roots, try, evaluation count,
method and residuals.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from engine.risk import pitman_arx, pitman_finite, pitman_kernel
from engine.risk.histogram import SizeHistogram
from engine.risk.memo import BoundedMemo

pytestmark = pytest.mark.skipif(not pitman_kernel.available(), reason="numba is not installed (extra `fast`)")

SOLVE = dict(start_values=pitman_arx.START_VALUES, accuracy=pitman_arx.ACCURACY,
             iterations_per_try=pitman_arx.ITERATIONS_PER_TRY)
B, C = pitman_finite.BLOCK, pitman_finite.CHECKPOINT


def same(x, y) -> bool:
    """Equal bit for bit (NaN equals NaN, 0.0 differs from -0.0), recursively through tuples."""
    if isinstance(x, tuple) or isinstance(y, tuple):
        return isinstance(x, tuple) and isinstance(y, tuple) and len(x) == len(y) and all(map(same, x, y))
    if isinstance(x, float) and isinstance(y, float):
        return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))
    return x == y


@pytest.fixture(scope="module")
def blocked():
    import numba

    finite = numba.njit(error_model="numpy")(
        lambda t, a, u, n, k, v, d, out, acc, buf: pitman_finite.finite(t, a, u, n, k, v, d, out, acc, buf))
    resumed = numba.njit(error_model="numpy")(
        lambda t, a, u, n, k, v, out, acc, buf, table: pitman_finite.finite_resumed(t, a, u, n, k, v, out, acc, buf,
                                                                                   table))
    return finite, resumed


def scalar(t, a, u, n, keys, values, derivatives):
    out = np.empty(6)
    pitman_kernel._finite_scalar(t, a, u, n, keys, values, derivatives, out)
    return out if derivatives else out[:2]


# counts of terms around the block and checkpoint boundaries, and the degenerate ones
EDGES = [0.0, 1.0, 2.0, 3.0, B - 1.0, float(B), B + 1.0, B + 2.0, 3 * B + 7.0, C - 1.0, float(C), C + 1.0, C + 2.0,
         5 * C + 3.0]


def test_blocked_sums_are_the_scalar_loop_bit_for_bit(blocked):
    finite, _ = blocked
    rng = np.random.default_rng(5)
    points = [(0.0, 0.0), (0.33, 0.0), (0.0, 0.66), (0.99, 0.99), (1e-300, 0.5), (3176.2335, 0.7179489),
              (2.5, -0.98), (5.0, 1.0), (0.1, -1.0), (-0.5, 0.3), (math.nan, 0.2), (math.inf, 0.5), (1e8, -3.0)]
    points += [(float(rng.uniform(0, 10 ** rng.integers(0, 6))), float(rng.uniform(-2, 1))) for _ in range(30)]
    keys = np.array([2.0, 3.0, 7.0, 40.0])
    values = np.array([9.0, 4.0, 2.0, 1.0])
    acc, buf, out = np.empty(7), np.empty((7, B)), np.empty(6)
    checked = 0
    for t, a in points:
        for u, n in [(e, e) for e in EDGES] + [(e, e + 3 * B + 5) for e in EDGES] + [(C + 2.0, 2.0), (7.5, 9.25)]:
            for derivatives in (True, False):
                finite(t, a, u, n, keys, values, derivatives, out, acc, buf)
                expected = scalar(t, a, u, n, keys, values, derivatives)
                got = out if derivatives else out[:2]
                assert all(same(float(x), float(y)) for x, y in zip(got, expected)), (t, a, u, n, derivatives)
                checked += 1
    assert checked > 1500


def test_resumed_from_checkpoints_is_the_scalar_loop_bit_for_bit(blocked):
    _, resumed = blocked
    keys = np.array([2.0, 5.0])
    values = np.array([3.0, 1.0])
    acc, buf, out = np.empty(7), np.empty((7, B)), np.empty(6)
    for t, a in pitman_arx.START_VALUES + ((2.5, -0.5),):
        table = pitman_finite.checkpoints(t, a, 6 * C)
        for u, n in [(e, e) for e in EDGES] + [(e, 6.0 * C) for e in EDGES]:
            resumed(t, a, u, n, keys, values, out, acc, buf, table)
            expected = scalar(t, a, u, n, keys, values, True)
            assert all(same(float(x), float(y)) for x, y in zip(out, expected)), (t, a, u, n)


def test_start_tables_grow_and_a_table_handed_out_stays_valid():
    tables = pitman_finite.StartTables()
    starts = np.asarray(pitman_arx.START_VALUES)
    small = tables.for_starts(starts, 10 * C)
    copy = small.copy()
    large = tables.for_starts(starts, 200 * C)
    assert large.shape[0] == starts.shape[0] and large.shape[1] >= 201 and small.shape[1] >= 11
    assert np.array_equal(small, copy, equal_nan=True)                    # not changed by the growth
    assert np.array_equal(large[:, :small.shape[1]], small, equal_nan=True)
    assert tables.for_starts(starts, 50 * C) is large                     # reached already: no new table
    k = 5                                                                 # start value (0.33, 0.33)
    expected = pitman_finite.checkpoints(float(starts[k, 0]), float(starts[k, 1]), 7 * C)
    assert np.array_equal(large[k, :8], expected, equal_nan=True)


def histograms_of_record():
    """Histograms like those a CUP (63,441 records) or FARS search gives the solver: all unique (no root: the finite
    sums run 17 tries), nearly all unique, many sizes, and random ones of up to 70,000 records."""
    fixed = [{1: 63441}, {1: 31720}, {1: 15860}, {1: 50781, 2: 5054, 3: 717, 4: 82, 5: 11, 6: 3},
             {1: 22082, 2: 7384, 3: 3265, 4: 1542, 5: 829, 6: 445, 7: 213, 8: 122, 9: 70, 10: 28, 11: 17, 12: 8,
              13: 5, 14: 3, 15: 2, 16: 1},
             {1: 4251, 2: 190, 3: 94, 4: 65, 5: 72, 6: 56, 7: 49, 8: 41, 9: 34, 10: 21, 11: 19, 12: 20, 13: 16, 14: 9,
              15: 6, 16: 4, 17: 11, 18: 8, 19: 6, 20: 2, 21: 4, 22: 7, 23: 4, 24: 2, 25: 5, 26: 2, 27: 5, 28: 3,
              29: 5, 30: 4, 31: 4, 32: 3, 33: 1, 34: 4, 35: 1, 37: 2, 39: 2},
             {1: 1, 2: 1}, {1: 100, 2: 50, 3: 20, 10: 5}, {1: 10, 2: 40, 5: 100, 20: 30}, {2: 7}]
    out = [SizeHistogram.from_counts(h) for h in fixed]
    rng = np.random.default_rng(28)
    while len(out) < 70:
        sizes = np.union1d([1], np.unique(rng.integers(1, int(rng.choice([3, 12, 60])), size=int(rng.integers(1, 25)))))
        counts = rng.integers(1, int(rng.choice([5, 200, 5000])), size=sizes.size)
        if int((sizes * counts).sum()) <= 70_000:
            out.append(SizeHistogram(sizes.astype(np.int64), counts.astype(np.int64)))
    return out


@pytest.mark.parametrize("config", [SOLVE, dict(SOLVE, iterations_per_try=10),
                                    dict(SOLVE, start_values=((0.5, 0.5), (0.0, 0.2), (2.0, 0.9)))],
                         ids=["arx-default", "arx-benchmark-10-per-try", "other-start-values"])
def test_the_fit_is_the_reference_fit_bit_for_bit(config):
    """Root, try, evaluations, method and residuals equal the solver of before on every histogram, including ARX's
    benchmark configuration (10 iterations per try, where the total budget can end the search) and start values
    other than ARX's (their own checkpoint tables)."""
    outcomes = set()
    for histogram in histograms_of_record():
        system = pitman_arx.PitmanSystem(histogram)
        start = pitman_arx.hoshino_start(histogram)
        reference = pitman_kernel.fit(start, system.u, system.n, system.keys_f, system.values, **config, reference=True)
        fast = pitman_kernel.fit(start, system.u, system.n, system.keys_f, system.values, **config)
        assert same(tuple(fast), tuple(reference)), (histogram, reference, fast)
        outcomes.add("none" if reference[2] is None else reference[4])
    if config is SOLVE:
        assert outcomes == {"none", "closed-form", "finite-sums"}            # every path was exercised
    else:
        assert "none" in outcomes and len(outcomes) >= 2


def test_all_unique_cup_histogram_has_no_root_and_is_answered_from_the_checkpoints():
    """63,441 unique records: no root; 77 evaluations as before (17 closed-form, 60 finite-sum)."""
    histogram = SizeHistogram.from_counts({1: 63441})
    uniques, params = pitman_arx.arx_pitman_fit(histogram, 318.9e6)
    assert math.isnan(uniques) and params["method"] is None and params["start"] is None
    assert params["evaluations"] == 77


def test_a_repeated_histogram_is_answered_from_the_memo_with_the_same_result(monkeypatch):
    histogram = SizeHistogram.from_counts({1: 3000, 2: 100, 3: 10})
    pitman_arx.FITS.clear()
    first = pitman_arx.arx_pitman_uniques(histogram, 1e6)
    first[1]["theta"] = -1.0                                               # a caller's change stays its own
    calls = []
    original = pitman_arx._solve_histogram
    monkeypatch.setattr(pitman_arx, "_solve_histogram", lambda *a: calls.append(a) or original(*a))
    again = pitman_arx.arx_pitman_uniques(SizeHistogram.from_counts({1: 3000, 2: 100, 3: 10}), 1e6)
    other_population = pitman_arx.arx_pitman_uniques(histogram, 3e8)
    assert calls == [] and pitman_arx.FITS.hits == 2
    fresh = pitman_arx.arx_pitman_fit(histogram, 1e6)
    assert again[0] == pytest.approx(187_483.1066, rel=1e-6) and again[0] == fresh[0]
    assert again[1] == fresh[1] and again[1]["theta"] > 0
    assert other_population[0] == pitman_arx.arx_pitman_fit(histogram, 3e8)[0]
    # the other solver path (no numba) is another key: it is solved, not taken from the compiled path's entry
    before = len(calls)
    monkeypatch.setattr(pitman_kernel, "available", lambda: False)
    pitman_arx.arx_pitman_uniques(histogram, 1e6)
    assert len(calls) == before + 1


def test_the_memo_is_bounded_in_entries_and_key_bytes():
    memo = BoundedMemo(max_entries=3, max_key_bytes=64 * 10)
    for i in range(5):
        memo.get_or_compute(bytes([i]) * 8, lambda i=i: i)
    assert len(memo) == 3 and memo.get_or_compute(bytes([4]) * 8, lambda: -1) == 4
    assert memo.get_or_compute(bytes([0]) * 8, lambda: -1) == -1           # evicted: computed again
    memo.get_or_compute(b"x" * 11, lambda: 7)                              # longer than max_key_bytes // 64
    assert memo.get_or_compute(b"x" * 11, lambda: 8) == 8                  # never stored
    big = BoundedMemo(max_entries=100, max_key_bytes=64 * 64)
    for i in range(100):
        big.get_or_compute(i.to_bytes(2, "little") * 32, lambda: 0)      # 64-byte keys
    assert len(big) == 64 and big._bytes <= 64 * 64

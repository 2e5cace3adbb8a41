"""The GIL-holding twins of the small per-check kernels (engine._kernels_numba, `*_held`): the same results as the
kernels they call, and compiled without `nogil`, while the big roll-ups keep it (the worker thread runs them).

Why it matters: a `nogil` kernel of a microsecond on the search's thread hands the GIL to the worker thread while
it runs Python, and the search's thread then waits for it to come back (up to the 5 ms switch interval)."""
from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from engine import _kernels_numba as k  # noqa: E402

TWINS = ["records_below", "records_in", "suppress_below", "best_source", "pack_levels", "best_source_packed"]


@pytest.mark.parametrize("name", TWINS)
def test_twin_holds_the_gil_and_kernel_releases_it(name):
    assert getattr(k, name + "_held").targetoptions.get("nogil", False) is False
    assert getattr(k, name).targetoptions.get("nogil") is True


@pytest.mark.parametrize("name", ["roll_up", "roll_up_base", "roll_up_levels", "roll_up_base_levels", "group_rows"])
def test_roll_ups_keep_releasing_the_gil(name):
    assert getattr(k, name).targetoptions.get("nogil") is True
    assert not hasattr(k, name + "_held")


def test_size_twins_equal_kernels_and_hand_sums():
    rng = np.random.default_rng(5)
    for n in (0, 1, 7, 500):
        sizes = rng.integers(1, 20, n).astype(np.int64)
        chosen = rng.random(n) < 0.3
        for minimal in (1, 3, 10, 25):
            expected = int(sum(s for s in sizes.tolist() if s < minimal))
            assert int(k.records_below_held(sizes, minimal)) == expected == int(k.records_below(sizes, minimal))
            mask, total = k.suppress_below_held(sizes, minimal)
            assert int(total) == expected
            assert mask.tolist() == [s < minimal for s in sizes.tolist()]
        picked = int(sum(s for s, c in zip(sizes.tolist(), chosen.tolist()) if c))
        assert int(k.records_in_held(sizes, chosen)) == picked == int(k.records_in(sizes, chosen))


def _best_by_hand(levels, counts, node):
    best, fewest = -1, None
    for r, row in enumerate(levels.tolist()):
        if all(a <= b for a, b in zip(row, node)) and row != list(node) and (fewest is None or counts[r] < fewest):
            best, fewest = r, counts[r]
    return best


def test_source_twins_equal_kernels_and_a_scan_by_hand():
    rng = np.random.default_rng(9)
    d, lane = 11, 4                       # 11 attributes in 4-bit lanes: two words
    per = 64 // lane
    words = (d + per - 1) // per
    high = np.uint64(sum(1 << (lane * i + lane - 1) for i in range(per)))
    for trial in range(40):
        n = int(rng.integers(0, 60))
        levels = rng.integers(0, 5, (n, d)).astype(np.int64)
        counts = rng.integers(1, 100, n).astype(np.int64)
        node = rng.integers(0, 6, d).astype(np.int64)
        if n and trial % 3 == 0:
            node = levels[int(rng.integers(0, n))].copy()   # the node itself is among the rows: never chosen
        expected = _best_by_hand(levels, counts, node.tolist())
        assert int(k.best_source_held(levels, counts, n, node)) == expected == int(k.best_source(levels, counts, n,
                                                                                                   node))
        packed = np.empty((max(n, 1), words), np.uint64)
        for r in range(n):
            k.pack_levels_held(levels[r], lane, packed[r])
        mine = np.empty(words, np.uint64)
        row = int(k.best_source_packed_held(packed, counts, n, node, lane, high, mine))
        assert row == expected
        again = np.empty(words, np.uint64)
        k.pack_levels(node, lane, again)
        assert mine.tolist() == again.tolist()   # the node left packed, as the nogil kernel packs it

"""The shared key loops of the numba kernels (engine/_keys_numba.py) against the key formula in numpy: a class's key
is Σ code x place, and a roll-up adds (mapped code - code) x place per attribute that changes level, whether through
the code map or from the base classes' kept updates (filled on first use, then reused)."""
from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")


@pytest.fixture(scope="module")
def compiled():
    from engine import _keys_numba

    # inline="always" functions are called through a small jitted wrapper, as the kernels call them
    radix = numba.njit(lambda codes, places: _keys_numba.radix_keys(codes, places))
    rolled = numba.njit(lambda codes, key, changed, starts, maps, places:
                        _keys_numba.rolled_keys(codes, key, changed, starts, maps, places))
    base = numba.njit(lambda codes, key, changed, starts, maps, places, deltas, ready, rows:
                      _keys_numba.base_keys(codes, key, changed, starts, maps, places, deltas, ready, rows))
    gather = numba.njit(lambda codes, member, u, changed, starts, maps:
                        _keys_numba.class_codes(codes, member, u, changed, starts, maps))
    return radix, rolled, base, gather


def random_case(seed: int):
    rng = np.random.default_rng(seed)
    d, m = int(rng.integers(1, 6)), int(rng.integers(0, 400))
    cards = rng.integers(1, 30, d)
    codes = np.stack([rng.integers(0, c, m) for c in cards]).astype(np.int32)
    places = np.cumprod(np.r_[1, cards[::-1][:-1]])[::-1].astype(np.int64)
    maps_per_attribute = [rng.integers(0, c, c).astype(np.int64) for c in cards]
    changed = np.flatnonzero(rng.random(d) < 0.6).astype(np.int64)
    starts = np.cumsum([0] + [c for c in cards[:-1]])[changed].astype(np.int64)
    return codes, places, maps_per_attribute, np.concatenate(maps_per_attribute), changed, starts


@pytest.mark.parametrize("seed", range(12))
def test_keys_equal_the_radix_formula(compiled, seed: int) -> None:
    radix, rolled, base, _ = compiled
    codes, places, maps_per_attribute, maps, changed, starts = random_case(seed)
    key = (codes.astype(np.int64) * places[:, None]).sum(axis=0)
    assert np.array_equal(radix(codes, places), key)
    mapped = codes.astype(np.int64)
    for i in changed:
        mapped[i] = maps_per_attribute[i][codes[i]]
    expected = (mapped * places[:, None]).sum(axis=0)
    assert np.array_equal(rolled(codes, key, changed, starts, maps, places), expected)
    # base_keys: the kept updates are filled on the first call and give the same keys on the second
    d, m = codes.shape
    deltas = np.full((d, m), 12345, dtype=np.int64)
    ready = np.zeros(d, dtype=np.bool_)
    rows = changed.copy()
    first = base(codes, key, changed, starts, maps, places, deltas, ready, rows)
    assert np.array_equal(first, expected) and ready[changed].all() and not ready[np.setdiff1d(np.arange(d), changed)].any()
    kept = deltas.copy()
    assert np.array_equal(base(codes, key, changed, starts, maps, places, deltas, ready, rows), expected)
    assert np.array_equal(deltas, kept)
    assert np.array_equal(key, (codes.astype(np.int64) * places[:, None]).sum(axis=0))   # the input is not written


@pytest.mark.parametrize("seed", range(12))
def test_class_codes_are_the_first_inputs_codes_mapped(compiled, seed: int) -> None:
    *_, gather = compiled
    codes, places, maps_per_attribute, maps, changed, starts = random_case(seed)
    rng = np.random.default_rng(100 + seed)
    m = codes.shape[1]
    u = int(rng.integers(0, m + 1))
    member = rng.choice(m, u, replace=False).astype(np.int64) if u else np.zeros(0, np.int64)
    expected = codes[:, member].astype(np.int32)
    assert np.array_equal(gather(codes, member, u, changed[:0], starts[:0], maps), expected)   # nothing changes
    for i in changed:
        expected[i] = maps_per_attribute[i][expected[i]]
    got = gather(codes, member, u, changed, starts, maps)
    assert got.dtype == np.int32 and np.array_equal(got, expected)

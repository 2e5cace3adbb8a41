"""The shared open-addressing probe of the numba kernels (engine/_hash_numba.py): grouping keys with it gives
exactly pandas' first-appearance factorization, on random keys, on keys that collide and wrap around the table's
end, and on the extremes of the key range (0 and close to 2^63)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from engine import kernels

pytestmark = pytest.mark.skipif(not kernels.enabled(), reason="numba is missing or the reference path is forced")


@pytest.fixture(scope="module")
def hashing():
    import numba

    from engine import _hash_numba

    @numba.njit
    def factorize(keys):
        bits = _hash_numba.table_bits(keys.size)
        table = _hash_numba.new_table(bits)
        inverse = np.empty(keys.size, np.int64)
        u = 0
        for j in range(keys.size):
            slot = _hash_numba.probe(table, keys[j], bits)
            if table[2 * slot] != keys[j]:
                table[2 * slot] = keys[j]
                table[2 * slot + 1] = u
                u += 1
            inverse[j] = table[2 * slot + 1]
        return inverse, u

    @numba.njit
    def slot_of(key, bits):
        return _hash_numba.probe(_hash_numba.new_table(bits), key, bits)

    @numba.njit
    def probe(table, key, bits):
        return _hash_numba.probe(table, key, bits)

    return _hash_numba, factorize, slot_of, probe


@pytest.fixture(scope="module")
def growing():
    import numba

    from engine import _hash_numba

    @numba.njit
    def factorize_growing(keys):
        """As `factorize`, from the smallest table, doubled whenever half full."""
        bits = 4
        table = _hash_numba.new_table(bits)
        inverse = np.empty(keys.size, np.int64)
        u = 0
        grown = 0
        for j in range(keys.size):
            slot = _hash_numba.probe(table, keys[j], bits)
            if table[2 * slot] == keys[j]:
                inverse[j] = table[2 * slot + 1]
                continue
            table[2 * slot] = keys[j]
            table[2 * slot + 1] = u
            inverse[j] = u
            u += 1
            if 2 * u > (1 << bits):
                table = _hash_numba.grow(table, bits)
                bits += 1
                grown += 1
        return inverse, u, grown

    return factorize_growing


def expected(keys: np.ndarray) -> tuple[np.ndarray, int]:
    inverse, uniques = pd.factorize(keys, sort=False)
    return inverse.astype(np.int64), len(uniques)


@pytest.mark.parametrize("seed", range(5))
def test_random_keys_group_as_pandas_factorizes(hashing, seed):
    _, factorize, _, _ = hashing
    rng = np.random.default_rng(seed)
    for size, spread in [(1, 1), (50, 7), (1000, 300), (20_000, 5_000), (20_000, 1 << 62)]:
        keys = rng.integers(0, spread, size, dtype=np.int64)
        inverse, count = factorize(keys)
        want_inverse, want_count = expected(keys)
        assert count == want_count
        np.testing.assert_array_equal(inverse, want_inverse)


def test_table_is_at_most_half_full(hashing):
    module, _, _, _ = hashing
    assert module.table_bits(0) == 4 and module.table_bits(8) == 4
    assert module.table_bits(9) == 5
    for keys in (1, 100, 4097, 123_456):
        bits = module.table_bits(keys)
        assert (1 << bits) >= 2 * keys > (1 << (bits - 1)) or bits == 4
    assert module.new_table(4).shape == (32,) and (module.new_table(4) == -1).all()


def test_colliding_keys_wrap_around_the_end_of_the_table(hashing):
    module, factorize, slot_of, probe = hashing
    bits = 4
    last = (1 << bits) - 1
    # Keys whose hash is the last slot: the second and third must wrap to slots 0 and 1.
    colliding = [k for k in range(100_000) if slot_of(k, bits) == last][:3]
    assert len(colliding) == 3
    table = module.new_table(bits)
    slots = []
    for key in colliding:
        slot = probe(table, np.int64(key), bits)
        table[2 * slot], table[2 * slot + 1] = key, len(slots)
        slots.append(slot)
    assert slots == [last, 0, 1]
    # Found again where they were stored; an absent colliding key lands on the next empty slot.
    assert [probe(table, np.int64(key), bits) for key in colliding] == slots
    fourth = [k for k in range(100_000) if slot_of(k, bits) == last][3]
    assert probe(table, np.int64(fourth), bits) == 2
    keys = np.array(colliding * 3 + [0, 0], dtype=np.int64)
    inverse, count = factorize(keys)
    assert count == 4 and inverse.tolist() == [0, 1, 2] * 3 + [3, 3]


def test_extreme_keys(hashing):
    _, factorize, _, _ = hashing
    keys = np.array([0, (1 << 63) - 1, 0, 1, (1 << 63) - 1, (1 << 62)], dtype=np.int64)
    inverse, count = factorize(keys)
    assert count == 4 and inverse.tolist() == [0, 1, 0, 2, 1, 3]


def test_a_growing_table_keeps_every_key(growing):
    """Grown whenever half full (from 16 slots to 2^16 for 20,000 keys), every key keeps its number."""
    from engine import _hash_numba

    rng = np.random.default_rng(7)
    keys = rng.integers(0, 1 << 40, 30_000, dtype=np.int64)
    keys = np.concatenate([keys, keys[::-1]])
    inverse, count, grown = growing(keys)
    want_inverse, want_count = expected(keys)
    assert count == want_count and grown >= 10
    np.testing.assert_array_equal(inverse[: keys.size // 2], want_inverse[: keys.size // 2])
    np.testing.assert_array_equal(inverse, want_inverse)
    table = _hash_numba.new_table(4)
    table[0:4] = [5, 0, 9, 1]
    larger = _hash_numba.grow(table, 4)
    assert larger.size == 64 and sorted(zip(larger[0::2][larger[0::2] >= 0], larger[1::2][larger[0::2] >= 0])) == [
        (5, 0), (9, 1)]

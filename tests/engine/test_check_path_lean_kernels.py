"""The roll-up's index table (engine._hash_numba.new_index / find): class numbers in the slots, keys read back from
the classes' own key array. A full table (every slot but one taken) forces long probe chains; the classes found
must be a dictionary's, numbered by first appearance."""
from __future__ import annotations

import numpy as np
import pytest

numba = pytest.importorskip("numba")

from engine._hash_numba import find, new_index, table_bits  # noqa: E402


@numba.njit(cache=False)
def _group(keys, bits):
    index = new_index(bits)
    class_keys = np.empty(keys.size, np.int64)
    numbers = np.empty(keys.size, np.int64)
    u = 0
    for j in range(keys.size):
        slot = find(index, class_keys, keys[j], bits)
        if index[slot] < 0:
            index[slot] = u
            class_keys[u] = keys[j]
            u += 1
        numbers[j] = index[slot]
    return numbers, class_keys[:u].copy()


def reference(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    seen: dict[int, int] = {}
    numbers = [seen.setdefault(int(k), len(seen)) for k in keys]
    return np.array(numbers, dtype=np.int64), np.array(list(seen), dtype=np.int64)


@pytest.mark.parametrize("seed", range(5))
def test_a_nearly_full_table_groups_as_a_dictionary(seed):
    rng = np.random.default_rng(seed)
    distinct = rng.choice(1 << 40, size=15, replace=False).astype(np.int64)   # 15 keys in 16 slots
    keys = rng.choice(distinct, size=200)
    numbers, class_keys = _group(keys, 4)
    expected_numbers, expected_keys = reference(keys)
    assert np.array_equal(numbers, expected_numbers) and np.array_equal(class_keys, expected_keys)


def test_colliding_keys_and_zero():
    """Keys spaced by a power of two far above the table (the radix places) and the key 0 (an empty index slot is
    -1, never a key)."""
    keys = np.array([0, 1 << 40, 2 << 40, 0, 3 << 40, 1 << 40, 5, 5, 0], dtype=np.int64)
    numbers, class_keys = _group(keys, table_bits(keys.size))
    expected_numbers, expected_keys = reference(keys)
    assert np.array_equal(numbers, expected_numbers) and np.array_equal(class_keys, expected_keys)
    assert new_index(5).dtype == np.int32 and new_index(5).size == 32 and (new_index(5) == -1).all()

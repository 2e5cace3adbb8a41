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


@pytest.mark.parametrize("d, height, lane", [(1, 3, 8), (8, 5, 8), (9, 5, 8), (17, 128, 8), (5, 300, 16),
                                             (6, 40000, 32)])
def test_packed_source_choice_is_the_level_by_level_one(d, height, lane):
    """engine._kernels_numba.best_source_packed: a word per 8 (4, 2) attributes instead of a compare per attribute;
    the same row as best_source on the plain level vectors, including the node itself in the ring (never its own
    source), ties (the first row with the fewest classes) and the top level of every lane."""
    from engine._kernels_numba import best_source, best_source_packed, pack_levels

    rng = np.random.default_rng(d * 1000 + height)
    n = 300
    levels = rng.integers(0, height, (n, d)).astype(np.int64)
    levels[:20] = height - 1 - rng.integers(0, 2, (20, d))   # near the top: the lanes' largest values
    counts = rng.integers(1, 50, n).astype(np.int64)
    per = 64 // lane
    words = np.zeros((n, -(-d // per)), dtype=np.uint64)
    for r in range(n):
        pack_levels(levels[r], lane, words[r])
    high = np.uint64(sum(1 << (lane * k + lane - 1) for k in range(per)))
    packed = np.zeros(words.shape[1], dtype=np.uint64)
    nodes = [rng.integers(0, height, d).astype(np.int64) for _ in range(200)] + [levels[r].copy() for r in range(40)]
    found = 0
    for node in nodes:
        expected = best_source(levels, counts, n, node)
        assert best_source_packed(words, counts, n, node, lane, high, packed) == expected
        unpacked = [   # the node, packed for the caller
            (int(packed[i // per]) >> (lane * (i % per))) & ((1 << lane) - 1) for i in range(d)]
        assert unpacked == node.tolist()
        found += expected >= 0
    assert found >= 10   # the specializations were there to find

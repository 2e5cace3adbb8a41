"""Flash's strategy keys for a whole lattice in one compiled pass (imported only once numba is; engine.search.flash
uses it where the search runs the compiled path, `Evaluator.kernels`).

Why: Flash orders transformations by ARX's strategy keys, precomputed for the whole lattice as integer ranks
(engine.search.flash.Strategy._ranks). With numpy that is three outer sums over the lattice and two argsorts for the
dense ranks of the two float keys: about 1.4 ms on ADULT's 12,960 transformations, a tenth of a 200-check search.
Here the sums are one pass in C order with the partial sums of the leading attributes kept (the same additions, left
to right from 0, so the same floats), and where a key takes few distinct values (precision: a few hundred on the
benchmarks' lattices) its dense rank comes from a hash table of the floats' bits and a sort of the distinct values
only (equal floats have equal bits: the sums are never -0.0 or NaN). The numpy code stays the reference;
tests/engine/test_flash_lean_ranks.py compares the two.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def distinct_values(values):
    """The distinct values in order of first appearance and, for each value, the index of its own among them (a
    hash table of the floats' bits: equal floats have equal bits, as the sums here are never -0.0 or NaN)."""
    n = values.size
    bits = values.view(np.int64)
    size = 16
    while size < 2 * n:
        size *= 2
    mask = size - 1
    keys = np.full(size, -1, np.int64)
    slots = np.empty(size, np.int64)
    found = np.empty(n, np.float64)
    which = np.empty(n, np.int64)
    count = 0
    for i in range(n):
        key = bits[i]
        position = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
        while True:
            if keys[position] == -1:
                keys[position] = key
                slots[position] = count
                found[count] = values[i]
                which[i] = count
                count += 1
                break
            if keys[position] == key:
                which[i] = slots[position]
                break
            position = (position + 1) & mask
    return found[:count], which


@numba.njit(cache=True, nogil=True)
def strategy_sums(relative, distinct, heights):
    """For every transformation of the lattice with `heights` levels per attribute (C order): its sum of levels,
    its precision key (sum of relative[a, level] / d) and its lost-distinct key (1 - sum of distinct[a, level] /
    d), the sums added left to right from 0 as `Strategy.tuple_key` adds them."""
    d = heights.size
    n = 1
    for axis in range(d):
        n *= heights[axis]
    levels = np.empty(n, np.int64)
    precision = np.empty(n, np.float64)
    lost = np.empty(n, np.float64)
    digits = np.zeros(d, np.int64)
    # partial sums of the first k attributes at the current digits: index k holds attributes 0 .. k - 1
    level_sums = np.zeros(d + 1, np.int64)
    relative_sums = np.zeros(d + 1, np.float64)
    distinct_sums = np.zeros(d + 1, np.float64)
    changed = 0   # partial sums from this attribute on are out of date
    for index in range(n):
        for axis in range(changed, d):
            level = digits[axis]
            level_sums[axis + 1] = level_sums[axis] + level
            relative_sums[axis + 1] = relative_sums[axis] + relative[axis, level]
            distinct_sums[axis + 1] = distinct_sums[axis] + distinct[axis, level]
        levels[index] = level_sums[d]
        precision[index] = relative_sums[d] / d
        lost[index] = 1.0 - distinct_sums[d] / d
        axis = d - 1
        while axis >= 0:
            digits[axis] += 1
            if digits[axis] < heights[axis]:
                break
            digits[axis] = 0
            axis -= 1
        changed = max(axis, 0)
    return levels, precision, lost

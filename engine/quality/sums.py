"""numpy's float64 add.reduce and multiply.reduce of a short vector, in Python floats, to the last bit.

Why: the level bounds (`lower_bound`) and the loss without suppression are a mean or a geometric mean of one term
per attribute, asked thousands of times per search; building a numpy array and reducing it costs about five times
the arithmetic. The search compares these floats with each other (ties decide the optimum), so they must be numpy's
bits exactly, not merely close:

* multiply.reduce multiplies left to right (numpy reduces only add pairwise);
* add.reduce of n <= 128 contiguous values (numpy's pairwise summation, one block): below 8 values a left-to-right
  sum from -0.0; otherwise 8 running sums over the multiples of 8, combined as ((r0 + r1) + (r2 + r3)) +
  ((r4 + r5) + (r6 + r7)), then the rest added left to right.

`numpy_order` checks an emulation against numpy on random vectors once per process and length; a numpy whose order
differs (another version, another SIMD path) makes the models fall back to numpy itself.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

PAIRWISE_BLOCK = 128   # numpy's PW_BLOCKSIZE: longer vectors are split recursively (not emulated here)


def add_reduce(values: Sequence[float]) -> float:
    """np.add.reduce of a float64 vector of at most PAIRWISE_BLOCK values."""
    n = len(values)
    if n < 8:
        total = -0.0
        for value in values:
            total += value
        return total
    r0, r1, r2, r3, r4, r5, r6, r7 = values[:8]
    i = 8
    end = n - n % 8
    while i < end:
        r0 += values[i]
        r1 += values[i + 1]
        r2 += values[i + 2]
        r3 += values[i + 3]
        r4 += values[i + 4]
        r5 += values[i + 5]
        r6 += values[i + 6]
        r7 += values[i + 7]
        i += 8
    total = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        total += values[i]
        i += 1
    return total


def add_reduce_columns(columns: Sequence[np.ndarray]) -> np.ndarray:
    """`add_reduce` of many vectors at once: columns[i] holds the i-th value of every vector (arrays that broadcast
    to one shape); the same additions in the same order, elementwise, so every entry is add_reduce's bits."""
    n = len(columns)
    if n < 8:
        total = np.float64(-0.0)
        for column in columns:
            total = total + column
        return np.asarray(total, dtype=np.float64)
    r = list(columns[:8])
    i = 8
    end = n - n % 8
    while i < end:
        for j in range(8):
            r[j] = r[j] + columns[i + j]
        i += 8
    total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        total = total + columns[i]
        i += 1
    return np.asarray(total, dtype=np.float64)


def multiply_reduce(values: Sequence[float]) -> float:
    """np.multiply.reduce of a non-empty float64 vector."""
    return math.prod(values)


_checked: dict[tuple[str, int], bool] = {}


def numpy_order(operation: str, length: int) -> bool:
    """Whether the emulation of `operation` ("add": add_reduce; "mean": add_reduce divided by the length, as
    ndarray.mean; "geometric": multiply_reduce, then the power
    1 / length, then minus 1, as engine.quality.loss aggregates) gives numpy's bits on vectors of `length` values:
    checked once per process and length on random vectors (the order of operations does not depend on the values)."""
    key = (operation, length)
    if key not in _checked:
        _checked[key] = _check(operation, length)
    return _checked[key]


def _check(operation: str, length: int, samples: int = 32, seed: int = 7) -> bool:
    if not 0 < length <= PAIRWISE_BLOCK:
        return False
    rng = np.random.default_rng(seed)
    vectors = rng.random((samples, length)) * 10.0 ** rng.integers(-3, 4, (samples, length))
    power = 1.0 / length
    for row in vectors:
        values = row.tolist()
        if operation == "add":
            ok = add_reduce(values) == float(np.add.reduce(row))
        elif operation == "mean":
            ok = add_reduce(values) / length == float(row.mean())
        else:
            ok = multiply_reduce(values) ** power - 1.0 == float(np.prod(row) ** power - 1.0)
        if not ok:
            return False
    return True

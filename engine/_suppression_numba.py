"""Loss's per-class keys for risk-based suppression, compiled (engine.quality.loss.Loss.suppression_keys).

Why: under a risk model (average risk, sample uniqueness, population uniqueness) nearly every check orders its
classes for suppression by size, then by Loss's per-class loss (ARX's `MetricMDNMLoss` for one class). In numpy the
keys gather the candidate classes' codes (d x n), then each attribute's label shares, a (d, n) array of products
and its reduction: 0.4 ms of a 0.9 ms ordering on ADULT's average-risk search, where the ordering is most of a
check. Here one pass over the candidates reads each class's codes where they are and sums its terms.

The bits are numpy's: values[i] = size x share_i is the same product, and numpy reduces a (d, n) array along axis 0
row after row (no pairwise summation across rows), as the loop does; the arithmetic mean then divides by d, and the
geometric mean's product of (value + 1) runs in the same order, its root left to numpy (`np.power`, whose vector
code on some processors is not libm's `pow`).
"""
from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")

SUM, MEAN, PRODUCT = 0, 1, 2   # how the per-attribute values of a class combine (PRODUCT: of value + 1)


@_jit
def suppression_keys(codes, sizes, index, shares, offsets, combine):
    """For each class index[j] (codes (d, u), sizes (u,)), its values size x shares[offsets[i] + code_i] combined
    across the attributes: summed (SUM), summed then divided by d (MEAN), or multiplied as value + 1 (PRODUCT)."""
    d = codes.shape[0]
    n = index.size
    keys = np.empty(n, np.float64)
    for j in range(n):
        c = np.uint64(index[j])
        size = np.float64(sizes[c])
        if combine == PRODUCT:
            acc = size * shares[np.uint64(offsets[0] + codes[0, c])] + 1.0
            for i in range(1, d):
                acc *= size * shares[np.uint64(offsets[i] + codes[i, c])] + 1.0
        else:
            acc = size * shares[np.uint64(offsets[0] + codes[0, c])]
            for i in range(1, d):
                acc += size * shares[np.uint64(offsets[i] + codes[i, c])]
            if combine == MEAN:
                acc = acc / d
        keys[j] = acc
    return keys


@_jit
def by_size(sizes):
    """The positions of `sizes` sorted by size, stably (a counting sort), the sizes in that order, and where each run
    of one size starts (and, last, the end): `SuppressionOrder`'s first step."""
    n = sizes.size
    largest = 0
    for j in range(n):
        largest = max(largest, sizes[j])
    place = np.zeros(largest + 2, np.int64)
    for j in range(n):
        place[sizes[j] + 1] += 1
    groups = 0
    for s in range(1, largest + 2):
        groups += place[s] > 0
        place[s] += place[s - 1]
    positions = np.empty(n, np.int64)
    ordered = np.empty(n, sizes.dtype)
    for j in range(n):
        s = sizes[j]
        p = place[s]
        positions[p] = j
        ordered[p] = s
        place[s] = p + 1
    starts = np.empty(groups + 1, np.int64)
    g = 0
    for p in range(n):
        if p == 0 or ordered[p] != ordered[p - 1]:
            starts[g] = p
            g += 1
    starts[groups] = n
    return positions, ordered, starts

"""Non-Uniform Entropy's terms of one transformation in one compiled pass (engine.quality.entropy): the suppressed
records per generalized value of every attribute, their entropy sums and the normalized per-attribute terms.

Why: the numpy reference makes a dozen calls per check over a few hundred values (a count vector, a mask, a
division, log2, a cumulative sum, then one dot product per attribute, a normalization): about 110-170 us a check
on FARS and ADULT, where the arithmetic is a few microseconds.

The reference's bits, not merely its value: each floating-point operation is the reference's, in the reference's
order. The counts are integers (exact in any order); S / s_w is the same IEEE division; log2 is the C library's
`log2`, which numpy's float64 log2 also calls on CPUs without AVX-512 (numba lowers math.log2 to the same symbol);
and the per-attribute sum of s_w x log2(S / s_w) is numpy's `np.dot`, i.e. OpenBLAS's ddot, replayed in its order
(`_blas_dot`: 16 products at a time into 16 fused multiply-add lanes, the lanes combined as the Haswell kernel's
horizontal additions do, then the rest added one product at a time, each product rounded before the sum). That
order belongs to one BLAS build and CPU kernel, so engine.quality.entropy uses this module only after
`agrees_with_numpy` found its sums equal to numpy's on random vectors of every length class (once per process),
and only for attributes with at most DOT_LIMIT suppressed values (OpenBLAS may split longer dot products over
threads): the caller computes those attributes' dot products with numpy itself, from the compiled counts.
"""
from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba.core import types
from numba.extending import intrinsic

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")

DOT_LIMIT = 8192   # longest dot product replayed: OpenBLAS splits ddot over threads above 10,000 values
LANES = 16         # products the Haswell ddot kernel takes per step (4 registers x 4 doubles)
MEMO = 1024        # counts below this have their log term remembered within one transformation (`_log_term`)


@intrinsic
def _fma(typingctx, a, b, c):
    """a x b + c rounded once (LLVM's llvm.fma.f64): the vfmadd231pd of OpenBLAS's ddot kernel."""
    signature = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, sig, args):
        double = ir.DoubleType()
        function = builder.module.declare_intrinsic("llvm.fma", [double], ir.FunctionType(double, [double] * 3))
        return builder.call(function, args)

    return signature, codegen


@numba.njit(inline="always", nogil=True)
def _log_term(total, count, memo, known):
    """log2(total / count) for a positive integer count: the division and the C library's log2, as numpy computes
    them, remembered for counts below memo.size (`known` marks the filled ones). Within one transformation the
    total is fixed and small counts recur across values and attributes (most values of a large domain hold a few
    suppressed records), so most terms are a read; the value is the same computation's either way."""
    if count < memo.size:
        if known[count]:
            return memo[count]
        y = math.log2(total / np.float64(count))
        memo[count] = y
        known[count] = True
        return y
    return math.log2(total / np.float64(count))


@numba.njit(inline="always", nogil=True)
def _blas_dot(counts, start, end, present, total, lanes, memo, known):
    """np.dot(values, log2(total / values)) over the positive counts[start:end] (`present` of them), in OpenBLAS
    Haswell ddot's order: the first present & -16 products accumulate in 16 fused lanes (lane j % 16), combined as
    ((l0 + l2) + (l4 + l6)) + ... per pair of lanes (the kernel's extract, adds and horizontal add), then the rest
    added one product at a time (product rounded, then the sum). The logs come through `_log_term`'s memo."""
    blocked = present & -LANES
    for j in range(LANES):
        lanes[j] = 0.0
    dot = 0.0
    j = 0
    for w in range(start, end):
        count = counts[w]
        if count <= 0:
            continue
        x = np.float64(count)
        y = _log_term(total, count, memo, known)
        if j < blocked:
            lanes[j & (LANES - 1)] = _fma(x, y, lanes[j & (LANES - 1)])
        else:
            if j == blocked and blocked > 0:
                dot = _combine(lanes)
            dot += y * x
        j += 1
    if blocked > 0 and j == blocked:
        dot = _combine(lanes)
    return dot


@numba.njit(inline="always", nogil=True)
def _combine(lanes):
    """The Haswell kernel's reduction of its four 4-lane accumulators a0..a3 (lanes 4a .. 4a + 3): each folded to
    two (lane 0 + lane 2, lane 1 + lane 3), then (a0 + a1) + (a2 + a3) per position, then the two positions added."""
    low = (lanes[0] + lanes[2]) + (lanes[4] + lanes[6])
    high = (lanes[1] + lanes[3]) + (lanes[5] + lanes[7])
    low2 = (lanes[8] + lanes[10]) + (lanes[12] + lanes[14])
    high2 = (lanes[9] + lanes[11]) + (lanes[13] + lanes[15])
    return (low + low2) + (high + high2)


@_jit
def entropy_terms(codes, sizes, suppressed, levels, cardinalities, generalization, maximum, totals, starts):
    """Non-Uniform Entropy's normalized terms of a transformation (levels) whose classes are (codes (d, u), sizes)
    and which suppresses `suppressed`: row 0 per attribute (generalization + suppression) / maximum (0 where the
    maximum is 0), row 1 suppression / maximum alone (engine.quality.entropy's `suppression_terms`). Returns
    (terms, suppressed records, how many pending, pending, values, logs, bounds): `pending` marks the attributes
    whose suppressed records hold more than DOT_LIMIT values, whose terms are left for the caller to compute with
    numpy's dot product of values[bounds[i]:bounds[i + 1]] (their suppressed records per value, as float64, in
    value order) and logs[...] (log2(suppressed records / value's), numpy's and the C library's log2).

    The suppressed records per value are counted from the side with fewer classes: the suppressed classes, or the
    records per value of the whole table (totals[starts[i, level] + code]) minus the kept classes; integers either
    way, so the counts are the same."""
    d, u = codes.shape
    offsets = np.empty(d + 1, np.int64)
    offsets[0] = 0
    for i in range(d):
        offsets[i + 1] = offsets[i] + cardinalities[i, levels[i]]
    removed = np.int64(0)
    chosen = 0
    for t in range(u):   # without a branch (the compiler vectorizes it)
        flag = np.int64(suppressed[t])
        removed += sizes[t] * flag
        chosen += flag
    out = np.empty((2, d), np.float64)
    raw = np.zeros(d, np.float64)
    pending = np.zeros(d, np.bool_)
    bounds = np.zeros(d + 1, np.int64)
    waiting = 0
    if removed > 0:
        counts = np.empty(offsets[d], np.int64)
        from_kept = 2 * chosen > u
        if from_kept:
            for i in range(d):
                begin = starts[i, levels[i]]
                for w in range(offsets[i + 1] - offsets[i]):
                    counts[offsets[i] + w] = totals[begin + w]
        else:
            counts[:] = 0
        for t in range(u):
            if suppressed[t] == from_kept:
                continue
            s = -sizes[t] if from_kept else sizes[t]
            for i in range(d):
                counts[offsets[i] + codes[i, t]] += s
        total = np.float64(removed)
        lanes = np.empty(LANES, np.float64)
        # the log terms of counts below MEMO (at most the records suppressed): filled as they are first needed
        memo = np.empty(min(removed + 1, MEMO), np.float64)
        known = np.zeros(memo.size, np.bool_)
        for i in range(d):
            present = 0
            for w in range(offsets[i], offsets[i + 1]):
                if counts[w] > 0:
                    present += 1
            if present > DOT_LIMIT:
                pending[i] = True
                waiting += 1
            else:
                raw[i] = _blas_dot(counts, offsets[i], offsets[i + 1], present, total, lanes, memo, known)
            bounds[i + 1] = bounds[i] + (present if present > DOT_LIMIT else 0)
        values = np.empty(bounds[d], np.float64)
        logs = np.empty(bounds[d], np.float64)
        if waiting:
            for i in range(d):
                if not pending[i]:
                    continue
                j = bounds[i]
                for w in range(offsets[i], offsets[i + 1]):
                    count = counts[w]
                    if count > 0:
                        values[j] = np.float64(count)
                        logs[j] = _log_term(total, count, memo, known)
                        j += 1
    else:
        values = np.empty(0, np.float64)
        logs = np.empty(0, np.float64)
    for i in range(d):
        g = generalization[i, levels[i]]
        if maximum[i] > 0:
            out[0, i] = (g + raw[i]) / maximum[i]
            out[1, i] = raw[i] / maximum[i]
        else:
            out[0, i] = 0.0
            out[1, i] = 0.0
    return out, removed, waiting, pending, values, logs, bounds


@_jit
def blas_dot_of_logs(counts, total):
    """`_blas_dot` over all of counts (positive integers): what `agrees_with_numpy` compares with np.dot."""
    lanes = np.empty(LANES, np.float64)
    memo = np.empty(MEMO, np.float64)
    known = np.zeros(MEMO, np.bool_)
    return _blas_dot(counts, 0, counts.size, counts.size, total, lanes, memo, known)


def agrees_with_numpy(samples: int = 3, seed: int = 11) -> bool:
    """Whether `_blas_dot` gives np.dot(values, np.log2(total / values))'s bits on random counts of every length
    up to 64 and of lengths up to DOT_LIMIT (blocks and tails of every size): the order replayed is this process's
    BLAS and libm's."""
    rng = np.random.default_rng(seed)
    lengths = [(n, samples) for n in range(1, 65)]
    lengths += [(int(n), 1) for n in rng.integers(65, DOT_LIMIT, 8)] + [(DOT_LIMIT, 1)]
    for n, repeats in lengths:
        for _ in range(repeats):
            counts = rng.integers(1, 10 ** int(rng.integers(1, 7)), n).astype(np.int64)
            total = float(counts.sum() + int(rng.integers(0, 1000)))
            values = counts.astype(np.float64)
            if float(blas_dot_of_logs(counts, total)) != float(np.dot(values, np.log2(total / values))):
                return False
    return True

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

Where numpy's log2 is not the C library's (numpy built with AVX-512 uses its own vector log2) or OpenBLAS runs
another kernel (SkylakeX's ddot on AVX-512 CPUs), the single pass cannot apply: the model then makes two compiled
calls around numpy's own log2 (`suppressed_values`, `terms_of_logs`), replaying the dot products in the order
`dot_order` found to be this BLAS's, and OpenBLAS's split of dot products longer than THREADED over its threads
where `threads_agree` verified it for the thread count it runs with.
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
    return _entropy_terms(codes, _NO_SELECT, _NO_ORIGIN, False, sizes, suppressed, levels, cardinalities,
                          generalization, maximum, totals, starts)


@_jit
def entropy_terms_lazy(rows, select, origin, sizes, suppressed, levels, cardinalities, generalization, maximum,
                       totals, starts):
    """`entropy_terms` of a lazy table (engine.classes.LazyCodes: origins into the level rows, select[i, lv]
    attribute i's row at level lv): the counted classes' codes read through their origins, so no (d, u) codes are
    gathered for a check that reads only the suppressed (or the kept) classes; the same counts, so the same bits."""
    return _entropy_terms(rows, select, origin, True, sizes, suppressed, levels, cardinalities, generalization,
                          maximum, totals, starts)


_NO_SELECT = np.zeros((1, 1), np.int64)   # an eager table's stand-ins for a lazy table's select and origins
_NO_ORIGIN = np.zeros(0, np.int32)


@numba.njit(inline="always", nogil=True)
def _entropy_terms(rows, select, origin, lazy, sizes, suppressed, levels, cardinalities, generalization, maximum,
                   totals, starts):
    """`entropy_terms` of an eager table (`lazy` False: rows are its codes) or a lazy one (`_value_counts`)."""
    d = levels.size
    u = sizes.size
    offsets = _offsets(levels, cardinalities)
    removed, chosen = _removed(sizes, suppressed)
    out = np.empty((2, d), np.float64)
    raw = np.zeros(d, np.float64)
    pending = np.zeros(d, np.bool_)
    bounds = np.zeros(d + 1, np.int64)
    waiting = 0
    if removed > 0:
        counts = _value_counts(rows, select, origin, lazy, sizes, suppressed, chosen, levels, totals, starts, offsets)
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
    _normalized(out, raw, levels, generalization, maximum)
    return out, removed, waiting, pending, values, logs, bounds


@numba.njit(inline="always", nogil=True)
def _offsets(levels, cardinalities):
    """Where each attribute's values start in one count vector at `levels` (and the total, last)."""
    d = levels.size
    offsets = np.empty(d + 1, np.int64)
    offsets[0] = 0
    for i in range(d):
        offsets[i + 1] = offsets[i] + cardinalities[i, levels[i]]
    return offsets


@numba.njit(inline="always", nogil=True)
def _removed(sizes, suppressed):
    """(records suppressed, classes suppressed)."""
    removed = np.int64(0)
    chosen = 0
    for t in range(sizes.size):   # without a branch (the compiler vectorizes it)
        flag = np.int64(suppressed[t])
        removed += sizes[t] * flag
        chosen += flag
    return removed, chosen


@numba.njit(inline="always", nogil=True)
def _value_counts(rows, select, origin, lazy, sizes, suppressed, chosen, levels, totals, starts, offsets):
    """The suppressed records per value of every attribute (offsets[i] + code), counted from the side with fewer
    classes (`chosen` of them suppressed): the suppressed classes, or the records per value of the whole table minus
    the kept classes'. Class t's code of attribute i is rows[i, t] in an eager table (`lazy` False: rows are its
    codes), rows[select[i, levels[i]], origin[t]] in a lazy one (engine.classes.LazyCodes): only the counted
    classes' codes are read, attribute by attribute (one row at a time). Measured: one pass listing both sides at
    once (no second scan of `suppressed`) cost more than these two scans (CUP k=5 `suppressed_values_lazy`: 85-105
    against 53-64 us a call)."""
    d = levels.size
    u = sizes.size
    from_kept = 2 * chosen > u
    counts = np.empty(offsets[d], np.int64)
    if from_kept:
        for i in range(d):
            begin = starts[i, levels[i]]
            for w in range(offsets[i + 1] - offsets[i]):
                counts[offsets[i] + w] = totals[begin + w]
    else:
        counts[:] = 0
    n = u - chosen if from_kept else chosen
    columns = np.empty(n, np.int64)   # the counted classes' columns (a lazy table's origins)
    signed = np.empty(n, np.int64)    # and sizes, negative when taken off the totals
    k = 0
    for t in range(u):
        if suppressed[t] != from_kept:
            columns[k] = origin[t] if lazy else t
            signed[k] = -sizes[t] if from_kept else sizes[t]
            k += 1
    for i in range(d):
        row = select[i, levels[i]] if lazy else i
        offset = offsets[i]
        for k in range(n):
            counts[offset + rows[row, columns[k]]] += signed[k]
    return counts


@numba.njit(inline="always", nogil=True)
def _normalized(out, raw, levels, generalization, maximum):
    """Row 0: (generalization + suppression) / maximum, row 1: suppression / maximum (0 where maximum is 0)."""
    for i in range(raw.size):
        g = generalization[i, levels[i]]
        if maximum[i] > 0:
            out[0, i] = (g + raw[i]) / maximum[i]
            out[1, i] = raw[i] / maximum[i]
        else:
            out[0, i] = 0.0
            out[1, i] = 0.0


# --- numpy's logs, a replayed dot product ------------------------------------------------------------------------
# Where numpy's float64 log2 is not the C library's (numpy's AVX-512 build computes it with its own vector code,
# which differs from libm in the last bit on about 1 value in 20,000), the logs are numpy's own: `suppressed_values`
# counts and lays out the present values, the caller takes np.log2(total / values) over all of them in one call (the
# reference's very call: elementwise, so each value's log is the reference's), and `terms_of_logs` replays the dot
# products in the order of this process's BLAS (`dot_order`).

HASWELL, SKYLAKEX = 1, 2   # dot product orders replayed (`dot_order`)


@_jit
def suppressed_values(codes, sizes, suppressed, levels, cardinalities, totals, starts):
    """(records suppressed, their records per present value of every attribute as float64 in value order, where
    each attribute's run starts (d + 1)): the reference's `values` and `ends`, in one pass."""
    return _suppressed_values(codes, _NO_SELECT, _NO_ORIGIN, False, sizes, suppressed, levels, cardinalities, totals,
                              starts)


@_jit
def suppressed_values_lazy(rows, select, origin, sizes, suppressed, levels, cardinalities, totals, starts):
    """`suppressed_values` of a lazy table (`entropy_terms_lazy`'s arguments): the counted classes' codes read
    through their origins; the same counts, so the same values."""
    return _suppressed_values(rows, select, origin, True, sizes, suppressed, levels, cardinalities, totals, starts)


@numba.njit(inline="always", nogil=True)
def _suppressed_values(rows, select, origin, lazy, sizes, suppressed, levels, cardinalities, totals, starts):
    """`suppressed_values` of an eager table (`lazy` False: rows are its codes) or a lazy one (`_value_counts`)."""
    d = levels.size
    offsets = _offsets(levels, cardinalities)
    removed, chosen = _removed(sizes, suppressed)
    bounds = np.zeros(d + 1, np.int64)
    if removed == 0:
        return removed, np.empty(0, np.float64), bounds
    counts = _value_counts(rows, select, origin, lazy, sizes, suppressed, chosen, levels, totals, starts, offsets)
    present = 0
    for w in range(counts.size):
        if counts[w] > 0:
            present += 1
    values = np.empty(present, np.float64)
    j = 0
    for i in range(d):
        for w in range(offsets[i], offsets[i + 1]):
            if counts[w] > 0:
                values[j] = np.float64(counts[w])
                j += 1
        bounds[i + 1] = j
    return removed, values, bounds


@_jit
def terms_of_logs(values, logs, bounds, levels, generalization, maximum, order, threads):
    """`entropy_terms`' (terms, pending, waiting) from the laid-out values and numpy's logs: per attribute the dot product
    of its run in `order`'s sequence, split as OpenBLAS splits it over `threads` threads (`_threaded_dot`); with
    `threads` 0 (a thread count not verified) an attribute of more than DOT_LIMIT values is left pending (numpy's
    own dot product, by the caller; `waiting` counts them)."""
    d = bounds.size - 1
    raw = np.zeros(d, np.float64)
    pending = np.zeros(d, np.bool_)
    waiting = 0
    for i in range(d):
        start, end = bounds[i], bounds[i + 1]
        if threads == 0 and end - start > DOT_LIMIT:
            pending[i] = True
            waiting += 1
        else:
            raw[i] = _threaded_dot(values, logs, start, end, order, threads)
    out = np.empty((2, d), np.float64)
    _normalized(out, raw, levels, generalization, maximum)
    return out, pending, waiting


THREADED = 10000   # OpenBLAS's ddot runs on one thread up to this length, split over its threads above


@numba.njit(inline="always", nogil=True)
def _threaded_dot(x, y, start, end, order, threads):
    """np.dot(x[start:end], y[start:end]) as OpenBLAS computes it with `threads` threads: one `order` dot product
    up to THREADED values; above, blas_level1_thread_with_return_value's split (each next chunk takes the remaining
    values divided by the remaining threads, rounded up), one dot product per chunk, and the chunks' results added
    in order to 0.0."""
    n = end - start
    if n <= THREADED or threads <= 1:
        return _ordered_dot(x, y, start, end, order)
    dot = 0.0
    remaining = n
    position = start
    for used in range(threads):
        if remaining <= 0:
            break
        width = (remaining + threads - used - 1) // (threads - used)
        remaining -= width
        if remaining < 0:
            width += remaining
        dot = dot + _ordered_dot(x, y, position, position + width, order)
        position += width
    return dot


@numba.njit(inline="always", nogil=True)
def _ordered_dot(x, y, start, end, order):
    if order == SKYLAKEX:
        return _skylakex_dot(x, y, start, end)
    return _haswell_dot(x, y, start, end)


@numba.njit(inline="always", nogil=True)
def _haswell_dot(x, y, start, end):
    """np.dot(x[start:end], y[start:end]) in OpenBLAS Haswell ddot's order (`_blas_dot`'s, on given products)."""
    lanes = np.zeros(LANES, np.float64)
    blocked = start + ((end - start) & -LANES)
    for j in range(start, blocked):
        lanes[(j - start) & (LANES - 1)] = _fma(x[j], y[j], lanes[(j - start) & (LANES - 1)])
    dot = _combine(lanes) if blocked > start else 0.0
    for j in range(blocked, end):
        dot += y[j] * x[j]
    return dot


@numba.njit(inline="always", nogil=True)
def _skylakex_dot(x, y, start, end):
    """np.dot(x[start:end], y[start:end]) in OpenBLAS SkylakeX ddot's order: the first n & -32 products fused
    into four 8-lane accumulators (accumulator r takes x[32 b + 8 r + l] in lane l); each folded to 4 lanes (lane l
    + lane l + 4); the rest of n & -16 fused 16 at a time into the four 4-lane accumulators (r takes 4 r + l); the
    four added ((a0 + a1) + a2) + a3 per lane, then (l0 + l2) + (l1 + l3); then the last n % 16 products fused into
    the sum one at a time (the C tail, contracted to fused multiply-adds in that build)."""
    n = end - start
    wide = np.zeros(32, np.float64)    # accumulator r, lane l at 8 r + l
    narrow = np.zeros(16, np.float64)  # accumulator r, lane l at 4 r + l
    n32 = n & -32
    n16 = n & -LANES
    for j in range(n32):
        wide[j & 31] = _fma(x[start + j], y[start + j], wide[j & 31])
    if n32:
        for r in range(4):
            for lane in range(4):
                narrow[4 * r + lane] = wide[8 * r + lane] + wide[8 * r + lane + 4]
    for j in range(n32, n16):
        narrow[j & 15] = _fma(x[start + j], y[start + j], narrow[j & 15])
    dot = 0.0
    if n16:
        c0 = ((narrow[0] + narrow[4]) + narrow[8]) + narrow[12]
        c1 = ((narrow[1] + narrow[5]) + narrow[9]) + narrow[13]
        c2 = ((narrow[2] + narrow[6]) + narrow[10]) + narrow[14]
        c3 = ((narrow[3] + narrow[7]) + narrow[11]) + narrow[15]
        dot = (c0 + c2) + (c1 + c3)
    for j in range(n16, n):
        dot = _fma(y[start + j], x[start + j], dot)
    return dot


@_jit
def dot_in_order(x, y, order, threads=1):
    """The whole of np.dot(x, y) in `order`'s sequence over `threads` threads (what `dot_order` and
    `threads_agree` compare with np.dot)."""
    return _threaded_dot(x, y, 0, x.size, order, threads)


def _samples(samples: int, seed: int):
    """Random count vectors of every length up to 64 and of lengths up to DOT_LIMIT, with a total above them."""
    rng = np.random.default_rng(seed)
    lengths = [(n, samples) for n in range(1, 65)]
    lengths += [(int(n), 1) for n in rng.integers(65, DOT_LIMIT, 8)] + [(DOT_LIMIT, 1)]
    for n, repeats in lengths:
        for _ in range(repeats):
            counts = rng.integers(1, 10 ** int(rng.integers(1, 7)), n).astype(np.int64)
            yield counts, float(counts.sum() + int(rng.integers(0, 1000)))


def dot_order(samples: int = 3, seed: int = 11) -> int:
    """The replayed order (HASWELL or SKYLAKEX) whose sums equal np.dot's bits on random vectors of every length
    class (blocks and tails of every size) in this process, else 0: which kernel OpenBLAS picked for this CPU."""
    cases = [(values, np.log2(total / values)) for values, total in
             ((counts.astype(np.float64), total) for counts, total in _samples(samples, seed))]
    for order in (HASWELL, SKYLAKEX):
        if all(float(dot_in_order(x, y, order)) == float(np.dot(x, y)) for x, y in cases):
            return order
    return 0


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
    for counts, total in _samples(samples, seed):
        values = counts.astype(np.float64)
        if float(blas_dot_of_logs(counts, total)) != float(np.dot(values, np.log2(total / values))):
            return False
    return True


def threads_agree(order: int, threads: int, seed: int = 17) -> bool:
    """Whether `order` split over `threads` threads gives np.dot's bits on random vectors longer than THREADED
    (lengths of every remainder by the thread count, and long ones) with the BLAS's thread count now."""
    if order not in (HASWELL, SKYLAKEX) or threads < 1:
        return False
    rng = np.random.default_rng(seed)
    # every remainder by the thread count once, one long length and one far longer: each threaded np.dot wakes
    # OpenBLAS's threads (about 10 ms on a loaded machine), so this once-per-process check stays short
    lengths = [THREADED - 1, THREADED] + [THREADED + r for r in range(1, threads + 1)]
    lengths += [int(rng.integers(2 * THREADED, 5 * THREADED)), 100_003]
    for n in lengths:
        counts = rng.integers(1, 10 ** int(rng.integers(1, 7)), n).astype(np.int64)
        x = counts.astype(np.float64)
        y = np.log2(float(counts.sum() + int(rng.integers(0, 1000))) / x)
        if float(dot_in_order(x, y, order, threads)) != float(np.dot(x, y)):
            return False
    return True


_THREAD_COUNT = None   # `blas_threads`: the BLAS's get-num-threads function (ctypes), False where not found


def blas_threads() -> int:
    """The thread count numpy's OpenBLAS runs with now (which splits its long dot products), 0 where it cannot be
    asked (the caller then leaves long dot products to numpy)."""
    global _THREAD_COUNT
    if _THREAD_COUNT is None:
        _THREAD_COUNT = _find_thread_count()
    return int(_THREAD_COUNT()) if _THREAD_COUNT else 0


def _find_thread_count():
    """The OpenBLAS library numpy loaded (numpy.libs next to the numpy package, as wheels ship it) and its
    get-num-threads symbol, or False."""
    import ctypes
    import glob
    import os

    folder = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in sorted(glob.glob(os.path.join(folder, "*openblas*.so*"))):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for name in ("scipy_openblas_get_num_threads64_", "openblas_get_num_threads64_", "openblas_get_num_threads"):
            function = getattr(library, name, None)
            if function is not None:
                function.restype = ctypes.c_int
                function.argtypes = []
                return function
    return False

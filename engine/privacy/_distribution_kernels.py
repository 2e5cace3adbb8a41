"""The compiled decisions of the distribution-based models (l-diversity, t-closeness): one pass over a
transformation's per-class sensitive-value histogram giving each class's statistic and whether the class must be
suppressed, on either form of the histogram:

* sparse entries (engine.distributions.SparseDistribution: class, value, count, sorted by class and value);
* a dense (values, classes) matrix (engine._distribution_numba.project_dense, one sensitive attribute, small
  enough), walked row by row, so that every class meets its values in the same order as its sparse entries and
  the classes' independent sums run side by side (the loop over classes vectorizes).

Each variant's formulas are written once (the `_term`/`_finish` helpers, inlined into both drivers), so the two
forms cannot drift apart. A value missing from a class adds +0.0 on the dense form (0 x log 0 is 0 x 0 in the
tables, |q - 0| - q is 0), which leaves a sum unchanged: no sum here is ever -0.0.

Imported only on the compiled path (a ClassView built with the kernels, engine.distributions.project), when numba
is already loaded. The numpy code in engine.privacy.ldiversity and engine.privacy.tcloseness stays the reference,
and every result here is its result to the last bit, because each floating-point operation is the reference's, in
the reference's order: per-class sums accumulate value by value as np.bincount does over the sorted entries, the
ordered distance's sum runs value by value as the reference's (and ARX's) does, sums of integer-valued floats are
exact in any order, and logarithms and Grassberger's G(n) are looked up in tables the models compute with numpy
(`log_table`, `table`), never recomputed with another libm. tests/engine/test_distribution_kernels.py and
tests/engine/test_distribution_dense.py compare them.
"""
from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")
_inline = numba.njit(inline="always", nogil=True)


@_inline
def _float_sizes(sizes):
    """The classes' sizes as float64 (exact below 2^53), the divisor every dense decision shares."""
    size = np.empty(sizes.size, np.float64)
    for k in range(sizes.size):
        size[k] = np.float64(sizes[k])
    return size


# --- l-diversity ----------------------------------------------------------------------------------------------------
@_inline
def _entropy_term(n, table):
    """A value held n times adds n x table[n] to its class's sum: n log2(n) (Shannon; table[n] = ln n / ln 2,
    divided by numpy once, the same bits as dividing here) or n G(n) (Grassberger)."""
    return np.float64(n) * table[n]


@_inline
def _finish_l_diversity(seen, total, weighted, variant, minimal, threshold, log_table, log2):
    """Per class the statistic and the violation from the distinct values (`seen`) and, for the entropy variants,
    the records (`total`) and the sum of the terms (`weighted`)."""
    class_count = seen.size
    statistic = np.zeros(class_count, np.float64)
    violating = np.empty(class_count, np.bool_)
    for k in range(class_count):
        if variant == 0:
            statistic[k] = seen[k]
            violating[k] = seen[k] < minimal
            continue
        log_total = log_table[np.int64(total[k])]
        if variant == 1:
            h = -((weighted[k] / total[k]) - log_total / log2)
        else:
            h = (log_total - weighted[k] / total[k]) / log2
        statistic[k] = h
        violating[k] = seen[k] < minimal or h < threshold
    return statistic, violating


@_jit
def l_diversity(classes, counts, class_count, variant, minimal, threshold, c, table, log_table, log2):
    """Per class the statistic and the violation of l-diversity, from sparse entries.

    variant 0 distinct (statistic: distinct values), 1 entropy with Shannon's estimator (`table`: log2 n by n), 2
    entropy with Grassberger's (`table`: G(n) by n; statistic: bits), 3 recursive (c,l) (statistic: c x the tail minus
    the largest count). A class with fewer than `minimal` distinct values always violates."""
    seen = np.zeros(class_count, np.int64)
    for e in range(classes.size):
        seen[classes[e]] += 1
    if variant == 3:
        statistic = np.zeros(class_count, np.float64)
        violating = np.empty(class_count, np.bool_)
        best = np.zeros(minimal - 1 if minimal > 1 else 0, np.int64)
        start = 0
        for k in range(class_count):
            stop = start + seen[k]
            statistic[k], violating[k] = _recursive_class(counts, start, stop, minimal, c, best)
            start = stop
        return statistic, violating
    total = np.zeros(class_count, np.float64)
    weighted = np.zeros(class_count, np.float64)
    if variant != 0:
        for e in range(classes.size):
            k = classes[e]
            total[k] += np.float64(counts[e])
            weighted[k] += _entropy_term(counts[e], table)
    return _finish_l_diversity(seen, total, weighted, variant, minimal, threshold, log_table, log2)


@_jit
def l_diversity_dense(dense, variant, minimal, threshold, c, table, log_table, log2):
    """`l_diversity` on a dense histogram (values, classes)."""
    card, class_count = dense.shape
    seen = np.zeros(class_count, np.int64)
    total = np.zeros(class_count, np.float64)
    weighted = np.zeros(class_count, np.float64)
    for v in range(card):
        row = dense[v]
        if variant == 1 or variant == 2:
            for k in range(class_count):
                n = row[k]
                seen[k] += n > 0
                total[k] += np.float64(n)
                weighted[k] += _entropy_term(n, table)
        else:
            for k in range(class_count):
                seen[k] += row[k] > 0
    if variant != 3:
        return _finish_l_diversity(seen, total, weighted, variant, minimal, threshold, log_table, log2)
    return _recursive_dense(dense, seen, minimal, c)


@_inline
def _recursive_dense(dense, seen, minimal, c):
    """Recursive (c,l)-diversity on a dense histogram, row by row like the other variants: per class its records,
    largest count and its minimal - 1 largest counts (kept in order by a compare-exchange per row, no branch), so
    the tail (the counts from the l-th largest on) is the records minus those. The integers a descending sort of
    each class's counts gives (the reference's; a sort and its allocation per class took ADULT l=3's recursive
    checks 0.4 ms each), so the same floats: tail x c - largest."""
    card, class_count = dense.shape
    top = minimal - 1 if minimal > 1 else 0
    total = np.zeros(class_count, np.int64)
    largest = np.zeros(class_count, np.int64)
    best = np.zeros((top, class_count), np.int64)   # per class its `top` largest counts so far, largest first
    carry = np.empty(class_count, np.int64)
    for v in range(card):
        row = dense[v]
        for k in range(class_count):
            n = np.int64(row[k])
            total[k] += n
            largest[k] = max(largest[k], n)
            carry[k] = n
        for r in range(top):   # the row's count sinks to its place among each class's largest
            kept = best[r]
            for k in range(class_count):
                b = kept[k]
                n = carry[k]
                kept[k] = max(b, n)
                carry[k] = min(b, n)
    statistic = np.empty(class_count, np.float64)
    violating = np.empty(class_count, np.bool_)
    for k in range(class_count):
        removed = np.int64(0)
        for r in range(top):
            removed += best[r, k]
        tail = np.float64(total[k] - removed)
        high = np.float64(largest[k])
        statistic[k] = tail * c - high
        violating[k] = seen[k] < minimal or not (high < tail * c)
    return statistic, violating


@_jit
def l_diversity_entropy_violating(dense, sizes, variant, minimal, threshold, table, log_table, log2, factor):
    """Per class whether entropy l-diversity (variant 1 Shannon, 2 Grassberger) is violated, on a dense histogram
    (values, classes) whose columns sum to `sizes`: `l_diversity_dense`'s violation to the bit, without a table
    look-up per cell for most classes.

    Why a bound decides most classes: the entropy is at least the collision (Renyi order 2) entropy,
    log2(N^2 / sum n^2), which needs only integer sums, vectorized across the classes. With the tables, the
    reference computes H = log2 N - (1/N) sum n T(n) with T(n) = log2 n (Shannon) or G(n) / ln 2 (Grassberger);
    with `excess` (>= 0, bits) the largest T(n) - log2 n in the tables, H >= (plug-in entropy in bits) - excess >=
    collision - excess. `factor` is 2^(threshold + excess + margin), where the margin (bits) covers every rounding
    between that real bound and the reference's floating-point H and the rounding of the test N^2 >= factor x
    sum n^2 itself (engine.privacy.ldiversity.decision_margin): a class passing the test has
    log2(N^2 / sum n^2) >= threshold + excess + the margin, with no logarithm per class. A class with fewer than
    `minimal` distinct values violates; one passing the test passes; every other class (about a third of those left
    on ADULT l=3) is summed exactly as `l_diversity_dense` sums it (its values in order, the same operations; N is
    its size, the exact float sum of its counts), and decided on that sum. If the view's records exceed the tables
    (`log_table` holds 0 .. its size - 1), nothing is decided and an empty array is returned: the caller rebuilds
    the tables, and `factor`, whose margin is taken for the tables' records."""
    card, class_count = dense.shape
    if sizes.sum() >= log_table.size:
        return np.empty(0, np.bool_)
    seen = np.zeros(class_count, np.int32)
    squares = np.zeros(class_count, np.int64)
    for v in range(card):
        row = dense[v]
        for k in range(class_count):
            n = row[k]
            seen[k] += np.int32(n > 0)
            squares[k] += np.int64(n) * n
    violating = np.empty(class_count, np.bool_)
    for k in range(class_count):
        size = np.float64(sizes[k])
        violating[k] = seen[k] < minimal or size * size < np.float64(squares[k]) * factor
    for k in range(class_count):
        if not violating[k] or seen[k] < minimal:
            continue
        weighted = 0.0
        for v in range(card):
            weighted += _entropy_term(dense[v, k], table)
        violating[k] = _entropy_bits(weighted, sizes[k], variant, log_table, log2) < threshold
    return violating


@_inline
def _or_smaller(suppressed, sizes, minimal):
    """The classes to suppress, `suppressed` (a model's violations, overwritten) or smaller than `minimal`, and the
    records they hold: what the evaluator computes as (sizes < minimal) | violating and the sum of their sizes."""
    total = np.int64(0)
    for k in range(sizes.size):
        chosen = suppressed[k] or sizes[k] < minimal
        suppressed[k] = chosen
        if chosen:
            total += sizes[k]
    return suppressed, total


@_jit
def l_diversity_entropy_suppression(dense, sizes, smallest, variant, minimal, threshold, table, log_table, log2,
                                    factor):
    """`l_diversity_entropy_violating`, then the classes to suppress with those smaller than `smallest` and the
    records they hold, in one call (ClassModel.suppression); an empty array where the kernel refuses the tables."""
    violating = l_diversity_entropy_violating(dense, sizes, variant, minimal, threshold, table, log_table, log2,
                                              factor)
    if violating.size != sizes.size:
        return violating, np.int64(0)
    return _or_smaller(violating, sizes, smallest)


@_inline
def _entropy_class(row, size, variant, minimal, threshold, table, log_table, log2, factor):
    """Whether one class (its counts per value, class-major) violates entropy l-diversity, as
    `l_diversity_entropy_violating` decides it: fewer than `minimal` values, else the collision bound, else the
    entropy summed exactly as `l_diversity_dense` sums it."""
    card = row.size
    distinct = np.int32(0)
    square_sum = np.int64(0)
    for v in range(card):
        n = row[v]
        distinct += np.int32(n > 0)
        square_sum += np.int64(n) * n
    if distinct < minimal:
        return True
    total = np.float64(size)
    if not (total * total < np.float64(square_sum) * factor):
        return False
    weighted = 0.0
    for v in range(card):
        weighted += _entropy_term(row[v], table)
    return _entropy_bits(weighted, size, variant, log_table, log2) < threshold


@_jit
def l_diversity_entropy_violating_bounded(counts, sizes, variant, minimal, threshold, table, log_table, log2,
                                          factor):
    """`l_diversity_entropy_violating` on the class-major histogram (classes, values) the class cache holds, class
    by class over contiguous rows (no value-major copy needed), with the classes of fewer than `minimal` records
    decided violating unread (they hold fewer than `minimal` values): the same decisions (ADULT l=3: two classes in
    three). The tables must cover every class read (log_table holds 0 .. its size - 1,
    and the margin in `factor` is taken for as many records); where a class read is larger, nothing is decided and
    an empty array is returned, as by the other kernels."""
    class_count = sizes.size
    violating = np.empty(class_count, np.bool_)
    for k in range(class_count):
        n = sizes[k]
        if n < minimal:
            violating[k] = True
            continue
        if n >= log_table.size:
            return np.empty(0, np.bool_)
        violating[k] = _entropy_class(counts[k], n, variant, minimal, threshold, table, log_table, log2, factor)
    return violating


@_jit
def l_diversity_entropy_suppression_bounded(counts, sizes, smallest, variant, minimal, threshold, table,
                                            log_table, log2, factor):
    """The classes to suppress (`l_diversity_entropy_violating_bounded`, or smaller than `smallest`) and the records
    they hold, in one pass: a class below either size is suppressed unread; an empty array where a class read is
    larger than the tables cover."""
    class_count = sizes.size
    suppressed = np.empty(class_count, np.bool_)
    below = max(smallest, minimal)
    total = np.int64(0)
    for k in range(class_count):
        n = sizes[k]
        if n < below:
            chosen = True
        elif n >= log_table.size:
            return np.empty(0, np.bool_), np.int64(0)
        else:
            chosen = _entropy_class(counts[k], n, variant, minimal, threshold, table, log_table, log2, factor)
        suppressed[k] = chosen
        if chosen:
            total += n
    return suppressed, total


@_inline
def _entropy_bits(weighted, size, variant, log_table, log2):
    """A class's entropy (bits) from its sum of terms and its size, as `_finish_l_diversity` computes it."""
    total = np.float64(size)
    log_total = log_table[np.int64(size)]
    if variant == 1:
        return -((weighted / total) - log_total / log2)
    return (log_total - weighted / total) / log2


@_inline
def _recursive_class(counts, start, stop, minimal, c, best):
    """Recursive (c,l)-diversity of one class from its counts counts[start:stop] (any order): c x the tail minus the
    largest count, and the violation. The tail (the counts from the l-th largest on) is the class's records minus
    its minimal - 1 largest counts, kept in `best` (a buffer of that length, overwritten) by a compare-exchange per
    count: the integers a descending sort would sum, without a sort and its allocation per class. The tail's floats
    are integers, so the result is the sorted sum's."""
    top = best.size
    for r in range(top):
        best[r] = 0
    total = np.int64(0)
    largest = np.int64(0)
    for e in range(start, stop):
        n = np.int64(counts[e])
        total += n
        largest = max(largest, n)
        for r in range(top):
            b = best[r]
            best[r] = max(b, n)
            n = min(b, n)
    removed = np.int64(0)
    for r in range(top):
        removed += best[r]
    tail = np.float64(total - removed)
    high = np.float64(largest)
    return tail * c - high, stop - start < minimal or not (high < tail * c)


# --- t-closeness ----------------------------------------------------------------------------------------------------
@_inline
def _equal_term(count, size, qv):
    """A value's term of the equal distance: |q_i - p_i| - q_i, with p_i = count / size."""
    p = np.float64(count) / size
    return np.abs(qv - p) - qv


@_inline
def _finish_equal(acc, t):
    """(1 + the class's sum of terms) / 2 per class, and whether it exceeds t (not <= t)."""
    distance = np.empty(acc.size, np.float64)
    violating = np.empty(acc.size, np.bool_)
    for k in range(acc.size):
        d = (1.0 + acc[k]) / 2.0
        distance[k] = d
        violating[k] = not (d <= t)
    return distance, violating


@_jit
def t_closeness_equal(classes, values, counts, sizes, q, t):
    """Equal ground distance per class, (1 + sum over the class's values of (|q_i - p_i| - q_i)) / 2, and whether it
    exceeds t, from sparse entries."""
    acc = np.zeros(sizes.size, np.float64)
    for e in range(classes.size):
        k = classes[e]
        acc[k] += _equal_term(counts[e], np.float64(sizes[k]), q[values[e]])
    return _finish_equal(acc, t)


@_jit
def t_closeness_equal_dense(dense, sizes, q, t):
    """`t_closeness_equal` on a dense histogram (values, classes)."""
    card, class_count = dense.shape
    size = _float_sizes(sizes)
    acc = np.zeros(class_count, np.float64)
    for v in range(card):
        qv = q[v]
        row = dense[v]
        for k in range(class_count):
            acc[k] += _equal_term(row[k], size[k], qv)
    return _finish_equal(acc, t)


EQUAL_MARGIN_ULPS = 16   # per value (and once more), in units of 2^-53: what `t_closeness_equal_violating` allows


@_jit
def t_closeness_equal_violating(dense, sizes, q, t):
    """Only the violation of the equal distance, on a dense histogram: what `t_closeness_equal_dense` decides, bit
    for bit, for the search, which needs no distance.

    Why: the distance's p_i = count / size is a division per value and class, the kernel's costliest instruction;
    here a first pass multiplies by the class's reciprocal instead. Both sums are within 7 V + 2 units of 2^-53 of
    the exact distance of the same q (each of V terms: the share within 3 units, the difference and the subtraction
    of q one each; each of V additions one unit of a partial sum at most 2 in magnitude; the final 1 + sum one
    unit), so a first distance further than (EQUAL_MARGIN_ULPS V + EQUAL_MARGIN_ULPS) x 2^-53 from t decides as
    the exact one does; a class nearer to t is summed again exactly (`_equal_term`, in value order, as
    `t_closeness_equal_dense` sums it)."""
    card, class_count = dense.shape
    size = _float_sizes(sizes)
    reciprocal = np.empty(class_count, np.float64)
    for k in range(class_count):
        reciprocal[k] = 1.0 / size[k]
    acc = np.zeros(class_count, np.float64)
    for v in range(card):
        qv = q[v]
        row = dense[v]
        for k in range(class_count):
            acc[k] += np.abs(qv - np.float64(row[k]) * reciprocal[k]) - qv
    return _equal_decisions(acc, dense.T, size, q, t)


@_jit
def _equal_decisions(acc, counts, size, q, t):
    """The equal-distance decisions from each class's fast sum `acc`: outside the proven margin around `t` the
    fast sum decides, inside it the class is summed again exactly as the numpy reference does (counts is
    class-major: counts[k, v]; the value-major caller passes a transposed view)."""
    class_count, card = counts.shape
    above, below = _equal_band(card, t)
    violating = np.empty(class_count, np.bool_)
    for k in range(class_count):
        d = (1.0 + acc[k]) / 2.0
        if d > above:
            violating[k] = True
        elif d < below:
            violating[k] = False
        else:
            violating[k] = _equal_exact_violates(counts[k], size[k], q, t)
    return violating


@_inline
def _equal_band(card, t):
    """The band around `t` where a fast sum over `card` values does not decide: (above, below)."""
    margin = (EQUAL_MARGIN_ULPS * card + EQUAL_MARGIN_ULPS) * 2.0 ** -53
    return t + margin, t - margin


@_inline
def _equal_exact_violates(row, size, q, t):
    """One class (counts per value, `size` as a float) summed again exactly as the numpy reference sums it."""
    exact = 0.0
    for v in range(row.size):
        exact += _equal_term(row[v], size, q[v])
    return not ((1.0 + exact) / 2.0 <= t)


@_jit
def t_closeness_equal_suppression(dense, sizes, q, t, minimal):
    """The classes to suppress under the equal distance alone (`t_closeness_equal_violating`, or smaller than
    `minimal`) and the records they hold: what the evaluator computes as (sizes < minimal) | violating and the
    sum of their sizes, in one call."""
    return _or_smaller(t_closeness_equal_violating(dense, sizes, q, t), sizes, minimal)


def equal_smallest_read(q: np.ndarray, t: float) -> int:
    """The smallest class size whose histogram the equal distance's decision must read: every class of fewer
    records violates t, whatever its values (`t_closeness_equal_violating_bounded`), prepared once per sensitive
    attribute and t (numpy, no kernel).

    Why it holds: a class of N records holds at most min(N, V) values, and the exact distance the kernels' sums
    approximate, E = (1 + sum over the held values of (|q_i - p_i| - q_i)) / 2, is at least 1 - the q of the held
    values (|q_i - p_i| >= p_i - q_i, and the held p_i sum to 1), so at least 1 - top(N), the sum of the N largest
    q_i. The reference's distance is within (7 V + 2) units of 2^-53 of E (`t_closeness_equal_violating`), so a
    class with 1 - top(N) above t by the kernels' margin ((EQUAL_MARGIN_ULPS V + EQUAL_MARGIN_ULPS) units) violates
    in the reference too. top(N) is summed in floating point (each of N additions of non-negative terms within a
    unit of the running sum) and raised by 4 N units and 4 more, the subtraction from 1 another unit: covered by the
    4 units added to the margin. Classes at least this large are decided as before (fast sum, exact re-sum near t).
    On ADULT's occupation (14 values) at t = 0.2 every class of fewer than 7 records violates: four classes in five
    of the branch and bound's checks are decided by their size alone."""
    card = int(q.size)
    unit = 2.0 ** -53
    above = float(t) + (EQUAL_MARGIN_ULPS * card + EQUAL_MARGIN_ULPS + 4) * unit
    top = np.cumsum(np.sort(np.asarray(q, dtype=np.float64))[::-1])
    for n in range(1, card + 1):
        upper = float(top[n - 1]) * (1.0 + 4.0 * n * unit) + 4.0 * unit
        if not 1.0 - upper > above:
            return n
    return card + 1


@_inline
def _equal_class(row, size, q, t, above, below):
    """Whether one class (its counts per value, class-major) violates the equal distance: the first sum of
    `t_closeness_equal_violating` (its terms in value order, with the class's reciprocal: the same bits) decides
    outside the band [below, above] around t, inside it the exact re-sum of `_equal_decisions`."""
    card = row.size
    reciprocal = 1.0 / np.float64(size)
    a = 0.0
    for v in range(card):
        qv = q[v]
        a += np.abs(qv - np.float64(row[v]) * reciprocal) - qv
    d = (1.0 + a) / 2.0
    if d > above:
        return True
    if d < below:
        return False
    return _equal_exact_violates(row, np.float64(size), q, t)


@_jit
def t_closeness_equal_violating_bounded(counts, sizes, q, t, smallest_read):
    """`t_closeness_equal_violating` on the class-major histogram (classes, values) the class cache holds, with
    classes of fewer than `smallest_read` records decided violating by their size alone (`equal_smallest_read`),
    unread: the same decisions. Class by class (the classes read are a few, the rest cost a comparison)."""
    class_count, card = counts.shape
    above, below = _equal_band(card, t)
    violating = np.empty(class_count, np.bool_)
    for k in range(class_count):
        n = sizes[k]
        violating[k] = True if n < smallest_read else _equal_class(counts[k], n, q, t, above, below)
    return violating


@_jit
def t_closeness_equal_suppression_bounded(counts, sizes, q, t, minimal, smallest_read):
    """The classes to suppress (`t_closeness_equal_violating_bounded`, or smaller than `minimal`) and the records
    they hold, in one pass: a class below either size is suppressed unread."""
    class_count, card = counts.shape
    above, below = _equal_band(card, t)
    smallest = max(smallest_read, minimal)
    suppressed = np.empty(class_count, np.bool_)
    total = np.int64(0)
    for k in range(class_count):
        n = sizes[k]
        chosen = True if n < smallest else _equal_class(counts[k], n, q, t, above, below)
        suppressed[k] = chosen
        if chosen:
            total += n
    return suppressed, total


@_inline
def _ordered_step(count, size, qv):
    """A value's step of the ordered distance's running sum: p_i - q_i, with p_i = count / size."""
    return np.float64(count) / size - qv


@_jit
def t_closeness_ordered(classes, values, counts, sizes, q, order, limit):
    """Ordered distance per class, sum_i |sum_(j<=i) (p_j - q_j)| over the values in `order` (compared with
    limit = t (m - 1), as ARX does), and whether it exceeds the limit, from sparse entries (each class's counts
    spread over a row of the values, then walked in order)."""
    class_count = sizes.size
    m = q.size
    p = np.zeros(m, np.int64)
    distance = np.empty(class_count, np.float64)
    violating = np.empty(class_count, np.bool_)
    e = 0
    for k in range(class_count):
        size = np.float64(sizes[k])
        start = e
        while e < classes.size and classes[e] == k:
            p[values[e]] = counts[e]
            e += 1
        cumulative = 0.0
        d = 0.0
        for j in range(m):
            v = order[j]
            step = _ordered_step(p[v], size, q[v])
            cumulative = step if j == 0 else cumulative + step
            d += np.abs(cumulative)
        distance[k] = d
        violating[k] = d > limit
        for r in range(start, e):
            p[values[r]] = 0
    return distance, violating


@_jit
def t_closeness_ordered_dense(dense, sizes, q, order, limit):
    """`t_closeness_ordered` on a dense histogram (values, classes)."""
    card, class_count = dense.shape
    size = _float_sizes(sizes)
    cumulative = np.zeros(class_count, np.float64)
    distance = np.zeros(class_count, np.float64)
    for j in range(card):
        v = order[j]
        qv = q[v]
        row = dense[v]
        for k in range(class_count):
            step = _ordered_step(row[k], size[k], qv)
            cumulative[k] = step if j == 0 else cumulative[k] + step
            distance[k] += np.abs(cumulative[k])
    violating = np.empty(class_count, np.bool_)
    for k in range(class_count):
        violating[k] = distance[k] > limit
    return distance, violating


@_jit
def t_closeness_hierarchical(classes, values, counts, sizes, table_counts, parents, starts, widths, t):
    """Hierarchical distance per class (Li et al. 2007, in ARX's integers scaled by |table| x |class|), and whether
    it exceeds t. Level L's parent map (children of level L-1 to nodes of level L) is parents[starts[L-1]:...], with
    widths[L] nodes at level L (widths[0]: the values)."""
    class_count = sizes.size
    table_size, extra, positive, negative = _hierarchy_scratch(table_counts, widths)
    dense = np.zeros(table_counts.size, np.float64)
    distance = np.empty(class_count, np.float64)
    violating = np.empty(class_count, np.bool_)
    e = 0
    for k in range(class_count):
        size = np.float64(sizes[k])
        begin = e
        while e < classes.size and classes[e] == k:
            dense[values[e]] = np.float64(counts[e])
            e += 1
        d = _hierarchical_class(dense, size, table_counts, table_size, parents, starts, widths, extra, positive,
                                negative)
        distance[k] = d
        violating[k] = not (d <= t)
        for r in range(begin, e):
            dense[values[r]] = 0.0
    return distance, violating


@_inline
def _hierarchy_scratch(table_counts, widths):
    """The table's size (a float sum of integers, exact) and the three scratch rows of `_hierarchical_class`."""
    table_size = 0.0
    for i in range(table_counts.size):
        table_size += table_counts[i]
    widest = 0
    for w in widths:
        widest = max(widest, w)
    return (table_size, np.empty(widest, np.float64), np.empty(widest, np.float64),
            np.empty(widest, np.float64))


@_inline
def _hierarchical_class(dense, size, table_counts, table_size, parents, starts, widths, extra, positive, negative):
    """The hierarchical distance of one class from its counts per value (`dense`, floats); `extra`, `positive` and
    `negative` are scratch rows as wide as the widest level."""
    m = table_counts.size
    height = starts.size
    for i in range(m):
        extra[i] = table_counts[i] * size - dense[i] * table_size
    cost = 0.0
    for level in range(1, height + 1):
        below = widths[level - 1]
        nodes = widths[level]
        for x in range(nodes):
            positive[x] = 0.0
            negative[x] = 0.0
        base = starts[level - 1]
        for x in range(below):
            parent = parents[base + x]
            value = extra[x]
            if value > 0.0:
                positive[parent] += value
            elif value < 0.0:
                negative[parent] -= value
        lesser = 0.0
        for x in range(nodes):
            lesser += min(positive[x], negative[x])
        cost += (level / np.float64(height)) * lesser
        for x in range(nodes):
            extra[x] = positive[x] - negative[x]
    return cost / (table_size * size)


@_jit
def t_closeness_hierarchical_dense(dense, sizes, table_counts, parents, starts, widths, t):
    """`t_closeness_hierarchical` on a dense histogram (values, classes), every class at once.

    Why: class by class, the tree walk is a chain of short loops with a branch per child; here each step of
    `_hierarchical_class` runs over a row of all the classes (vectorized). Every class still meets the same
    floating-point operations in the same order as there: a child's extra goes to its parent's positive sum if
    above 0 and to its negative sum if below; the branch-free form adds a zero otherwise, which leaves a sum that
    started at +0.0 unchanged to the bit (+0 + -0 is +0), so the distances are `_hierarchical_class`'s exactly."""
    card, class_count = dense.shape
    table_size, _, _, _ = _hierarchy_scratch(table_counts, widths)
    widest = 0
    for w in widths:
        widest = max(widest, w)
    size = _float_sizes(sizes)
    extra = np.empty((widest, class_count), np.float64)
    positive = np.empty((widest, class_count), np.float64)
    negative = np.empty((widest, class_count), np.float64)
    for i in range(card):
        counted = table_counts[i]
        row = dense[i]
        out = extra[i]
        for k in range(class_count):
            out[k] = counted * size[k] - np.float64(row[k]) * table_size
    cost = np.zeros(class_count, np.float64)
    lesser = np.empty(class_count, np.float64)
    height = starts.size
    for level in range(1, height + 1):
        below = widths[level - 1]
        nodes = widths[level]
        positive[:nodes] = 0.0
        negative[:nodes] = 0.0
        base = starts[level - 1]
        for x in range(below):
            parent = parents[base + x]
            child = extra[x]
            up = positive[parent]
            down = negative[parent]
            for k in range(class_count):
                value = child[k]
                up[k] += value if value > 0.0 else 0.0
                down[k] -= value if value < 0.0 else 0.0
        lesser[:] = 0.0
        for x in range(nodes):
            up = positive[x]
            down = negative[x]
            for k in range(class_count):
                lesser[k] += min(up[k], down[k])
        factor = level / np.float64(height)
        for k in range(class_count):
            cost[k] += factor * lesser[k]
        for x in range(nodes):
            up = positive[x]
            down = negative[x]
            out = extra[x]
            for k in range(class_count):
                out[k] = up[k] - down[k]
    distance = np.empty(class_count, np.float64)
    violating = np.empty(class_count, np.bool_)
    for k in range(class_count):
        d = cost[k] / (table_size * size[k])
        distance[k] = d
        violating[k] = not (d <= t)
    return distance, violating


# --- beta-likeness and delta-disclosure -----------------------------------------------------------------------------
@_jit
def beta_likeness_dense(dense, sizes, q, bound):
    """Per class, whether a value it holds has (p - q) / q > bound (bound per value: beta, or min(beta, -ln q)
    computed by the model with numpy), on a dense histogram: the reference's comparisons on the same floats
    (p = count / size, one IEEE division, as numpy divides). A value the class lacks never fails: its p is 0, and
    (0 - q) / q = -1 (or NaN for q = 0) is not above a bound >= 0; so the loop needs no branch."""
    card, class_count = dense.shape
    size = _float_sizes(sizes)
    violating = np.zeros(class_count, np.bool_)
    for v in range(card):
        qv = q[v]
        limit = bound[v]
        row = dense[v]
        for k in range(class_count):
            p = np.float64(row[k]) / size[k]
            violating[k] |= (p - qv) / qv > limit
    return violating


@_jit
def delta_disclosure_dense(dense, sizes, q, bounds):
    """Per class, whether a value it holds has |log2(p / q)| >= delta, on a dense histogram, and the (value,
    class) cells that this function leaves to the model.

    Why no logarithm: |log2 r| >= delta is r >= 2^delta or r <= 2^-delta, so the ratio r = p / q (two IEEE
    divisions, numpy's floats) is compared with `bounds` (engine.privacy.disclosure.delta_bounds): at or beyond
    (bounds[0], bounds[3]) the reference's |log2 r| is surely >= delta, strictly within (bounds[2], bounds[1]) surely
    below, and a cell in between (its numpy logarithm could round either way) is returned (values, classes) for
    the model to decide with numpy, as the reference does. Branch-free over the cells; a second pass collects the
    rare cells in between."""
    card, class_count = dense.shape
    violate_high, safe_high, safe_low, violate_low = bounds[0], bounds[1], bounds[2], bounds[3]
    size = _float_sizes(sizes)
    violating = np.zeros(class_count, np.bool_)
    near = 0
    for v in range(card):
        qv = q[v]
        row = dense[v]
        for k in range(class_count):
            held = row[k] > 0
            r = (np.float64(row[k]) / size[k]) / qv
            hit = held & ((r >= violate_high) | (r <= violate_low))
            violating[k] |= hit
            near += held & ~hit & ~((r > safe_low) & (r < safe_high))
    values = np.empty(near, np.int64)
    classes = np.empty(near, np.int64)
    if near > 0:
        w = 0
        for v in range(card):
            qv = q[v]
            row = dense[v]
            for k in range(class_count):
                if row[k] > 0:
                    r = (np.float64(row[k]) / size[k]) / qv
                    if not (r >= violate_high or r <= violate_low) and not (safe_low < r < safe_high):
                        values[w] = v
                        classes[w] = k
                        w += 1
    return violating, values, classes


# --- GIL-holding twins of the per-check decisions (suffix `_held`) -------------------------------------------------
#
# Why: the search's thread calls these once a check, for some ten microseconds, while the class cache's worker thread
# (engine.ahead) rolls up the next transformations. A `nogil` kernel releases the GIL on entry; the worker, waiting
# for it to run its Python between roll-ups, takes it, and the search's thread then waits on return until the worker
# drops it again (engine._kernels_numba's `_held` twins: the same hand-over). Measured on ADULT equal t-closeness
# (bnb, 4,190 checks): the decision kernel alone 14 us a call, 85 us of wall inside the search. Holding the GIL this
# briefly costs the worker nothing: its roll-ups run without it. Each twin calls its kernel (one source, compiled
# inline), so the decisions are the kernel's to the bit.
_held = numba.njit(cache=True, nogil=False, error_model="numpy")


@_held
def t_closeness_equal_suppression_bounded_held(counts, sizes, q, t, minimal, smallest_read):
    """`t_closeness_equal_suppression_bounded`, holding the GIL."""
    return t_closeness_equal_suppression_bounded(counts, sizes, q, t, minimal, smallest_read)


@_held
def t_closeness_equal_violating_bounded_held(counts, sizes, q, t, smallest_read):
    """`t_closeness_equal_violating_bounded`, holding the GIL."""
    return t_closeness_equal_violating_bounded(counts, sizes, q, t, smallest_read)


@_held
def l_diversity_entropy_suppression_bounded_held(counts, sizes, smallest, variant, minimal, threshold, table,
                                                 log_table, log2, factor):
    """`l_diversity_entropy_suppression_bounded`, holding the GIL."""
    return l_diversity_entropy_suppression_bounded(counts, sizes, smallest, variant, minimal, threshold, table,
                                                   log_table, log2, factor)


@_held
def l_diversity_entropy_violating_bounded_held(counts, sizes, variant, minimal, threshold, table, log_table, log2,
                                               factor):
    """`l_diversity_entropy_violating_bounded`, holding the GIL."""
    return l_diversity_entropy_violating_bounded(counts, sizes, variant, minimal, threshold, table, log_table, log2,
                                                 factor)

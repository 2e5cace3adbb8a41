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
        axis = _advance(digits, heights)
        changed = max(axis, 0)
    return levels, precision, lost


@numba.njit(cache=True, nogil=True)
def _advance(digits, heights):
    """The next level vector in flat C order, in place (the last attribute fastest, as the flat index counts):
    returns the first attribute whose level changed, -1 after the last transformation."""
    axis = digits.size - 1
    while axis >= 0:
        digits[axis] += 1
        if digits[axis] < heights[axis]:
            break
        digits[axis] = 0
        axis -= 1
    return axis


@numba.njit(cache=True, nogil=True)
def successor_table(ranks, heights):
    """For every transformation of the lattice with `heights` levels per attribute (flat C-order index i): row i of
    `successors` holds how many direct generalizations it has, then their flat indices in ascending strategy rank
    (`ranks`, unique), then -1; row i of `levels` its level vector. Flash's flat sweep reads a row with one
    `tolist` where it built the list with divmod, a comprehension and a sort per transformation."""
    d = heights.size
    n = ranks.size
    successors = np.full((n, d + 1), -1, np.int32)
    levels = np.empty((n, d), np.int32)
    strides = np.ones(d, np.int64)
    for axis in range(d - 2, -1, -1):
        strides[axis] = strides[axis + 1] * heights[axis + 1]
    digits = np.zeros(d, np.int64)
    for index in range(n):
        count = 0
        for axis in range(d):
            level = digits[axis]
            levels[index, axis] = level
            if level + 1 < heights[axis]:
                step = index + strides[axis]
                rank = ranks[step]
                # insertion in rank order (at most d entries)
                position = count
                while position > 0 and ranks[successors[index, position]] > rank:
                    successors[index, position + 1] = successors[index, position]
                    position -= 1
                successors[index, position + 1] = step
                count += 1
        successors[index, 0] = count
        _advance(digits, heights)
    return successors, levels



@numba.njit(cache=True, nogil=True)
def _levels_of(index, dims):
    """The level vector of the transformation with flat (C-order) index `index` (dims: row 0 the levels per
    attribute, row 1 the strides)."""
    d = dims.shape[1]
    levels = np.empty(d, np.int64)
    rest = index
    for axis in range(d):
        levels[axis] = rest // dims[1, axis]
        rest -= levels[axis] * dims[1, axis]
    return levels


@numba.njit(cache=True, nogil=True)
def tag_up_set(flags, index, dims):
    """Set the flag of every generalization of the transformation with flat (C-order) index `index` (its up-set:
    each level from its own to the top) in the lattice of `dims` (row 0 the levels per attribute, row 1 the
    strides), as `ExplicitTags.tag` does with one slice per axis: the trailing attributes at level 0 and the last
    one above it span one contiguous run per combination of the leading attributes' levels."""
    d = dims.shape[1]
    if d == 0:
        flags[index] = True
        return
    levels = _levels_of(index, dims)
    last = d - 1
    while last > 0 and levels[last] == 0:
        last -= 1
    run = (dims[0, last] - levels[last]) * dims[1, last]
    digits = levels.copy()
    while True:
        flags[index:index + run] = True
        axis = last - 1
        while axis >= 0:
            digits[axis] += 1
            index += dims[1, axis]
            if digits[axis] < dims[0, axis]:
                break
            index -= (digits[axis] - levels[axis]) * dims[1, axis]
            digits[axis] = levels[axis]
            axis -= 1
        if axis < 0:
            return


@numba.njit(cache=True, nogil=True)
def tag_down_set(flags, index, dims):
    """Set the flag of every specialization of the transformation with flat (C-order) index `index` (its down-set:
    each level from 0 to its own), as `ExplicitTags.tag` does for downward tags: the trailing attributes at their
    top level and the last one below it span one contiguous run per combination of the leading attributes' levels."""
    d = dims.shape[1]
    if d == 0:
        flags[index] = True
        return
    levels = _levels_of(index, dims)
    last = d - 1
    while last > 0 and levels[last] == dims[0, last] - 1:
        last -= 1
    run = (levels[last] + 1) * dims[1, last]
    digits = np.zeros(d, np.int64)
    start = 0
    while True:
        flags[start:start + run] = True
        axis = last - 1
        while axis >= 0:
            digits[axis] += 1
            start += dims[1, axis]
            if digits[axis] <= levels[axis]:
                break
            start -= digits[axis] * dims[1, axis]
            digits[axis] = 0
            axis -= 1
        if axis < 0:
            return


@numba.njit(cache=True, nogil=True)
def skip_step(candidate, flags, bounds, dims, prune, loss, best_bound, best_rank, best_index):
    """Flash's `skip` for a flat index: 0 to keep it, 1 when it is tagged (`flags` rows: anonymous, not anonymous,
    insufficient quality), 2 when `prune` (a solution is known) and its level bound rules it out as
    `FlashSearch._sweep`'s `ruled_out` and `Incumbent.rules_out` decide from the incumbent's key (`loss`,
    `best_bound`, `best_rank`, and its levels as the flat index `best_index`: for level vectors of one lattice the
    lexicographic order is the flat C order): a bound above the loss, or equal to it and losing the tie-break (the
    incumbent's level bound below this one's, or equal and the incumbent of a lower sum of levels, or of the same
    sum and not after it). A transformation ruled out has its up-set tagged insufficient here."""
    if flags[0, candidate] or flags[1, candidate]:
        return 1
    if not prune:
        return 0
    if flags[2, candidate]:
        return 1
    bound = bounds[candidate]
    if bound != loss:
        out = bound > loss
    elif best_bound != bound:   # a tie: Incumbent.rules_out, whose level bound is `bound` itself
        out = best_bound < bound
    else:
        rank = 0
        rest = candidate
        for axis in range(dims.shape[1]):
            level = rest // dims[1, axis]
            rest -= level * dims[1, axis]
            rank += level
        out = best_rank < rank or (best_rank == rank and best_index <= candidate)
    if out:
        tag_up_set(flags[2], candidate, dims)
        return 2
    return 0


@numba.njit(cache=True, nogil=True)
def find_path(path, length, successors, flags, bounds, dims, prune, loss, best_bound, best_rank, best_index):
    """Flash's `find_path` from the path's last transformation (`path[length - 1]`): repeatedly the first successor
    in rank order (a row of `successor_table`) that `skip_step` keeps, appended to `path`. Returns (the path's new
    length, how many successors were ruled out by the bound on the way)."""
    pruned = 0
    current = path[length - 1]
    while True:
        count = successors[current, 0]
        step = -1
        for position in range(1, count + 1):
            candidate = successors[current, position]
            skipped = skip_step(candidate, flags, bounds, dims, prune, loss, best_bound, best_rank, best_index)
            if skipped == 0:
                step = candidate
                break
            if skipped == 2:
                pruned += 1
        if step < 0:
            return length, pruned
        path[length] = step
        length += 1
        current = step


@numba.njit(cache=True, nogil=True)
def open_successors(out, index, successors, ranks, flags, bounds, dims, prune, loss, best_bound, best_rank,
                    best_index):
    """The loop of Flash's `check_path` after a failing check: of `index`'s successors in rank order, the ranks
    (`ranks`) of those `skip_step` keeps, written to `out`. Returns (how many, how many were ruled out)."""
    count = 0
    pruned = 0
    for position in range(1, successors[index, 0] + 1):
        candidate = successors[index, position]
        skipped = skip_step(candidate, flags, bounds, dims, prune, loss, best_bound, best_rank, best_index)
        if skipped == 0:
            out[count] = ranks[candidate]
            count += 1
        elif skipped == 2:
            pruned += 1
    return count, pruned



@numba.njit(cache=True, nogil=True)
def floor_down(values, live, indices, steps, starts, first, last, strides):
    """engine.search.floor's suppression floor carried down the ranks `first`, first - 1, ..., `last` (sums of
    levels, each rank above `first` already done): each transformation x listed for those ranks (`indices`: flat
    C-order indices grouped by rank, rank q at starts[q] .. starts[q + 1]; `steps`: per listed x a bit per attribute
    whose level is below its top) takes, column by column, the largest of its own row and the rows of its direct
    generalizations x + strides[a] (`values`: one row of floats per flat index). Done top-down, a row then holds
    the largest over every generalization of x reached through listed transformations: what raising the down-set
    of each evaluated transformation gives, with comparisons only (the same floats). `live` marks the rows that
    may be above 0 (raised, or below a raised one): a row none of whose generalizations is live stays as it is,
    without reading theirs."""
    d = strides.size
    columns = values.shape[1]
    row = np.empty(columns, values.dtype)   # x's row while its generalizations are compared (no aliasing)
    for q in range(first, last - 1, -1):
        for p in range(starts[q], starts[q + 1]):
            x = indices[p]
            bits = steps[p]
            if bits == 0:
                continue
            started = False
            for axis in range(d):
                if (bits >> axis) & 1:
                    s = x + strides[axis]
                    if not live[s]:
                        continue
                    if not started:
                        started = True
                        for j in range(columns):
                            row[j] = values[x, j]
                    for j in range(columns):
                        other = values[s, j]
                        row[j] = other if other > row[j] else row[j]
            if started:
                live[x] = True
                for j in range(columns):
                    values[x, j] = row[j]

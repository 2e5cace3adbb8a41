"""The numba functions behind engine.kernels (imported only through `engine.kernels.load()`, which imports numba).

All are compiled with `cache=True` (once per machine), `nogil=True` (threads may run them side by side; the small
kernels the search's thread calls once a check also have GIL-holding twins, `*_held`, see there) and numpy's
error model; none uses fastmath, and all sums are integer, so results do not depend on the order of the loops.
Classes are merged by key in one place (`_merge`, with the index table of engine._hash_numba); their keys come from
engine._keys_numba, shared with the dense form's roll-ups.
"""
from __future__ import annotations

import numba
import numpy as np

from ._hash_numba import find, new_index, table_bits
from ._keys_numba import base_keys, class_codes, radix_keys, rolled_keys

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")
# The merge's index table is sized for at most a quarter of its slots used while it stays within 2^16 int32 slots
# (256 KB, in the core's L2 cache): FARS's roll-ups of a search (4,192 classes on average) 6 % faster than half
# full; larger tables (CUP's 63,441 base classes) stay half full, twice the size would leave L2.
SPARSER_BITS = 15


@_jit
def roll_up(codes, sizes, key, changed, starts, maps, places, minimal, bound=-1):
    """Classes of a generalization from the classes (codes (d, m) int32, sizes, key in the fixed radix `places`) of a
    specialization. Attribute changed[c] changes level through the code map starting at maps[starts[c]]. Returns
    the new classes' codes (d, u) int32, sizes, keys (first appearance order, as engine.classes.roll_up_keyed) and
    the records in classes smaller than `minimal`. `bound`: at most this many classes can result (`_merge`)."""
    keys = rolled_keys(codes, key, changed, starts, maps, places)   # the new keys first (engine._keys_numba)
    return _merge(codes, sizes, keys, changed, starts, maps, minimal, bound)


@_jit
def records_below(sizes, minimal):
    """Records in classes smaller than `minimal`."""
    total = np.int64(0)
    for t in range(sizes.size):
        if sizes[t] < minimal:
            total += sizes[t]
    return total


@_jit
def records_in(sizes, chosen):
    """Records in the chosen classes (an integer sum: the reference's sizes[chosen].sum())."""
    total = np.int64(0)
    for t in range(sizes.size):
        if chosen[t]:
            total += sizes[t]
    return total


@_jit
def suppress_below(sizes, minimal):
    """The classes smaller than `minimal` (to suppress) and the records they hold."""
    suppressed = np.empty(sizes.size, np.bool_)
    total = np.int64(0)
    for t in range(sizes.size):
        small = sizes[t] < minimal
        suppressed[t] = small
        if small:
            total += sizes[t]
    return suppressed, total


@_jit
def kept_weighted_sums(codes, sizes, suppressed, weights, offsets):
    """Per attribute i, Σ over kept classes of size x weights[offsets[i] + code] (integers: Loss's hierarchy rows
    under each label), and the suppressed records."""
    d, u = codes.shape
    sums = np.zeros(d, np.int64)
    removed = np.int64(0)
    for t in range(u):
        s = sizes[t]
        if suppressed[t]:
            removed += s
            continue
        for i in range(d):
            sums[i] += s * weights[offsets[i] + codes[i, t]]
    return sums, removed


@_jit
def loss_terms(codes, sizes, suppressed, weights, offsets, domain, generalization, suppression, floor, span,
               positive):
    """Loss's normalized per-attribute terms (engine.quality.loss.Loss._attribute_array) in one call:
    `kept_weighted_sums`, then per attribute kept / domain, x the generalization weight, + the suppression weight x
    the suppressed records, (sum - floor) / span where the span is positive (else 0), clipped to [0, 1]. The same
    IEEE operations in the same order as the numpy reference (no fastmath, so no fused multiply-add): its bits."""
    kept, removed = kept_weighted_sums(codes, sizes, suppressed, weights, offsets)
    return _terms_of_kept(kept, removed, domain, generalization, suppression, floor, span, positive)


@_jit
def suppress_and_loss_terms(codes, sizes, minimal, limit, weights, offsets, domain, generalization, suppression,
                            floor, span, positive):
    """`suppress_below`, then, when some records are suppressed and no more than `limit`, Loss's terms of that
    suppression (`loss_terms`; an empty array otherwise): a size-only check with Loss in one call."""
    suppressed, kept_classes, n, total = _suppressed_and_kept(sizes, minimal)
    if total == 0 or total > limit:
        return suppressed, total, np.empty(0, np.float64)
    # `kept_weighted_sums` over the kept classes only, without a branch per class on whether it is kept (ADULT
    # k=5 suppresses most classes, a branch the processor mispredicts): the same integer sums, 15 % cheaper
    d = codes.shape[0]
    kept = np.zeros(d, np.int64)
    for k in range(n):
        t = kept_classes[k]
        s = sizes[t]
        for i in range(d):
            kept[i] += s * weights[offsets[i] + codes[i, t]]
    return suppressed, total, _terms_of_kept(kept, total, domain, generalization, suppression, floor, span, positive)


@numba.njit(inline="always", nogil=True)
def _suppressed_and_kept(sizes, minimal):
    """(suppressed mask of the classes below `minimal`, the kept classes' numbers in the first n places, n, records
    suppressed) in one pass without a branch per class (ADULT k=5 suppresses most classes, a branch the processor
    mispredicts)."""
    u = sizes.size
    suppressed = np.empty(u, np.bool_)
    kept_classes = np.empty(u, np.int64)
    total = np.int64(0)
    n = 0
    for t in range(u):
        s = sizes[t]
        small = s < minimal
        suppressed[t] = small
        kept_classes[n] = t
        n += not small
        total += s * small
    return suppressed, kept_classes, n, total


@numba.njit(inline="always", nogil=True)
def _terms_of_kept(kept, removed, domain, generalization, suppression, floor, span, positive):
    """`loss_terms`'s normalization of the kept sums, written once for both."""
    d = kept.size
    out = np.empty(d, np.float64)
    penalty = suppression * np.float64(removed)
    for i in range(d):
        total = generalization * (np.float64(kept[i]) / domain[i]) + penalty
        value = (total - floor[i]) / span[i] if positive[i] else 0.0
        out[i] = min(max(value, 0.0), 1.0)
    return out


@_jit
def suppressed_value_counts(codes, sizes, suppressed, offsets, total):
    """Suppressed records per attribute value: entry offsets[i] + code counts attribute i's value `code` (Non-Uniform
    Entropy's suppression term)."""
    d, u = codes.shape
    counts = np.zeros(total, np.int64)
    for t in range(u):
        if suppressed[t]:
            s = sizes[t]
            for i in range(d):
                counts[offsets[i] + codes[i, t]] += s
    return counts


@_jit
def best_source(levels, counts, n, node):
    """Row of `levels` (the first n rows: transformations whose classes were computed) that is a specialization of
    `node` (every level at most node's, not node itself) with the fewest classes (`counts`), -1 when none is."""
    d = node.size
    best = -1
    fewest = np.int64(-1)
    for r in range(n):
        count = counts[r]
        if best >= 0 and count >= fewest:
            continue
        same = True
        below = True
        for i in range(d):
            level = levels[r, i]
            if level > node[i]:
                below = False
                break
            if level != node[i]:
                same = False
        if below and not same:
            best = r
            fewest = count
    return best



@_jit
def pack_levels(node, lane, packed):
    """The level vector `node` packed into `packed` (uint64 words): level i in lane i % (64 // lane) of word
    i // (64 // lane), `lane` bits each (levels below 2^(lane - 1)), unused lanes 0."""
    per = 64 // lane
    for k in range(packed.size):
        packed[k] = np.uint64(0)
    for i in range(node.size):
        packed[i // per] |= np.uint64(node[i]) << np.uint64(lane * (i % per))


@_jit
def best_source_packed(words, counts, n, node, lane, high, packed):
    """`best_source` on packed level vectors (`pack_levels`; `node` is packed into `packed` first, for the caller
    to keep): row r is a specialization of the node when every lane of ((node | high) - words[r]) keeps its top
    bit (`high`: the top bit of every lane), i.e. no lane of words[r] exceeds the node's (levels below 2^(lane - 1),
    so no lane borrows from the next); a word per 8 attributes instead of a compare per attribute. The same row as
    `best_source`: the first with the fewest classes."""
    pack_levels(node, lane, packed)
    w = packed.size
    best = -1
    fewest = np.int64(-1)
    for r in range(n):
        count = counts[r]
        if best >= 0 and count >= fewest:
            continue
        below = True
        same = True
        for k in range(w):
            row = words[r, k]
            mine = packed[k]
            if ((mine | high) - row) & high != high:
                below = False
                break
            if row != mine:
                same = False
        if below and not same:
            best = r
            fewest = count
    return best


@_jit
def group_rows(rows, places):
    """Classes of the records: rows (d, n) are the level-0 codes, places the fixed radix. Returns the classes' codes
    (d, u) int32, sizes (records per class) and keys, classes in order of first appearance (as engine.grouping.group
    with unit weights, whose codes, sizes and order these equal)."""
    n = rows.shape[1]
    keys = radix_keys(rows, places)
    nothing = np.empty(0, np.int64)   # no attribute changes level: the merge only groups
    codes, sizes, class_keys, _ = _merge(rows, np.ones(n, np.int64), keys, nothing, nothing, nothing, 0, -1)
    return codes, sizes, class_keys


@_jit
def roll_up_base(codes, sizes, key, changed, starts, maps, places, minimal, deltas, ready, rows, bound=-1):
    """`roll_up` from the base classes with the key updates kept: deltas[rows[c]] holds, per base class, what
    attribute changed[c] adds to the key at its new level ((mapped code - code) x place), filled on first use
    (ready) and kept by the caller. The keys are the same integers, so classes, sizes, keys and their order are
    roll_up's; a search that rolls up from the base many times (a Flash path's first checks, far up the lattice)
    adds contiguous rows instead of gathering through the maps every time."""
    keys = base_keys(codes, key, changed, starts, maps, places, deltas, ready, rows)
    return _merge(codes, sizes, keys, changed, starts, maps, minimal, bound)


@_jit
def roll_up_levels(codes, sizes, key, levels, starts, maps, places, cards, minimal):
    """`roll_up` from a cached table told by level vectors instead of the changed attributes: levels holds the
    source's d levels then the target's, starts[i, lo, hi] where attribute i's code map from level lo to hi begins in
    `maps` (-1: none), cards[i, level] attribute i's cardinality (the bound, `_level_changes`). The class cache's
    common roll-up in one call, with no Python pass over the attributes; the same classes as `roll_up`."""
    changed, where, bound = _level_changes(levels, starts, cards, codes.shape[1])
    keys = rolled_keys(codes, key, changed, where, maps, places)
    return _merge(codes, sizes, keys, changed, where, maps, minimal, bound)


@numba.njit(inline="always", nogil=True)
def _base_level_keys(codes, key, levels, starts, maps, places, cards, deltas, ready, rows):
    """The new keys of a roll-up from a source with kept key updates, told by level vectors, with the changed
    attributes, where their code maps start and the target's class bound: both forms' (codes, origins) first half."""
    changed, where, bound = _level_changes(levels, starts, cards, codes.shape[1])
    d = changed.size
    picked = np.empty(d, np.int64)
    half = levels.size // 2
    for c in range(d):
        picked[c] = rows[changed[c], levels[half + changed[c]]]
    keys = base_keys(codes, key, changed, where, maps, places, deltas, ready, picked)
    return keys, changed, where, bound


@_jit
def roll_up_base_levels(codes, sizes, key, levels, starts, maps, places, cards, minimal, deltas, ready, rows):
    """`roll_up_base` told by level vectors (as `roll_up_levels`): rows[i, level] is the row of `deltas` holding
    attribute i's key updates at `level` (engine.classes.ClassCache._delta_layout). The same classes as
    `roll_up_base`."""
    keys, changed, where, bound = _base_level_keys(codes, key, levels, starts, maps, places, cards, deltas, ready,
                                                   rows)
    return _merge(codes, sizes, keys, changed, where, maps, minimal, bound)


@numba.njit(inline="always", nogil=True)
def _level_changes(levels, starts, cards, m):
    """From levels (source's then target's): the attributes whose level changes, where each one's code map starts,
    and the bound of `_merge`: the product of the target levels' cardinalities, -1 once it exceeds the m source
    classes (stopped there, so it never overflows)."""
    half = levels.size // 2
    count = 0
    for i in range(half):
        if levels[i] != levels[half + i]:
            count += 1
    changed = np.empty(count, np.int64)
    where = np.empty(count, np.int64)
    c = 0
    bound = np.int64(1)
    for i in range(half):
        lo = levels[i]
        hi = levels[half + i]
        if lo != hi:
            changed[c] = i
            where[c] = starts[i, lo, hi]
            c += 1
        if bound > 0:
            bound *= cards[i, hi]
            if bound > m:
                bound = -1
    return changed, where, bound


@_jit
def _merge(codes, sizes, keys, changed, starts, maps, minimal, bound):
    """The classes with equal keys merged (first appearance order), their codes mapped: roll_up's and
    roll_up_base's second half. The hash table holds class numbers, the keys being in new_keys (`find`).

    `bound` (negative: none) is what the caller knows at most this many classes can result, the product of the
    target levels' cardinalities: when it is below the input's classes the table and the work arrays are sized
    for it (a roll-up of ADULT's 19,502 base classes to a node of 480 code combinations hashes into 1,024 slots
    in L1 instead of 65,536, with no 256 KB table to clear). A key beyond the bound would mean codes outside
    their cardinalities: refused rather than probing a full table."""
    new_sizes, new_keys, member, u, below = _merged(sizes, keys, minimal, bound)
    new_codes = class_codes(codes, member, u, changed, starts, maps)
    return new_codes, new_sizes, new_keys, below


@numba.njit(inline="always", nogil=True)
def _merged(sizes, keys, minimal, bound):
    """The merge both forms share: (sizes, keys, first member of each merged class, their number u, records in
    classes below `minimal`); sizes and keys are the classes' own arrays when every slot of the cap was used, else
    copies of their first u entries."""
    m = keys.size
    cap = m if bound < 0 or bound > m else bound
    bits = table_bits(cap)
    if bits <= SPARSER_BITS:   # a quarter full at most: fewer collisions, each a second dependent read (the keys)
        bits += 1
    index = new_index(bits)
    new_keys = np.empty(cap, np.int64)
    new_sizes = np.empty(cap, np.int64)
    member = np.empty(cap, np.int64)
    u = 0
    for j in range(m):
        k = keys[j]
        slot = find(index, new_keys, k, bits)
        t = index[slot]
        if t >= 0:
            new_sizes[np.uint64(t)] += sizes[j]
        else:
            if u == cap:
                raise ValueError("roll-up: more classes than the product of the target levels' cardinalities")
            index[slot] = u
            new_keys[u] = k
            new_sizes[u] = sizes[j]
            member[u] = j
            u += 1
    below = np.int64(0)
    for t in range(u):
        if new_sizes[t] < minimal:
            below += new_sizes[t]
    if u == cap:   # every slot used: the arrays are the classes' own (no copy)
        return new_sizes, new_keys, member, u, below
    return new_sizes[:u].copy(), new_keys[:u].copy(), member, u, below


# GIL-holding twins of the small kernels the search's thread calls once a check (suffix `_held`).
#
# Why: a `nogil` kernel releases the GIL on entry and takes it back on return. While the worker thread
# (engine.ahead) runs Python it is waiting for the GIL, so it takes the GIL at the release, and the search's
# thread, back from a kernel of a microsecond, then waits until the worker drops it: at its next own kernel, or
# after the interpreter's switch interval (5 ms). Measured on ADULT t-closeness with the worker running: pack_levels
# 80 us of wall per call for 10 us of CPU. Holding the GIL through a kernel this short costs the worker nothing it
# could have used. The big kernels (roll-ups) keep `nogil`: the worker runs them, and the search's thread runs
# them side by side with it. Each twin calls its kernel (one source; the call is compiled inline), and has its own
# cache entry (numba's cache key is the function's name and line, not its flags).
_held = numba.njit(cache=True, nogil=False, error_model="numpy")


@_held
def records_below_held(sizes, minimal):
    """`records_below`, holding the GIL."""
    return records_below(sizes, minimal)


@_held
def records_in_held(sizes, chosen):
    """`records_in`, holding the GIL."""
    return records_in(sizes, chosen)


@_held
def suppress_below_held(sizes, minimal):
    """`suppress_below`, holding the GIL."""
    return suppress_below(sizes, minimal)


@_held
def best_source_held(levels, counts, n, node):
    """`best_source`, holding the GIL."""
    return best_source(levels, counts, n, node)


@_held
def pack_levels_held(node, lane, packed):
    """`pack_levels`, holding the GIL."""
    pack_levels(node, lane, packed)


@_held
def best_source_packed_held(words, counts, n, node, lane, high, packed):
    """`best_source_packed`, holding the GIL."""
    return best_source_packed(words, counts, n, node, lane, high, packed)


# Lazy class tables (engine.classes.LazyCodes): a table holds, per class, the number of one of its base classes (its
# "origin", the first base class of its first member) instead of its d codes. Attribute i's codes at level lv are
# then rows[select[i, lv]][origin]: a level row holds the base classes' codes at that level. A roll-up reads the
# changed attributes' codes through the origins and writes one int32 per new class instead of d codes (the codes'
# copy was a third to half of the eager roll-up); readers gather the codes they need (`gather_codes`).


@_jit
def roll_up_levels_lazy(rows, select, origin, sizes, key, levels, starts, maps, places, cards, minimal):
    """`roll_up_levels` of a lazy table (origins into the level rows `rows`, select[i, lv] attribute i's row at level
    lv): the same keys, sizes, order and records below `minimal`; returns the new classes' origins instead of their
    codes."""
    changed, where, bound = _level_changes(levels, starts, cards, origin.size)
    keys = lazy_keys(rows, select, origin, key, levels, changed, where, maps, places)
    return _merge_origin(origin, sizes, keys, minimal, bound)


@numba.njit(inline="always", nogil=True)
def lazy_keys(rows, select, origin, key, levels, changed, where, maps, places):
    """The keys of a lazy table's roll-up: attribute changed[c]'s codes at its source level levels[i] read through the
    origins from its level row, mapped through the code map starting at maps[where[c]]. Both forms' lazy roll-ups
    (`roll_up_levels_lazy`; the dense form's engine._distribution_numba.roll_up_dense_lazy) share it."""
    m = origin.size
    keys = key.copy()
    for c in range(changed.size):
        i = changed[c]
        row = rows[select[i, levels[i]]]
        start = where[c]
        place = places[i]
        for j in range(m):
            v = np.int64(row[np.uint64(origin[j])])
            keys[j] += (maps[np.uint64(start + v)] - v) * place
    return keys


@_jit
def roll_up_base_levels_lazy(codes, origin, sizes, key, levels, starts, maps, places, cards, minimal, deltas, ready,
                             rows):
    """`roll_up_base_levels` (a source with kept key updates: the base, or a warmed table with its codes gathered)
    returning the new classes' origins (origin[first member]) instead of their codes."""
    keys, changed, where, bound = _base_level_keys(codes, key, levels, starts, maps, places, cards, deltas, ready,
                                                   rows)
    return _merge_origin(origin, sizes, keys, minimal, bound)


@_jit
def _merge_origin(origin, sizes, keys, minimal, bound):
    """`_merge` writing each new class's origin (its first member's) instead of its codes."""
    new_sizes, new_keys, member, u, below = _merged(sizes, keys, minimal, bound)
    return origins_of(origin, member, u), new_sizes, new_keys, below


@numba.njit(inline="always", nogil=True)
def origins_of(origin, member, u):
    """The u merged classes' origins: each one's first member's (both forms' lazy merges share it; the dense form's
    is engine._distribution_numba._merge_dense_origin)."""
    new_origin = np.empty(u, np.int32)
    for t in range(u):
        new_origin[t] = origin[np.uint64(member[t])]
    return new_origin


@_jit
def gather_codes(rows, picked, origin):
    """A lazy table's codes (d, u) int32: codes[i, t] = rows[picked[i]][origin[t]] (picked[i]: attribute i's row at
    the table's level)."""
    d = picked.size
    u = origin.size
    out = np.empty((d, u), np.int32)
    for i in range(d):
        row = rows[picked[i]]
        for t in range(u):
            out[i, t] = row[origin[t]]
    return out


@_jit
def suppress_and_loss_terms_lazy(rows, picked, origin, sizes, minimal, limit, weights, offsets, domain,
                                 generalization, suppression, floor, span, positive):
    """`suppress_and_loss_terms` of a lazy table: the kept classes' codes read through their origins (the same
    integer sums, so the same bits)."""
    suppressed, kept_classes, n, total = _suppressed_and_kept(sizes, minimal)
    if total == 0 or total > limit:
        return suppressed, total, np.empty(0, np.float64)
    d = picked.size
    kept = np.zeros(d, np.int64)
    for k in range(n):
        t = kept_classes[k]
        s = sizes[t]
        o = np.uint64(origin[t])
        for i in range(d):
            kept[i] += s * weights[np.uint64(offsets[i] + rows[picked[i], o])]
    return suppressed, total, _terms_of_kept(kept, total, domain, generalization, suppression, floor, span, positive)


@_jit
def roll_up_decide_lazy(rows, select, origin, sizes, key, levels, starts, maps, places, cards, minimal, limit,
                        weights, offsets, domain, generalization, suppression, floor, span, positive):
    """`roll_up_levels_lazy`, then `suppress_and_loss_terms_lazy` of the new table (each attribute's row at the
    target's level read off `select` here): a size-only check with Loss that misses the cache in one call instead of
    two plus the Python between (the evaluator's common check on lazy tables). Returns the new origins, sizes and
    keys, then the suppressed classes, records and Loss's terms: the two kernels' results, bit for bit."""
    new_origin, new_sizes, new_keys, _ = roll_up_levels_lazy(rows, select, origin, sizes, key, levels, starts, maps,
                                                             places, cards, minimal)
    half = levels.size // 2
    picked = np.empty(half, np.int64)
    for i in range(half):
        picked[i] = select[i, levels[half + i]]
    suppressed, total, terms = suppress_and_loss_terms_lazy(rows, picked, new_origin, new_sizes, minimal, limit,
                                                            weights, offsets, domain, generalization, suppression,
                                                            floor, span, positive)
    return new_origin, new_sizes, new_keys, suppressed, total, terms


@_jit
def level_rows(codes, starts, maps, heights):
    """A lazy table's level rows from the base classes' codes (d, m): attribute i's row at level lv (lv below
    heights[i]) is its codes mapped from level 0 through the code map at maps[starts[i, 0, lv]] (level 0: the codes
    themselves), int32, rows in order of attribute then level; select[i, lv] is that row's number (0 beyond)."""
    d, m = codes.shape
    count = 0
    for i in range(d):
        count += heights[i]
    rows = np.empty((count, m), np.int32)
    select = np.zeros((d, starts.shape[1]), np.int64)
    r = 0
    for i in range(d):
        for level in range(heights[i]):
            select[i, level] = r
            if level == 0:
                for j in range(m):
                    rows[r, j] = codes[i, j]
            else:
                start = starts[i, 0, level]
                for j in range(m):
                    rows[r, j] = maps[start + codes[i, j]]
            r += 1
    return rows, select

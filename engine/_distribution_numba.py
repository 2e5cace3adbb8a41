"""The compiled projection of joint classes onto quasi-identifier classes, and the per-class sensitive-value
histograms, for the distribution-based privacy models (imported only once numba is, through
`engine.distributions.project` on the compiled path; the class cache decides the path, engine.kernels).

Why: a check of l-diversity or t-closeness groups the joint classes (quasi-identifiers + sensitive values, rolled up
from a finer transformation by the class cache) into quasi-identifier classes and sorts their (class, value) pairs;
in numpy that is a mixed-radix key, a hash factorization, a stable argsort and a handful of casts per check, whose
fixed costs dominate. Here it is one hash pass (the probe of engine._hash_numba) and one two-pass counting sort;
with one sensitive attribute and keyed joint classes (the common case), `project_dense` does the hash pass and
`dense_histogram` scatters the counts into a dense (values, classes) matrix instead, which the decisions read in value order with no
sort at all (engine.privacy._distribution_kernels).

Every result equals engine.distributions' numpy reference exactly (integers only): classes numbered in order of
first appearance of their first joint class, sizes and counts as int64, histogram entries sorted by class and value.
"""
from __future__ import annotations

import numba
import numpy as np

from ._hash_numba import find, grow, new_index, new_table, probe, table_bits
from ._keys_numba import base_keys, class_codes, radix_keys, rolled_keys
from ._kernels_numba import lazy_keys, origins_of

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")


@numba.njit(inline="always", nogil=True)
def _add(table, bits, k, j, joint_sizes, inverse, sizes, member, u):
    """Joint class j, of quasi-identifier key k, joins its class (a new one, numbered u, if the key is new); returns
    the number of classes. The caller grows the table (`_roomy`) after each call."""
    h = probe(table, k, bits)
    if table[2 * h] == k:
        c = table[2 * h + 1]
        inverse[j] = c
        sizes[c] += joint_sizes[j]
        return u
    table[2 * h] = k
    table[2 * h + 1] = u
    inverse[j] = u
    sizes[u] = joint_sizes[j]
    member[u] = j
    return u + 1


@numba.njit(inline="always", nogil=True)
def _roomy(table, bits, u):
    """The table and its bits, doubled once u keys fill half of it. Why start small: the projection's classes are
    typically a third of its joint classes, and a table that stays in the core's cache probes faster."""
    if 2 * u > (1 << bits):
        return grow(table, bits), bits + 1
    return table, bits


@numba.njit(inline="always", nogil=True)
def _class_codes(joint_codes, member, attributes, u):
    codes = np.empty((attributes, u), joint_codes.dtype)
    for i in range(attributes):
        for t in range(u):
            codes[i, t] = joint_codes[i, member[t]]
    return codes


@numba.njit(inline="always", nogil=True)
def _group(joint_codes, joint_sizes, keys, attributes):
    """The joint classes grouped by their quasi-identifier key (keys[j] >= 0): the classes' codes (the first
    `attributes` rows), sizes and the class of every joint class, classes numbered in order of first appearance.
    The one grouping loop of `project`, `project_keyed` and `project_dense`, which differ only in how they get the
    key."""
    m = keys.size
    bits = table_bits((m + 1) // 2)   # as many slots as joint classes; grown once half full
    table = new_table(bits)
    inverse = np.empty(m, np.int64)
    sizes = np.zeros(m, np.int64)
    member = np.empty(m, np.int64)
    u = 0
    for j in range(m):
        u = _add(table, bits, keys[j], j, joint_sizes, inverse, sizes, member, u)
        table, bits = _roomy(table, bits, u)
    return _class_codes(joint_codes, member, attributes, u), sizes[:u].copy(), inverse


@_jit
def project(joint_codes, joint_sizes, attributes, places):
    """Group the joint classes (codes (rows, m), sizes) by their first `attributes` rows, keyed in the fixed radix
    `places` (one place per row, wide enough for its level-0 codes). Returns the classes' codes (attributes, u) in the
    joint codes' dtype, their sizes (int64) and the class of every joint class (int64), classes numbered in order
    of first appearance (engine.distributions.project)."""
    m = joint_codes.shape[1]
    keys = np.zeros(m, np.int64)
    for i in range(attributes):
        for j in range(m):
            keys[j] += np.int64(joint_codes[i, j]) * places[i]
    return _group(joint_codes, joint_sizes, keys, attributes)


@_jit
def histogram(joint_class, values, joint_sizes, class_count, cardinality):
    """Per class, the records holding each sensitive value, as sparse entries (class, value, count) sorted by class
    and value, equal values of a class merged (several sensitive attributes: joint classes repeat a value). A stable
    counting sort by value, then by class (engine.distributions.ClassView.distribution)."""
    m = joint_class.size
    by_value = np.zeros(cardinality + 1, np.int64)
    for j in range(m):
        by_value[values[j] + 1] += 1
    for v in range(cardinality):
        by_value[v + 1] += by_value[v]
    order = np.empty(m, np.int64)
    for j in range(m):
        v = values[j]
        order[by_value[v]] = j
        by_value[v] += 1
    by_class = np.zeros(class_count + 1, np.int64)
    for j in range(m):
        by_class[joint_class[j] + 1] += 1
    for c in range(class_count):
        by_class[c + 1] += by_class[c]
    sorted_ = np.empty(m, np.int64)
    for r in range(m):
        j = order[r]
        c = joint_class[j]
        sorted_[by_class[c]] = j
        by_class[c] += 1
    classes = np.empty(m, np.int64)
    out_values = np.empty(m, np.int64)
    counts = np.empty(m, np.int64)
    w = 0
    for r in range(m):
        j = sorted_[r]
        c = joint_class[j]
        v = values[j]
        if w > 0 and classes[w - 1] == c and out_values[w - 1] == v:
            counts[w - 1] += joint_sizes[j]
        else:
            classes[w] = c
            out_values[w] = v
            counts[w] = joint_sizes[j]
            w += 1
    return classes[:w].copy(), out_values[:w].copy(), counts[:w].copy()


@_jit
def project_keyed(joint_codes, joint_sizes, joint_key, attributes, span):
    """`project` for joint classes that carry their key in the fixed radix: the sensitive rows take its lowest
    places, so the quasi-identifier key is joint_key // span (span: the product of the sensitive rows' level-0
    cardinalities), one read per joint class instead of one per attribute. Same result as `project`."""
    m = joint_codes.shape[1]
    keys = np.empty(m, np.int64)
    for j in range(m):
        keys[j] = joint_key[j] // span
    return _group(joint_codes, joint_sizes, keys, attributes)



DENSE_CELLS_PER_JOINT_CLASS = 16   # a dense histogram is built while values x classes <= 16 x joint classes + 4096


@numba.njit(inline="always", nogil=True)
def _divide(key, span, reciprocal):
    """(key // span, key % span) for 0 <= key < 2^62, without an integer division (the projection's costliest
    instruction): a first quotient from the float reciprocal is off by at most a few thousand, the float quotient
    of the (exact, small) remainder corrects it to within one, and one comparison settles it. Exact for every such
    key (tests/engine/test_distribution_dense.py tries the edges)."""
    q = np.int64(np.float64(key) * reciprocal)
    r = key - q * span
    q += np.int64(np.floor(np.float64(r) * reciprocal))
    r = key - q * span
    if r < 0:
        q -= 1
        r += span
    elif r >= span:
        q += 1
        r -= span
    return q, r


@_jit
def project_dense(joint_codes, joint_sizes, joint_key, attributes, span):
    """`project_keyed` for a table with one sensitive attribute, whose row holds the radix's lowest place: a joint
    class's value is joint_key % span and its quasi-identifier key joint_key // span. Returns the classes' codes,
    sizes and the class of every joint class, as `project_keyed` does, and the value of every joint class (int64),
    from which `dense_histogram` builds the histogram when a model asks for it (a check of the implied class size
    alone never does)."""
    m = joint_codes.shape[1]
    quotient = np.empty(m, np.int64)
    value = np.empty(m, np.int64)
    reciprocal = 1.0 / span
    for j in range(m):
        quotient[j], value[j] = _divide(joint_key[j], span, reciprocal)
    codes, sizes, inverse = _group(joint_codes, joint_sizes, quotient, attributes)
    return codes, sizes, inverse, value


@_jit
def dense_histogram(joint_class, values, joint_sizes, class_count, span):
    """The per-class histogram of one sensitive attribute as a dense (values, classes) int32 matrix.

    Why dense, value-major: the decisions add up each class's terms in value order (the reference's order of
    floating-point sums); walking the matrix row by row (value by value) keeps that order for every class at once,
    with no sort and with the classes' independent sums side by side (vectorized), where the sparse `histogram`
    needs two counting sorts of the joint classes and one dependent chain of additions. It is built only while small
    (values x classes <= DENSE_CELLS_PER_JOINT_CLASS x joint classes + 4096) and while counts fit in int32;
    otherwise the matrix returned has no columns and the sparse `histogram` serves."""
    m = joint_class.size
    records = 0
    for j in range(m):
        records += joint_sizes[j]
    if class_count * span > DENSE_CELLS_PER_JOINT_CLASS * m + 4096 or records > 2147483647:
        return np.zeros((span, 0), np.int32)
    dense = np.zeros((span, class_count), np.int32)
    for j in range(m):
        dense[values[j], joint_class[j]] += joint_sizes[j]
    return dense


# --- quasi-identifier classes with their dense histogram (engine.classes.ClassCache's dense form) -----------------
@numba.njit(inline="always", nogil=True)
def _hash_classes(keys, sizes):
    """`_hash_rows` without rows (`_group_dense`; the merge of rows that are not whole words, `_merged_dense`)."""
    nothing = np.empty(0, np.uint32)
    return _hash_rows(keys, sizes, nothing, nothing, 0)


@numba.njit(inline="always", nogil=True)
def _hash_rows(keys, sizes, source, target, width):
    """The classes of equal keys (keys >= 0), numbered in order of first appearance: the class of every input
    (int32), the classes' sizes (sums of `sizes`), keys and first input, and their count. Grouped through an int32
    index table (engine._hash_numba's `find`: class numbers in the slots, keys read back from the classes' key
    array) sized for every input at once: a quarter of a (key, value) pair table's bytes and no doubling on the way
    (ADULT's dense roll-ups: the grouping 77 -> 38 us); the same classes in the same order. Four slots per input
    (a quarter full at most, twice table_bits' own minimum): shorter probes, the grouping about a tenth faster on
    ADULT's dense roll-ups (2,000 and 4,700 classes), for a table of 16 bytes per input that lives only as long as
    the call. With rows (`width` > 0 words, `_hash_words`): row j of the flat `source` copied into row t of the
    flat `target` when input j starts class t, added to it when it joins one."""
    m = keys.size
    bits = table_bits(2 * m)
    index = new_index(bits)
    inverse = np.empty(m, np.int32)
    new_sizes = np.empty(m, np.int64)
    new_keys = np.empty(m, np.int64)
    member = np.empty(m, np.int64)
    w = np.uint64(width)
    u = 0
    for j in range(m):
        k = keys[j]
        slot = find(index, new_keys, k, bits)
        c = index[slot]
        s = np.uint64(j) * w
        if c >= 0:
            inverse[j] = c
            new_sizes[c] += sizes[j]
            t = np.uint64(c) * w
            for v in range(w):
                target[t + v] += source[s + v]
        else:
            index[slot] = u
            inverse[j] = u
            new_sizes[u] = sizes[j]
            new_keys[u] = k
            member[u] = j
            t = np.uint64(u) * w
            for v in range(w):
                target[t + v] = source[s + v]
            u += 1
    return inverse, new_sizes, new_keys, member, u


@_jit
def _hash_words(keys, sizes, source, target, width):
    """`_hash_rows` on rows of `width` uint32 words, compiled once per width (numba.literally: a separate function
    per width, shared by every dense kernel and both cell types), so that the row loops have a constant trip count
    the compiler unrolls and vectorizes whole."""
    numba.literally(width)
    return _hash_rows(keys, sizes, source, target, width)


@numba.njit(inline="always", nogil=True)
def _merge_dense(codes, sizes, keys, counts, changed, starts, maps):
    """The classes of equal keys merged (first appearance order), their codes mapped through the changed attributes'
    code maps, and their histograms added up: the second half of `roll_up_dense` and `roll_up_dense_base`.

    Why class-major histograms ((classes, values) in the cache): a source class adds its row, a few contiguous
    cells, to its new class's row, one streaming pass; value-major, the same adds scatter across V rows (twice the
    time on ADULT's base). The models read the value-major transpose (`value_major`), made per view."""
    new_sizes, new_keys, new_counts, member, u = _merged_dense(sizes, keys, counts)
    new_codes = class_codes(codes, member, u, changed, starts, maps)
    return new_codes, new_sizes, new_keys, new_counts


@numba.njit(inline="always", nogil=True)
def _merged_dense(sizes, keys, counts):
    """The merge both dense forms (codes, origins) share: the merged classes' sizes, keys and added histogram rows
    (first appearance order, the source's cells, `cell_dtype`), with each class's first member and their number u.
    Rows of whole uint32 words, at most ROW_WORDS of them, are summed during the grouping (`_hash_by_width`) into
    a scratch matrix of a row per input, whose u first rows are then copied out (the cache counts what a table
    holds); others are added cell by cell after it (`_add_cells`). Why in the grouping: the branch on a new class
    is taken anyway, so a first row is copied (no zero fill) and the others added while the input is at hand, with
    no second pass over the class numbers (ADULT's roll-ups from cached tables, replayed: about 7 % less for
    l=3 and t-closeness; from the base's 12,458 classes, whose scratch is three times the rows kept, 3 % more)."""
    card = counts.shape[1]
    row_bytes = card * counts.itemsize
    if row_bytes % 4 == 0 and row_bytes <= 4 * ROW_WORDS:
        scratch = np.empty(counts.shape, counts.dtype)
        inverse, new_sizes, new_keys, member, u = _hash_by_width(keys, sizes, counts.ravel().view(np.uint32),
                                                                 scratch.ravel().view(np.uint32), row_bytes // 4)
        new_counts = scratch[:u].copy()
    else:
        inverse, new_sizes, new_keys, member, u = _hash_classes(keys, sizes)
        new_counts = np.zeros((u, card), counts.dtype)
        _add_cells(counts.ravel(), inverse, keys.size, new_counts.ravel(), card)
    return new_sizes[:u].copy(), new_keys[:u].copy(), new_counts, member, u


@numba.njit(inline="always", nogil=True)
def _merge_dense_origin(origin, sizes, keys, counts):
    """`_merge_dense` writing each new class's origin (its first member's, engine.classes.LazyCodes) instead of its
    d codes: the lazy dense roll-ups' second half."""
    new_sizes, new_keys, new_counts, member, u = _merged_dense(sizes, keys, counts)
    return origins_of(origin, member, u), new_sizes, new_keys, new_counts


ROW_WORDS = 8   # the dense merge sums rows of at most this many uint32 words (32 bytes: 16 int16 or 8 int32 cells) as words


@numba.njit(inline="always", nogil=True)
def _hash_by_width(keys, sizes, source, target, words):
    """`_hash_words` at the constant width `words` (1 .. ROW_WORDS): a row added as machine words, ADULT's 14 int16
    cells as 7 uint32 words each holding two cells. Exact: every cell is a count >= 0 and every sum of a table's
    counts is at most its records, which fit the cell type (`cell_dtype`; int32 cells only below 2^31 records), so
    a cell's sum never carries into the next cell and a word's sum is its cells' sums side by side: the same bits.
    Why: 14 int16 cells are below one vector register, and at their runtime width a row's add ran as 14 scalar
    read-modify-writes (as did a uint32 loop of runtime width 7, or a constant 8 with the last words masked); at a
    constant 7 words ADULT l=3's dense roll-ups (replayed) take a tenth less. (One compiled function per width,
    not inline copies: eight of those in every dense kernel made them take 25 s to compile.)"""
    if words == 1:
        return _hash_words(keys, sizes, source, target, 1)
    if words == 2:
        return _hash_words(keys, sizes, source, target, 2)
    if words == 3:
        return _hash_words(keys, sizes, source, target, 3)
    if words == 4:
        return _hash_words(keys, sizes, source, target, 4)
    if words == 5:
        return _hash_words(keys, sizes, source, target, 5)
    if words == 6:
        return _hash_words(keys, sizes, source, target, 6)
    if words == 7:
        return _hash_words(keys, sizes, source, target, 7)
    return _hash_words(keys, sizes, source, target, 8)


@numba.njit(inline="always", nogil=True)
def _add_cells(source, inverse, m, target, card):
    """Row j of the flat `source` added to row inverse[j] of the flat `target` (rows of `card` cells, C-ordered) for
    j < m, with unsigned offsets: no negative-index wraparound in the short inner loop, which then vectorizes also
    for int16 cells."""
    w = np.uint64(card)
    for j in range(m):
        s = np.uint64(j) * w
        t = np.uint64(inverse[j]) * w
        for v in range(w):
            target[t + v] += source[s + v]


NARROW_RECORDS = 32767   # tables of at most this many records keep their dense histogram in int16 cells


def cell_dtype(records: int) -> type:
    """The dense histogram's cell type for a table of `records` records: int16 while every count fits (no cell, and
    no class, exceeds the table's records), else int32. Why: the roll-ups stream every source class's histogram row
    and write every new class's, and the decisions read them (ADULT, 30,162 records, 14 occupations: 28 bytes a
    class instead of 56). Signed, so that the kernels' arithmetic on a cell promotes to int64 as it does on int32:
    the same integers, the same sums, the same bits."""
    return np.int16 if records <= NARROW_RECORDS else np.int32


def group_dense(codes: np.ndarray, sizes: np.ndarray, values: np.ndarray, places: np.ndarray,
                cardinality: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Quasi-identifier classes of weighted inputs (the class cache's base joint classes: quasi-identifier codes
    (d, m), sizes, and the one sensitive attribute's value of each), keyed in the fixed radix `places` (one per
    quasi-identifier): the classes' codes (d, u) int32, sizes, keys (first appearance order, as `project_keyed`
    numbers them) and their class-major (classes, values) histogram, in `cell_dtype`'s cells (the roll-ups keep
    them). The caller checks that the records fit in int32."""
    like = np.empty(0, cell_dtype(int(sizes.sum())))
    return _group_dense(codes, sizes, values, places, cardinality, like)


@_jit
def _group_dense(codes, sizes, values, places, cardinality, like):
    """`group_dense` with cells of like's dtype."""
    m = codes.shape[1]
    keys = radix_keys(codes, places)
    inverse, new_sizes, new_keys, member, u = _hash_classes(keys, sizes)
    nothing = np.empty(0, np.int64)   # the base classes: no attribute changes level
    new_codes = class_codes(codes, member, u, nothing, nothing, nothing)
    counts = np.zeros((u, cardinality), like.dtype)
    for j in range(m):
        counts[inverse[j], values[j]] += sizes[j]
    return new_codes, new_sizes[:u].copy(), new_keys[:u].copy(), counts


@_jit
def roll_up_dense(codes, sizes, key, counts, changed, starts, maps, places):
    """The quasi-identifier classes of a generalization with their histogram, from those of a specialization
    (codes (d, m) int32, sizes, keys in the fixed radix `places`, counts (m, values) class-major, in int16 or int32
    cells (`cell_dtype`), which the new histogram keeps): attribute changed[c] changes level through the code map
    starting at maps[starts[c]]. Returns the new codes, sizes, keys and histogram; classes in order of first
    appearance, as engine._kernels_numba.roll_up numbers them (so the classes and sizes are its, and the histogram
    is the transpose of what `project_dense` and `dense_histogram` give from the joint classes)."""
    keys = rolled_keys(codes, key, changed, starts, maps, places)
    return _merge_dense(codes, sizes, keys, counts, changed, starts, maps)


@_jit
def roll_up_dense_ahead(codes, sizes, key, counts, changed, starts, maps, places):
    """`roll_up_dense` and `value_major` of the new histogram in one call, for the class cache's worker thread
    (engine.classes.ClassCache.prefetch): one compiled call is one release and one retake of the GIL, where two
    calls would contend for it with the search's thread twice."""
    new_codes, new_sizes, new_keys, new_counts = roll_up_dense(codes, sizes, key, counts, changed, starts, maps,
                                                               places)
    return new_codes, new_sizes, new_keys, new_counts, value_major(new_counts)


@_jit
def roll_up_dense_base(codes, sizes, key, counts, changed, starts, maps, places, deltas, ready, rows):
    """`roll_up_dense` from the base classes with the key updates kept, as engine._kernels_numba.roll_up_base
    keeps them: deltas[rows[c]] holds, per base class, what attribute changed[c] adds to the key at its new level,
    filled on first use (ready). The same keys, so the same result as `roll_up_dense`."""
    keys = base_keys(codes, key, changed, starts, maps, places, deltas, ready, rows)
    return _merge_dense(codes, sizes, keys, counts, changed, starts, maps)


# --- the dense form with lazy class tables (engine.classes.LazyCodes): origins instead of codes ---------------------
# A check of entropy l-diversity or t-closeness reads the sizes and the histogram, not the codes: only the quality
# model of a solution with suppression gathers them (ADULT l=3: 26 of 552 roll-ups, 2 % of the classes written).


@_jit
def roll_up_dense_lazy(rows, select, origin, sizes, key, counts, levels, changed, starts, maps, places):
    """`roll_up_dense` of a lazy table (origins into the level rows `rows`, select[i, lv] attribute i's row at level
    lv, levels[i] the table's level of attribute i; the base's origins are the base classes): the same sizes, keys,
    order and histogram; the new classes' origins instead of their codes."""
    keys = lazy_keys(rows, select, origin, key, levels, changed, starts, maps, places)
    return _merge_dense_origin(origin, sizes, keys, counts)


@_jit
def roll_up_dense_lazy_ahead(rows, select, origin, sizes, key, counts, levels, changed, starts, maps, places):
    """`roll_up_dense_lazy` and `value_major` of the new histogram in one call (`roll_up_dense_ahead`'s reason)."""
    new_origin, new_sizes, new_keys, new_counts = roll_up_dense_lazy(rows, select, origin, sizes, key, counts,
                                                                     levels, changed, starts, maps, places)
    return new_origin, new_sizes, new_keys, new_counts, value_major(new_counts)


@_jit
def roll_up_dense_base_lazy(codes, origin, sizes, key, counts, changed, starts, maps, places, deltas, ready, rows):
    """`roll_up_dense_base` (a source with kept key updates: the base, or a warmed table with its codes gathered)
    returning the new classes' origins (origin[first member]) instead of their codes."""
    keys = base_keys(codes, key, changed, starts, maps, places, deltas, ready, rows)
    return _merge_dense_origin(origin, sizes, keys, counts)


@_jit
def value_major(counts):
    """The value-major (values, classes) copy of a class-major histogram, which the models' dense decisions read
    (engine.privacy._distribution_kernels)."""
    class_count, card = counts.shape
    dense = np.empty((card, class_count), counts.dtype)
    for k in range(class_count):
        row = counts[k]
        for v in range(card):
            dense[v, k] = row[v]
    return dense


@_jit
def sparse_from_counts(counts):
    """The sparse histogram (class, value, count; int64, sorted by class then value, counts positive) of a
    class-major (classes, values) matrix: what `histogram` gives from the joint classes, for a view that holds only
    the class cache's dense form (engine.distributions.ClassView.distribution). Branch-free: every cell is written
    at the next free entry, which only a positive count takes (a zero is overwritten by the next cell), so a
    mostly-empty matrix costs no mispredicted branches."""
    class_count, card = counts.shape
    flat = counts.ravel()
    w = 0
    for j in range(flat.size):   # one long loop (vectorized), not class_count short ones
        w += flat[j] > 0
    classes = np.empty(w + 1, np.int64)
    values = np.empty(w + 1, np.int64)
    out = np.empty(w + 1, np.int64)
    w = 0
    k = 0
    v = 0
    for j in range(flat.size):
        n = flat[j]
        classes[w] = k
        values[w] = v
        out[w] = n
        w += n > 0
        v += 1
        if v == card:
            v = 0
            k += 1
    return classes[:w], values[:w], out[:w]

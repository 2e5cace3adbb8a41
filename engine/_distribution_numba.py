"""The compiled projection of joint classes onto quasi-identifier classes, and the per-class sensitive-value
histograms, for the distribution-based privacy models (imported only once numba is, through
`engine.distributions.project` on the compiled path; the class cache decides the path, engine.kernels).

Why: a check of l-diversity or t-closeness groups the joint classes (quasi-identifiers + sensitive values, rolled up
from a finer transformation by the class cache) into quasi-identifier classes and sorts their (class, value) pairs;
in numpy that is a mixed-radix key, a hash factorization, a stable argsort and a handful of casts per check, whose
fixed costs dominate. Here it is one hash pass and one counting sort by class (each class's few values then
sorted in place).

Every result equals engine.distributions' numpy reference exactly (integers only): classes numbered in order of
first appearance of their first joint class, sizes and counts as int64, histogram entries sorted by class and value.
"""
from __future__ import annotations

import numba
import numpy as np

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)   # Fibonacci hashing, as engine._kernels_numba


@_jit
def project(joint_codes, joint_sizes, attributes, places):
    """Group the joint classes (codes (rows, m), sizes) by their first `attributes` rows, keyed in the fixed radix
    `places` (one place per row, wide enough for its level-0 codes). Returns the classes' codes (attributes, u) in the
    joint codes' dtype, their sizes (int64) and the class of every joint class (int64), classes numbered in order
    of first appearance (engine.distributions.project)."""
    m = joint_codes.shape[1]
    bits = 4
    while (1 << bits) < 2 * m:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    table = np.full(2 << bits, -1, np.int64)
    inverse = np.empty(m, np.int64)
    sizes = np.zeros(m, np.int64)
    member = np.empty(m, np.int64)
    u = 0
    for j in range(m):
        k = np.int64(0)
        for i in range(attributes):
            k += np.int64(joint_codes[i, j]) * places[i]
        h = np.int64((np.uint64(k) * _GOLDEN) >> shift)
        while True:
            stored = table[2 * h]
            if stored == k:
                c = table[2 * h + 1]
                inverse[j] = c
                sizes[c] += joint_sizes[j]
                break
            if stored < 0:
                table[2 * h] = k
                table[2 * h + 1] = u
                inverse[j] = u
                sizes[u] = joint_sizes[j]
                member[u] = j
                u += 1
                break
            h = (h + 1) & mask
    codes = np.empty((attributes, u), joint_codes.dtype)
    for i in range(attributes):
        for t in range(u):
            codes[i, t] = joint_codes[i, member[t]]
    return codes, sizes[:u].copy(), inverse


@_jit
def histogram(joint_class, values, joint_sizes, class_count, cardinality):
    """Per class, the records holding each sensitive value, as sparse entries (class, value, count) sorted by class
    and value, equal values of a class merged (several sensitive attributes: joint classes repeat a value). A stable
    counting sort by class, then each class's few entries sorted by value in place (insertion sort; a stable
    argsort for long runs) (engine.distributions.ClassView.distribution). `cardinality` is unused (the reference
    needs it for its keys)."""
    m = joint_class.size
    starts = np.zeros(class_count + 1, np.int64)
    for j in range(m):
        starts[joint_class[j] + 1] += 1
    for c in range(class_count):
        starts[c + 1] += starts[c]
    fill = starts[:class_count].copy()
    sorted_values = np.empty(m, np.int64)
    sorted_counts = np.empty(m, np.int64)
    for j in range(m):
        c = joint_class[j]
        p = fill[c]
        sorted_values[p] = values[j]
        sorted_counts[p] = joint_sizes[j]
        fill[c] = p + 1
    classes = np.empty(m, np.int64)
    out_values = np.empty(m, np.int64)
    counts = np.empty(m, np.int64)
    w = 0
    for c in range(class_count):
        a = starts[c]
        b = starts[c + 1]
        if b - a > 32:
            order = np.argsort(sorted_values[a:b], kind="mergesort")
            segment_values = sorted_values[a:b][order]
            segment_counts = sorted_counts[a:b][order]
            sorted_values[a:b] = segment_values
            sorted_counts[a:b] = segment_counts
        else:
            for r in range(a + 1, b):
                v = sorted_values[r]
                n = sorted_counts[r]
                q = r - 1
                while q >= a and sorted_values[q] > v:
                    sorted_values[q + 1] = sorted_values[q]
                    sorted_counts[q + 1] = sorted_counts[q]
                    q -= 1
                sorted_values[q + 1] = v
                sorted_counts[q + 1] = n
        for r in range(a, b):
            v = sorted_values[r]
            if r > a and out_values[w - 1] == v:
                counts[w - 1] += sorted_counts[r]
            else:
                classes[w] = c
                out_values[w] = v
                counts[w] = sorted_counts[r]
                w += 1
    return classes[:w].copy(), out_values[:w].copy(), counts[:w].copy()


@_jit
def project_keyed(joint_codes, joint_sizes, joint_key, attributes, span):
    """`project` for joint classes that carry their key in the fixed radix: the sensitive rows take its lowest
    places, so the quasi-identifier key is joint_key // span (span: the product of the sensitive rows' level-0
    cardinalities), one read per joint class instead of one per attribute. Same result as `project`."""
    m = joint_codes.shape[1]
    bits = 4
    while (1 << bits) < 2 * m:
        bits += 1
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    table = np.full(2 << bits, -1, np.int64)
    inverse = np.empty(m, np.int64)
    sizes = np.zeros(m, np.int64)
    member = np.empty(m, np.int64)
    u = 0
    for j in range(m):
        k = joint_key[j] // span
        h = np.int64((np.uint64(k) * _GOLDEN) >> shift)
        while True:
            stored = table[2 * h]
            if stored == k:
                c = table[2 * h + 1]
                inverse[j] = c
                sizes[c] += joint_sizes[j]
                break
            if stored < 0:
                table[2 * h] = k
                table[2 * h + 1] = u
                inverse[j] = u
                sizes[u] = joint_sizes[j]
                member[u] = j
                u += 1
                break
            h = (h + 1) & mask
    codes = np.empty((attributes, u), joint_codes.dtype)
    for i in range(attributes):
        for t in range(u):
            codes[i, t] = joint_codes[i, member[t]]
    return codes, sizes[:u].copy(), inverse

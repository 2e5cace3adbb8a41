"""A research subset's population counts per check, compiled (engine.subset.PopulationTable.counts_for).

Why: delta-presence and k-map with a research subset count, at every check, the population records that fall into
each class of the subset. The numpy reference gathers the population's distinct tuples at the check's levels, sorts
the classes' keys and binary-searches every tuple's key among them: about 3 ms a check on ADULT (19,000 distinct
tuples), ten times a whole k-anonymity check. Here one pass reads each attribute's row of generalized codes (built
once per table, `PopulationTable.level_rows`), adds the keys up and looks each tuple's key up in a hash table of the
classes' keys; the tuples that match no class are grouped in a second table, in order of first appearance, as the
reference's `group` numbers them, only when a model reads them (`unmatched_sizes`: delta-presence with a lower
bound). Same sizes, same unmatched sizes in the same order.

Keys are mixed radix over the widths of the check's levels (the subset's codes and the population's labels the subset
never shows): a tuple with a label the subset lacks can then never take a class's key. The caller uses the reference
where the widths' product does not fit (`PopulationTable.places`).

numba's cache checks only this file: after a change in engine._hash_numba or engine._kernels_numba's `_merged`,
clear this module's cache (`__pycache__/_population_numba*.nbi|*.nbc`).
"""
from __future__ import annotations

import numba
import numpy as np

from ._hash_numba import find, new_index, table_bits
from ._kernels_numba import _merged

_jit = numba.njit(cache=True, nogil=True, error_model="numpy")


@_jit
def population_counts(rows, select, levels, places, counts, class_codes):
    """Per class of `class_codes` (d, u: the subset's classes at `levels`), the population records whose tuple has the
    class's codes; with every tuple's key and the tuples that match no class (`unmatched_sizes` groups them when
    asked). rows[select[i, lv]] holds every distinct population tuple's code of attribute i at level lv, `counts`
    their records."""
    d, u = class_codes.shape
    n = counts.size
    class_keys = np.zeros(u, np.int64)
    for i in range(d):
        place = places[i]
        for c in range(u):
            class_keys[c] += np.int64(class_codes[i, c]) * place
    bits = table_bits(u)
    index = new_index(bits)
    for c in range(u):   # the classes are distinct, so are their keys
        index[find(index, class_keys, class_keys[c], bits)] = c
    keys = np.zeros(n, np.int64)
    for i in range(d):
        row = rows[select[i, levels[i]]]
        place = places[i]
        for t in range(n):
            keys[t] += np.int64(row[t]) * place
    sizes = np.zeros(u, np.int64)
    pending = np.empty(n, np.int64)
    left = 0
    for t in range(n):
        c = index[find(index, class_keys, keys[t], bits)]
        if c >= 0:
            sizes[np.uint64(c)] += counts[t]
        else:
            pending[left] = t
            left += 1
    return sizes, keys, pending[:left].copy()


@_jit
def unmatched_sizes(keys, pending, counts):
    """The tuples `pending` (those `population_counts` matched to no class) grouped by key, in order of first
    appearance (the reference's `group`): each group's records, by the roll-ups' own merge."""
    return _merged(counts[pending], keys[pending], 0, -1)[0]

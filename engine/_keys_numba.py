"""The class keys the numba kernels compute before they merge classes, and the merged classes' codes, written once
(imported only once numba is).

Why one module: a class's key in the class cache's fixed radix is Σ code x place; a roll-up adds, per attribute that
changes level, (mapped code - code) x place, either through the code map or from the base classes' kept updates.
The joint roll-ups (engine._kernels_numba) and the dense form's (engine._distribution_numba) do exactly this, then
take each merged class's codes from its first input (`class_codes`); `inline="always"` puts these loops in each
kernel, so sharing them costs nothing per class.

Indices read from arrays (codes into the maps, first members) are cast to np.uint64: numba then emits no
negative-index wraparound for them (engine._hash_numba).

numba's cache checks only the cached function's own file: after a change here, clear the callers' caches
(`__pycache__/*.nbi|*.nbc` of engine/) or they keep the old loops.
"""
from __future__ import annotations

import numba
import numpy as np


@numba.njit(inline="always", nogil=True)
def radix_keys(codes, places):
    """Every class's key: Σ over attributes of code x place (one attribute's row at a time, streaming)."""
    d, m = codes.shape
    keys = np.zeros(m, np.int64)
    for i in range(d):
        row = codes[i]
        place = places[i]
        for j in range(m):
            keys[j] += np.int64(row[j]) * place
    return keys


@numba.njit(inline="always", nogil=True)
def rolled_keys(codes, key, changed, starts, maps, places):
    """The keys after attribute changed[c] moves through the code map at maps[starts[c]], one changed attribute at
    a time over its contiguous row (twice as fast as all changed attributes per class)."""
    m = codes.shape[1]
    keys = key.copy()
    for c in range(changed.size):
        i = changed[c]
        row = codes[i]
        start = starts[c]
        place = places[i]
        for j in range(m):
            v = np.int64(row[j])
            keys[j] += (maps[np.uint64(start + v)] - v) * place
    return keys


@numba.njit(inline="always", nogil=True)
def base_keys(codes, key, changed, starts, maps, places, deltas, ready, rows):
    """`rolled_keys` from the base classes with the updates kept: deltas[rows[c]] holds, per base class, how much
    attribute changed[c]'s code moves at its new level (mapped code - code; the key moves by that x its place),
    filled on first use (ready) and kept by the caller, so a search that rolls up from the base many times adds
    contiguous rows instead of gathering through the maps. Code moves rather than key moves: they fit the narrow
    integer the caller picks (int16 while every cardinality is at most 32,768, engine.classes.ClassCache
    ._delta_layout; int32 always), where FARS's key moves need int64: a quarter of the bytes read per base
    roll-up, for a multiply per class that the vector unit hides. The keys are the same integers."""
    m = codes.shape[1]
    keys = key.copy()
    for c in range(changed.size):
        r = rows[c]
        delta = deltas[r]
        place = places[changed[c]]
        if not ready[r]:
            row = codes[changed[c]]
            start = starts[c]
            for j in range(m):
                v = np.int64(row[j])
                delta[j] = maps[start + v] - v
            ready[r] = True
        for j in range(m):
            keys[j] += np.int64(delta[j]) * place
    return keys


@numba.njit(inline="always", nogil=True)
def class_codes(codes, member, u, changed, starts, maps):
    """The codes (d, u) int32 of the u merged classes, each taken from its first input (member[t]) and mapped through
    the code map at maps[starts[c]] for every attribute changed[c] that changes level (none: `changed` empty).
    Class by class (the d codes of member[t], then the next class's): one index read per class instead of one per
    code, and the d rows read and written as d nearly sequential streams (FARS's 610 roll-ups of a search: 13.5
    instead of 18 ms; ADULT's 841: 38 instead of 46 ms); then the changed rows mapped in place."""
    d = codes.shape[0]
    new_codes = np.empty((d, u), np.int32)
    for t in range(u):
        j = np.uint64(member[t])
        for i in range(d):
            new_codes[i, t] = codes[i, j]
    for c in range(changed.size):
        out = new_codes[changed[c]]
        start = starts[c]
        for t in range(u):
            out[t] = maps[np.uint64(start + out[t])]
    return new_codes

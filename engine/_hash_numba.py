"""The open-addressing hash table the numba kernels group keys with, written once (imported only once numba is).

Why one module: grouping by a non-negative int64 key (a class's key in the class cache's fixed radix) is the inner
loop of the roll-up (engine._kernels_numba) and of the projection onto quasi-identifier classes
(engine._distribution_numba). Each kernel keeps its own table (an int64 array of 2 x slots entries, key then value
per slot, -1 where empty: one cache line holds both) and asks `probe` where a key lives or would go; `inline="always"`
puts the probe in the caller's loop, so sharing it costs nothing per key.

Fibonacci hashing (multiply by 2^64 / golden ratio, keep the top bits) and linear probing. Keys must be >= 0 (-1
marks an empty slot) and the table must have more slots than keys stored, or `probe` never returns.

The roll-up's merge, which stores each key once in the new classes' own key array anyway, uses an index table
instead (`new_index`, `find`): one int32 per slot, the number of the class whose key hashed there, the key read back
from that array. A quarter of the pair table's bytes (FARS's 8,641 base classes: 128 KB instead of 512 KB, inside
the core's L2 cache), so a roll-up merges about a quarter faster; the classes and their order are the same.

`find` keeps its slots unsigned and reads a class's key at an unsigned number: numba adds a negative-index
wraparound (a compare and a select) to every index of a signed type, and these never are negative; with the
callers' other known non-negative indices unsigned too (engine._kernels_numba, engine._keys_numba), FARS's and
ADULT's lazy roll-ups measured 5-15 % faster, same results.

numba's cache checks only the cached function's own file: after a change here, clear the callers' caches
(`__pycache__/*.nbi|*.nbc` of engine/) or they keep the old probe.
"""
from __future__ import annotations

import numba
import numpy as np

GOLDEN = np.uint64(0x9E3779B97F4A7C15)   # 2^64 / golden ratio


@numba.njit(cache=True, nogil=True)
def table_bits(keys):
    """log2 of the slot count for up to `keys` keys: the smallest power of two >= 2 x keys (at least 16), so the
    table is at most half full."""
    bits = 4
    while (1 << bits) < 2 * keys:
        bits += 1
    return bits


@numba.njit(cache=True, nogil=True)
def new_table(bits):
    """An empty table of 2^bits slots (key, value), every key -1."""
    return np.full(2 << bits, -1, np.int64)


@numba.njit(cache=True, nogil=True)
def grow(table, bits):
    """The same entries in a table of twice the slots (2^(bits + 1)): a kernel that starts small, for cache
    locality, grows its table once it is half full."""
    larger = new_table(bits + 1)
    for slot in range(1 << bits):
        key = table[2 * slot]
        if key >= 0:
            target = probe(larger, key, bits + 1)
            larger[2 * target] = key
            larger[2 * target + 1] = table[2 * slot + 1]
    return larger


@numba.njit(inline="always", nogil=True)
def probe(table, key, bits):
    """The slot holding `key`, or the empty slot where it goes (table[2 * slot] < 0): linear probing from the key's
    Fibonacci hash in a table of 2^bits slots."""
    mask = (np.int64(1) << bits) - 1
    slot = np.int64((np.uint64(key) * GOLDEN) >> np.uint64(64 - bits))
    while True:
        stored = table[2 * slot]
        if stored == key or stored < 0:
            return slot
        slot = (slot + 1) & mask


@numba.njit(cache=True, nogil=True)
def new_index(bits):
    """An empty index table of 2^bits int32 slots, every slot -1 (`find`)."""
    return np.full(1 << bits, -1, np.int32)


@numba.njit(inline="always", nogil=True)
def find(index, keys, key, bits):
    """The slot of the index table holding the number t of the class with keys[t] == key, or the empty slot where
    it goes (index[slot] < 0): linear probing from the key's Fibonacci hash in a table of 2^bits slots."""
    mask = (np.uint64(1) << np.uint64(bits)) - np.uint64(1)
    slot = (np.uint64(key) * GOLDEN) >> np.uint64(64 - bits)
    while True:
        t = index[slot]
        if t < 0 or keys[np.uint64(t)] == key:
            return slot
        slot = (slot + np.uint64(1)) & mask

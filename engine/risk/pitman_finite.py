"""Pitman's finite score sums (ARX's `ModelPitman.getMasterFunctionIterative` / `getObjectFunctionsIterative`),
blocked so that the compiler can vectorize their divisions, with the very result of ARX's left-to-right loops.

Why: ARX falls back to the finite sums whenever the closed form finds no root or its root fails the check, and it
checks every closed-form root with them. Unlike the closed form, whose sums run over the distinct class sizes, these
sums run over every class (i < u) and every record (i < n): on CUP each evaluation is about 250,000 divisions, and a
solve without a root makes about 60 of them (17 tries). That was the whole cost of a failing solve.

How, without changing a bit: each sum is a chain of additions that must stay in ARX's order (left to right, i = 1,
2, ...), but its terms do not depend on each other. Each block of `BLOCK` indices first computes its terms, every one
with the same IEEE operations as the scalar loop (`engine.risk.pitman_kernel._finite_scalar`, the reference), in a
loop without a carried dependency that LLVM turns into 4-wide AVX divisions; a second loop then adds them to the
running sums in order. The five class sums and the two record sums share one pass for i < min(u, n). numba compiles
without fastmath, so nothing is contracted into FMAs or reassociated; tests compare with the scalar loop bit for bit.

`start_sums` makes the first evaluation of a try from one of ARX's fixed start values almost free: the running sums at
a fixed (theta, alpha) after every `CHECKPOINT` terms are kept (per process, grown to the largest sample seen), and an
evaluation resumes from the last checkpoint below u and n instead of from i = 1, which is again the same chain of
additions.
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np

try:   # optional: `pip install safeshare[fast]`
    if os.environ.get("SAFESHARE_NO_NUMBA"):
        raise ImportError("disabled by SAFESHARE_NO_NUMBA")
    import numba
    from numba.extending import register_jitable
except ImportError:   # pragma: no cover - depends on the installation
    numba = None

BLOCK = 512              # terms computed per vectorized pass (7 buffers of 4 KB: stays in L1)
CHECKPOINT = 1024        # indices between two stored running sums of a start value
U_SUMS = 5               # o1, o3, d1, d5, d3: sums over the classes (i < u)
N_SUMS = 2               # o2, d2: sums over the records (i < n)


def terms_count(limit: float) -> int:
    """How many i = 1, 2, ... satisfy i < limit (ARX's `for (double i = 1; i < limit; i++)`)."""
    if not limit > 1.0:
        return 0
    return int(math.ceil(limit)) - 1


def _sums(t: float, a: float, first: int, count_u: int, count_n: int, derivatives: bool, acc: np.ndarray,
          buf: np.ndarray) -> None:
    """Add the terms i = first, first + 1, ... to the running sums acc = (o1, o3, d1, d5, d3, o2, d2): class terms
    while i <= count_u, record terms while i <= count_n. Each term as `_finite_scalar` computes it, added in index
    order."""
    o1, o3, d1, d5, d3, o2, d2 = acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6]
    both = min(count_u, count_n)
    w0, w1, w2, w3, w4, w5, w6 = buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6]
    start = first
    while start <= both:                                    # class and record terms, one pass
        size = min(BLOCK, both - start + 1)
        if derivatives:
            for j in range(size):
                i = float(start + j)
                val0 = i * a + t
                val1 = 1.0 / val0
                val3 = 1.0 / (val0 * val0)
                val4 = i * val3
                v = i + t
                w0[j] = val1
                w1[j] = i * val1
                w2[j] = val3
                w3[j] = val4
                w4[j] = i * val4
                w5[j] = 1.0 / v
                w6[j] = 1.0 / (v * v)
            for j in range(size):
                o1 += w0[j]
                o3 += w1[j]
                d1 += w2[j]
                d5 += w3[j]
                d3 += w4[j]
                o2 += w5[j]
                d2 += w6[j]
        else:
            for j in range(size):
                i = float(start + j)
                val1 = 1.0 / (i * a + t)
                w0[j] = val1
                w1[j] = i * val1
                w5[j] = 1.0 / (i + t)
            for j in range(size):
                o1 += w0[j]
                o3 += w1[j]
                o2 += w5[j]
        start += size
    while start <= count_u:                                 # class terms only (u > n: not a histogram, kept exact)
        size = min(BLOCK, count_u - start + 1)
        for j in range(size):
            i = float(start + j)
            val0 = i * a + t
            val1 = 1.0 / val0
            val3 = 1.0 / (val0 * val0)
            w0[j] = val1
            w1[j] = i * val1
            w2[j] = val3
            w3[j] = i * val3
            w4[j] = i * (i * val3)
        for j in range(size):
            o1 += w0[j]
            o3 += w1[j]
            if derivatives:
                d1 += w2[j]
                d5 += w3[j]
                d3 += w4[j]
        start += size
    while start <= count_n:                                 # record terms only (i >= u)
        size = min(BLOCK, count_n - start + 1)
        for j in range(size):
            v = float(start + j) + t
            w5[j] = 1.0 / v
            w6[j] = 1.0 / (v * v)
        for j in range(size):
            o2 += w5[j]
            if derivatives:
                d2 += w6[j]
        start += size
    acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6] = o1, o3, d1, d5, d3, o2, d2


def _class_sums(a: float, keys: np.ndarray, values: np.ndarray, derivatives: bool) -> tuple[float, float]:
    """sum_j F_j sum_{k<j} 1/(k - a) and its derivative sum, as `_finite_scalar` computes them."""
    o4 = d4 = 0.0
    if keys.size:
        largest = int(keys[keys.size - 1])
        prefix1 = np.empty(max(largest - 1, 1))
        prefix2 = np.empty(max(largest - 1, 1))
        s1 = s2 = 0.0
        for j in range(1, largest):
            k = float(j) - a
            s1 += 1.0 / k
            s2 += 1.0 / (k * k)
            prefix1[j - 1] = s1
            prefix2[j - 1] = s2
        for index in range(keys.size):
            o4 += values[index] * prefix1[int(keys[index]) - 2]
            if derivatives:
                d4 += values[index] * prefix2[int(keys[index]) - 2]
    return o4, d4


def _finish(acc: np.ndarray, o4: float, d4: float, out: np.ndarray) -> None:
    o1, o3, d1, d5, d3, o2, d2 = acc[0], acc[1], acc[2], acc[3], acc[4], acc[5], acc[6]
    out[0] = o1 - o2
    out[1] = o3 - o4
    out[2] = d2 - d1
    out[3] = 0.0 - d5
    out[4] = 0.0 - d5
    out[5] = 0.0 - d3 - d4


def finite(t: float, a: float, u: float, n: float, keys: np.ndarray, values: np.ndarray, derivatives: bool,
           out: np.ndarray, acc: np.ndarray, buf: np.ndarray) -> None:
    """The finite sums into out = (g1, g2, J11, J12, J21, J22) (without derivatives only g1, g2 are meaningful);
    acc (7,) and buf (7, BLOCK) are scratch."""
    acc[:] = 0.0
    _sums(t, a, 1, terms_count(u), terms_count(n), derivatives, acc, buf)
    o4, d4 = _class_sums(a, keys, values, derivatives)
    _finish(acc, o4, d4, out)


def finite_resumed(t: float, a: float, u: float, n: float, keys: np.ndarray, values: np.ndarray, out: np.ndarray,
                   acc: np.ndarray, buf: np.ndarray, table: np.ndarray) -> None:
    """`finite` with derivatives at the point whose checkpoint table is `table` (rows: running sums after
    CHECKPOINT * r terms, columns o1, o3, d1, d5, d3 (classes) and o2, d2 (records)). The caller guarantees the table
    reaches u and n."""
    count_u, count_n = terms_count(u), terms_count(n)
    row_u = count_u // CHECKPOINT
    row_n = count_n // CHECKPOINT
    acc[:] = 0.0
    # the class sums resume at their checkpoint, the record sums at theirs: two passes over disjoint chains
    for c in range(U_SUMS):
        acc[c] = table[row_u, c]
    _sums(t, a, row_u * CHECKPOINT + 1, count_u, 0, True, acc, buf)
    for c in range(N_SUMS):
        acc[U_SUMS + c] = table[row_n, U_SUMS + c]
    _sums(t, a, row_n * CHECKPOINT + 1, 0, count_n, True, acc, buf)
    o4, d4 = _class_sums(a, keys, values, True)
    _finish(acc, o4, d4, out)


def checkpoints(t: float, a: float, terms: int) -> np.ndarray:
    """The running sums at (t, a) after 0, CHECKPOINT, 2 CHECKPOINT, ... terms, up to `terms` (rows of 7)."""
    rows = terms // CHECKPOINT + 1
    table = np.zeros((rows, U_SUMS + N_SUMS))
    acc = np.zeros(U_SUMS + N_SUMS)
    buf = np.empty((7, BLOCK))
    for r in range(1, rows):
        _sums(t, a, (r - 1) * CHECKPOINT + 1, r * CHECKPOINT, r * CHECKPOINT, True, acc, buf)
        table[r, :] = acc
    return table


if numba is not None:
    _jit = numba.njit(cache=True, error_model="numpy", nogil=True)
    terms_count = register_jitable(terms_count)
    _sums = register_jitable(_sums)
    _class_sums = register_jitable(_class_sums)
    _finish = register_jitable(_finish)
    finite = register_jitable(finite)
    finite_resumed = register_jitable(finite_resumed)
    checkpoints = _jit(checkpoints)


class StartTables:
    """Checkpoint tables of the prepared start values, per process, grown (doubling) to the largest sample seen.

    A table is never changed once made (a larger sample makes a new one), so a table handed out stays valid while
    another thread grows the cache. About 1 KB per 1,000 records for ARX's 16 start values."""

    def __init__(self) -> None:
        self._tables: dict[bytes, np.ndarray] = {}
        self._lock = threading.Lock()

    def for_starts(self, starts: np.ndarray, terms: int) -> np.ndarray:
        """(len(starts), rows, 7): the checkpoints of each start value (rows of `starts`), reaching `terms` terms."""
        rows = terms // CHECKPOINT + 1
        key = np.ascontiguousarray(starts, dtype=np.float64).tobytes()
        table = self._tables.get(key)
        if table is not None and table.shape[1] >= rows:
            return table
        with self._lock:
            table = self._tables.get(key)
            if table is None or table.shape[1] < rows:
                grown = max(rows, 2 * table.shape[1] if table is not None else rows, 64)
                table = np.stack([checkpoints(float(t), float(a), (grown - 1) * CHECKPOINT) for t, a in starts])
                self._tables[key] = table
            return table


START_TABLES = StartTables()

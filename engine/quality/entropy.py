"""Non-Uniform Entropy (de Waal and Willenborg 1999), normalized per attribute.

Generalization term: -sum over all input records (suppressed ones included) of log2(count of the original value /
count of the generalized value). Suppression term: the suppressed records of one attribute, grouped by their
generalized value w, add -sum_w s_w log2(s_w / S). Each attribute is normalized by the entropy of generalizing
everything to one value, -sum_v cnt(v) log2(cnt(v) / n); the loss is the mean over attributes.

The terms with suppression are computed in one compiled call once numba is loaded (engine._entropy_numba, which
replays numpy's log2 and OpenBLAS's dot product order and is used only where it agrees with them in the process);
the numpy code here stays the reference, and both give the same bits (tests/engine/test_entropy_compiled.py).
Where numpy's log2 or BLAS kernel is not the one that single pass replays (AVX-512 CPUs), two compiled calls around
numpy's own log2 give the same bits (`_terms_of_numpy_logs`, tests/engine/test_entropy_numpy_logs.py).
On a lazy class table (engine.classes.LazyCodes, which the search hands over as it is: `codes_to_read`) those calls
read the counted classes' codes through their origins (`_table`), so a check gathers no (d, u) codes
(tests/engine/test_entropy_lazy_terms.py).
"""
from __future__ import annotations

import numpy as np

from ..classes import LazyCodes, codes_of
from ..encoding import EncodedTable
from .base import Levels, QualityModel
from .sums import add_reduce, add_reduce_columns, numpy_order

LAYOUT_MEMO_LIMIT = 1 << 16   # transformations whose value layout `_layout` remembers
_FAST_AGREES: bool | None = None   # engine._entropy_numba.agrees_with_numpy(), asked once per process
_DOT_ORDER = 0   # without that single pass: engine._entropy_numba.dot_order(), asked once per process
_THREADS = 0     # and the BLAS thread count whose split engine._entropy_numba replays (0: none verified)


class NonUniformEntropy(QualityModel):
    name = "non_uniform_entropy"
    suppression_only_adds_loss = False   # not claimed: the suppression term is an entropy over what is suppressed

    def __init__(self, table: EncodedTable) -> None:
        super().__init__(table)
        self._generalization = []
        self._maximum = np.empty(self.d)
        for i, a in enumerate(table.attributes):
            original = a.counts[0][a.to_level[0]].astype(float)  # per original value present in the data
            terms = []
            for level in range(a.levels):
                generalized = a.counts[level][a.to_level[level]].astype(float)  # per original value
                terms.append(float(np.dot(original, np.log2(generalized / original))))
            self._generalization.append(np.array(terms))
            self._maximum[i] = float(np.dot(original, np.log2(self.n / original)))
        self._layouts: dict[tuple[int, ...], tuple] = {}   # `_layout`
        self._normalized_terms: list[list[float]] | None = None   # `lower_bound`
        self._python_sum = False   # `lower_bound` sums in Python floats (engine.quality.sums agrees with numpy)
        self._fast = None   # `_fast_terms`: engine._entropy_numba and its tables, or False where it does not apply
        self._dot_order = 0   # `_fast_terms` in two compiled calls around numpy's log2 (`_terms_of_numpy_logs`)
        self._threads = 0     # the thread count whose split of long dot products those calls replay (0: none),
                              # OpenBLAS's when the model loaded them (`_load_fast`)

    def codes_to_read(self, evaluation):
        """The table as the cache holds it (a lazy one not gathered): the compiled terms read only the counted
        classes' codes, through their origins (`_table`); the reference path gathers them (`_suppression_raw`)."""
        return evaluation.held_codes

    def _normalize(self, raw: np.ndarray) -> np.ndarray:
        # raw / maximum where the maximum is positive, else 0: the division by a divisor with 1 in place of the
        # zeros gives the same quotients without numpy's error state (whose context costs more than the division)
        positive = self._maximum > 0
        return np.where(positive, raw / np.where(positive, self._maximum, 1.0), 0.0)

    def loss_without_suppression(self, levels: Levels) -> float:
        return self.lower_bound(levels)

    def lower_bound(self, levels: Levels) -> float:
        # The normalized term of every attribute and level is computed once (`_normalized_terms`: the same
        # elementwise division `_normalize` does), and their mean is numpy's add.reduce over the d terms divided by
        # d, which is what `.mean()` computes: the same bits as normalizing per call, for a fifth of the time (a
        # search asks for thousands of bounds). The sum is numpy's pairwise order replayed in Python floats
        # (engine.quality.sums), checked against numpy once per model.
        terms = self._normalized_terms
        if terms is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                terms = self._normalized_terms = [
                    np.where(m > 0, g / m, 0.0).tolist() for g, m in zip(self._generalization, self._maximum)]
            self._python_sum = numpy_order("add", len(terms))
        if self._python_sum:
            return add_reduce(list(map(list.__getitem__, terms, levels))) / self.d
        return float(np.add.reduce(np.array([t[lv] for t, lv in zip(terms, levels)])) / self.d)

    def level_bounds(self, upper: Levels) -> np.ndarray | None:
        """`lower_bound` of every level vector from 0 to `upper` at once, indexed by the levels: the same
        additions in the same order elementwise (engine.quality.sums.add_reduce_columns), so every entry is
        lower_bound's bits; a search reads them instead of asking for thousands of bounds one by one. None where
        the Python sum does not replay numpy's (lower_bound then uses numpy itself)."""
        self.lower_bound(tuple(0 for _ in upper))   # makes the terms and checks the summation order
        if not self._python_sum or len(upper) != self.d:
            return None
        shape = tuple(hi + 1 for hi in upper)
        columns = []
        for axis, (terms, height) in enumerate(zip(self._normalized_terms, shape)):
            column = np.array(terms[:height], dtype=np.float64)
            columns.append(column.reshape([height if a == axis else 1 for a in range(len(shape))]))
        return np.broadcast_to(add_reduce_columns(columns), shape) / self.d

    def level_bound_reader(self, upper: Levels):
        bounds = self.level_bounds(upper)
        return None if bounds is None else bounds.item

    def _layout(self, levels) -> tuple:
        """Per attribute at `levels`, its cardinality and where its values start in one count vector (as numpy
        arrays, the offsets also as int64 for the compiled counts) and the total: remembered per transformation,
        since a search asks again for the transformations it evaluates and their neighbours."""
        key = tuple(levels)
        layout = self._layouts.get(key)
        if layout is None:
            cards = np.array([a.cardinality(lv) for a, lv in zip(self.table.attributes, levels)])
            offsets = np.concatenate([[0], np.cumsum(cards)[:-1]])
            layout = (cards, offsets, offsets.astype(np.int64), int(cards.sum()))
            if len(self._layouts) < LAYOUT_MEMO_LIMIT:
                self._layouts[key] = layout
        return layout

    def _suppression_raw(self, levels, codes, sizes, suppressed) -> np.ndarray:
        """Per attribute, sum_w s_w log2(S / s_w) over the suppressed records' generalized values w (unnormalized)."""
        raw = np.zeros(self.d)
        total = float(sizes[suppressed].sum())
        if total > 0:
            codes = codes_of(codes)   # a lazy table's codes, gathered
            # s_w for all attributes in one bincount (codes offset per attribute), taken from whichever side has
            # fewer classes: the suppressed classes directly, or the precomputed totals minus the kept classes.
            cards, offsets, offsets64, total_values = self._layout(levels)
            compiled = self._compiled()
            if compiled is not None:   # the same integer counts, compiled (engine.kernels)
                counted = compiled.suppressed_value_counts(codes, sizes, suppressed, offsets64,
                                                                total_values).astype(np.float64)
            else:
                from_kept = np.count_nonzero(suppressed) * 2 > suppressed.size
                side = ~suppressed if from_kept else suppressed
                flat = (codes[:, side] + offsets[:, None]).ravel()
                counted = np.bincount(flat, weights=np.tile(sizes[side], self.d), minlength=int(cards.sum()))
                if from_kept:
                    totals = np.concatenate([a.counts[lv] for a, lv in zip(self.table.attributes, levels)])
                    counted = totals - counted
            # The values of every attribute that suppressed records hold, and their log2 terms, in one pass each
            # (elementwise, so each value's term is the one a per-attribute pass computes); then per attribute the
            # same dot product over its own contiguous run.
            present = counted > 0.5
            values = counted[present]
            logs = np.log2(total / values)
            ends = np.cumsum(present)
            bounds = np.concatenate([[0], ends[offsets + cards - 1]]).tolist() if counted.size else [0] * (self.d + 1)
            for i in range(self.d):
                start, end = bounds[i], bounds[i + 1]
                raw[i] = float(np.dot(values[start:end], logs[start:end]))
        return raw

    def _fast_terms(self, levels, codes, sizes, suppressed) -> np.ndarray | None:
        """engine._entropy_numba's terms (row 0: the normalized attribute terms, row 1: the normalized suppression
        terms, the reference's bits) on the compiled path, else None (the reference then computes them): only
        once numba is loaded for this model (`_compiled`) and where the module's sums agree with numpy's in this
        process; an attribute whose suppressed records hold more values than it replays gets numpy's dot product
        of the values and log terms the kernel lays out for it."""
        fast = self._fast
        if fast is None:
            if self._compiled() is None:
                return None
            fast = self._fast = self._load_fast()
        if fast is False:
            return None
        module, cardinalities, generalization, totals, starts = fast
        if self._dot_order:   # numpy's logs, the dot products replayed in this BLAS's order
            return self._terms_of_numpy_logs(module, levels, codes, sizes, suppressed)
        lazy, table = _table(codes)
        terms, removed, waiting, pending, values, logs, bounds = (
            module.entropy_terms_lazy if lazy else module.entropy_terms)(
            *table, sizes, suppressed, np.array(levels, dtype=np.int64), cardinalities, generalization,
            self._maximum, totals, starts)
        if waiting:   # more values than the kernel replays: numpy's own dot product, as the reference's
            self._numpy_dots(terms, pending, values, logs, bounds, levels, generalization)
        return terms

    def _numpy_dots(self, terms, pending, values, logs, bounds, levels, generalization) -> None:
        """The terms of the attributes left `pending` (more values than the compiled calls replay), from numpy's own
        dot product of their laid-out values and log terms, as the reference's; where an attribute's maximum is 0
        the compiled zeros stand, as the reference's."""
        for i in np.flatnonzero(pending).tolist():
            start, end = int(bounds[i]), int(bounds[i + 1])
            raw = float(np.dot(values[start:end], logs[start:end]))
            maximum = float(self._maximum[i])
            if maximum > 0:
                terms[0, i] = (float(generalization[i, levels[i]]) + raw) / maximum
                terms[1, i] = raw / maximum

    def _terms_of_numpy_logs(self, module, levels, codes, sizes, suppressed) -> np.ndarray:
        """`_fast_terms` where numpy's log2 is not the C library's: the compiled counts and layout of the present
        values, numpy's log2 over all of them in one call (the reference's call, elementwise: the same bits), the
        dot products replayed compiled; an attribute beyond DOT_LIMIT values gets numpy's own dot product."""
        _, cardinalities, generalization, totals, starts = self._fast
        level_vector = np.array(levels, dtype=np.int64)
        lazy, table = _table(codes)
        removed, values, bounds = (module.suppressed_values_lazy if lazy else module.suppressed_values)(
            *table, sizes, suppressed, level_vector, cardinalities, totals, starts)
        logs = np.log2(float(removed) / values) if removed else values
        terms, pending, waiting = module.terms_of_logs(values, logs, bounds, level_vector, generalization,
                                                       self._maximum, self._dot_order, self._threads)
        if waiting:
            self._numpy_dots(terms, pending, values, logs, bounds, levels, generalization)
        return terms

    def _load_fast(self):
        """(engine._entropy_numba, cardinality per attribute and level, generalization term per attribute and
        level, the records per value of every attribute and level in one vector, where each attribute and level
        starts in it) as the kernel reads them, or False where its order does not replay numpy's here."""
        from .. import _entropy_numba

        global _FAST_AGREES, _DOT_ORDER, _THREADS
        if _FAST_AGREES is None:
            _FAST_AGREES = bool(_entropy_numba.agrees_with_numpy())
            # no single pass: the dot order alone (numpy's logs taken in between), if one is replayed here, and
            # the BLAS's thread count whose split of long dot products it replays too
            _DOT_ORDER = 0 if _FAST_AGREES else _entropy_numba.dot_order()
            threads = _entropy_numba.blas_threads() if _DOT_ORDER else 0
            _THREADS = threads if threads and _entropy_numba.threads_agree(_DOT_ORDER, threads) else 0
        if not _FAST_AGREES and not _DOT_ORDER:
            return False
        # the thread count verified, if OpenBLAS runs with it now (asked once per model, i.e. once per search:
        # a ctypes call per check costs more than the terms); else long dot products go to numpy
        threads = _THREADS if _THREADS and _entropy_numba.blas_threads() == _THREADS else 0
        self._dot_order, self._threads = _DOT_ORDER, threads
        height = max(a.levels for a in self.table.attributes)
        cardinalities = np.zeros((self.d, height), dtype=np.int64)
        generalization = np.zeros((self.d, height), dtype=np.float64)
        starts = np.zeros((self.d, height), dtype=np.int64)
        totals = []
        position = 0
        for i, (a, terms) in enumerate(zip(self.table.attributes, self._generalization)):
            cardinalities[i, :a.levels] = [a.cardinality(level) for level in range(a.levels)]
            generalization[i, :a.levels] = terms
            for level in range(a.levels):
                starts[i, level] = position
                totals.append(np.asarray(a.counts[level], dtype=np.int64))
                position += totals[-1].size
        self._mean_in_python = numpy_order("mean", self.d)
        return _entropy_numba, cardinalities, generalization, np.concatenate(totals), starts

    def _attribute_array(self, levels, codes, sizes, suppressed) -> np.ndarray:
        fast = self._fast_terms(levels, codes, sizes, suppressed)
        if fast is not None:
            # kept for suppression_terms, which the search asks for right after the loss of the same classes
            self._last_suppression = (tuple(levels), codes, sizes, suppressed, None, fast[1])
            return fast[0]
        raw = np.array([g[lv] for g, lv in zip(self._generalization, levels)])
        suppression = self._suppression_raw(levels, codes, sizes, suppressed)
        self._last_suppression = (tuple(levels), codes, sizes, suppressed, suppression, None)
        return self._normalize(raw + suppression)

    def generalization_terms(self, levels: Levels) -> np.ndarray:
        """Per attribute, the normalized generalization term (their mean is `lower_bound`)."""
        return self._normalize(np.array([g[lv] for g, lv in zip(self._generalization, levels)]))

    def suppression_terms(self, levels, codes, sizes, suppressed) -> np.ndarray:
        """Per attribute, the normalized suppression term of a transformation whose classes are (codes, sizes).

        Where suppression removes exactly the classes below a minimal size (k-anonymity alone), every
        specialization x of this transformation y has, attribute by attribute, a suppression term at least this
        large, so mean(generalization_terms(x) + suppression_terms(y)) is a lower bound of loss(x):

        * the suppressed records of x include those of y: x is finer, so every class of y is a union of classes of
          x; a record x keeps lies in a class of x of at least k records, contained in a class of y of at least k
          records, which y keeps too. So R(y), the records y suppresses, is a subset of R(x);
        * f(c) = sum_w c_w log2(C / c_w) = C log2 C - sum_w c_w log2 c_w (C = sum_w c_w) never falls when a record
          is added: adding one to c_w changes it by phi(C) - phi(c_w) with phi(z) = (z+1) log2(z+1) - z log2 z,
          increasing, and C >= c_w (a new value w is c_w = 0, phi(0) = 0); so f over R(x) >= f over R(y) at the
          same level;
        * f never falls when a value is split into finer ones (x's level of the attribute is at most y's): for
          c = a + b, c log2(C / c) <= a log2(C / a) + b log2(C / b) since a, b <= c.

        Both steps together give suppression term of x >= suppression term of y, attribute by attribute.
        """
        last = getattr(self, "_last_suppression", None)
        if last is not None and last[0] == tuple(levels) and last[1] is codes and last[2] is sizes \
                and last[3] is suppressed:
            return self._normalize(last[4]) if last[5] is None else last[5].copy()
        fast = self._fast_terms(levels, codes, sizes, suppressed)
        if fast is not None:
            return fast[1].copy()
        return self._normalize(self._suppression_raw(levels, codes, sizes, suppressed))

    def loss(self, levels, codes, sizes, suppressed) -> float:
        terms = self._attribute_array(levels, codes, sizes, suppressed)
        if self._fast and self._mean_in_python:   # numpy's mean replayed in Python floats (engine.quality.sums)
            return add_reduce(terms.tolist()) / self.d
        return float(terms.mean())

    def attribute_losses(self, levels, codes, sizes, suppressed) -> dict[str, float]:
        values = self._attribute_array(levels, codes, sizes, suppressed)
        return {a.name: float(v) for a, v in zip(self.table.attributes, values)}


def _table(codes) -> tuple[bool, tuple]:
    """Whether a class table is lazy (engine.classes.LazyCodes), and the compiled terms' first arguments for it:
    (rows, select, origin) of a lazy table, whose counted classes' codes the kernels read through their origins
    (a check then gathers no (d, u) codes: it reads only the suppressed, or the kept, classes), else (codes,)."""
    if isinstance(codes, LazyCodes):
        return True, (codes.rows, codes.select, codes.origin)
    return False, (codes,)

"""Equivalence classes per transformation, cached and rolled up (the grouping itself is engine.grouping).

A class table is (codes, counts): codes has one row per attribute and one column per class. The input of a grouping
is either the records or, much smaller, the classes of a more specific transformation (roll-up).

With sensitive attributes the cache holds one of two forms. The joint form groups quasi-identifiers and sensitive
values together (a class per combination) and projects them onto quasi-identifier classes per check
(engine.distributions.project). The dense form (compiled path, one sensitive attribute, a histogram small enough:
`DENSE_BASE_BYTES`) holds the quasi-identifier classes with their (classes, values) int32 histogram and rolls both
up together (engine._distribution_numba.roll_up_dense): fewer classes to hash, no projection and no histogram per
check, the same classes, sizes, order and counts.
Lazy tables (`enable_lazy`; the evaluator's size-only checks without sensitive attributes or risk models on the
compiled path): a rolled-up table holds, per class, the number of one base class of it (its origin, `LazyCodes`)
instead of its codes, which are level rows (every base class's code per attribute level) read through the origins;
a roll-up writes one int32 per class instead of d codes, and readers gather the codes they need. The dense form's
rolled-up tables are lazy too (`LAZY_DENSE`; engine._distribution_numba.roll_up_dense_lazy): its checks read sizes
and histograms, and only a solution's quality model gathers codes.
`combined_key`, `group`, `roll_up` and `roll_up_keyed` are re-exported from engine.grouping for existing callers.
"""
from __future__ import annotations

import math
import operator
import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import kernels
from .ahead import Job, Worker
from .distributions import ClassView, project
from .grouping import _KEY_LIMIT, combined_key, group, roll_up, roll_up_keyed

if TYPE_CHECKING:
    from .encoding import EncodedTable

__all__ = ["PREFETCH_PENDING", "ClassCache", "Evaluation", "LazyCodes", "codes_of", "combined_key", "group", "roll_up",
           "roll_up_keyed"]

PREFETCH_PENDING = 4   # roll-ups started ahead and not yet asked for, at most
BASE_DELTA_BYTES = 64 << 20   # the base classes' key updates per attribute and level (compiled path), at most
DENSE_BASE_BYTES = 64 << 20   # the dense form's base histogram (base classes x values x 4 bytes), at most
HUB_BYTES = 32 << 20   # the warmed tables (`warm`) with their filled key updates, at most (and a quarter of the budget)
LEVEL_ROWS_BYTES = 64 << 20   # lazy tables' level rows (base classes x attribute levels x 4 bytes), at most


class LazyCodes:
    """The codes of a lazy class table (compiled path, `ClassCache.enable_lazy`): per class the number of one of its
    base classes (its origin), and the table's levels. Attribute i's codes are rows[select[i, levels[i]]][origin]
    (engine._kernels_numba.gather_codes): a roll-up writes one int32 per class instead of d codes, and only readers
    that need codes pay for them, when they read them."""

    __slots__ = ("origin", "levels", "rows", "select", "kernels", "kept")

    def __init__(self, origin: np.ndarray, levels: tuple[int, ...], rows: np.ndarray, select: np.ndarray,
                 kernels, kept: np.ndarray | None = None) -> None:
        self.origin = origin
        self.levels = levels
        self.rows = rows
        self.select = select
        self.kernels = kernels
        self.kept = kept   # the codes gathered once and kept (`keeping`), else None

    def keeping(self) -> "LazyCodes":
        """The same table with its codes gathered and kept: a warmed table (`ClassCache.warm`), whose roll-ups
        with kept key updates read its codes."""
        return LazyCodes(self.origin, self.levels, self.rows, self.select, self.kernels, self.array())

    @property
    def nbytes(self) -> int:
        """What the table holds beyond the shared level rows (the cache's budget counts this)."""
        return self.origin.nbytes + (0 if self.kept is None else self.kept.nbytes)

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.levels), self.origin.size

    @property
    def picked(self) -> np.ndarray:
        """Each attribute's level row at the table's levels."""
        return self.select[np.arange(len(self.levels)), self.levels]

    def array(self) -> np.ndarray:
        """The codes (attributes, classes) int32, gathered now (the eager table's codes, bit for bit)."""
        if self.kept is not None:
            return self.kept
        return self.kernels.gather_codes(self.rows, self.picked, self.origin)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        codes = self.array()
        return codes if dtype is None else codes.astype(dtype)


def codes_of(codes) -> np.ndarray:
    """A table's codes as an array, gathered when the table is lazy (`LazyCodes`)."""
    return codes.array() if isinstance(codes, LazyCodes) else codes


@dataclass
class Evaluation:
    """One transformation, evaluated: its classes, which of them are suppressed, and whether it is a solution.

    Lives below both the privacy models (which decide suppression) and the search (which compares evaluations), so
    neither has to import the other. Its codes have two readings: `held_codes` is the table as the class cache holds
    it (a lazy table, `LazyCodes`, is not gathered: readers such as Non-Uniform Entropy's compiled terms read it
    through its origins), `codes` the (attributes, classes) array, gathered on first read and kept (readers that
    compare codes by identity see one array).
    """

    levels: tuple[int, ...]
    held_codes: "np.ndarray | LazyCodes"   # (attributes, classes) generalized codes, or a lazy table of them
    sizes: np.ndarray               # (classes,) records per class; classes in order of first appearance in the input
    suppressed: np.ndarray          # (classes,) bool
    suppressed_records: int
    solution: bool
    loss: float | None = None
    details: dict = field(default_factory=dict)   # e.g. the risk estimate of a risk-based model
    abandoned: bool = False   # evaluation stopped early: it provably cannot beat the best solution known

    @property
    def codes(self) -> np.ndarray:
        """The (attributes, classes) codes; a lazy table's are gathered on first read and kept."""
        codes = self.held_codes
        if isinstance(codes, LazyCodes):
            codes = self.held_codes = codes.array()
        return codes

    @codes.setter
    def codes(self, codes: np.ndarray) -> None:
        self.held_codes = codes


def _below(lower: tuple[int, ...], upper: tuple[int, ...]) -> bool:
    """Every level of `lower` at most `upper`'s (a specialization or the node itself), with no Python frame per
    level."""
    return all(map(operator.le, lower, upper))


class ClassCache:
    """Equivalence classes per transformation, computed by rolling up the classes of a cached specialization.

    An LRU of class tables bounded in bytes: the search mostly moves one level up from what it just looked at, so the
    nearest cached specialization is usually a direct one with far fewer classes than the records. The bound holds
    at every moment (`nbytes <= budget`): the oldest tables are evicted before a new one is stored, and a table
    larger than the whole budget is not cached at all. The base classes of the table (level 0), which every roll-up
    may start from, are kept outside the bound.
    """

    DEFAULT_BUDGET_BYTES = 256 << 20
    LAZY_DENSE = True   # the dense form's rolled-up tables lazy (`_dense_rows`); False: eager codes (tests compare)

    def __init__(self, table: "EncodedTable", budget_bytes: int = DEFAULT_BUDGET_BYTES, compiled=kernels.default,
                 prefetch: bool = False) -> None:
        """`compiled`: engine.kernels' functions for the compiled roll-up, None for the numpy one; by default
        `kernels.default()` decides (compiled once numba is loaded, never importing it). `prefetch`: a worker thread
        may roll up ahead (`prefetch`; call `close` when done)."""
        self.table = table
        self.cards = [[a.cardinality(lv) for lv in range(a.levels)] for a in table.attributes]
        # Sensitive attributes ride along as rows that never generalize (engine.distributions projects them away).
        self.sensitive = tuple(getattr(table, "sensitive", ()))
        self.cards += [[s.cardinality] for s in self.sensitive]
        self.attributes = len(table.attributes)
        self._tail = tuple(0 for _ in self.sensitive)
        bottom = tuple(0 for _ in self.cards)
        # A fixed mixed radix over the level-0 cardinalities, when it fits in int64, lets a roll-up touch only the
        # attributes that change (roll_up_keyed); otherwise keys are rebuilt per roll-up (roll_up).
        places, span = [], 1
        for cards in reversed(self.cards):
            places.append(span)
            span *= max(int(cards[0]), 1)
        self.radix = np.array(places[::-1], dtype=np.int64) if span < _KEY_LIMIT else None
        # The compiled roll-up (engine.kernels) needs the fixed radix; without it, or with the reference path
        # forced, the numpy roll-up runs.
        self.kernels = (compiled() if callable(compiled) else compiled) if self.radix is not None else None
        records = [a.records for a in table.attributes] + [s.records for s in self.sensitive]
        if self.kernels is not None:
            # The records grouped in one compiled hash pass that also gives the keys: the same classes, sizes and
            # order as the numpy grouping (a tenth of its time on ADULT, paid once per search).
            codes, sizes, key = self.kernels.group_rows(np.stack(records), self.radix)
        else:
            if self.sensitive:
                codes, sizes, _ = group(np.stack(records), np.ones(table.n, dtype=np.int64),
                                        [c[0] for c in self.cards])
            else:
                codes, sizes, _ = table.base_classes()
            key = None if self.radix is None else (codes.astype(np.int64) * self.radix[:, None]).sum(axis=0)
        self.base = (bottom, codes, sizes, key)
        # The roll-up places of the cached keys: the fixed radix (joint form) or its quasi-identifier part (dense).
        self._places = self.radix
        self.dense = None   # engine._distribution_numba while the cache holds the dense form (`_dense_form`)
        if self.kernels is not None and len(self.sensitive) == 1:
            self._dense_form(table.n)
        # What a roll-up from the base starts from: (codes, sizes, key), plus the histogram in the dense form.
        self._base_entry = self.base[1:] if self.dense is None else self.base[1:] + (self._base_dense,)
        self._maps: dict[tuple[int, int, int], np.ndarray] = {}
        self._cache: OrderedDict[tuple[int, ...], tuple] = OrderedDict()
        self.nbytes = 0
        self.peak_nbytes = 0
        self.budget = int(budget_bytes)
        self._last_view: tuple[tuple[int, ...], object] | None = None
        self._fresh: tuple[tuple[int, ...], np.ndarray | None] | None = None   # the last table from the worker
        # Whether the worker also makes the dense form's value-major copy (`_roll_up_ahead`): only once a view
        # handed out without it was seen to have it built (`view`): equal t-closeness and entropy l-diversity read
        # the class-major histogram, so for them the copy would be work no one reads.
        self._by_value = False
        # A worker thread that rolls up ahead what the search will likely ask next (`prefetch`); the compiled
        # roll-up releases the GIL, so it runs on the other core while the search does its Python work.
        self._pending: OrderedDict[tuple[int, ...], Job] = OrderedDict()
        self._worker = None
        if self.kernels is not None and prefetch and (os.cpu_count() or 1) > 1:
            self._worker = Worker("safeshare-rollup")
            # A cache dropped without `close` still stops its thread (the thread holds no reference to the cache).
            self._stop = weakref.finalize(self, self._worker.close, False)
        self._flat: tuple[np.ndarray, dict[tuple[int, int, int], int]] | None = None
        self._deltas: tuple[np.ndarray, np.ndarray] | bool | None = None   # `_base_deltas`
        # Tables a search asked to keep as roll-up sources (`warm`), outside the LRU and its bound, least recently
        # used released first beyond HUB_BYTES; with their levels and class counts as arrays for the compiled
        # source choice (rebuilt when the set changes).
        self._hubs: OrderedDict[tuple[int, ...], tuple] = OrderedDict()
        # per warmed table on the compiled path, its key updates kept as the base's are (`_base_deltas`): rows per
        # attribute and level above the hub's, filled by the compiled roll-up on first use
        self._hub_deltas: dict[tuple[int, ...], tuple[np.ndarray, np.ndarray, list[list[int]], np.ndarray]] = {}
        self.hub_nbytes = 0
        self._hub_arrays: tuple[np.ndarray, np.ndarray, list] | None = None
        self._lazy: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None   # `enable_lazy`
        self._dense_lazy: tuple[np.ndarray, np.ndarray, np.ndarray] | bool | None = None   # `_dense_rows`

    def enable_lazy(self) -> bool:
        """Keep rolled-up tables lazy (`LazyCodes`: one origin per class instead of d codes) from now on: the
        compiled path outside the dense form and without sensitive attributes, before any table is cached, with the
        level rows (every base class's code at every attribute level, int32) within LEVEL_ROWS_BYTES and a quarter
        of the budget. For readers that mostly ask for sizes (the evaluator's size-only checks); `classes` still
        hands out codes. Returns whether tables are now lazy."""
        if self._lazy is not None:
            return True
        if self.kernels is None or self.dense is not None or self.sensitive or self._cache or self._hubs \
                or self._pending:
            return False
        self._lazy = self._base_level_rows()
        return self._lazy is not None

    def _base_level_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """What a lazy table reads through (both forms'): the level rows (every base class's code at every attribute
        level, int32), their select table and the base's origins (the base classes themselves); None when the rows
        would exceed LEVEL_ROWS_BYTES or a quarter of the budget."""
        codes = self.base[1]
        m = codes.shape[1]
        count = sum(len(cards) for cards in self.cards)
        if count * m * 4 > min(LEVEL_ROWS_BYTES, self.budget // 4):
            return None
        self._flat_maps()
        heights = np.array([len(cards) for cards in self.cards], dtype=np.int64)
        rows, select = self.kernels.level_rows(codes, self._starts3, self._flat[0], heights)
        return rows, select, np.arange(m, dtype=np.int32)

    def _dense_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The dense form's `_base_level_rows`, decided at its first roll-up (before any rolled-up table exists, so
        every cached table but the base is lazy or none is): None when `LAZY_DENSE` is off or the rows exceed the
        cap. Why lazy: entropy l-diversity's and t-closeness's checks read sizes and histograms, never codes (ADULT
        l=3: a sixth of a dense roll-up's time went to writing codes that 98 % of the tables never had read)."""
        if self._dense_lazy is None:
            self._dense_lazy = (self.LAZY_DENSE and self._base_level_rows()) or False
        return self._dense_lazy or None

    def _lazy_table(self, origin: np.ndarray, node: tuple[int, ...]) -> LazyCodes:
        return LazyCodes(origin, node, self._lazy[0], self._lazy[1], self.kernels)

    def _dense_form(self, records: int) -> None:
        """Switch to the dense form when it pays: the base joint classes grouped into quasi-identifier classes with
        their dense histogram, kept while it takes at most DENSE_BASE_BYTES and at most as many cells as the dense
        histogram of a joint projection may (values x classes <= DENSE_CELLS_PER_JOINT_CLASS x joint classes +
        4096: few values per class of a large domain are cheaper as joint classes), and the records fit in int32.
        Nodes then have no sensitive tail and keys are in the quasi-identifier part of the radix (the joint key's
        quotient by the sensitive place)."""
        from . import _distribution_numba as compiled

        bottom, codes, sizes, _ = self.base
        d = self.attributes
        cardinality = int(self.sensitive[0].cardinality)
        span = int(self.radix[d - 1])   # the sensitive row's place: its level-0 cardinality (at least 1)
        if cardinality < 1 or records >= 1 << 31:
            return
        places = self.radix[:d] // span
        qi_codes, qi_sizes, qi_key, dense = compiled.group_dense(codes[:d], sizes, codes[d], places, cardinality)
        cells = cardinality * qi_sizes.size
        if cells * 4 > DENSE_BASE_BYTES or cells > compiled.DENSE_CELLS_PER_JOINT_CLASS * sizes.size + 4096:
            return
        self.base = (bottom[:d], qi_codes, qi_sizes, qi_key)
        self._base_dense = dense
        self._places = places
        self._tail = ()
        self.dense = compiled

    def _map(self, attribute: int, source: int, target: int) -> np.ndarray:
        key = (attribute, source, target)
        if key not in self._maps:
            self._maps[key] = self.table.attributes[attribute].roll_up(source, target)
        return self._maps[key]

    @property
    def prefetches(self) -> bool:
        """Whether `prefetch` rolls up on a worker thread (else it does nothing, and a search need not guess)."""
        return self._worker is not None

    def holds(self, node: tuple[int, ...]) -> bool:
        """Whether `node`'s classes need no roll-up source: cached, or being rolled up ahead (the evaluator then skips
        its search for the best source)."""
        node = node + self._tail
        return node in self._cache or node in self._pending or node in self._hubs

    def classes(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The quasi-identifier classes of `node`: codes (attributes, classes) and sizes, in order of first
        appearance in the input."""
        codes, sizes = self.held_classes(node, hint)
        return codes_of(codes), sizes

    def held_classes(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None
                     ) -> tuple["np.ndarray | LazyCodes", np.ndarray]:
        """`classes` with a lazy table's codes as the cache holds them (`LazyCodes`, not gathered): for callers that
        may read only the sizes (the evaluator's size-only first phase of Flash2P in the dense form)."""
        if not self.sensitive or self.dense is not None:
            entry = self._entry(node, hint)
            return entry[0], entry[1]
        view = self.view(node, hint)
        return view.held_codes, view.sizes

    def class_sizes(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None) -> np.ndarray:
        """The sizes of `node`'s quasi-identifier classes (`classes` without gathering a lazy table's codes)."""
        if not self.sensitive or self.dense is not None:
            return self._entry(node, hint)[1]
        return self.view(node, hint).sizes

    def view(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None):
        """The classes of `node` with their sensitive-value distributions (engine.distributions.ClassView)."""
        if self._last_view is not None and self._last_view[0] == node:
            return self._last_view[1]
        entry = self._entry(node, hint)
        if self.dense is not None:
            # The dense form: the cached classes and histogram as they are (the models only read them), with the
            # value-major copy when the worker thread made it. Until the worker makes them, a view whose copy got
            # built was built by its reader: from then on the worker makes them (`_by_value`).
            if not self._by_value and self._last_view is not None and self._last_view[1]._dense_built:
                self._by_value = True
            view = ClassView(entry[0], entry[1], self.sensitive, kernels=self.dense, counts_by_class=entry[3])
            fresh = self._fresh
            if fresh is not None and fresh[0] == node and fresh[1] is not None:
                view._dense, view._dense_built = fresh[1], True
            self._fresh = None
        elif self.kernels is not None:
            # On the compiled path (and with the fixed radix) the projection and the histograms run compiled too.
            view = project(entry[0], entry[1], self.attributes, [], self.sensitive, self.radix, entry[2])
        else:
            cards = [self.cards[i][lv] for i, lv in enumerate(node)]
            view = project(entry[0], entry[1], self.attributes, cards, self.sensitive)
        population = getattr(self.table, "population", None)
        if population is not None:
            view.population = lambda v, levels=tuple(node): population.counts_for(levels, v)
        self._last_view = (node, view)
        return view

    def _entry(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None) -> tuple:
        """The cached table of `node` (codes, sizes, key, and the histogram in the dense form), computed from the
        best source if needed."""
        if self._tail:
            node = node + self._tail
            hint = None if hint is None else hint + self._tail
        cached = self._cache.get(node)
        if cached is not None:
            self._cache.move_to_end(node)
            return cached
        return self._missed(node, hint)

    def _missed(self, node: tuple[int, ...], hint: tuple[int, ...] | None, scan: bool = True) -> tuple:
        """`_entry` for a node (with the sensitive tail) not in the LRU: a warmed table, one rolled up ahead, or
        one computed and stored now (the evaluator's size-only checks come here straight from their own LRU
        lookup). `scan` False: the caller knows no cached table is a specialization of `node` (`_source`)."""
        if self._hubs:
            cached = self._hubs.get(node)
            if cached is not None:
                return cached
        pending = self._pending.pop(node, None) if self._pending else None
        # Rolled up ahead by the worker thread: the same table, stored as if computed now. One the worker has not
        # started yet is cancelled and computed here: the search never waits for a thread the OS has not scheduled.
        if pending is not None and not pending.cancel():
            entry, by_value = pending.result()
            self._store(node, entry)
            self._fresh = (node, by_value)
            return entry
        new = self._compute(node, hint, scan)
        self._store(node, new)
        return new

    def rolled_from(self, node: tuple[int, ...], source: tuple[int, ...], decision: tuple | None = None
                    ) -> tuple | None:
        """`_missed`'s common case in one step, for a caller that chose the source itself (the evaluator's remembered
        specialization of `node` with the fewest classes; no sensitive tail, `node` neither cached nor rolled up
        ahead): `node`'s table rolled up from the cached table of `source` and stored, without `_missed`'s and
        `_source`'s layers. None where `_missed` would do more (`source` not cached, or without fewer classes than
        the base, whose roll-ups use its kept key updates; warmed tables, which may be better sources): the caller
        then takes `_missed(node, source)`, which picks the same source. `decision` (smallest class size, records
        allowed to be suppressed, Loss's compiled arguments), on lazy tables: the check's suppression and Loss's
        terms are decided in the same compiled call (`roll_up_decide_lazy`) and follow the table (suppressed,
        records, terms)."""
        if self._hubs:
            return None
        entry = self._cache.get(source)
        if entry is None or entry[1].size >= self._base_entry[1].size:
            return None
        if self._flat is None:
            self._flat_maps()
        levels = np.array(source + node, dtype=np.int64)
        lazy = self._lazy
        if lazy is None:
            new = self.kernels.roll_up_levels(entry[0], entry[1], entry[2], levels, self._starts3, self._flat[0],
                                              self.radix, self._cards2, 0)[:3]
            self._store(node, new)
            return new
        if decision is None:
            out = self.kernels.roll_up_levels_lazy(lazy[0], lazy[1], entry[0].origin, entry[1], entry[2], levels,
                                                   self._starts3, self._flat[0], self.radix, self._cards2, 0)
        else:
            out = self.kernels.roll_up_decide_lazy(lazy[0], lazy[1], entry[0].origin, entry[1], entry[2], levels,
                                                   self._starts3, self._flat[0], self.radix, self._cards2, *decision)
        new = (LazyCodes(out[0], node, lazy[0], lazy[1], self.kernels), out[1], out[2])
        self._store(node, new, out[0].nbytes + out[1].nbytes + out[2].nbytes)   # `_size` of a lazy table
        return new if decision is None else new + out[3:]

    def _compute(self, node: tuple[int, ...], hint: tuple[int, ...] | None, scan: bool = True) -> tuple:
        """`node`'s table (node and hint with the sensitive tail) rolled up from the best source: `_entry` and
        `warm` share it."""
        source, entry = self._source(node, hint, scan)
        if self.kernels is not None:
            base = entry is self._base_entry
            if base and node == self.base[0]:
                return entry   # the base classes themselves (never written)
            if self.dense is None:
                return self._roll_up_levels(source, node, entry, base)
            # the dense form (engine._distribution_numba): told by the changed attributes
            changed, where = self._changes(source, node)
            self._dense_rows()
            if not base and (not self._hubs or source not in self._hubs):
                return self._roll_up(entry, changed, where, node=node)   # a cached table, no kept key updates
            delta_rows = None
            if base:
                deltas = self._base_deltas()
                delta_rows = self._delta_rows
            elif source in self._hubs:
                deltas = self._hub_deltas[source] if source in self._hub_deltas else self._new_hub_deltas(source)
                if deltas is not None:
                    deltas, delta_rows = deltas[:2], deltas[2]
            else:
                deltas = None
            rows = None
            if deltas is not None:
                rows = np.array([delta_rows[i][node[i]] for i in changed.tolist()], dtype=np.int64)
            if deltas is None or entry is self._base_entry:
                return self._roll_up(entry, changed, where, deltas, rows, node=node)
            filled = int(np.count_nonzero(~deltas[1][rows]))
            new = self._roll_up(entry, changed, where, deltas, rows, node=node)
            self._count_hub_rows(source, filled, deltas[0].shape[1])
            return new
        codes, sizes, key = entry
        maps = [None if lo == hi else self._map(i, lo, hi) for i, (lo, hi) in enumerate(zip(source, node))]
        if key is not None:
            return roll_up_keyed(codes, sizes, key, maps, self.radix)
        return roll_up(codes, sizes, maps, [self.cards[i][lv] for i, lv in enumerate(node)]) + (None,)

    def warm(self, node: tuple[int, ...]) -> int:
        """Roll up `node`'s classes now and keep them as a roll-up source (a hub) for its generalizations: a search
        that knows which transformations it will check can have many of them rolled up from one common
        specialization with far fewer classes than the base. Not a check, and nothing a search sees changes: the
        classes are the same from any source (numbered by first appearance in the input). Kept outside the LRU
        and its bound, up to HUB_BYTES (and a quarter of the budget), least recently used released first. Returns
        the number of classes."""
        key = node + self._tail
        entry = self._hubs.get(key)
        if entry is None:
            entry = self._cache.get(key)
            if entry is None:
                entry = self._compute(key, None)
            if isinstance(entry[0], LazyCodes):   # its roll-ups with kept key updates read its codes
                entry = (entry[0].keeping(),) + entry[1:]
            size = self._size(entry)
            if self._make_room(size, None):
                self._hubs[key] = entry
                self.hub_nbytes += size
                self._hub_arrays = None
        return int(entry[1].size)

    def _make_room(self, size: int, keep: tuple[int, ...] | None) -> bool:
        """Release the least recently used warmed tables (never `keep`) until `size` more bytes fit the cap."""
        cap = min(HUB_BYTES, self.budget // 4)
        if size > cap:
            return False
        while self.hub_nbytes + size > cap:
            old = next((hub for hub in self._hubs if hub != keep), None)
            if old is None:
                return False
            self.hub_nbytes -= self._hub_size(old)
            del self._hubs[old]
            self._hub_deltas.pop(old, None)
            self._hub_arrays = None
        return True

    def _new_hub_deltas(self, hub: tuple[int, ...]
                        ) -> tuple[np.ndarray, np.ndarray, list[list[int]], np.ndarray] | None:
        """A warmed table's key updates, when it is first rolled up from (compiled path, within the cap): rows per
        attribute and level above the hub's, as the base's (`_base_deltas`), filled by the compiled roll-up on
        first use; roll-ups from a hub that many transformations share then add rows instead of gathering. The
        rows per attribute and level come as a list and as an array (`_padded`, for roll_up_base_levels)."""
        if self.kernels is None:
            return None
        self._hub_deltas[hub] = None   # unless made below
        delta_rows, count, dtype = self._delta_layout(hub)
        # Allocated, not touched: a row takes memory when the compiled roll-up first fills it (counted then).
        if not self._make_room(count, hub):
            return None
        deltas = (np.empty((count, self._hubs[hub][1].size), dtype=dtype), np.zeros(count, dtype=np.bool_),
                  delta_rows, self._padded(delta_rows))
        self._hub_deltas[hub] = deltas
        self.hub_nbytes += count
        return deltas

    def _delta_layout(self, levels: tuple[int, ...]) -> tuple[list[list[int]], int, type]:
        """Where the key updates of a source at `levels` (the base or a hub) keep each attribute's levels above
        its own: per attribute and level, a row number (-1 at and below the source's level), how many rows, and
        their integer type. A row holds code moves (mapped code - code, engine._keys_numba.base_keys), within
        +-(cardinality - 1): int16 while every cardinality at and above the source's levels is at most 32,768 (a
        quarter of int64's bytes read per base roll-up), int32 otherwise (codes are int32)."""
        rows, count, widest = [], 0, 1
        for level, cards in zip(levels, self.cards):
            rows.append([-1] * (level + 1) + list(range(count, count + len(cards) - level - 1)))
            count += len(cards) - level - 1
            if len(cards) > level + 1:   # rows above the source's level: codes below these cardinalities
                widest = max([widest, *cards[level:]])
        return rows, count, (np.int16 if widest - 1 <= np.iinfo(np.int16).max else np.int32)

    def _hub_size(self, hub: tuple[int, ...]) -> int:
        """Bytes a warmed table holds, with the rows of key updates filled so far (before it is released)."""
        size = self._size(self._hubs[hub]) if hub in self._hubs else 0
        deltas = self._hub_deltas.get(hub)   # None: none yet, or none kept (over the cap)
        if deltas is None:
            return size
        return size + deltas[1].nbytes + int(np.count_nonzero(deltas[1])) * deltas[0].shape[1] * deltas[0].itemsize

    def merged_share(self, axis: int, level: int, sample: int = 4096) -> float | None:
        """An estimate, from every k-th base class (about `sample` of them), of the share of the base classes that
        generalizing attribute `axis` alone to `level` merges away: merges seen among the sampled classes, scaled
        by the sampling fraction as merged pairs scale (larger merged groups are overestimated). A screen before a
        real roll-up (engine.search.floor's hubs); None without the fixed radix (no keys)."""
        key = self.base[3]
        if key is None or self.kernels is None or not key.size:
            return None
        stride = max(1, key.size // sample)
        codes = self.base[1][axis, ::stride].astype(np.int64)
        keys = key[::stride] + (self._map(axis, 0, level)[codes] - codes) * int(self._places[axis])
        return (1.0 - np.unique(keys).size / keys.size) * key.size / keys.size

    def release_hubs(self) -> None:
        """Drop the warmed tables (`warm`)."""
        self._hubs.clear()
        self._hub_deltas.clear()
        self.hub_nbytes = 0
        self._hub_arrays = None

    def _best_hub(self, node: tuple[int, ...]) -> tuple[tuple[int, ...] | None, tuple | None]:
        """The warmed specialization of `node` (node itself excluded) with the fewest classes, if any."""
        if self._hub_arrays is None:
            nodes = list(self._hubs)
            levels = np.array(nodes, dtype=np.int64).reshape(len(nodes), len(node))
            counts = np.array([self._hubs[h][1].size for h in nodes], dtype=np.int64)
            self._hub_arrays = (levels, counts, nodes)
        levels, counts, nodes = self._hub_arrays
        if self.kernels is not None:
            row = int(self.kernels.best_source_held(levels, counts, len(nodes), np.asarray(node, dtype=np.int64)))
        else:
            below = np.all(levels <= np.asarray(node), axis=1) & np.any(levels != np.asarray(node), axis=1)
            row = int(np.flatnonzero(below)[np.argmin(counts[below])]) if below.any() else -1
        if row < 0:
            return None, None
        hub = nodes[row]
        self._hubs.move_to_end(hub)
        return hub, self._hubs[hub]

    def _roll_up_levels(self, source: tuple[int, ...], node: tuple[int, ...], entry: tuple, base: bool) -> tuple:
        """`_compute`'s compiled roll-up outside the dense form, in one compiled call told by the two level vectors
        (engine._kernels_numba.roll_up_levels and roll_up_base_levels find the changed attributes, their maps, the
        rows of kept key updates and the bound there, with no Python pass over the attributes): from a cached
        table, or with the kept key updates of the base or of a warmed table (whose rows, memory once filled,
        are counted within the hubs' cap)."""
        if self._flat is None:
            self._flat_maps()
        levels = np.array(source + node, dtype=np.int64)
        codes, sizes, key = entry
        held = None
        if base:
            held = self._base_deltas()
            if held is not None:
                held = (held[0], held[1], None, self._delta_rows2)
        elif self._hubs and source in self._hubs:
            held = self._hub_deltas[source] if source in self._hub_deltas else self._new_hub_deltas(source)
        lazy = self._lazy
        if lazy is not None and held is None:   # the common lazy roll-up, with no further Python call
            new = self.kernels.roll_up_levels_lazy(lazy[0], lazy[1], lazy[2] if base else codes.origin, sizes, key,
                                                   levels, self._starts3, self._flat[0], self.radix, self._cards2, 0)
            return LazyCodes(new[0], node, lazy[0], lazy[1], self.kernels), new[1], new[2]
        if lazy is not None:
            return self._roll_up_lazy(node, entry, levels, held, base, source)
        if held is None:
            return self.kernels.roll_up_levels(codes, sizes, key, levels, self._starts3, self._flat[0], self.radix,
                                               self._cards2, 0)[:3]
        ready = held[1]
        before = 0 if base else int(np.count_nonzero(ready))
        new = self.kernels.roll_up_base_levels(codes, sizes, key, levels, self._starts3, self._flat[0], self.radix,
                                               self._cards2, 0, held[0], ready, held[3])[:3]
        if not base:
            self._count_hub_rows(source, int(np.count_nonzero(ready)) - before, held[0].shape[1])
        return new

    def _origin(self, codes) -> np.ndarray:
        """A source table's origins: a lazy table's own, the base's are the base classes themselves."""
        return codes.origin if isinstance(codes, LazyCodes) else self._lazy[2]

    def _roll_up_lazy(self, node: tuple[int, ...], entry: tuple, levels: np.ndarray, held, base: bool,
                      source: tuple[int, ...]) -> tuple:
        """`_roll_up_levels` for lazy tables (`enable_lazy`): the new table's origins instead of its codes, from a
        lazy table or the base (whose origins are the base classes), with the kept key updates of the base or of a
        warmed table (whose codes are gathered for them: the updates' rows are filled from codes)."""
        codes, sizes, key = entry
        origin = self._origin(codes)
        if held is None:
            rows, select = self._lazy[0], self._lazy[1]
            new = self.kernels.roll_up_levels_lazy(rows, select, origin, sizes, key, levels, self._starts3,
                                                   self._flat[0], self.radix, self._cards2, 0)
            return self._lazy_table(new[0], node), new[1], new[2]
        ready = held[1]
        before = 0 if base else int(np.count_nonzero(ready))
        new = self.kernels.roll_up_base_levels_lazy(codes_of(codes), origin, sizes, key, levels, self._starts3,
                                                    self._flat[0], self.radix, self._cards2, 0, held[0], ready,
                                                    held[3])
        if not base:
            self._count_hub_rows(source, int(np.count_nonzero(ready)) - before, held[0].shape[1])
        return self._lazy_table(new[0], node), new[1], new[2]

    def _count_hub_rows(self, hub: tuple[int, ...], filled: int, width: int) -> None:
        """A warmed table's rows of kept key updates are memory once a roll-up fills them: `filled` new rows of
        `width` entries are counted then, within the hubs' cap; when the hub alone is over the cap with its rows,
        the rows go (the hub stays)."""
        if not filled:
            return
        self.hub_nbytes += filled * width * self._hub_deltas[hub][0].itemsize
        if not self._make_room(0, hub):
            self.hub_nbytes -= self._hub_size(hub) - self._size(self._hubs[hub])
            self._hub_deltas[hub] = None

    def _bound(self, node: tuple[int, ...]) -> int:
        """At most how many classes `node` can have: the product of its levels' cardinalities (the joint form's
        sensitive tail included; the dense form's nodes have none and its roll-up takes no bound), capped to fit
        int64. The compiled merge sizes its hash table for it when it is below the source's classes."""
        return min(math.prod(map(list.__getitem__, self.cards, node)), 1 << 62)

    def _roll_up(self, entry: tuple, changed: np.ndarray, where: np.ndarray, deltas=None, rows=None,
                 bound: int = -1, node: tuple[int, ...] | None = None) -> tuple:
        """The compiled roll-up of a cached table (either form); with `deltas` (the base's kept key updates and
        the rows of the changed attributes' levels) the base roll-up. Runs on the worker thread too (no deltas
        there: the main thread fills them). `bound`: at most this many classes result (`_bound`; -1 unknown).
        `node`: the new table's levels (the dense form's lazy tables keep them)."""
        flat = self._flat[0]
        if self.dense is not None:
            if self._dense_lazy:
                return self._roll_up_dense_lazy(entry, changed, where, node, deltas, rows)
            codes, sizes, key, dense = entry
            if deltas is not None:
                return self.dense.roll_up_dense_base(codes, sizes, key, dense, changed, where, flat, self._places,
                                                     deltas[0], deltas[1], rows)
            return self.dense.roll_up_dense(codes, sizes, key, dense, changed, where, flat, self._places)
        codes, sizes, key = entry
        if deltas is not None:
            result = self.kernels.roll_up_base(codes, sizes, key, changed, where, flat, self.radix, 0, deltas[0],
                                               deltas[1], rows, bound)
        else:
            result = self.kernels.roll_up(codes, sizes, key, changed, where, flat, self.radix, 0, bound)
        return result[:3]

    def _roll_up_dense_lazy(self, entry: tuple, changed: np.ndarray, where: np.ndarray, node: tuple[int, ...],
                            deltas=None, rows=None, ahead: bool = False) -> tuple:
        """`_roll_up` in the dense form with lazy tables (`_dense_rows`): the new table's origins instead of its
        codes, from a lazy table or the base (whose origins are the base classes, at level 0), with the kept key
        updates of the base or of a warmed table (whose codes are kept gathered, `warm`). `ahead`: with the
        value-major histogram too (`_roll_up_ahead`)."""
        rows_, select, base_origin = self._dense_lazy
        codes, sizes, key, dense = entry
        lazy = isinstance(codes, LazyCodes)
        origin = codes.origin if lazy else base_origin   # an eager source is the base itself
        if deltas is not None:
            new = self.dense.roll_up_dense_base_lazy(codes_of(codes), origin, sizes, key, dense, changed, where,
                                                     self._flat[0], self._places, deltas[0], deltas[1], rows)
            by_value = self.dense.value_major(new[3]) if ahead else None
        else:
            levels = np.array(codes.levels if lazy else self.base[0], dtype=np.int64)
            kernel = self.dense.roll_up_dense_lazy_ahead if ahead else self.dense.roll_up_dense_lazy
            new = kernel(rows_, select, origin, sizes, key, dense, levels, changed, where, self._flat[0],
                         self._places)
            by_value = new[4] if ahead else None
        table = (LazyCodes(new[0], node, rows_, select, self.kernels),) + tuple(new[1:4])
        return (table, by_value) if ahead else table

    def _source(self, node: tuple[int, ...], hint: tuple[int, ...] | None, scan: bool = True
                ) -> tuple[tuple[int, ...], tuple]:
        """The cached specialization to roll `node` up from, with the fewest classes: the hint (what the search came
        from), then the direct specializations, else the base classes. Returns (levels, cached table). `scan`
        False: the caller knows no cached table is a specialization of `node` (the evaluator's remembered sources
        hold every table it computed), so only the warmed ones and the base are left."""
        source, best = self.base[0], self._base_entry
        if self._hubs:   # a warmed specialization (`warm`) with fewer classes than the base
            hub, entry = self._best_hub(node)
            if entry is not None and entry[1].size < best[1].size:
                source, best = hub, entry
        if not scan:
            return source, best
        if hint is not None and self.kernels is not None:
            # The compiled path's hint is already the remembered specialization with the fewest classes
            # (engine.search.evaluator): taken as it is when cached; the classes are the same from any source.
            entry = self._cache.get(hint)
            if entry is not None and entry[1].size < best[1].size and _below(hint, node):
                return hint, entry
        candidates = [hint] if hint is not None else []
        candidates += [node[:i] + (lv - 1,) + node[i + 1:] for i, lv in enumerate(node) if lv > 0]
        for candidate in candidates:
            entry = self._cache.get(candidate)
            if entry is not None and entry[1].size < best[1].size and _below(candidate, node):
                source, best = candidate, entry
        return source, best

    def prefetch(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None) -> None:
        """Start rolling up `node` on the worker thread (compiled path with a worker only; otherwise nothing), so
        that a later `classes(node)` finds it done. The table is the one `classes` would compute (classes are
        numbered by first appearance in the input, whatever specialization they come from), and it enters the
        cache only when asked for, so the search, its checks and the cache are exactly those of a run without it.
        At most PREFETCH_PENDING roll-ups wait; older ones are dropped."""
        if self._worker is None:
            return
        if self._tail:
            node = node + self._tail
            hint = None if hint is None else hint + self._tail
        if node in self._cache or node in self._pending:
            return
        source, entry = self._source(node, hint)
        changed, where = self._changes(source, node)
        if self.dense is not None:
            self._dense_rows()   # decided here, on the search's thread
        while len(self._pending) >= PREFETCH_PENDING:
            self._pending.pop(next(iter(self._pending))).cancel()   # dropped: the worker skips it if not started
        if self._lazy is not None:
            levels = np.array(source + node, dtype=np.int64)
            self._pending[node] = self._worker.submit(self._roll_up_ahead_lazy, node, entry, levels)
            return
        self._pending[node] = self._worker.submit(self._roll_up_ahead, entry, changed, where, self._bound(node), node)

    def _roll_up_ahead_lazy(self, node: tuple[int, ...], entry: tuple, levels: np.ndarray) -> tuple:
        """The worker thread's job for lazy tables (`enable_lazy`): the lazy roll-up from any source, without kept
        key updates (the main thread fills those)."""
        rows, select = self._lazy[0], self._lazy[1]
        new = self.kernels.roll_up_levels_lazy(rows, select, self._origin(entry[0]), entry[1], entry[2], levels,
                                               self._starts3, self._flat[0], self.radix, self._cards2, 0)
        return (self._lazy_table(new[0], node), new[1], new[2]), None

    def _roll_up_ahead(self, entry: tuple, changed: np.ndarray, where: np.ndarray, bound: int = -1,
                       node: tuple[int, ...] | None = None) -> tuple:
        """The worker thread's job: the roll-up and, in the dense form once the models were seen to read it
        (`_by_value`), the value-major histogram (engine.distributions.ClassView.dense_counts), so the search's
        thread does neither."""
        if self.dense is None or not self._by_value:
            return self._roll_up(entry, changed, where, bound=bound, node=node), None
        if self._dense_lazy:
            return self._roll_up_dense_lazy(entry, changed, where, node, ahead=True)
        *new, by_value = self.dense.roll_up_dense_ahead(*entry, changed, where, self._flat[0], self._places)
        return tuple(new), by_value

    def close(self) -> None:
        """Stop the worker thread (pending roll-ups are dropped) and drop the warmed tables."""
        self._pending.clear()
        self.release_hubs()
        if self._worker is not None:
            self._stop.detach()
            self._worker.close()
            self._worker = None

    def _base_deltas(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per attribute and level above 0, the key update of every base class at that level (rows filled by the
        compiled roll-up on first use, `roll_up_base`), and which rows are filled; None when they would take more
        than BASE_DELTA_BYTES or a quarter of the cache's budget. Outside the cache's bound, like the base."""
        if self._deltas is None:
            self._delta_rows, count, dtype = self._delta_layout(self.base[0])
            self._delta_rows2 = self._padded(self._delta_rows)   # as an array, for roll_up_base_levels
            m = self.base[2].size   # base classes of the cache's form
            if count * m * np.dtype(dtype).itemsize > min(BASE_DELTA_BYTES, self.budget // 4):
                self._deltas = False
            else:
                self._deltas = (np.empty((count, m), dtype=dtype), np.zeros(count, dtype=np.bool_))
        return self._deltas or None

    def _changes(self, source: tuple[int, ...], node: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The attributes whose level differs between `source` and `node`, and where the code map of each starts in
        the flat maps (`_flat_maps`): the compiled roll-up's arguments, in one pass over the levels."""
        if self._flat is None:
            self._flat_maps()
        starts = self._starts
        changed = [i for i in range(len(node)) if source[i] != node[i]]
        return (np.array(changed, dtype=np.int64),
                np.array([starts[i][source[i]][node[i]] for i in changed], dtype=np.int64))

    def _flat_maps(self) -> tuple[np.ndarray, dict[tuple[int, int, int], int]]:
        """Every code map (attribute, from level, to level) in one int64 array, and where each starts: the compiled
        roll-up takes any combination of them without building arrays per check."""
        if self._flat is None:
            parts, starts, position = [], {}, 0
            for i, cards in enumerate(self.cards):
                for lo in range(len(cards)):
                    for hi in range(lo + 1, len(cards)):
                        mapping = self._map(i, lo, hi).astype(np.int64)
                        starts[(i, lo, hi)] = position
                        parts.append(mapping)
                        position += mapping.size
            flat = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
            self._flat = (flat, starts)
            # the same starts as nested lists, [attribute][from level][to level] (-1 where there is no map)
            self._starts = [[[starts.get((i, lo, hi), -1) for hi in range(len(cards))] for lo in range(len(cards))]
                            for i, cards in enumerate(self.cards)]
            # the same as arrays padded with -1 to the highest hierarchy, and the cardinalities per attribute and
            # level (0 beyond an attribute's levels): the compiled roll-up told by level vectors reads these
            height = max((len(cards) for cards in self.cards), default=1)
            self._starts3 = np.full((len(self.cards), height, height), -1, dtype=np.int64)
            for i, rows in enumerate(self._starts):
                for lo, row in enumerate(rows):
                    self._starts3[i, lo, :len(row)] = row
            self._cards2 = self._padded(self.cards, 0)
        return self._flat

    @staticmethod
    def _padded(rows: list[list[int]], fill: int = -1) -> np.ndarray:
        """Ragged per-attribute lists as one int64 array, padded with `fill` to the longest."""
        width = max((len(row) for row in rows), default=1)
        out = np.full((len(rows), width), fill, dtype=np.int64)
        for i, row in enumerate(rows):
            out[i, :len(row)] = row
        return out

    @staticmethod
    def _size(entry: tuple) -> int:
        return sum(part.nbytes for part in entry if part is not None)

    def __len__(self) -> int:
        return len(self._cache)

    def _store(self, node: tuple[int, ...], entry: tuple, size: int = -1) -> None:
        """Cache a table (codes, sizes, key[, histogram]) within the budget; `size`: its bytes (`_size`), when the
        caller knows them."""
        if size < 0:
            size = self._size(entry)
        if size > self.budget:
            return   # larger than the whole cache: computing it again later is cheaper than breaking the bound
        while self._cache and self.nbytes + size > self.budget:
            _, old = self._cache.popitem(last=False)
            self.nbytes -= self._size(old)
        self._cache[node] = entry
        self.nbytes += size
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

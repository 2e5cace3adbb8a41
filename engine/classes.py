"""Equivalence classes per transformation, cached and rolled up (the grouping itself is engine.grouping).

A class table is (codes, counts): codes has one row per attribute and one column per class. The input of a grouping
is either the records or, much smaller, the classes of a more specific transformation (roll-up).
`combined_key`, `group`, `roll_up` and `roll_up_keyed` are re-exported from engine.grouping for existing callers.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import kernels
from .distributions import project
from .grouping import _KEY_LIMIT, combined_key, group, roll_up, roll_up_keyed

if TYPE_CHECKING:
    from .encoding import EncodedTable

__all__ = ["PREFETCH_PENDING", "ClassCache", "Evaluation", "combined_key", "group", "roll_up", "roll_up_keyed"]

PREFETCH_PENDING = 4   # roll-ups started ahead and not yet asked for, at most
BASE_DELTA_BYTES = 64 << 20   # the base classes' key updates per attribute and level (compiled path), at most


@dataclass
class Evaluation:
    """One transformation, evaluated: its classes, which of them are suppressed, and whether it is a solution.

    Lives below both the privacy models (which decide suppression) and the search (which compares evaluations), so
    neither has to import the other.
    """

    levels: tuple[int, ...]
    codes: np.ndarray               # (attributes, classes) generalized codes
    sizes: np.ndarray               # (classes,) records per class; classes in order of first appearance in the input
    suppressed: np.ndarray          # (classes,) bool
    suppressed_records: int
    solution: bool
    loss: float | None = None
    details: dict = field(default_factory=dict)   # e.g. the risk estimate of a risk-based model
    abandoned: bool = False   # evaluation stopped early: it provably cannot beat the best solution known


class ClassCache:
    """Equivalence classes per transformation, computed by rolling up the classes of a cached specialization.

    An LRU of class tables bounded in bytes: the search mostly moves one level up from what it just looked at, so the
    nearest cached specialization is usually a direct one with far fewer classes than the records. The bound holds
    at every moment (`nbytes <= budget`): the oldest tables are evicted before a new one is stored, and a table
    larger than the whole budget is not cached at all. The base classes of the table (level 0), which every roll-up
    may start from, are kept outside the bound.
    """

    DEFAULT_BUDGET_BYTES = 256 << 20

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
        self._maps: dict[tuple[int, int, int], np.ndarray] = {}
        self._cache: OrderedDict[tuple[int, ...], tuple] = OrderedDict()
        self.nbytes = 0
        self.peak_nbytes = 0
        self.budget = int(budget_bytes)
        self._last_view: tuple[tuple[int, ...], object] | None = None
        # A worker thread that rolls up ahead what the search will likely ask next (`prefetch`); the compiled
        # roll-up releases the GIL, so it runs on the other core while the search does its Python work.
        self._pending: OrderedDict[tuple[int, ...], Future] = OrderedDict()
        self._worker = None
        if self.kernels is not None and prefetch and (os.cpu_count() or 1) > 1:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="safeshare-rollup")
        self._flat: tuple[np.ndarray, dict[tuple[int, int, int], int]] | None = None
        self._deltas: tuple[np.ndarray, np.ndarray] | bool | None = None   # `_base_deltas`

    def _map(self, attribute: int, source: int, target: int) -> np.ndarray:
        key = (attribute, source, target)
        if key not in self._maps:
            self._maps[key] = self.table.attributes[attribute].roll_up(source, target)
        return self._maps[key]

    def holds(self, node: tuple[int, ...]) -> bool:
        """Whether `node`'s classes need no roll-up source: cached, or being rolled up ahead (the evaluator then skips
        its search for the best source)."""
        node = node + self._tail
        return node in self._cache or node in self._pending

    def classes(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The quasi-identifier classes of `node`: codes (attributes, classes) and sizes, in order of first
        appearance in the input."""
        if not self.sensitive:
            return self._joint(node, hint)
        view = self.view(node, hint)
        return view.codes, view.sizes

    def view(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None):
        """The classes of `node` with their sensitive-value distributions (engine.distributions.ClassView)."""
        if self._last_view is not None and self._last_view[0] == node:
            return self._last_view[1]
        codes, sizes = self._joint(node, hint)
        cards = [self.cards[i][lv] for i, lv in enumerate(node)]
        # On the compiled path (and with the fixed radix) the projection and the histograms run compiled too.
        places = self.radix if self.kernels is not None else None
        entry = self._cache.get(node + self._tail) if places is not None else None
        key = entry[2] if entry is not None and entry[0] is codes else None
        view = project(codes, sizes, self.attributes, cards, self.sensitive, places, key)
        population = getattr(self.table, "population", None)
        if population is not None:
            view.population = lambda v, levels=tuple(node): population.counts_for(levels, v)
        self._last_view = (node, view)
        return view

    def _joint(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None) -> tuple[np.ndarray, np.ndarray]:
        node = node + self._tail
        hint = None if hint is None else hint + self._tail
        cached = self._cache.get(node)
        if cached is not None:
            self._cache.move_to_end(node)
            return cached[0], cached[1]
        pending = self._pending.pop(node, None)
        # Rolled up ahead by the worker thread: the same table, stored as if computed now. One the worker has not
        # started yet is cancelled and computed here: the search never waits for a thread the OS has not scheduled.
        if pending is not None and not pending.cancel():
            new_codes, new_sizes, new_key = pending.result()
            self._store(node, new_codes, new_sizes, new_key)
            return new_codes, new_sizes
        source, codes, sizes, key = self._source(node, hint)
        if self.kernels is not None:
            if codes is self.base[1] and node == self.base[0]:
                new_codes, new_sizes, new_key = codes, sizes, key   # the base classes themselves (never written)
            else:
                changed, where = self._changes(source, node)
                deltas = self._base_deltas() if codes is self.base[1] else None
                if deltas is not None:
                    rows = np.array([self._delta_rows[i][node[i]] for i in changed.tolist()], dtype=np.int64)
                    new_codes, new_sizes, new_key, _ = self.kernels.roll_up_base(
                        codes, sizes, key, changed, where, self._flat[0], self.radix, 0, deltas[0], deltas[1], rows)
                else:
                    new_codes, new_sizes, new_key, _ = self.kernels.roll_up(codes, sizes, key, changed, where,
                                                                            self._flat[0], self.radix, 0)
            self._store(node, new_codes, new_sizes, new_key)
            return new_codes, new_sizes
        maps = [None if lo == hi else self._map(i, lo, hi) for i, (lo, hi) in enumerate(zip(source, node))]
        if key is not None:
            new_codes, new_sizes, new_key = roll_up_keyed(codes, sizes, key, maps, self.radix)
        else:
            new_codes, new_sizes = roll_up(codes, sizes, maps, [self.cards[i][lv] for i, lv in enumerate(node)])
            new_key = None
        self._store(node, new_codes, new_sizes, new_key)
        return new_codes, new_sizes

    def _source(self, node: tuple[int, ...], hint: tuple[int, ...] | None):
        """The cached specialization to roll `node` up from, with the fewest classes: the hint (what the search came
        from), then the direct specializations, else the base classes. Returns (levels, codes, sizes, key)."""
        source, codes, sizes, key = self.base
        if hint is not None and self.kernels is not None:
            # The compiled path's hint is already the remembered specialization with the fewest classes
            # (engine.search.evaluator): taken as it is when cached; the classes are the same from any source.
            entry = self._cache.get(hint)
            if entry is not None and entry[1].size < sizes.size and all(c <= x for c, x in zip(hint, node)):
                return hint, entry[0], entry[1], entry[2]
        candidates = [hint] if hint is not None else []
        candidates += [node[:i] + (lv - 1,) + node[i + 1:] for i, lv in enumerate(node) if lv > 0]
        for candidate in candidates:
            entry = self._cache.get(candidate)
            if entry is not None and entry[1].size < sizes.size and all(c <= x for c, x in zip(candidate, node)):
                source, (codes, sizes, key) = candidate, entry
        return source, codes, sizes, key

    def prefetch(self, node: tuple[int, ...], hint: tuple[int, ...] | None = None) -> None:
        """Start rolling up `node` on the worker thread (compiled path with a worker only; otherwise nothing), so
        that a later `classes(node)` finds it done. The table is the one `classes` would compute (classes are
        numbered by first appearance in the input, whatever specialization they come from), and it enters the
        cache only when asked for, so the search, its checks and the cache are exactly those of a run without it.
        At most PREFETCH_PENDING roll-ups wait; older ones are dropped."""
        if self._worker is None:
            return
        node = node + self._tail
        hint = None if hint is None else hint + self._tail
        if node in self._cache or node in self._pending:
            return
        source, codes, sizes, key = self._source(node, hint)
        changed, where = self._changes(source, node)
        while len(self._pending) >= PREFETCH_PENDING:
            self._pending.pop(next(iter(self._pending)))
        self._pending[node] = self._worker.submit(self._roll_up_job, codes, sizes, key, changed, where,
                                                  self._flat[0])

    def _roll_up_job(self, codes, sizes, key, changed, where, flat):
        new_codes, new_sizes, new_key, _ = self.kernels.roll_up(codes, sizes, key, changed, where, flat, self.radix, 0)
        return new_codes, new_sizes, new_key

    def close(self) -> None:
        """Stop the worker thread (pending roll-ups are dropped)."""
        self._pending.clear()
        if self._worker is not None:
            self._worker.shutdown(wait=True, cancel_futures=True)
            self._worker = None

    def _base_deltas(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Per attribute and level above 0, the key update of every base class at that level (rows filled by the
        compiled roll-up on first use, `roll_up_base`), and which rows are filled; None when they would take more
        than BASE_DELTA_BYTES or a quarter of the cache's budget. Outside the cache's bound, like the base."""
        if self._deltas is None:
            self._delta_rows = [[-1] * len(cards) for cards in self.cards]
            count = 0
            for i, cards in enumerate(self.cards):
                for level in range(1, len(cards)):
                    self._delta_rows[i][level] = count
                    count += 1
            m = self.base[2].size
            if count * m * 8 > min(BASE_DELTA_BYTES, self.budget // 4):
                self._deltas = False
            else:
                self._deltas = (np.empty((count, m), dtype=np.int64), np.zeros(count, dtype=np.bool_))
        return self._deltas or None

    def _changes(self, source: tuple[int, ...], node: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The attributes whose level differs between `source` and `node`, and where the code map of each starts in
        the flat maps (`_flat_maps`): the compiled roll-up's arguments, in one pass over the levels."""
        if self._flat is None:
            self._flat_maps()
        starts = self._starts
        changed, where = [], []
        for i, (lo, hi) in enumerate(zip(source, node)):
            if lo != hi:
                changed.append(i)
                where.append(starts[i][lo][hi])
        return np.array(changed, dtype=np.int64), np.array(where, dtype=np.int64)

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
        return self._flat

    @staticmethod
    def _size(codes: np.ndarray, sizes: np.ndarray, key: np.ndarray | None) -> int:
        return codes.nbytes + sizes.nbytes + (0 if key is None else key.nbytes)

    def __len__(self) -> int:
        return len(self._cache)

    def _store(self, node: tuple[int, ...], codes: np.ndarray, sizes: np.ndarray, key: np.ndarray | None) -> None:
        size = self._size(codes, sizes, key)
        if size > self.budget:
            return   # larger than the whole cache: computing it again later is cheaper than breaking the bound
        while self._cache and self.nbytes + size > self.budget:
            _, old = self._cache.popitem(last=False)
            self.nbytes -= self._size(*old)
        self._cache[node] = (codes, sizes, key)
        self.nbytes += size
        self.peak_nbytes = max(self.peak_nbytes, self.nbytes)

"""Evaluating one transformation: classes, class-level suppression, risk-based suppression, loss.

Two depths of check, because the search often needs only the first:

* `m_anonymous`: the classes and whether the records in classes below the configuration's smallest class size fit
  in the suppression limit (the property Flash2P's first phase classifies; cheap: a roll-up and a sum);
* `evaluate`: everything (class models, risk-based models in ARX's suppression order, loss).

Every transformation whose classes are computed counts once as checked.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .. import kernels
from ..classes import ClassCache, Evaluation, LazyCodes, codes_of
from ..encoding import EncodedTable
from ..privacy.configuration import PrivacyConfiguration
from ..privacy.suppression_order import SuppressionOrder
from ..quality.base import QualityModel
from .ahead_policy import AheadPolicy

Node = tuple[int, ...]
SUPPRESSED_LABEL = "*"


class Evaluator:
    SOURCES = 2048   # transformations remembered as roll-up sources (compiled path)

    def __init__(self, table: EncodedTable, configuration: PrivacyConfiguration, quality: QualityModel,
                 cache_bytes: int | None = None, compiled=kernels.default, parallel: bool = False) -> None:
        """`compiled`: engine.kernels' functions, None for the numpy reference path; by default `kernels.default()`
        decides (search() passes `kernels.for_search`'s choice for the search's size). `parallel`: roll up ahead on
        a worker thread what the search says it will likely check next (`prefetch`); results, checks and their
        count are those of the sequential run. Call `close()` when done."""
        self.table = table
        self.configuration = configuration
        self.quality = quality
        self.max_suppressed = configuration.max_suppressed(table.n)
        self.minimal_class_size = configuration.minimal_class_size
        budget = ClassCache.DEFAULT_BUDGET_BYTES if cache_bytes is None else cache_bytes
        self.cache = ClassCache(table, budget_bytes=budget, compiled=compiled, prefetch=parallel)
        self.seen: set[Node] = set()
        # The compiled per-check path (engine.kernels) when the class cache rolls up compiled; the class models'
        # decision is then compiled too when every one of them only asks for a class size (`size_only`).
        self.kernels = self.cache.kernels
        self._risk_models = configuration.risk_models   # a property that filters the models on every call
        self._class_models = configuration.class_models  # likewise
        self._single = self._class_models[0] if len(self._class_models) == 1 else None
        self._size_only = all(getattr(m, "size_only", False) for m in configuration.class_models)
        # On the compiled path the size-only decision needs no class view (sensitive-value distributions).
        self._plain = self.kernels is not None and self._size_only and not getattr(table, "sensitive", ())
        # The transformations whose classes were computed lately and their class counts (a ring of SOURCES rows):
        # the compiled path rolls up from the one of them with the fewest classes below the node checked, which may
        # be far from the search's hint (often the base classes). Any source gives the same classes in the same
        # order (engine.classes.ClassCache), so only the cost changes.
        # Their level vectors packed, a lane of 8 bits per attribute (16 or 32 for hierarchies of more levels), so
        # the compiled choice compares a word per 8 attributes (`best_source_packed`: ADULT 2,048 rows in 2 instead
        # of 7 us); `_packed` holds the last node looked up (`_levels`), for `_remember` to copy.
        d = len(table.attributes)
        height = max((a.levels for a in table.attributes), default=1)
        self._lane = 8 if height <= 1 << 7 else 16 if height <= 1 << 15 else 32
        per = 64 // self._lane
        self._high = np.uint64(sum(1 << (self._lane * k + self._lane - 1) for k in range(per)))
        self._source_words = np.zeros((self.SOURCES, -(-d // per)), dtype=np.uint64)
        self._packed = np.zeros(-(-d // per), dtype=np.uint64)
        self._source_counts = np.zeros(self.SOURCES, dtype=np.int64)
        self._sources = 0
        self._source_rows: dict[Node, int] = {}
        self._source_nodes: list[Node | None] = [None] * self.SOURCES   # the level vector of each row, as a tuple
        self._roots: list[np.ndarray] | None = None   # `_root_codes`, made when a risk model first needs them
        self._levels: Node | None = None   # the node `_packed` holds
        # Whether to roll up ahead, measured on the search (only where the class cache has a worker thread).
        self.ahead = AheadPolicy(getattr(self.cache, "_worker", None) is not None)
        # Constant per search, read once instead of per check: the Loss terms are asked of the compiled decision
        # only where they can be used (some suppression allowed, no risk model to suppress further); the LRU itself
        # (`_plain` checks look their node up there before anything else).
        self._loss_terms = self.kernels is not None and self._size_only and not self._risk_models \
            and self.max_suppressed > 0
        self._lru = self.cache._cache
        # Size-only checks without risk models read codes only for the loss of some solutions: the class cache then
        # keeps lazy tables (engine.classes.LazyCodes, one origin per class instead of d codes), and the compiled
        # decision with Loss's terms reads the kept classes' codes through their origins. Not without suppression:
        # those searches are short (ADULT k=3: 193 checks of small tables) and the level rows' fixed cost (ADULT
        # 27 x 19,502 int32, built and paged in per search) measured more than their roll-ups save (engine_bench
        # adult-k3-nosupp 8.5-9.1 -> 10.1-15 ms a search).
        self._lazy = self._plain and not self._risk_models and self.max_suppressed > 0 and self.cache.enable_lazy()

    @property
    def checked(self) -> int:
        return len(self.seen)

    def classes(self, node: Node, hint: Node | None = None) -> tuple[np.ndarray, np.ndarray]:
        """`node`'s classes (codes, sizes), counted as checked."""
        codes, sizes = self._classes(node, hint)
        return codes_of(codes), sizes

    def _classes(self, node: Node, hint: Node | None = None) -> tuple[np.ndarray | LazyCodes, np.ndarray]:
        """`classes` with a lazy table's codes as they are (engine.classes.LazyCodes)."""
        self.seen.add(node)
        if self._plain:
            entry = self._plain_entry(node, hint)
            return entry[0], entry[1]
        if self.kernels is None:
            return self.cache.classes(node, hint)
        codes, sizes = self.cache.held_classes(node, self._best_source(node, hint))
        self._remember(node, sizes.size)
        return codes, sizes

    def _plain_entry(self, node: Node, hint: Node | None, decision: tuple | None = None) -> tuple:
        """The cache's table of a size-only check on the compiled path (no sensitive tail, so the cache's keys are
        the nodes): the LRU first (a hit needs no roll-up source), then a roll-up from the remembered specialization
        with the fewest classes, straight from the cached table when it is there (`ClassCache.rolled_from`, with
        the check's `decision` in the same compiled call on lazy tables: the suppressed classes, records and Loss's
        terms then follow the table), else through the cache's miss path."""
        entry = self._lru.get(node)
        if entry is not None:
            self._lru.move_to_end(node)
        else:
            cache = self.cache
            if self._sources and node not in cache._pending and node not in cache._hubs:
                row = self._locate(node)
                if row >= 0:
                    source = self._source_nodes[row]
                    entry = cache.rolled_from(node, source, decision) or cache._missed(node, source)
                else:   # no remembered table lies below; until the ring wraps, it holds every one computed
                    entry = cache._missed(node, hint, self._sources > self.SOURCES)
            else:
                entry = cache._missed(node, hint)
        self._remember(node, entry[1].size)
        return entry

    def _best_source(self, node: Node, hint: Node | None) -> Node | None:
        """The remembered specialization of `node` with the fewest classes (compiled path), else `hint`. Not looked
        for when the cache holds `node` (cached, or rolled up ahead): no roll-up needs it then."""
        if not self._sources or self.cache.holds(node):
            return hint
        return self._remembered_source(node, hint)

    def _remembered_source(self, node: Node, hint: Node | None) -> Node | None:
        """`_best_source` once the cache is known not to hold `node`."""
        row = self._locate(node)
        return hint if row < 0 else self._source_nodes[row]

    def _locate(self, node: Node) -> int:
        """The ring's row of the remembered specialization of `node` with the fewest classes, -1 if none; leaves
        `node` packed in `_packed` (`_remember` writes the same words into the ring)."""
        self._levels = node
        return int(self.kernels.best_source_packed_held(self._source_words, self._source_counts,
                                                        min(self._sources, self.SOURCES),
                                                        np.array(node, dtype=np.int64), self._lane, self._high,
                                                        self._packed))

    def _remember(self, node: Node, count: int) -> None:
        rows = self._source_rows
        if node in rows:
            return
        row = self._sources % self.SOURCES
        if self._sources >= self.SOURCES:   # the ring is full: forget the oldest
            rows.pop(self._source_nodes[row], None)
        if self._levels is not node:
            self._levels = node
            self.kernels.pack_levels_held(np.array(node, dtype=np.int64), self._lane, self._packed)
        self._source_words[row] = self._packed
        self._source_counts[row] = count
        self._source_nodes[row] = node
        rows[node] = row
        self._sources += 1

    def prefetch(self, node: Node, hint: Node | None = None) -> None:
        """A hint that `node` will likely be checked soon: its classes may be rolled up on the worker thread. Never
        counts as a check. A search that prefetches at every check may ask `ahead` (engine.search.ahead_policy)
        first whether rolling up ahead pays on this machine now (the branch and bound does)."""
        self.cache.prefetch(node, hint if self.kernels is None else self._best_source(node, hint))

    def close(self) -> None:
        self.cache.close()

    def m_anonymous(self, node: Node, hint: Node | None = None) -> bool:
        """At most the allowed number of records lie in classes smaller than the smallest class size implied."""
        if self.minimal_class_size <= 1:
            return True   # no class size implied: nothing to compute, nothing checked
        _, sizes = self._classes(node, hint)
        if self.kernels is not None:
            return int(self.kernels.records_below_held(sizes, self.minimal_class_size)) <= self.max_suppressed
        return int(sizes[sizes < self.minimal_class_size].sum()) <= self.max_suppressed

    def evaluate(self, node: Node, hint: Node | None = None, cannot_win: Callable[[Node, float], bool] | None = None
                 ) -> Evaluation:
        """`cannot_win(node, loss)` (the search's incumbent test) lets risk-based suppression stop once a loss it is
        sure to reach already loses; the evaluation is then `abandoned`, not a solution."""
        self.seen.add(node)
        # Loss's compiled arguments: without suppression allowed (or with a risk model) the terms are never used
        arguments = self.quality.compiled_loss_arguments(node) if self._loss_terms else None
        decided = None
        if self._plain:
            decision = (self.minimal_class_size, self.max_suppressed) + arguments \
                if arguments is not None and self._lazy else None
            entry = self._plain_entry(node, hint, decision)
            codes, sizes = entry[0], entry[1]
            if len(entry) == 6:   # rolled up and decided in one call (ClassCache.rolled_from)
                decided = entry[3:]
        else:
            view = self.cache.view(node, hint if self.kernels is None else self._best_source(node, hint))
            codes, sizes = view.held_codes, view.sizes   # a lazy table not gathered (Evaluation.codes does)
            if self.kernels is not None:
                self._remember(node, sizes.size)
        blocked = False
        terms = None
        if decided is not None:
            suppressed, count, terms = decided
            count = int(count)
        elif self.kernels is not None and self._size_only:
            if arguments is not None and isinstance(codes, LazyCodes):   # the kept classes' codes via origins
                suppressed, count, terms = self.kernels.suppress_and_loss_terms_lazy(
                    codes.rows, codes.picked, codes.origin, sizes, self.minimal_class_size, self.max_suppressed,
                    *arguments)
            elif arguments is not None:   # the decision and the loss's terms in one call
                suppressed, count, terms = self.kernels.suppress_and_loss_terms(
                    codes, sizes, self.minimal_class_size, self.max_suppressed, *arguments)
            else:
                suppressed, count = self.kernels.suppress_below_held(sizes, self.minimal_class_size)
            count = int(count)
        elif self._single is not None and self.kernels is not None and (
                fused := self._single.suppression(view, self.minimal_class_size)) is not None:
            suppressed, count = fused   # the one class model's compiled decision and count (ClassModel.suppression)
            blocked = self._single.blocks_release(view)
        else:
            suppressed = sizes < self.minimal_class_size   # ARX checks the implied class size first
            for model in self._class_models:
                suppressed |= model.violating(view)
                blocked = blocked or model.blocks_release(view)
            count = int(sizes[suppressed].sum()) if self.kernels is None else int(
                self.kernels.records_in_held(sizes, suppressed))
        evaluation = Evaluation(node, codes, sizes, suppressed, count, count <= self.max_suppressed and not blocked)
        if self._risk_models:
            codes = evaluation.codes   # gathered if lazy (risk models never run with lazy tables: `_lazy`)
        for model in self._risk_models:
            if not evaluation.solution:
                break
            visible = ~evaluation.suppressed & ~self._completely_generalized(node, codes)
            order = lambda e=evaluation, v=visible: self.suppression_order(e, v)   # noqa: E731 - only if needed
            evaluation = model.enforce(evaluation, order, self.max_suppressed, visible,
                                       self._hopeless(node, codes, sizes, cannot_win))
        if evaluation.solution:
            loss = self.quality.loss_without_suppression(node) if evaluation.suppressed_records == 0 else None
            if loss is None and terms is not None and terms.size:   # no risk model: the suppression decided above
                loss = self.quality.loss_from_terms(terms)
            if loss is None:
                loss = self.quality.loss(node, self.quality.codes_to_read(evaluation), evaluation.sizes,
                                         evaluation.suppressed)
            evaluation.loss = loss
        return evaluation

    def _hopeless(self, node: Node, codes: np.ndarray, sizes: np.ndarray,
                  cannot_win: Callable[[Node, float], bool] | None) -> Callable[[np.ndarray], bool] | None:
        """A test for risk-based suppression: does suppressing these classes already cost too much to win?"""
        if cannot_win is None or not self.quality.suppression_only_adds_loss:
            return None
        return lambda suppressed: cannot_win(node, self.quality.loss(node, codes, sizes, suppressed))

    def suppression_order(self, evaluation: Evaluation, candidates: np.ndarray) -> SuppressionOrder:
        """Classes in the order risk-based suppression takes them: size, the quality model's per-class loss where it
        has one, first record (ARX's `HashGroupifyDistribution` comparator); sorted by loss only as far as
        `enforce` reads it (engine.privacy.suppression_order)."""
        index = np.flatnonzero(candidates)
        keys = self.quality.suppression_keys(evaluation.levels, evaluation.codes, evaluation.sizes, index)
        return SuppressionOrder(index, evaluation.sizes[index], keys, self.kernels)

    @property
    def _root_codes(self) -> list[np.ndarray]:
        """Per attribute and level, the code of the root label "*", or -1: a class whose every value is "*" is
        "completely generalized" and, as in ARX, hidden from risk models without counting as suppressed. Only risk
        models ask, so a search without one never compares the labels."""
        if self._roots is None:
            self._roots = [
                np.array([int(np.flatnonzero(labels == SUPPRESSED_LABEL)[0]) if (labels == SUPPRESSED_LABEL).any()
                          else -1 for labels in a.labels]) for a in self.table.attributes
            ]
        return self._roots

    def _completely_generalized(self, node: Node, codes: np.ndarray) -> np.ndarray:
        roots = [codes_[level] for codes_, level in zip(self._root_codes, node)]
        if any(root < 0 for root in roots):
            return np.zeros(codes.shape[1], dtype=bool)
        return np.all(codes == np.array(roots)[:, None], axis=0)

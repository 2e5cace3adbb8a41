"""Globally optimal full-domain generalization with record suppression: best-first branch and bound.

With suppression the quality of a transformation is not monotone in the lattice (Kohlmayer et al. 2015), but each
quality model's lower bound (loss from generalization alone) is. The search therefore pops transformations in order of
that bound, evaluates each (classes, violating classes, suppression, loss), and stops as soon as the smallest bound
left in the queue is not below the best loss found: every unseen transformation is a generalization of something in
the queue, so none can be better. That proves the optimum while evaluating only transformations whose bound is below
it. Two predictive properties are stored as antichains (engine.antichain): transformations pruned by the bound (with
all their generalizations), and, for monotone privacy models, transformations that exceed the suppression limit (with
all their specializations).

Ties are broken deterministically: the first transformation reaching the best loss in queue order wins, and the queue
is ordered by (bound, sum of levels, level vector), so among equally good transformations the one with the smaller
bound, then the fewer generalization steps, then the lexicographically smaller level vector is returned.
"""
from __future__ import annotations

import heapq
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .antichain import DownwardAntichain, UpwardAntichain
from .classes import roll_up
from .encoding import EncodedTable
from .lattice import Lattice
from .privacy.base import ClassPrivacyModel
from .quality.base import QualityModel

Node = tuple[int, ...]


@dataclass
class Evaluation:
    levels: Node
    codes: np.ndarray
    sizes: np.ndarray
    suppressed: np.ndarray          # per class
    suppressed_records: int
    solution: bool
    loss: float | None = None
    details: dict = field(default_factory=dict)   # e.g. the risk estimate of a table-level model


@dataclass
class SearchResult:
    best: Evaluation | None
    checked: int
    optimal: bool
    seconds: float
    lattice_size: int
    pruned_by_bound: int
    pruned_by_privacy: int
    risk_evaluations: int = 0   # calls of a table-level risk model (population uniqueness), for benchmarks


class ClassCache:
    """Equivalence classes per transformation, computed by rolling up the classes of a cached specialization."""

    def __init__(self, table: EncodedTable, budget_cells: int = 40_000_000) -> None:
        self.table = table
        self.cards = [[a.cardinality(lv) for lv in range(a.levels)] for a in table.attributes]
        bottom = tuple(0 for _ in table.attributes)
        codes, sizes, _ = table.base_classes()
        self.base = (bottom, codes, sizes)
        self._maps: dict[tuple[int, int, int], np.ndarray] = {}
        self._cache: OrderedDict[Node, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._cells = 0
        self.budget = budget_cells

    def _map(self, attribute: int, source: int, target: int) -> np.ndarray:
        key = (attribute, source, target)
        if key not in self._maps:
            self._maps[key] = self.table.attributes[attribute].roll_up(source, target)
        return self._maps[key]

    def classes(self, node: Node, hint: Node | None = None) -> tuple[np.ndarray, np.ndarray]:
        cached = self._cache.get(node)
        if cached is not None:
            self._cache.move_to_end(node)
            return cached
        source, codes, sizes = self.base
        # Roll up from the cached direct specialization with the fewest classes (the hint is usually one of them).
        candidates = [hint] if hint is not None else []
        candidates += [node[:i] + (lv - 1,) + node[i + 1:] for i, lv in enumerate(node) if lv > 0]
        for candidate in candidates:
            entry = self._cache.get(candidate)
            if entry is not None and entry[1].size < sizes.size:
                source, (codes, sizes) = candidate, entry
        maps = [None if lo == hi else self._map(i, lo, hi) for i, (lo, hi) in enumerate(zip(source, node))]
        new_codes, new_sizes = roll_up(codes, sizes, maps, [self.cards[i][lv] for i, lv in enumerate(node)])
        self._store(node, new_codes, new_sizes)
        return new_codes, new_sizes

    def _store(self, node: Node, codes: np.ndarray, sizes: np.ndarray) -> None:
        self._cache[node] = (codes, sizes)
        self._cells += codes.size + sizes.size
        while self._cells > self.budget and len(self._cache) > 1:
            _, (old_codes, old_sizes) = self._cache.popitem(last=False)
            self._cells -= old_codes.size + old_sizes.size


TableModel = Callable[[Evaluation, QualityModel, int], Evaluation]
"""A table-level privacy model (e.g. population uniqueness): given an evaluation after class-level suppression and
the largest number of suppressed records allowed, return it with further suppression and `solution` decided."""


class Evaluator:
    """Evaluates one transformation: classes, class-level violations, table-level models, loss."""

    def __init__(self, table: EncodedTable, privacy: Sequence[ClassPrivacyModel], quality: QualityModel,
                 suppression_limit: float, table_models: Sequence[TableModel] = ()) -> None:
        self.table = table
        self.privacy = list(privacy)
        self.table_models = list(table_models)
        self.quality = quality
        self.max_suppressed = int(math.floor(suppression_limit * table.n + 1e-9))
        self.cache = ClassCache(table)

    def evaluate(self, node: Node, hint: Node | None = None) -> Evaluation:
        codes, sizes = self.cache.classes(node, hint)
        suppressed = np.zeros(sizes.size, dtype=bool)
        for model in self.privacy:
            suppressed |= model.violating(sizes)
        count = int(sizes[suppressed].sum())
        evaluation = Evaluation(node, codes, sizes, suppressed, count, count <= self.max_suppressed)
        for model in self.table_models:
            if not evaluation.solution:
                break
            evaluation = model(evaluation, self.quality, self.max_suppressed)
        if evaluation.solution:
            evaluation.loss = self.quality.loss(node, evaluation.codes, evaluation.sizes, evaluation.suppressed)
        return evaluation


def search(table: EncodedTable, privacy: Sequence[ClassPrivacyModel], quality: QualityModel,
           suppression_limit: float, lattice: Lattice | None = None, table_models: Sequence[TableModel] = (),
           time_limit: float | None = None, progress: bool | None = False) -> SearchResult:
    """Find the transformation of least loss that satisfies every privacy model within the suppression limit.

    Returns the proven optimum when the search completes (`optimal=True`), or the best solution found when the time
    limit ends it first. `best` is None when no transformation is a solution.
    """
    started = time.perf_counter()
    if lattice is None:
        lattice = Lattice(tuple(a.min_level for a in table.attributes), tuple(a.max_level for a in table.attributes))
    evaluator = Evaluator(table, privacy, quality, suppression_limit, table_models)
    monotone = bool(privacy) and all(m.monotone for m in privacy) and not table_models
    failing = DownwardAntichain(lattice.top)      # these and all specializations exceed the suppression limit
    pruned = UpwardAntichain(len(lattice.top))    # these and all generalizations cannot beat the best solution

    bar = None
    if progress is not False:
        from tqdm import tqdm

        bar = tqdm(total=lattice.size, desc="transformations", unit="tr", disable=None if progress is None else False,
                   leave=False)

    best: Evaluation | None = None
    best_loss = math.inf
    checked = pruned_bound = pruned_privacy = 0
    bottom = lattice.bottom
    queue: list[tuple[float, int, Node, Node | None]] = [(quality.lower_bound(bottom), sum(bottom), bottom, None)]
    seen = {lattice.index(bottom)}
    optimal = True
    while queue:
        bound, _, node, parent = heapq.heappop(queue)
        if bound >= best_loss:
            break  # every transformation left is bounded below by `bound`
        if time_limit is not None and time.perf_counter() - started > time_limit:
            optimal = False
            break
        class_bound = 0.0
        if monotone and failing.covers(node):
            pruned_privacy += 1
        else:
            evaluation = evaluator.evaluate(node, parent)
            checked += 1
            if bar is not None:
                bar.update(1)
            class_bound = quality.lower_bound_from_classes(evaluation.sizes)
            if evaluation.solution and evaluation.loss is not None and evaluation.loss < best_loss:
                best, best_loss = evaluation, evaluation.loss
            elif not evaluation.solution and monotone:
                failing.add(node)
        for successor in lattice.successors(node):
            index = lattice.index(successor)
            if index in seen:
                continue
            seen.add(index)
            key = max(quality.lower_bound(successor), class_bound)
            if key >= best_loss or pruned.covers(successor):
                pruned.add(successor)
                pruned_bound += 1
                continue
            heapq.heappush(queue, (key, sum(successor), successor, node))
    if bar is not None:
        bar.close()
    risk_evaluations = sum(int(getattr(model, "evaluations", 0)) for model in table_models)
    return SearchResult(best, checked, optimal, time.perf_counter() - started, lattice.size, pruned_bound,
                        pruned_privacy, risk_evaluations)

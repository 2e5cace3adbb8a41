"""Flash2P's second phase top-down, pruning with a suppression floor (Non-Uniform Entropy under k-anonymity alone).

Why: Non-Uniform Entropy's only level bound is its generalization term, which ignores suppression; low in the
lattice, where most records are suppressed, the real loss is far above it, so the best-first branch and bound checks
every transformation whose generalization term is below the optimum (CUP k = 5: 14,098 of 45,000; ARX 14,385).

The loss of x is mean_a (G_a(x) + S_a(x)): a generalization term that only rises with the levels and a suppression
term S_a that, when suppression removes exactly the classes below a minimal size, only falls
(`NonUniformEntropy.suppression_terms` proves it): for every generalization y of x, S_a(x) >= S_a(y). So once y is
evaluated, every specialization x has loss(x) >= mean_a (G_a(x) + max over evaluated y >= x of S_a(y)) - a margin for
rounding. Sweeping the admissible region (the transformations the first phase classified as m-anonymous) from the
top down, rank by rank, every transformation is either evaluated or shown unable to beat the incumbent, by this bound
or by its level bound; the incumbent only improves, so a transformation ruled out once stays ruled out. The optimum and
its tie-break (engine.search.common) are the branch and bound's; only the transformations checked differ.

The floor is one array of lattice size x attributes, so the sweep runs where the lattice is explicit and that array
is small (`MAX_FLOOR_ENTRIES`); elsewhere Flash2P keeps its branch and bound.
"""
from __future__ import annotations

from bisect import bisect_left

import numpy as np

from ..lattice import Lattice
from .common import Deadline, Incumbent, Progress
from .evaluator import Evaluator

Node = tuple[int, ...]
MAX_FLOOR_ENTRIES = 1 << 22     # transformations x attributes of the floor array (32 MiB of float64)
MARGIN = 1e-12                  # the bound is lowered by this (relative) so that rounding never prunes a tie
# Roll up common specializations of the rank's candidates first (`_Hubs`): off, since the base's roll-ups with
# their kept key updates got cheap enough that warming the hubs costs more than reading the hubs' fewer classes
# saves (s33, search CPU alternated in one process: ADULT k=5 entropy 0.178 s without, 0.200 s with; FARS
# k=5 entropy 0.116 / 0.130 s; ADULT k=2 2 % and FARS k=2 10 % equal; CUP never qualified for hubs)
HUBS = False
HUB_MIN_CANDIDATES = 256        # admissible transformations below which hubs are not tried (their probes cost more)
HUB_USEFUL = 0.9                # an attribute orders hubs when its top level alone leaves at most this share of classes
HUB_MIN_SHARE = 4               # candidates of a rank that must lie above a hub before it is rolled up
PREFETCH_MIN_CLASSES = 16384    # base classes below which a roll-up is too short to hand to the worker thread


def applies(evaluator: Evaluator, flags: np.ndarray | None) -> bool:
    """The sweep is exact and affordable: suppression is only 'class below the minimal size' (every class model
    decides by size alone, no risk-based model), the quality model has suppression terms, the lattice is explicit
    and the floor array small."""
    configuration = evaluator.configuration
    return (flags is not None and hasattr(evaluator.quality, "suppression_terms")
            and not configuration.risk_models
            and all(getattr(model, "size_only", False) for model in configuration.class_models)
            and flags.size * flags.ndim <= MAX_FLOOR_ENTRIES)


def _generalization_table(quality, lattice: Lattice) -> list[np.ndarray]:
    """Per attribute, its normalized generalization term at each level of the lattice (index 0 = its lower level).

    An attribute's term depends on its own level only (`generalization_terms` is per attribute), so one call per
    level height serves every attribute: the level vector with each attribute at that height, clipped to its range
    (FARS: 6 calls instead of 30, 0.4 ms a search)."""
    lower, upper = tuple(lattice.lower), tuple(lattice.upper)
    columns = [[] for _ in upper]
    for height in range(min(lower, default=0), max(upper, default=-1) + 1):
        terms = quality.generalization_terms(tuple(min(max(height, lo), hi) for lo, hi in zip(lower, upper)))
        for axis, (lo, hi) in enumerate(zip(lower, upper)):
            if lo <= height <= hi:
                columns[axis].append(terms[axis])
    return [np.array(column) for column in columns]


def floor_sweep(evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                progress: Progress, admissible: np.ndarray) -> dict:
    """Evaluate the admissible transformations (a boolean array over the lattice, indexed from its lower levels)
    top-down, skipping those the level bound or the suppression floor rules out; returns counters.

    Within a rank the floor of the rank's transformations is fixed (an evaluation raises the floor of its
    specializations only, and no other transformation of its rank is one), so the floor bounds of a rank are
    computed at once when the sweep reaches it, and the transformations the sweep will likely check next are known:
    their classes are rolled up ahead on the cache's worker thread (`_Ahead`), which never changes what is checked."""
    quality = evaluator.quality
    lower = np.asarray(lattice.lower, dtype=np.int64)
    shape = admissible.shape
    floor = np.zeros(shape + (len(shape),))
    points = np.argwhere(admissible)
    counters = {"pruned_by_bound": 0, "pruned_by_floor": 0, "complete": True}
    if not points.size:
        return counters
    # The level bound of every admissible transformation at once: the mean of the per-attribute generalization
    # terms, lowered by the margin (the sum may round differently from `lower_bound`'s mean).
    per_attribute = _generalization_table(quality, lattice)
    d = len(shape)
    level_bounds = sum(per_attribute[axis][points[:, axis]] for axis in range(d)) / d
    level_bounds = level_bounds - MARGIN * (1.0 + np.abs(level_bounds))
    # rank by rank from the top; within a rank, the smallest level bound first (good solutions early)
    ranks = points.sum(axis=1)
    order = np.lexsort((level_bounds, -ranks))
    starts = np.flatnonzero(np.diff(ranks[order])) + 1
    nodes = points + lower
    cache = evaluator.cache
    hubs = None
    if HUBS and cache.kernels is not None and len(points) >= HUB_MIN_CANDIDATES:
        hubs = _Hubs(cache, lattice)
        if not hubs.order and not any(hubs.lower):   # no attribute merges enough classes alone (CUP): no hubs
            hubs = None
    ahead = _Ahead(evaluator, hubs) if cache.prefetches and cache.base[2].size >= PREFETCH_MIN_CLASSES else None
    # On the compiled path the floor is carried down rank by rank (`_Carried`); the reference raises the down-set
    # of each evaluated transformation at once. The same maxima of the same floats either way.
    # (a bit per attribute in `_Carried`'s steps: at most 62 attributes)
    flat = np.ravel_multi_index(tuple(points.T), shape) if evaluator.kernels is not None and d <= 62 else None
    carried = _Carried(floor, points, flat, ranks) if flat is not None else None
    for chunk in np.split(order, starts):
        if incumbent.best is not None:   # a level bound above the incumbent's loss rules out at once (no tie)
            above = level_bounds[chunk] > incumbent.loss
            counters["pruned_by_bound"] += int(np.count_nonzero(above))
            chunk = chunk[~above]
        if not chunk.size:
            continue
        bounds = level_bounds[chunk]
        if carried is not None:
            carried.reach(int(ranks[chunk[0]]))
        floors = _floor_bounds(per_attribute, floor, points[chunk])
        chunk_nodes = nodes[chunk].tolist()
        if ahead is not None:
            ahead.rank(chunk_nodes, bounds, floors)
        if hubs is not None:
            hubs.rank(nodes[chunk][_candidates(bounds, floors, incumbent.loss)])
        positions, level_list, floor_list = chunk.tolist(), bounds.tolist(), floors.tolist()
        j, size, tested_loss, tested = 0, len(positions), None, []
        while j < size:
            # The transformations the incumbent rules out by a strict inequality are counted in bulk, exactly as
            # the tests below would count them; only the others (and ties, whose tie-break is rules_out's) are
            # looked at one by one.
            loss = incumbent.loss
            if loss != tested_loss:
                tested_loss = loss
                tested = np.flatnonzero((bounds == loss) | _candidates(bounds, floors, loss)).tolist()
            at = bisect_left(tested, j)   # a list and bisect: no numpy call per transformation looked at
            following = tested[at] if at < len(tested) else size
            if following > j:
                by_bound = int(np.count_nonzero(bounds[j:following] > loss))
                counters["pruned_by_bound"] += by_bound
                counters["pruned_by_floor"] += following - j - by_bound
                j = following
                if j >= size:
                    break
            position, level_bound, floor_bound = positions[j], level_list[j], floor_list[j]
            node = tuple(chunk_nodes[j])
            j += 1
            if incumbent.rules_out(node, level_bound):
                counters["pruned_by_bound"] += 1
                continue
            if floor_bound > level_bound and incumbent.rules_out(node, floor_bound):
                counters["pruned_by_floor"] += 1
                continue
            if deadline.passed():
                counters["complete"] = False
                return _total(counters)
            if ahead is not None and evaluator.ahead.tick():   # rolling up ahead pays now (measured)
                ahead.following(j - 1, incumbent.loss)
            if hubs is not None:
                hubs.prepare(node)
            before = evaluator.checked
            evaluation = evaluator.evaluate(node, None, incumbent.rules_out)
            progress.update(evaluator.checked - before)
            incumbent.offer(evaluation)
            if evaluation.suppressed_records:
                terms = quality.suppression_terms(node, quality.codes_to_read(evaluation), evaluation.sizes,
                                                  evaluation.suppressed)
                if carried is not None:
                    carried.raise_row(int(flat[position]), terms)
                else:
                    below = tuple(slice(0, v + 1) for v in points[position].tolist())
                    np.maximum(floor[below], terms, out=floor[below])
    if hubs is not None:
        cache.release_hubs()
    return _total(counters)


def _candidates(bounds: np.ndarray, floors: np.ndarray, loss: float) -> np.ndarray:
    """Which transformations of a rank the incumbent of this loss leaves to check, ties kept (a superset of those
    the sweep checks: the incumbent only improves, and the floors of a rank do not change within it)."""
    return (bounds <= loss) & ((floors <= bounds) | (floors <= loss))


def _floor_bounds(per_attribute: list[np.ndarray], floor: np.ndarray, points: np.ndarray) -> np.ndarray:
    """The floor bound of each of `points` (one rank): mean over attributes of (generalization term + floor), summed
    attribute by attribute in order as the per-transformation Python sum did (the same additions, so the same
    bits), lowered by the margin."""
    rows = floor[tuple(points.T)]
    total = per_attribute[0][points[:, 0]] + rows[:, 0]
    for axis in range(1, points.shape[1]):
        total = total + (per_attribute[axis][points[:, axis]] + rows[:, axis])
    total = total / points.shape[1]
    return total - MARGIN * (1.0 + np.abs(total))


class _Carried:
    """The floor on the compiled path: an evaluation raises its own row only, and the rows of a rank take the
    largest of their direct generalizations' rows (engine._flash_numba.floor_down) when the sweep reaches it. Top
    down, a row then holds the largest suppression terms over every evaluated generalization, as the reference's
    down-set updates give, but for one pass over the admissible rows in all instead of one over the down-set (most
    of the lattice high up) at every evaluation: ADULT's 775 updates took 25 ms. Within a rank no row changes
    another of the rank (a generalization of x of x's rank is x), so each rank is carried down once, before its
    floors are read.

    Only the admissible transformations are carried, and that is exact for them: between an admissible x and an
    evaluated y above it every z (x <= z <= y) is admissible too, since z is above x (so has the monotone property
    of the first phase) and is not tagged insufficient (that tag covers every generalization, y included, and y
    was evaluated); so x's largest is reached through admissible direct generalizations. Rows outside the
    admissible set are never read (the sweep reads the floor of admissible transformations only)."""

    def __init__(self, floor: np.ndarray, points: np.ndarray, flat: np.ndarray, ranks: np.ndarray) -> None:
        """`points`: the admissible transformations (levels from the lower ones), `flat` their flat indices and
        `ranks` their sums of levels."""
        from .. import _flash_numba

        shape = floor.shape[:-1]
        self.kernel = _flash_numba.floor_down
        self.rows = floor.reshape(-1, floor.shape[-1])   # a view: the floor's rows by flat (C-order) index
        heights = np.asarray(shape, dtype=np.int64)
        strides = np.ones(len(shape), dtype=np.int64)
        for axis in range(len(shape) - 2, -1, -1):
            strides[axis] = strides[axis + 1] * heights[axis + 1]
        self.strides = strides
        by_rank = np.argsort(ranks, kind="stable")
        self.indices = flat[by_rank].astype(np.int64)
        # per admissible transformation, a bit per attribute that can still be generalized
        steps = np.zeros(len(points), dtype=np.int64)
        for axis in range(len(shape)):
            steps |= (points[by_rank, axis] < heights[axis] - 1).astype(np.int64) << axis
        self.steps = steps
        top = int(heights.sum() - len(shape))
        self.starts = np.concatenate(([0], np.cumsum(np.bincount(ranks, minlength=top + 1)))).astype(np.int64)
        self.done = top        # ranks from this one up are carried (the top has nothing above it)
        self.raised = False    # no row raised yet: every row is 0, nothing to carry
        self.waiting: list[tuple[int, np.ndarray]] = []   # rows raised since the last rank was reached
        self.live = np.zeros(len(self.rows), dtype=np.bool_)   # rows raised or below one (the others are 0)

    def reach(self, rank: int) -> None:
        """Carry the floor down to `rank` (the ranks above it are done)."""
        if rank < self.done:
            self._apply()
            if self.raised:
                self.kernel(self.rows, self.live, self.indices, self.steps, self.starts, self.done - 1, rank,
                            self.strides)
            self.done = rank

    def raise_row(self, index: int, terms: np.ndarray) -> None:
        """An evaluated transformation (flat index, of the rank reached last) and its suppression terms: applied
        when the next rank is reached (no row of this rank is read again), all of a rank's in one numpy call."""
        self.waiting.append((index, terms))
        self.raised = True

    def _apply(self) -> None:
        if self.waiting:
            indices = np.array([index for index, _ in self.waiting], dtype=np.int64)   # distinct: one per check
            self.rows[indices] = np.maximum(self.rows[indices], np.stack([terms for _, terms in self.waiting]))
            self.live[indices] = True
            self.waiting = []


class _Ahead:
    """Rolls up on the cache's worker thread the classes of the next transformations of the rank that the current
    incumbent does not rule out (`LOOKAHEAD` of them), while the search's thread evaluates the current one. A guess
    only: one later ruled out is never asked for (the cache drops it); the checks are the sweep's either way. Only
    at checks where the evaluator's policy (engine.search.ahead_policy) finds that rolling up ahead pays on this
    machine now: on a loaded one the two threads' GIL hand-offs cost more than the roll-ups."""

    LOOKAHEAD = 3

    def __init__(self, evaluator: Evaluator, hubs: "_Hubs | None") -> None:
        self.evaluator = evaluator
        self.hubs = hubs
        self.nodes: list[list[int]] = []
        self.maybe = np.zeros(0, dtype=np.int64)
        self.loss = None
        self.sent = -1   # index (in the rank) of the last transformation handed to the worker

    def rank(self, nodes: list[list[int]], bounds: np.ndarray, floors: np.ndarray) -> None:
        self.nodes, self.bounds, self.floors = nodes, bounds, floors
        self.loss = None
        self.sent = -1

    def following(self, current: int, loss: float) -> None:
        """Before `current` (an index in the rank) is evaluated: hand the worker the next candidates after it."""
        if loss != self.loss:   # the incumbent improved: fewer candidates (ties kept: the test is strict)
            self.loss = loss
            self.maybe = np.flatnonzero(_candidates(self.bounds, self.floors, loss))
        maybe = self.maybe
        first = int(np.searchsorted(maybe, max(current, self.sent) + 1))
        last = int(np.searchsorted(maybe, current + 1)) + self.LOOKAHEAD
        for index in maybe[first:last].tolist():
            node = tuple(self.nodes[index])
            if self.hubs is not None:
                self.hubs.prepare(node)
            self.evaluator.prefetch(node)
            self.sent = index


class _Hubs:
    """Common specializations (hubs) of the transformations a rank will check, rolled up once from the base and kept
    by the class cache (`ClassCache.warm`), so that each of those transformations rolls up from a hub's far fewer
    classes instead of the base's (the top-down sweep has no specialization of what it checks cached otherwise).

    The hubs form a prefix tree over the attributes whose generalization merges the most classes (`order`: each
    attribute's top level alone must leave at most HUB_USEFUL of the base classes, by a sampled estimate): a
    transformation x's hub of depth k keeps x's levels of the first k attributes of the order and the lattice's
    lower levels elsewhere, so it lies below x and below every transformation that shares those k levels. A hub
    is rolled up (from the deepest hub above it, so cheaply) only when HUB_MIN_SHARE candidates of the rank share
    it, at the first of them checked. Classes are the same from any source, so checks and results never change."""

    def __init__(self, cache, lattice: Lattice) -> None:
        self.cache = cache
        self.lower = tuple(int(v) for v in lattice.lower)
        upper = tuple(int(v) for v in lattice.upper)
        if any(self.lower):   # every transformation lies above the lattice's bottom: the best hub of all
            cache.warm(self.lower)
        # How many base classes each attribute merges away alone at its top level, estimated from a sample of the
        # base classes (ClassCache.merged_share: far cheaper than a roll-up, close for small shares and larger
        # than the truth for large ones, so the order and the cut at HUB_USEFUL are kept)
        merged = []
        for axis, (lo, hi) in enumerate(zip(self.lower, upper)):
            share = cache.merged_share(axis, hi) if hi > lo else None
            if share is not None and share >= 1.0 - HUB_USEFUL:
                merged.append((-share, axis))
        self.order = [axis for _, axis in sorted(merged)]
        self.strides = []
        stride = 1
        for axis in self.order:
            self.strides.append(stride)
            stride *= upper[axis] - self.lower[axis] + 1
        self.shares: list[dict[int, int]] = []

    def rank(self, candidates: np.ndarray) -> None:
        """The candidates of the rank about to be swept (level vectors): how many share each prefix."""
        self.shares = []
        keys = np.zeros(len(candidates), dtype=np.int64)
        for axis, stride in zip(self.order, self.strides):
            keys = keys + (candidates[:, axis] - self.lower[axis]) * stride
            values, counts = np.unique(keys, return_counts=True)
            self.shares.append(dict(zip(values.tolist(), counts.tolist())))

    def prepare(self, node: Node) -> None:
        """Before `node`'s classes are rolled up: make sure its hubs shared by enough candidates are warm (a hub
        the cache already keeps is left alone, as `warm` would: no call for it)."""
        hub = list(self.lower)
        kept, tail = self.cache._hubs, self.cache._tail
        key = 0
        for depth, (axis, stride) in enumerate(zip(self.order, self.strides)):
            level = node[axis]
            key += (level - self.lower[axis]) * stride
            if level == self.lower[axis]:
                continue   # the same hub as the depth before
            if depth >= len(self.shares) or self.shares[depth].get(key, 0) < HUB_MIN_SHARE:
                return
            hub[axis] = level
            levels = tuple(hub)
            if levels == node:
                return
            if levels + tail not in kept:
                self.cache.warm(levels)


def _total(counters: dict) -> dict:
    counters["pruned_by_bound"] += counters["pruned_by_floor"]
    return counters

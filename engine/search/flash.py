"""Flash (Kohlmayer et al. 2012; with implicit tags, Prasser et al. 2016) and Flash2P (Kohlmayer et al. 2015).

Flash walks the lattice level by level. From each transformation not yet classified it builds a path upwards,
greedily taking the first unclassified successor in the strategy's order, and binary-searches the path for the
lowest transformation that has the monotone property. A check that finds the property tags every generalization
with it, one that does not tags every specialization with its absence, so one check classifies many
transformations; successors of failing path nodes are queued and searched the same way (ARX's `FLASHAlgorithmImpl`:
`binarySearch`, `findPath`, `checkPath`). The strategy orders by relative rank, then mean relative level, then the
share of distinct values lost (ARX's `FLASHStrategy`), then the reversed level vector for a deterministic order
(it matches ARX's check counts on the benchmark tables more closely than the plain one).

* Monotone problem (privacy and quality both monotone: no suppression, or models monotone with it and a quality
  model that is too): the binary search classifies the privacy models themselves; the optimum is the best checked
  transformation that satisfies them, since generalizing a solution never improves a monotone quality.
* Flash2P, generalization plus suppression (the privacy models imply a monotone property: all of them monotone
  under the limit, or at least a minimal class size m, whose violation is monotone even with suppression):
  phase 1 is the binary search on that property; phase 2 evaluates the transformations that have it. The paper's
  phase 2 is a depth-first search over that region; ours visits it best-first by the quality bound (the loop of
  engine.search.bnb restricted to the region), which evaluates exactly the region's transformations whose bound can
  still beat the optimum, never more than a depth-first search with the same bound.

Both phases prune by the quality bound (ARX's `prune`/`skip`): once a solution is known, a transformation whose
bound cannot beat it is tagged "insufficient quality" with all its generalizations and never checked.

Where the tags are explicit and the strategy's keys are precomputed as ranks (every lattice of the benchmarks), the
first phase runs on flat indices (`FlashSearch._sweep`): the same checks, tags and counters in the same order as the
per-tuple methods, which stay for the implicit tags and for shifted or very large lattices, at about a third less
Python per check (tests/engine/test_flash_lean_sweep.py compares the two transformation by transformation). On the
compiled path (engine._flash_numba) that sweep reads each index's rank-sorted successors and levels from one table,
tags with compiled loops over the flat tag rows, and walks `find_path` and the pushes after a failing check in numba,
returning to Python for checks only (tests/engine/test_flash_walk_*.py compare it with the Python sweep).
"""
from __future__ import annotations

import heapq
import sys
from functools import reduce
from itertools import product
from operator import add, getitem, mul, neg

import numpy as np

from ..lattice import Lattice
from ..privacy.configuration import Monotonicity
from .bnb import branch_and_bound
from .common import Deadline, Incumbent, Progress
from .evaluator import Evaluator
from .floor import applies as floor_applies, floor_sweep
from .tags import ExplicitTags, make_tag_rows

Node = tuple[int, ...]


# Floats added one after the other from 0, as the ranks' numpy loop adds them: Python's sum up to 3.11; from 3.12
# sum adds floats with compensation, so an explicit left fold.
_float_sum = sum if sys.version_info < (3, 12) else (lambda values: reduce(add, values, 0))
RANK_LIMIT = 1 << 18   # transformations: up to this lattice size the strategy's keys are precomputed as ranks
FAST_SWEEP = True      # explicit tags and ranks: the first phase on flat indices (`FlashSearch._sweep`)
TABLE_LIMIT = 1 << 22  # int32 entries: up to this the compiled path precomputes the sweep's successor and level rows
RANKS_REMEMBERED = 4   # strategies whose ranks (and sweep tables) the process keeps for its next searches
_REMEMBERED_RANKS: dict[tuple, dict] = {}


def _dense_rank(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Each value's rank among the distinct values (equal values share one, as a sort key compares them), and how
    many distinct values there are."""
    order = np.argsort(values)
    ordered = values[order]
    step = np.empty(values.size, dtype=np.int64)
    if values.size:
        step[0] = 0
        np.not_equal(ordered[1:], ordered[:-1], out=step[1:], casting="unsafe")
    ranks = np.empty(values.size, dtype=np.int64)
    ranks[order] = np.cumsum(step)
    return ranks, (int(ranks.max()) + 1 if values.size else 0)


def _compiled_dense_rank(compiled, values: np.ndarray) -> tuple[np.ndarray, int]:
    """`_dense_rank`, sorting only the distinct values where they are at most half of all (found with the compiled
    hash table, engine._flash_numba.distinct_values); else `_dense_rank` itself, whose one argsort is then cheaper."""
    found, which = compiled.distinct_values(values)
    if found.size > values.size // 2:
        return _dense_rank(values)
    rank_of = np.empty(found.size, dtype=np.int64)
    rank_of[np.argsort(found)] = np.arange(found.size, dtype=np.int64)   # distinct values: no ties to order
    return rank_of[which], int(found.size)


class Strategy:
    """ARX's FLASHStrategy as a sort key, plus the negated level vector to break ties.

    On a lattice of at most RANK_LIMIT transformations whose lower levels are all 0 (every Flash lattice of the
    benchmarks), the key of every transformation is computed once with numpy, in the same floating-point operations
    in the same order, and the keys' order is stored as one integer rank per transformation: `key` is then an array
    read, and comparing ranks is comparing the keys (they are unique, the level vector breaks ties)."""

    def __init__(self, evaluator: Evaluator, lattice: Lattice) -> None:
        attributes = evaluator.table.attributes
        self.lower = lattice.lower
        self.lower_sum = sum(lattice.lower)
        self.max_rank = max(sum(lattice.upper) - sum(lattice.lower), 1)
        self.tops = [max(hi, 1) for hi in lattice.upper]
        self.distinct = [[a.cardinality(lv) / a.cardinality(0) for lv in range(a.levels)] for a in attributes]
        # level / top per attribute and level, the same floats the key sums (computed once, not per key)
        self.relative = [[level / top for level in range(a.levels)] for a, top in zip(attributes, self.tops)]
        self.d = len(attributes)
        self._keys: dict[Node, tuple] = {}
        # the keys of the whole lattice in one compiled pass where the search runs the compiled path
        self.compiled = getattr(evaluator, "kernels", None) is not None and self.d > 0
        self.ranks = self._remembered_ranks(lattice) if not any(lattice.lower) and lattice.size <= RANK_LIMIT \
            else None
        if self.ranks is not None:
            self.key = self.ranks.item   # a Python int from the level vector, without a numpy scalar

    def _ranks_key(self, lattice: Lattice) -> tuple:
        """Everything `_ranks` reads: the lattice's shape, the floats it sums per attribute and level, and the
        path (compiled or numpy; both give the same ranks, but each is kept as its own)."""
        shape = tuple(hi + 1 for hi in lattice.upper)
        return (shape, self.compiled, tuple(tuple(r[:h]) for r, h in zip(self.relative, shape)),
                tuple(tuple(c[:h]) for c, h in zip(self.distinct, shape)))

    def _remembered_ranks(self, lattice: Lattice) -> np.ndarray:
        """`_ranks`, remembered for the process (RANKS_REMEMBERED keys, the latest kept): a warm run of the same
        policy (same lattice, same cardinalities per level) would compute the same ranks again (ADULT: 1 ms of a
        12 ms search). The arrays are shared and never written (`order`, `rank_starts` and the sweep's tables
        are read only)."""
        key = self._ranks_key(lattice)
        found = _REMEMBERED_RANKS.get(key)
        if found is None:
            ranks = self._ranks(lattice)
            found = _REMEMBERED_RANKS[key] = {"ranks": ranks, "order": self.order, "starts": self.rank_starts}
            while len(_REMEMBERED_RANKS) > RANKS_REMEMBERED:
                _REMEMBERED_RANKS.pop(next(iter(_REMEMBERED_RANKS)))
        else:
            self.order, self.rank_starts = found["order"], found["starts"]
        self.remembered = found   # the sweep's successor table is kept beside the ranks (`FlashSearch._flat_tables`)
        return found["ranks"]

    def _ranks(self, lattice: Lattice) -> np.ndarray:
        """Every transformation's position in the order of `tuple_key` (int64, indexed by the level vector)."""
        shape = tuple(hi + 1 for hi in lattice.upper)
        # The same operations as `tuple_key`: its float sums start from 0 and add left to right, as the outer sums
        # here do, attribute after attribute (0 + x == x exactly), over the lattice in C order. Its first
        # component, (sum of levels - lower sum) / max rank, orders as the sum of levels itself (distinct small
        # integers divided by one positive integer stay distinct and in order).
        if self.compiled:   # the same sums and dense ranks in one compiled pass (engine._flash_numba)
            from .. import _flash_numba

            height = max(shape)
            relative = np.zeros((self.d, height))
            distinct = np.zeros((self.d, height))
            for i, levels_here in enumerate(shape):
                relative[i, :levels_here] = self.relative[i][:levels_here]
                distinct[i, :levels_here] = self.distinct[i][:levels_here]
            levels, precision, lost = _flash_numba.strategy_sums(relative, distinct,
                                                                 np.asarray(shape, dtype=np.int64))
            precision_rank, precisions = _compiled_dense_rank(_flash_numba, precision)
            lost_rank, losts = _compiled_dense_rank(_flash_numba, lost)
        else:
            precision = np.zeros(1)
            distinct = np.zeros(1)
            levels = np.zeros(1, dtype=np.int64)
            for i, height in enumerate(shape):
                precision = np.add.outer(precision, np.asarray(self.relative[i], dtype=np.float64)[:height]).ravel()
                distinct = np.add.outer(distinct, np.asarray(self.distinct[i], dtype=np.float64)[:height]).ravel()
                levels = np.add.outer(levels, np.arange(height, dtype=np.int64)).ravel()
            precision = precision / self.d
            lost = 1.0 - distinct / self.d
            precision_rank, precisions = _dense_rank(precision)
            lost_rank, losts = _dense_rank(lost)
        size = levels.size
        # The negated level vector, compared first attribute first, orders as the flat (C-order) index descending.
        # The four keys become one int64 (sum of levels, then the dense ranks of the two floats, then the reversed
        # index): one sort instead of lexsort's four, the same order (ties of a float key share its dense rank).
        top = int(levels.max()) if size else 0
        if (top + 1) * precisions * losts * size < 1 << 62:
            combined = ((levels * precisions + precision_rank) * losts + lost_rank) * size
            combined += np.arange(size - 1, -1, -1, dtype=np.int64)
            # unique keys: sorting the keys themselves (a third of argsort's time) gives the one order, and each
            # key's low part (its reversed index) says which transformation it is
            order = size - 1 - np.sort(combined) % size
        else:   # the dense ranks order as the floats themselves
            order = np.lexsort((np.arange(size - 1, -1, -1, dtype=np.int64), lost_rank, precision_rank, levels))
        ranks = np.empty(size, dtype=np.int64)
        ranks[order] = np.arange(size, dtype=np.int64)
        # For the sweep on flat indices (`FlashSearch._sweep`): the transformations in the keys' order, and where
        # each sum of levels starts in it (the sum is the keys' first component, so a rank is one run of `order`).
        self.order = order
        self.rank_starts = np.concatenate(([0], np.cumsum(np.bincount(levels, minlength=top + 1)))).tolist()
        return ranks.reshape(shape)

    def key(self, node: Node) -> tuple:
        return self.tuple_key(node)

    def tuple_key(self, node: Node) -> tuple:
        key = self._keys.get(node)
        if key is None:
            d = self.d
            # float sums added left to right from 0 (Python 3.11's sum; from 3.12 sum compensates, so reduce)
            rank = (sum(node) - self.lower_sum) / self.max_rank
            precision = _float_sum(map(getitem, self.relative, node)) / d
            lost = 1.0 - _float_sum(map(getitem, self.distinct, node)) / d
            key = self._keys[node] = (rank, precision, lost, tuple(map(neg, node)))
        return key


class FlashSearch:
    def __init__(self, evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                 progress: Progress, explicit: bool | None = None, prune_by_bound: bool | None = None,
                 two_phase: bool | None = None) -> None:
        """`two_phase` None: Flash2P exactly when privacy and quality are not both monotone; True forces it."""
        self.evaluator = evaluator
        self.quality = evaluator.quality
        self.lattice = lattice
        self.incumbent = incumbent
        self.deadline = deadline
        self.progress = progress
        configuration = evaluator.configuration
        privacy = configuration.privacy_monotonicity
        if privacy is Monotonicity.NONE:
            raise ValueError("Flash needs a monotone privacy property (k-anonymity or a model implying a class size)")
        # The property the binary search classifies: the privacy models themselves when they are all monotone,
        # otherwise the minimal class size they imply.
        self.full_check = privacy is Monotonicity.FULL
        self.quality_monotone = configuration.quality_monotonicity(self.quality) is Monotonicity.FULL
        self.two_phase = not (self.full_check and self.quality_monotone) if two_phase is None else two_phase
        if not self.two_phase and not (self.full_check and self.quality_monotone):
            raise ValueError("Flash alone is exact only when privacy and quality are both monotone; use Flash2P")
        if prune_by_bound is None:
            # As in ARX: in the monotone problem the binary search alone classifies fastest; bound pruning there
            # costs checks, because it stops the search from tagging whole regions with a single check.
            prune_by_bound = self.two_phase
        self.prune_by_bound = prune_by_bound
        # explicit tags in the rows of one array (`_tag_rows`), which the compiled path walk reads as one argument
        (self.anonymous, self.not_anonymous, self.insufficient), self._tag_rows = \
            make_tag_rows(lattice, (True, False, True), explicit=explicit)
        self.strategy = Strategy(evaluator, lattice)
        # Explicit tags whose array index is the level vector itself (every lower level 0): `classified` reads the
        # arrays directly instead of through `in` calls (it runs tens of thousands of times per search), through
        # their `item` methods: a flag as a Python bool, without a numpy scalar (the same reads, a third cheaper).
        self._items = tuple(tags.flags.item for tags in (self.anonymous, self.not_anonymous, self.insufficient)) \
            if isinstance(self.anonymous, ExplicitTags) and not any(lattice.lower) else None
        # Every transformation's level bound as one array (a quality model that can compute them all at once, to
        # the bit): `skip` reads it instead of the bound memo, whose misses cost a bound each.
        self._bound_item = None
        if self.prune_by_bound and self._items is not None:
            self._bound_item = self.quality.level_bound_reader(lattice.upper)
        self.class_bounds: dict[Node, float] = {}   # transformations fully evaluated -> bound from their classes
        self._bounds: dict = self.quality.__dict__.setdefault("_bound_memo", {})   # see QualityModel.bound
        self._successors: dict[Node, list[Node]] = {}
        self.pruned_by_bound = 0
        self.complete = True

    # --- predictive properties ------------------------------------------------------------------------------------
    def classified(self, node: Node) -> bool:
        if self._items is not None:   # explicit tags indexed by the levels themselves: two array reads
            return self._items[0](node) or self._items[1](node)
        return node in self.anonymous or node in self.not_anonymous

    def insufficient_quality(self, node: Node) -> bool:
        if not self.prune_by_bound or self.incumbent.best is None:
            return False
        if (self._items[2](node) if self._items is not None else node in self.insufficient):
            return True
        bound = self._bound_item(node) if self._bound_item is not None else self.quality.bound(node)
        if self.incumbent.rules_out(node, bound):
            self.insufficient.tag(node)
            self.pruned_by_bound += 1
            return True
        return False

    def skip(self, node: Node) -> bool:
        """`classified(node) or insufficient_quality(node)`, inlined for explicit tags indexed by the levels (a
        search asks tens of thousands of times): the same reads, tags and count in the same order."""
        items = self._items
        if items is None:
            return self.classified(node) or self.insufficient_quality(node)
        if items[0](node) or items[1](node):
            return True
        if not self.prune_by_bound or self.incumbent.best is None:
            return False
        if items[2](node):
            return True
        if self._bound_item is not None:
            bound = self._bound_item(node)
        else:
            bound = self._bounds.get(node)   # QualityModel.bound's memo, read directly
            if bound is None:
                bound = self.quality.bound(node)
        if self.incumbent.rules_out(node, bound):
            self.insufficient.tag(node)
            self.pruned_by_bound += 1
            return True
        return False

    def successors(self, node: Node) -> list[tuple[tuple, Node]]:
        """The direct generalizations of `node` in the strategy's order, each with its key (as the queue holds
        them; keys are unique, so sorting the pairs is sorting by key)."""
        ordered = self._successors.get(node)
        if ordered is None:
            key = self.strategy.key
            upper = self.lattice.upper
            # lattice.successors, inline (the order does not matter: they are sorted by their unique keys)
            ordered = [(key(s), s) for s in [node[:i] + (level + 1,) + node[i + 1:]
                                             for i, level in enumerate(node) if level < upper[i]]]
            ordered.sort()
            self._successors[node] = ordered
        return ordered

    # --- checks ---------------------------------------------------------------------------------------------------
    def evaluate(self, node: Node, hint: Node | None = None, may_abandon: bool = True):
        before = self.evaluator.checked
        evaluation = self.evaluator.evaluate(node, hint, self.incumbent.rules_out if may_abandon else None)
        self.progress.update(self.evaluator.checked - before)
        self.incumbent.offer(evaluation)
        self.class_bounds[node] = self.quality.lower_bound_from_classes(evaluation.sizes)
        return evaluation

    def check(self, node: Node, hint: Node | None) -> bool:
        """Classify `node` for the binary property, tag, and prune by the bound; True when it has the property."""
        if self.full_check:
            has_property = self.evaluate(node, hint, may_abandon=False).solution   # the tag needs the full answer
        else:
            before = self.evaluator.checked
            has_property = self.evaluator.m_anonymous(node, hint)
            self.progress.update(self.evaluator.checked - before)
        (self.anonymous if has_property else self.not_anonymous).tag(node)
        if self.prune_by_bound and self.incumbent.best is not None:
            class_bound = self.class_bounds.get(node)   # set when the check evaluated the node fully
            if class_bound is None:
                class_bound = self.quality.lower_bound_from_classes(self.evaluator.cache.class_sizes(node))
            level_bound = self._bound_item(node) if self._bound_item is not None else self.quality.bound(node)
            bound = max(level_bound, class_bound)
            if self.incumbent.rules_out(node, bound):
                self.insufficient.tag(node)
        return has_property

    # --- Flash ------------------------------------------------------------------------------------------------------
    def find_path(self, head: Node) -> list[Node]:
        path = [head]
        current = head
        skip = self.skip
        while True:
            for _, step in self.successors(current):
                if not skip(step):
                    break
            else:
                return path
            path.append(step)
            current = step

    def check_path(self, path: list[Node], queue: list) -> Node | None:
        low, high = 0, len(path) - 1
        lowest = None
        while low <= high:
            mid = (low + high) // 2
            node = path[mid]
            if self.skip(node):
                high = mid - 1
                continue
            hint = path[low - 1] if low > 0 else None
            if self.check(node, hint):
                lowest = node
                high = mid - 1
            else:
                for item in self.successors(node):
                    if not self.skip(item[1]):
                        heapq.heappush(queue, item)
                low = mid + 1
        return lowest

    def binary_search(self, start: Node) -> None:
        queue = [(self.strategy.key(start), start)]
        while queue:
            if self.deadline.passed():
                self.complete = False
                return
            _, head = heapq.heappop(queue)
            if self.skip(head):
                continue
            lowest = self.check_path(self.find_path(head), queue)
            if lowest is not None and self.two_phase and lowest not in self.class_bounds \
                    and not self.insufficient_quality(lowest):
                # An early solution makes the bound prune the rest of the first phase (ARX checks the utility of
                # every node it checks).
                self.evaluate(lowest)

    def unclassified_at_rank(self, rank: int, ranks, explicit: bool) -> list[Node]:
        if explicit:
            # The transformations of this rank in index order (as np.argwhere lists them), grouped once per search
            # (`_rank_groups`), and of them the unclassified ones: reads of the flat flags, not whole-lattice masks.
            order, starts = self._rank_groups(ranks)
            index = order[starts[rank]:starts[rank + 1]]
            tagged = self.anonymous.flags.ravel()[index] | self.not_anonymous.flags.ravel()[index]
            if self.prune_by_bound:
                tagged |= self.insufficient.flags.ravel()[index]
            points = np.unravel_index(index[~tagged], ranks.shape)
            lower = self.lattice.lower
            if any(lower):
                points = [p + lo for p, lo in zip(points, lower)]
            nodes = list(zip(*(p.tolist() for p in points))) if index.size else []
        else:
            # Enumerates the lattice: only feasible for lattices of moderate size, so it watches the budget too.
            nodes = []
            every = product(*(range(lo, hi + 1) for lo, hi in zip(self.lattice.lower, self.lattice.upper)))
            for count, n in enumerate(every):
                if sum(n) - sum(self.lattice.lower) == rank:
                    nodes.append(n)
                if count % 4096 == 4095 and self.deadline.passed():
                    self.complete = False
                    return []
        return sorted((n for n in nodes if not self.skip(n)), key=self.strategy.key)

    def _rank_groups(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Flat indices of the lattice sorted by rank (stable: index order within a rank) and where each rank
        starts among them."""
        if getattr(self, "_groups", None) is None:
            flat = ranks.ravel()
            order = np.argsort(flat, kind="stable")
            counts = np.bincount(flat, minlength=int(flat.max()) + 2 if flat.size else 2)
            starts = np.concatenate([[0], np.cumsum(counts)])
            self._groups = (order, starts)
        return self._groups

    # --- Flash on flat indices ---------------------------------------------------------------------------------
    def _sweep(self) -> None:
        """The first phase of `run` where the tags are explicit and the strategy's ranks exist (every lower level 0,
        at most RANK_LIMIT transformations): the same reads, checks, tags and counts in the same order as
        `unclassified_at_rank`, `binary_search`, `find_path`, `check_path`, `check` and `skip`, but with
        transformations numbered by their flat (C-order) index. A tag is read from its bytearray
        (`ExplicitTags.buffer`), a strategy key is the integer rank (unique, so the queue holds ranks and `order`
        turns one back into a transformation), a rank's transformations are one run of `order` filtered with numpy,
        the successors of an index are computed once, sorted by rank, and `check` is inline in the loops that call
        it thousands of times. Level vectors are made only for what needs them: a check, a tag, a
        tie."""
        lattice, strategy, incumbent, deadline = self.lattice, self.strategy, self.incumbent, self.deadline
        evaluator, quality, progress = self.evaluator, self.quality, self.progress
        anonymous, not_anonymous, insufficient = self.anonymous.buffer, self.not_anonymous.buffer, \
            self.insufficient.buffer
        prune, full_check, two_phase = self.prune_by_bound, self.full_check, self.two_phase
        bound_item = self._bound_item
        bounds = self._bounds
        class_bounds = self.class_bounds
        rank_of = strategy.ranks.item           # flat index -> rank (an int)
        order = strategy.order
        at_rank = order.item                    # rank -> flat index
        upper = tuple(lattice.upper)
        d = len(upper)
        strides = [1] * d
        for axis in range(d - 2, -1, -1):
            strides[axis] = strides[axis + 1] * (upper[axis + 1] + 1)
        strides = tuple(strides)
        nodes: dict[int, Node] = {}
        successors: dict[int, list[int]] = {}
        tables = self._flat_tables()

        if tables is None:
            def node_of(index: int) -> Node:
                node = nodes.get(index)
                if node is None:
                    rest, levels = index, []
                    for stride in strides:
                        level, rest = divmod(rest, stride)
                        levels.append(level)
                    node = nodes[index] = tuple(levels)
                return node

            def successors_of(index: int) -> list[int]:
                found = successors.get(index)
                if found is None:
                    found = successors[index] = sorted(
                        [index + stride for stride, level, top in zip(strides, node_of(index), upper) if level < top],
                        key=rank_of)
                return found

            anonymous_tag, not_anonymous_tag, insufficient_tag = \
                self.anonymous.tag, self.not_anonymous.tag, self.insufficient.tag

            def tag_anonymous(index: int) -> None:
                anonymous_tag(node_of(index))

            def tag_not_anonymous(index: int) -> None:
                not_anonymous_tag(node_of(index))

            def tag_insufficient(index: int) -> None:
                insufficient_tag(node_of(index))
        else:   # the same level vectors and rank-sorted successors, read from the compiled tables, and the same
            # tags set by compiled loops over the flat rows (engine._flash_numba.tag_up_set, tag_down_set)
            from .. import _flash_numba

            successor_rows, level_rows = tables
            dims = np.array([self.anonymous.flags.shape, strides], dtype=np.int64).reshape(2, d)
            up_set, down_set = _flash_numba.tag_up_set, _flash_numba.tag_down_set
            anonymous_row, not_anonymous_row, insufficient_row = self._tag_rows

            def tag_anonymous(index: int) -> None:
                up_set(anonymous_row, index, dims)

            def tag_not_anonymous(index: int) -> None:
                down_set(not_anonymous_row, index, dims)

            def tag_insufficient(index: int) -> None:
                up_set(insufficient_row, index, dims)

            def node_of(index: int) -> Node:
                node = nodes.get(index)
                if node is None:
                    node = nodes[index] = tuple(level_rows[index].tolist())
                return node

            def successors_of(index: int) -> list[int]:
                found = successors.get(index)
                if found is None:
                    row = successor_rows[index].tolist()
                    found = successors[index] = row[1:row[0] + 1]
                return found

        def ruled_out(index: int, key: tuple) -> bool:
            """`insufficient_quality` past its tag read, for a transformation not tagged: the bound, and the tag
            and count when it rules the transformation out."""
            if bound_item is not None:
                bound = bound_item(index)
            else:
                node = node_of(index)
                bound = bounds.get(node)   # QualityModel.bound's memo, read directly
                if bound is None:
                    bound = quality.bound(node)
            loss = key[0]
            if bound > loss or (bound == loss and incumbent.rules_out(node_of(index), bound)):
                tag_insufficient(index)
                self.pruned_by_bound += 1
                return True
            return False

        def skip(index: int) -> bool:
            if anonymous[index] or not_anonymous[index]:
                return True
            if not prune:
                return False
            key = incumbent.key
            return key is not None and (bool(insufficient[index]) or ruled_out(index, key))

        def first_open(steps: list[int]) -> int:
            """The first of `steps` not skipped, or -1 (the path walk where it is not compiled)."""
            for step in steps:
                if not skip(step):
                    return step
            return -1

        def check(index: int, hint: Node | None) -> bool:
            """`check` (and `evaluate` under it) inline, for a flat index."""
            node = node_of(index)
            if full_check:   # the tag needs the full answer: not abandoned
                if progress.bar is None:
                    evaluation = evaluator.evaluate(node, hint, None)
                else:
                    before = evaluator.checked
                    evaluation = evaluator.evaluate(node, hint, None)
                    progress.update(evaluator.checked - before)
                incumbent.offer(evaluation)
                class_bounds[node] = quality.lower_bound_from_classes(evaluation.sizes)
                has_property = evaluation.solution
            else:
                before = evaluator.checked
                has_property = evaluator.m_anonymous(node, hint)
                progress.update(evaluator.checked - before)
            if has_property:
                tag_anonymous(index)
            else:
                tag_not_anonymous(index)
            if prune and incumbent.best is not None:
                class_bound = class_bounds.get(node)   # set when the check evaluated the node fully
                if class_bound is None:
                    class_bound = quality.lower_bound_from_classes(evaluator.cache.class_sizes(node))
                level_bound = bound_item(index) if bound_item is not None else quality.bound(node)
                bound = max(level_bound, class_bound)
                if incumbent.rules_out(node, bound):
                    tag_insufficient(index)
            return has_property

        heappush, heappop = heapq.heappush, heapq.heappop
        tag_rows = self._tag_rows
        flat = tuple(tag_rows)
        # find_path compiled (engine._flash_numba.find_path) where the tables exist and, when the bound prunes, every
        # level bound is one float64 array (the values `bound_item` reads, `QualityModel.bound`'s to the bit)
        walk = None
        bound_array = getattr(bound_item, "__self__", None) if prune else np.zeros(1)
        if tables is not None and isinstance(bound_array, np.ndarray) and bound_array.dtype == np.float64 \
                and (bound_array.size == len(order) or not prune):
            walk = _flash_numba.find_path
            bound_array = bound_array.reshape(-1)
            open_steps = _flash_numba.open_successors
            rank_array = strategy.ranks.reshape(-1)
            path_buffer = np.empty(sum(upper) + 1, dtype=np.int64)
            push_buffer = np.empty(max(d, 1), dtype=np.int64)
            no_key = (False, 0.0, 0.0, 0, 0)
            walked = [None, no_key]   # the incumbent key last walked with, and its arguments

            def walk_key() -> tuple:
                """The compiled walk's arguments from the incumbent's key as it stands: whether the bound prunes,
                the loss, the level bound, the sum of levels and the levels as one flat index."""
                key = incumbent.key
                if not prune or key is None:
                    return no_key
                if key is not walked[0]:
                    walked[0], walked[1] = key, (True, float(key[0]), float(key[1]), key[2],
                                                 sum(map(mul, key[3], strides)))
                return walked[1]

        def search_from(start: int) -> None:
            """`binary_search`, with `find_path` and `check_path` inline."""
            queue = [rank_of(start)]
            while queue:
                if deadline.passed():
                    self.complete = False
                    return
                head = at_rank(heappop(queue))
                if skip(head):
                    continue
                if walk is None:
                    path = [head]
                    step = first_open(successors.get(head) or successors_of(head))
                    while step >= 0:   # find_path
                        path.append(step)
                        step = first_open(successors.get(step) or successors_of(step))
                else:   # find_path compiled, from the incumbent's key as it stands (no check on the way)
                    path_buffer[0] = head
                    length, pruned = walk(path_buffer, 1, successor_rows, tag_rows, bound_array, dims, *walk_key())
                    self.pruned_by_bound += pruned
                    path = path_buffer[:length].tolist()
                low, high, lowest = 0, len(path) - 1, -1
                while low <= high:   # check_path
                    mid = (low + high) // 2
                    index = path[mid]
                    if skip(index):
                        high = mid - 1
                        continue
                    if check(index, node_of(path[low - 1]) if low > 0 else None):
                        lowest = index
                        high = mid - 1
                    elif walk is None or not prune or incumbent.key is None:   # (tag reads alone: cheaper here)
                        for step in successors.get(index) or successors_of(index):
                            if not skip(step):
                                heappush(queue, rank_of(step))
                        low = mid + 1
                    else:   # the same loop compiled: the ranks of the successors not skipped, in rank order
                        count, pruned = open_steps(push_buffer, index, successor_rows, rank_array, tag_rows,
                                                   bound_array, dims, *walk_key())
                        self.pruned_by_bound += pruned
                        for step in push_buffer[:count].tolist():
                            heappush(queue, step)
                        low = mid + 1
                if lowest >= 0 and two_phase:
                    node = node_of(lowest)
                    if node not in class_bounds and not self.insufficient_quality(node):
                        # An early solution makes the bound prune the rest of the first phase
                        self.evaluate(node)

        starts = strategy.rank_starts
        if deadline.passed():
            self.complete = False
        elif full_check:
            check(0, None)   # the bottom: every lower level is 0
        for rank in range(len(starts) - 1):
            if not self.complete:
                break
            # `unclassified_at_rank`: the rank's transformations in the keys' order, untagged, then not skipped
            indices = order[starts[rank]:starts[rank + 1]]
            tagged = flat[0][indices] | flat[1][indices]
            if prune:
                tagged |= flat[2][indices]
            untagged = indices[~tagged].tolist()
            key = incumbent.key
            if prune and key is not None:
                untagged = [index for index in untagged if not ruled_out(index, key)]
            for index in untagged:
                if not skip(index):
                    search_from(index)
                if not self.complete:
                    break

    def _flat_tables(self) -> tuple[np.ndarray, np.ndarray] | None:
        """On the compiled path and a lattice whose tables stay small (TABLE_LIMIT entries): every flat index's
        successors sorted by rank and its level vector (engine._flash_numba.successor_table), so the sweep reads a
        row instead of building it; None elsewhere (the sweep then builds them itself, the reference)."""
        strategy = self.strategy
        heights = self.anonymous.flags.shape
        if not strategy.compiled or strategy.ranks.size * (2 * len(heights) + 1) > TABLE_LIMIT:
            return None
        tables = strategy.remembered.get("tables")
        if tables is None:   # computed once per remembered strategy (it depends on the ranks and shape alone)
            from .. import _flash_numba

            tables = strategy.remembered["tables"] = _flash_numba.successor_table(
                strategy.ranks.reshape(-1), np.asarray(heights, dtype=np.int64))
        return tables

    def run(self) -> dict:
        lattice = self.lattice
        explicit = isinstance(self.anonymous, ExplicitTags)
        if FAST_SWEEP and self._items is not None and self.strategy.ranks is not None:
            self._sweep()
            return self._second_phase(explicit)
        ranks = None
        if explicit:
            shape = self.anonymous.flags.shape
            ranks = np.zeros(shape, dtype=np.int16)   # rank of every transformation, one small array
            for axis, height in enumerate(shape):
                ranks += np.arange(height, dtype=np.int16).reshape([-1 if a == axis else 1 for a in range(len(shape))])
        bottom = lattice.bottom
        if self.deadline.passed():
            self.complete = False
        elif self.full_check:
            self.check(bottom, None)
        for rank in range(sum(lattice.upper) - sum(lattice.lower) + 1):
            if not self.complete:
                break
            for node in self.unclassified_at_rank(rank, ranks, explicit):
                if not self.skip(node):
                    self.binary_search(node)
                if not self.complete:
                    break
        return self._second_phase(explicit)

    def _second_phase(self, explicit: bool) -> dict:
        lattice = self.lattice
        phase_one = self.evaluator.checked
        counters = {"pruned_by_bound": self.pruned_by_bound, "complete": self.complete,
                    "phases": {"binary": phase_one}}
        flags = self.anonymous.flags if explicit else None
        if self.two_phase and self.complete and floor_applies(self.evaluator, flags):
            # top-down with the suppression floor (engine.search.floor): the same optimum, fewer checks
            admissible = flags & ~self.insufficient.flags if self.prune_by_bound else flags
            second = floor_sweep(self.evaluator, lattice, self.incumbent, self.deadline, self.progress, admissible)
        elif self.two_phase and self.complete:
            seeds = [n for n in self.anonymous.minimal() if not self.insufficient_quality(n)]
            second = branch_and_bound(self.evaluator, lattice, self.incumbent, self.deadline, self.progress,
                                      start=seeds, admissible=lambda n: n in self.anonymous,
                                      known=self.class_bounds, admissible_flags=flags, bound_item=self._bound_item)
        if self.two_phase and self.complete:
            counters["pruned_by_bound"] += second["pruned_by_bound"]
            counters["complete"] = second["complete"]
            counters["phases"]["second"] = self.evaluator.checked - phase_one
        return counters

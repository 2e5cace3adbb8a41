"""Best-first branch and bound over the lattice (Prasser, Kohlmayer, Kuhn 2016, "BFS"), for configurations where no
privacy property is monotone, e.g. population uniqueness alone, whose optimum usually sits low in the lattice.

With suppression the quality of a transformation is not monotone, but each quality model's lower bound (loss from
generalization alone) is. Transformations are popped in order of that bound, each is evaluated, and the search stops
as soon as the smallest bound left in the queue cannot beat the best loss found: every unseen transformation is a
generalization of something in the queue, so none can be better. Two predictive properties are kept: transformations
ruled out by the bound (with all their generalizations), and, where the configuration implies a monotone minimal
class size, transformations that violate it (with all their specializations).

`start` lets Flash2P's second phase run the same loop over the region its first phase classified.
"""
from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable

import numpy as np

from ..lattice import Lattice
from ..privacy.configuration import Monotonicity
from ..quality.base import QualityModel
from .common import Deadline, Incumbent, Progress
from .evaluator import Evaluator
from .tags import ExplicitTags, make_tags

Node = tuple[int, ...]
READER_LIMIT = 1 << 20   # transformations: up to this (8 MB of float64) a search without a caller's reader makes its
#                          level bounds at once (the loop on tuples keeps a bound per queued node in a memo instead)


def branch_and_bound(evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                     progress: Progress, start: Iterable[Node] | None = None,
                     admissible: Callable[[Node], bool] | None = None, known: dict[Node, float] | None = None,
                     admissible_flags: np.ndarray | None = None, bound_item: Callable | None = None) -> dict:
    """Run to completion (or the deadline); returns counters. `admissible` filters successors (Flash2P: the region
    already known to satisfy the minimal class size); `known` maps transformations already evaluated and offered
    to the incumbent to the bound from their classes. `admissible_flags`: the same filter as booleans in the
    lattice's flat C order (`admissible` of a node is its flag), read by index instead of calling `admissible`;
    `bound_item`: `QualityModel.level_bound_reader`'s reader when the caller has one (made here otherwise)."""
    quality = evaluator.quality
    configuration = evaluator.configuration
    privacy = configuration.privacy_monotonicity
    failing = make_tags(lattice, upward=False)   # these and all specializations are no solution
    ruled_out = make_tags(lattice, upward=True)  # these and all generalizations cannot beat the incumbent
    counters = {"pruned_by_bound": 0, "pruned_by_privacy": 0, "complete": True}
    seeds = [lattice.bottom] if start is None else list(start)
    upper = lattice.upper
    # Per check, fewer Python frames (a check costs about 0.15 ms, its Python a good part of that): the tags'
    # membership read off their flags directly where a node is its own index, the classes' bound asked only of a
    # quality model that has one, the progress bar's count only when there is a bar.
    is_ruled_out = _membership(ruled_out, lattice)
    is_failing = _membership(failing, lattice)
    # Where the tags' flags are indexed by the node's number itself (`_flat`): membership is a byte read by that
    # number, the level bounds one array read (`level_bound_reader`, `bound`'s bits), and a ruled-out successor
    # is tagged by number (compiled where the kernels are loaded), so a successor costs no tuple until queued.
    flat = _flat(evaluator, lattice, ruled_out, failing, admissible, admissible_flags, bound_item)
    from_classes = type(quality).lower_bound_from_classes is not QualityModel.lower_bound_from_classes
    counting = getattr(progress, "bar", progress) is not None
    bounds: dict = quality.__dict__.setdefault("_bound_memo", {})   # see QualityModel.bound
    # A node is seen once queued (or filtered out); seen nodes are kept as their number in the lattice's mixed
    # radix (`_strides`), carried in the queue after the node (never compared: nodes are unique), so that a successor
    # already seen, most of them, costs an addition and an int look-up instead of building and hashing its tuple.
    strides = _strides(upper)
    queue: list[tuple[float, int, Node, Node | None, int]] = []
    seen: set[int] = set()
    for node in seeds:
        index = sum(level * place for level, place in zip(node, strides))
        seen.add(index)
        heapq.heappush(queue, (quality.bound(node), sum(node), node, None, index))
    if flat is not None:
        return _flat_loop(evaluator, incumbent, deadline, progress, queue, seen, strides, upper, known, counters,
                          failing, flat, from_classes, counting)
    while queue:
        bound, total, node, parent, index = heapq.heappop(queue)
        if bound > incumbent.loss:
            break   # every transformation left is bounded below by `bound`
        if incumbent.rules_out(node, bound) or is_ruled_out(node):
            continue
        if deadline.passed():
            counters["complete"] = False
            break
        class_bound = 0.0
        if known is not None and node in known:
            class_bound = known[node]
        elif privacy is not Monotonicity.NONE and is_failing(node):
            counters["pruned_by_privacy"] += 1
        else:
            class_bound = _check(evaluator, incumbent, failing, node, parent, queue, progress, counting, from_classes)
        # lattice.successors, inline (one attribute one level up, in attribute order); a seen one is skipped by its
        # number before its tuple is built
        for i, level in enumerate(node):
            if level >= upper[i] or index + strides[i] in seen:
                continue
            successor = node[:i] + (level + 1,) + node[i + 1:]
            if admissible is not None and not admissible(successor):
                continue
            seen.add(index + strides[i])
            bound = bounds.get(successor)   # QualityModel.bound's memo, read directly
            if bound is None:
                bound = quality.bound(successor)
            key = max(bound, class_bound)
            if incumbent.rules_out(successor, key) or is_ruled_out(successor):
                ruled_out.tag(successor)
                counters["pruned_by_bound"] += 1
                continue
            heapq.heappush(queue, (key, total + 1, successor, node, index + strides[i]))   # its sum of levels
    return counters


def _check(evaluator: Evaluator, incumbent: Incumbent, failing, node: Node, parent: Node | None, queue: list,
           progress: Progress, counting: bool, from_classes: bool) -> float:
    """One check, as both loops make it: the likely next check rolled up on the worker thread meanwhile while that
    pays (measured per check, engine.search.ahead_policy), the evaluation offered to the incumbent, and a node that
    fails tagged where privacy's monotonicity carries the failure to its specializations. Returns the bound on
    the loss of its generalizations that its classes give (0 for a quality model without one)."""
    if evaluator.ahead.tick() and queue:
        evaluator.prefetch(queue[0][2], queue[0][3])
    before = evaluator.checked if counting else 0
    evaluation = evaluator.evaluate(node, parent, incumbent.rules_out)
    if counting:
        progress.update(evaluator.checked - before)
    class_bound = evaluator.quality.lower_bound_from_classes(evaluation.sizes) if from_classes else 0.0
    incumbent.offer(evaluation)
    privacy = evaluator.configuration.privacy_monotonicity
    if not evaluation.solution and not evaluation.abandoned and (privacy is Monotonicity.FULL or (
            privacy is Monotonicity.PARTIAL and not evaluator.m_anonymous(node))):
        failing.tag(node)
    return class_bound


def _strides(upper: Node) -> tuple[int, ...]:
    """The place of each attribute in the mixed radix (upper + 1 per attribute, the last attribute lowest) that
    numbers the lattice's nodes one to one: a node's number is sum(level x place), its successor's in attribute i
    that number plus place i."""
    strides, place = [], 1
    for top in reversed(upper):
        strides.append(place)
        place *= top + 1
    return tuple(reversed(strides))


def _membership(tags, lattice: Lattice) -> Callable[[Node], bool]:
    """`node in tags`, without the tags' own frame where their flags are indexed by the node itself (explicit
    tags of a lattice whose lowest levels are 0: ExplicitTags.__contains__ then reads flags.item(node))."""
    if isinstance(tags, ExplicitTags) and not any(lattice.lower):
        return tags.flags.item
    return tags.__contains__


class _Flat:
    """What `_flat_loop` reads by a node's number: the ruled-out, failing and admissible flags as bytes, the level
    bound reader, and how to tag a ruled-out successor's up-set (its number, its node, the attribute raised: the
    successor's tuple is built only where the tags are set by slices)."""

    def __init__(self, ruled_out: ExplicitTags, failing: ExplicitTags, admissible: memoryview | None,
                 bound_item: Callable, tag_ruled_out: Callable[[int, Node, int], None]) -> None:
        self.ruled_out = ruled_out.buffer
        self.failing = failing.buffer
        self.admissible = admissible
        self.bound_item = bound_item
        self.tag_ruled_out = tag_ruled_out


def _flat(evaluator: Evaluator, lattice: Lattice, ruled_out, failing, admissible, admissible_flags,
          bound_item) -> _Flat | None:
    """`_Flat` where the tags are explicit and indexed by the levels (every lower level 0), the admissible region
    (if any) is given as flags and the quality model has a level bound reader; None elsewhere (the loop by
    tuples, the reference)."""
    if not (isinstance(ruled_out, ExplicitTags) and isinstance(failing, ExplicitTags)) or any(lattice.lower):
        return None
    if admissible is not None and admissible_flags is None:
        return None
    if bound_item is None:
        bound_item = evaluator.quality.level_bound_reader(lattice.upper) if lattice.size <= READER_LIMIT else None
        if bound_item is None:
            return None
    flags = None if admissible_flags is None else memoryview(admissible_flags.reshape(-1)).cast("B")
    tag = ruled_out.tag
    if evaluator.kernels is not None:   # the up-set by number, the same flags as ExplicitTags.tag's slices
        from .. import _flash_numba

        up_set = _flash_numba.tag_up_set
        row = ruled_out.flags.reshape(-1)
        dims = np.array([ruled_out.flags.shape, _strides(lattice.upper)], dtype=np.int64).reshape(2, -1)

        def tag_number(index: int, node: Node, axis: int) -> None:
            up_set(row, index, dims)
    else:
        def tag_number(index: int, node: Node, axis: int) -> None:
            tag(node[:axis] + (node[axis] + 1,) + node[axis + 1:])
    return _Flat(ruled_out, failing, flags, bound_item, tag_number)


def _flat_loop(evaluator: Evaluator, incumbent: Incumbent, deadline: Deadline, progress: Progress, queue: list,
               seen: set[int], strides: tuple[int, ...], upper: Node, known: dict[Node, float] | None,
               counters: dict, failing, flat: _Flat, from_classes: bool, counting: bool) -> dict:
    """`branch_and_bound`'s loop on nodes numbered in the lattice's mixed radix (`_flat`): the same pops, checks,
    tags, counts and pushes in the same order, with flags read by number, bounds read from the level bound array,
    `incumbent.rules_out`'s common case (a bound not equal to the incumbent's loss) inline, and a successor's tuple
    built only when it is queued."""
    privacy = evaluator.configuration.privacy_monotonicity
    rules_out = incumbent.rules_out
    ruled, failing_flags, admissible = flat.ruled_out, flat.failing, flat.admissible
    bound_item, tag_ruled_out = flat.bound_item, flat.tag_ruled_out
    heappush, heappop = heapq.heappush, heapq.heappop
    axes = tuple(zip(range(len(upper)), upper, strides))
    monotone = privacy is not Monotonicity.NONE
    while queue:
        bound, total, node, parent, index = heappop(queue)
        key = incumbent.key
        if key is not None and bound >= key[0]:
            if bound > key[0]:
                break   # every transformation left is bounded below by `bound`
            if rules_out(node, bound):
                continue
        if ruled[index]:
            continue
        if deadline.passed():
            counters["complete"] = False
            break
        class_bound = 0.0
        if known is not None and node in known:
            class_bound = known[node]
        elif monotone and failing_flags[index]:
            counters["pruned_by_privacy"] += 1
        else:
            class_bound = _check(evaluator, incumbent, failing, node, parent, queue, progress, counting, from_classes)
        key = incumbent.key
        for i, top, stride in axes:
            level = node[i]
            successor_index = index + stride
            if level >= top or successor_index in seen:
                continue
            if admissible is not None and not admissible[successor_index]:
                continue
            seen.add(successor_index)
            successor_bound = bound_item(successor_index)
            successor_key = successor_bound if successor_bound >= class_bound else class_bound
            # A flagged successor lies in the up-set of a tagged node, so its own up-set is flagged already:
            # tagging it again (as the loop on tuples does) changes no flag
            if ruled[successor_index]:
                counters["pruned_by_bound"] += 1
                continue
            if key is not None and successor_key >= key[0] and (
                    successor_key > key[0] or rules_out(node[:i] + (level + 1,) + node[i + 1:], successor_key)):
                tag_ruled_out(successor_index, node, i)
                counters["pruned_by_bound"] += 1
                continue
            heappush(queue, (successor_key, total + 1, node[:i] + (level + 1,) + node[i + 1:], node,
                             successor_index))
    return counters

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

import numpy as np

from ..lattice import Lattice
from .common import Deadline, Incumbent, Progress
from .evaluator import Evaluator

Node = tuple[int, ...]
MAX_FLOOR_ENTRIES = 1 << 22     # transformations x attributes of the floor array (32 MiB of float64)
MARGIN = 1e-12                  # the bound is lowered by this (relative) so that rounding never prunes a tie


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
    """Per attribute, its normalized generalization term at each level of the lattice (index 0 = its lower level)."""
    top = tuple(lattice.upper)
    tables = []
    for axis, (lo, hi) in enumerate(zip(lattice.lower, lattice.upper)):
        tables.append(np.array([quality.generalization_terms(top[:axis] + (level,) + top[axis + 1:])[axis]
                                for level in range(lo, hi + 1)]))
    return tables


def floor_sweep(evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                progress: Progress, admissible: np.ndarray) -> dict:
    """Evaluate the admissible transformations (a boolean array over the lattice, indexed from its lower levels)
    top-down, skipping those the level bound or the suppression floor rules out; returns counters."""
    quality = evaluator.quality
    lower = np.asarray(lattice.lower)
    shape = admissible.shape
    floor = np.zeros(shape + (len(shape),))
    points = np.argwhere(admissible)
    counters = {"pruned_by_bound": 0, "pruned_by_floor": 0, "complete": True}
    if not points.size:
        return counters
    # The level bound of every admissible transformation at once: the mean of the per-attribute generalization
    # terms, lowered by the margin (the sum may round differently from `lower_bound`'s mean).
    per_attribute = _generalization_table(quality, lattice)
    level_bounds = sum(per_attribute[axis][points[:, axis]] for axis in range(len(shape))) / len(shape)
    level_bounds = level_bounds - MARGIN * (1.0 + np.abs(level_bounds))
    # rank by rank from the top; within a rank, the smallest level bound first (good solutions early)
    ranks = points.sum(axis=1)
    order = np.lexsort((level_bounds, -ranks))
    starts = np.flatnonzero(np.diff(ranks[order])) + 1
    d = len(shape)
    for chunk in np.split(order, starts):
        if incumbent.best is not None:   # a level bound above the incumbent's loss rules out at once (no tie)
            above = level_bounds[chunk] > incumbent.loss
            counters["pruned_by_bound"] += int(np.count_nonzero(above))
            chunk = chunk[~above]
        for position in chunk:
            point = tuple(int(v) for v in points[position])
            node = tuple(v + int(lo) for v, lo in zip(point, lower))
            level_bound = float(level_bounds[position])
            if incumbent.rules_out(node, level_bound):
                counters["pruned_by_bound"] += 1
                continue
            row = floor[point]
            floor_bound = sum(float(per_attribute[axis][v] + row[axis]) for axis, v in enumerate(point)) / d
            floor_bound -= MARGIN * (1.0 + abs(floor_bound))
            if floor_bound > level_bound and incumbent.rules_out(node, floor_bound):
                counters["pruned_by_floor"] += 1
                continue
            if deadline.passed():
                counters["complete"] = False
                return _total(counters)
            before = evaluator.checked
            evaluation = evaluator.evaluate(node, None, incumbent.rules_out)
            progress.update(evaluator.checked - before)
            incumbent.offer(evaluation)
            if evaluation.suppressed_records:
                terms = quality.suppression_terms(node, evaluation.codes, evaluation.sizes, evaluation.suppressed)
                below = tuple(slice(0, v + 1) for v in point)
                np.maximum(floor[below], terms, out=floor[below])
    return _total(counters)


def _total(counters: dict) -> dict:
    counters["pruned_by_bound"] += counters["pruned_by_floor"]
    return counters

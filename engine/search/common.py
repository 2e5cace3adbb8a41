"""What every search algorithm shares: the best solution so far with the documented tie-breaking, the result, the
deadline and the progress bar.

Tie-breaking (the same for every algorithm, so the algorithm never changes the answer): among transformations of
equal loss, the one with the smaller lower bound wins, then the one with fewer generalization steps (sum of levels),
then the lexicographically smaller level vector.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from ..classes import Evaluation

Node = tuple[int, ...]


@dataclass
class SearchResult:
    best: Evaluation | None
    checked: int
    optimal: bool
    seconds: float
    lattice_size: int
    algorithm: str
    pruned_by_bound: int = 0
    pruned_by_privacy: int = 0
    risk_evaluations: int = 0   # calls of a risk model (population uniqueness), for benchmarks
    phases: dict | None = None  # per phase of a multi-phase search: transformations checked


class Incumbent:
    """The best solution so far, and whether a transformation's bound rules out it and all its generalizations."""

    def __init__(self, quality) -> None:
        self.quality = quality
        self.best: Evaluation | None = None
        self.key: tuple | None = None

    @property
    def loss(self) -> float:
        return self.best.loss if self.best is not None else float("inf")

    def _key(self, evaluation: Evaluation) -> tuple:
        levels = tuple(evaluation.levels)
        return (evaluation.loss, self.quality.lower_bound(levels), sum(levels), levels)

    def offer(self, evaluation: Evaluation) -> bool:
        if not evaluation.solution or evaluation.loss is None:
            return False
        key = self._key(evaluation)
        if self.key is None or key < self.key:
            self.best, self.key = evaluation, key
            return True
        return False

    def rules_out(self, node: Node, bound: float) -> bool:
        """True when neither `node` nor any generalization can beat the incumbent, given a lower bound of their loss
        (ties lost under the tie-breaking above)."""
        if self.key is None:
            return False
        loss, best_bound, best_rank, best_levels = self.key
        if bound != loss:
            return bound > loss
        # A generalization y can only tie: loss(y) = loss, and its level bound and rank are at least node's.
        level_bound = self.quality.lower_bound(node)
        if best_bound != level_bound:
            return best_bound < level_bound
        rank = sum(node)
        return best_rank < rank or (best_rank == rank and best_levels <= tuple(node))


class Deadline:
    def __init__(self, seconds: float | None) -> None:
        self.started = time.perf_counter()
        self.end = None if seconds is None else self.started + seconds

    def passed(self) -> bool:
        return self.end is not None and time.perf_counter() > self.end

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


class Progress:
    """A tqdm bar over the lattice, shown only when asked for (and only on a terminal when `progress` is None)."""

    def __init__(self, total: int, progress: bool | None, description: str) -> None:
        self.bar = None
        if progress is not False:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=description, unit="tr", disable=None if progress is None else False,
                            leave=False)

    def update(self, count: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(count)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

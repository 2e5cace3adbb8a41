"""The genetic algorithm of Meurers, Bild, Do and Prasser (GigaScience 2021; digest P1.5), a heuristic for lattices far
too large for an optimal search (creditcard: 24 quasi-identifiers, about 5 x 10^13 transformations).

An individual is a transformation (one gene per quasi-identifier: its level); a subpopulation is a matrix of levels,
one row per individual. Fitness is the engine's loss (lower is fitter). Two subpopulations evolve side by side:

* initialization: subpopulation 1 starts with the "triangle" (row i has genes 0..i at their highest level and the
  rest at their lowest), which spreads the start over the whole lattice; its other rows and all of subpopulation 2
  are random;
* each iteration, per subpopulation, sorted by fitness: the elite is copied, the crossover share is bred by uniform
  crossover from parents drawn (with replacement, by scaled fitness) from the production share, and the rest are
  mutants of uniformly drawn individuals of the current generation;
* every `immigration_interval` iterations the fittest individuals of the two subpopulations are swapped.

The defaults are the paper's Table 2. Where ARX's `GeneticAlgorithm` differs from the paper, the paper is followed,
and the spot says so (subpopulation size, immigration, mutation count and values).

Non-solutions (more suppression than the limit allows, or a risk model that cannot be met) are ranked by their loss
like every other individual, as ARX ranks every checked transformation by its information loss: the suppression
they would need is in that loss, so they mostly sort low, but a good one still passes its genes on. Only solutions
are offered to the incumbent.

The operators work on whole matrices with numpy; only the evaluation of a new individual is one at a time, through
the evaluator's class cache (rolled up from the cheapest evaluated specialization in the current populations). A
transformation is evaluated once; its fitness is remembered. A row that cannot reach the next generation's ranked
places (elite, parents, immigrants) is not finished (`_evaluate`): when its generalization alone already loses it is
not checked at all, and under a risk-based model (population uniqueness) its suppression stops early; on MACH2019
under population uniqueness 70-85 % of the new rows are then ranked without a check (issue 28).

Two additions to the paper (issue 28), both deterministic for a seed: hill climbs (`_climb`: one attribute a level up
or down, or one up and another down, first improvement; at a local optimum of those, two attributes up and one down
where the pair moves they extend are no solutions, `_triples`), which the operators rarely hit on their own
(creditcard under population uniqueness: 0.41-0.43 at 10 s without them, 0.51-0.53 with them, seeds 0-2), from the
middle of the lattice (every attribute halfway up, `middle`: the balanced generalizations the triangle's extremes
miss) and from the best of the start, then from the best solution after each iteration (policy `climb: false` turns
them off); and `islands`, independent runs of seeds seed, seed + 1, ... on several cores (engine.search.islands).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from ..classes import Evaluation
from ..lattice import Lattice
from .common import Deadline, Incumbent, Progress
from .evaluator import Evaluator

Node = tuple[int, ...]

# Below this, a fraction times a count that should be a whole number (0.2 * 50) is not rounded up by float noise.
_EPSILON = 1e-9


@dataclass(frozen=True)
class GeneticParameters:
    """The parameters of the paper's Table 2 (the defaults), and the seed of the random generator.

    `iterations=None` runs until the deadline (a time limit is then required). The same seed, data and parameters
    give the same result whenever no limit cuts the run short."""

    subpopulation_size: int = 50
    iterations: int | None = 50
    elite_fraction: float = 0.2
    crossover_fraction: float = 0.4
    production_fraction: float = 0.2
    mutation_probability: float = 0.05
    immigration_fraction: float = 0.2
    immigration_interval: int = 10
    seed: int = 0
    # Not in the paper: after each iteration, a hill climb from the best solution (see `GeneticSearch._climb`).
    climb: bool = True
    # Not in the paper: the climb also tries filtered three-attribute moves at a local optimum (`_triples`).
    climb_triples: bool = True
    # Not in the paper: independent runs of seeds seed, seed + 1, ... in as many processes (engine.search.islands).
    islands: int = 1

    def __post_init__(self) -> None:
        for item in fields(self):
            value = getattr(self, item.name)
            if item.name in ("climb", "climb_triples"):
                if not isinstance(value, bool):
                    raise ValueError(f"genetic {item.name} must be true or false, got {value!r}")
            elif item.name.endswith(("_fraction", "_probability")):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                    raise ValueError(f"genetic {item.name} must be a number in [0, 1], got {value!r}")
            elif value is not None or item.name != "iterations":
                if isinstance(value, bool) or not isinstance(value, int):
                    raise ValueError(f"genetic {item.name} must be an integer, got {value!r}")
        if self.subpopulation_size < 2:
            raise ValueError(f"genetic subpopulation_size must be at least 2, got {self.subpopulation_size}")
        if self.iterations is not None and self.iterations < 1:
            raise ValueError(f"genetic iterations must be at least 1, got {self.iterations}")
        if self.islands < 1:
            raise ValueError(f"genetic islands must be at least 1, got {self.islands}")
        if self.immigration_interval < 1:
            raise ValueError(f"genetic immigration_interval must be at least 1, got {self.immigration_interval}")
        if self.seed < 0:
            raise ValueError(f"genetic seed must not be negative, got {self.seed}")
        if self.elite_fraction + self.crossover_fraction > 1 + _EPSILON:
            raise ValueError("genetic elite_fraction + crossover_fraction must be at most 1, got "
                             f"{self.elite_fraction} + {self.crossover_fraction}")

    def counts(self) -> tuple[int, int, int, int]:
        """Per subpopulation: elite, crossover children, parents (production share), immigrants.

        Rounded up as in ARX; the children never crowd out the elite, and there is always at least one parent."""
        size = self.subpopulation_size
        elite = _share(self.elite_fraction, size)
        children = min(_share(self.crossover_fraction, size), size - elite)
        parents = max(1, _share(self.production_fraction, size))
        immigrants = _share(self.immigration_fraction, size)
        return elite, children, parents, immigrants


def _share(fraction: float, size: int) -> int:
    return min(size, max(0, math.ceil(fraction * size - _EPSILON)))


# --- operators (pure functions of arrays and a generator, so each can be tested on a fixed seed) ----------------------

def triangle(lower: np.ndarray, upper: np.ndarray) -> np.ndarray:
    """The paper's triangle pattern (Fig. 5): row i has genes 0..i at the highest level and the rest at the lowest,
    one row per gene, from one attribute generalized fully to all of them (the top)."""
    m = lower.size
    at_top = np.tri(m, m, dtype=bool)   # row i: True in columns 0..i
    return np.where(at_top, upper[None, :], lower[None, :]).astype(np.int64)


def initial_population(lower: np.ndarray, upper: np.ndarray, size: int, rng: np.random.Generator,
                       with_triangle: bool) -> np.ndarray:
    """A subpopulation of `size` individuals: the triangle first (if asked for), the rest uniformly random levels.

    ARX makes each subpopulation m + size large so the whole triangle always fits; the paper's subpopulation has
    `size` individuals, so when the triangle has more rows than that, evenly spaced rows of it are kept, always
    including the top."""
    random_rows = rng.integers(lower, upper + 1, size=(size, lower.size))
    if not with_triangle:
        return random_rows
    rows = triangle(lower, upper)
    if rows.shape[0] > size:
        rows = rows[np.unique(np.round(np.linspace(rows.shape[0] - 1, 0, size)).astype(int))]
    return np.concatenate([rows, random_rows[rows.shape[0]:]])


def select_parents(losses: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """Two independent draws of `count` parents (indices into `losses`, the production share), with replacement,
    each individual weighted by 1 - its loss scaled to [0, 1] within the share (the best weighs 1, the worst 0;
    all equal when the losses are). Shape (2, count)."""
    low, high = float(losses.min()), float(losses.max())
    weights = np.ones(losses.size) if high <= low else 1.0 - (losses - low) / (high - low)
    if weights.sum() <= 0:
        weights = np.ones(losses.size)
    return rng.choice(losses.size, size=(2, count), p=weights / weights.sum())


def crossover(first: np.ndarray, second: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Uniform crossover: each gene of each child comes from either parent with probability 1/2."""
    return np.where(rng.random(first.shape) < 0.5, first, second)


def mutate(individuals: np.ndarray, lower: np.ndarray, upper: np.ndarray, probability: float,
           rng: np.random.Generator) -> np.ndarray:
    """Change between 1 and ceil(probability x genes) genes of each individual, at distinct random positions, each to
    a different level drawn uniformly from the others.

    The paper: "The number of changed genes is randomly chosen between 1 and an upper bound". ARX draws the count
    from 0 (a mutant may be an unchanged copy) and redraws the level as min + round(U (max - min)), which can repeat
    the old level and gives the extreme levels half the weight; here every counted gene really changes. Genes of
    attributes with a single allowed level cannot change and are never picked; the genes available are the others.
    """
    n, m = individuals.shape
    span = (upper - lower + 1).astype(np.int64)
    mutable = span > 1
    available = int(mutable.sum())
    if available == 0 or n == 0:
        return individuals.copy()
    bound = min(available, max(1, math.ceil(probability * available - _EPSILON)))
    counts = rng.integers(1, bound + 1, size=n)
    keys = rng.random((n, m))
    keys[:, ~mutable] = 2.0   # after every mutable gene
    position = np.argsort(np.argsort(keys, axis=1, kind="stable"), axis=1, kind="stable")
    chosen = position < counts[:, None]
    shift = 1 + np.floor(rng.random((n, m)) * (span - 1)[None, :]).astype(np.int64)
    changed = lower[None, :] + (individuals - lower[None, :] + shift) % span[None, :]
    return np.where(chosen, changed, individuals)


def immigrate(first: np.ndarray, first_losses: np.ndarray, second: np.ndarray, second_losses: np.ndarray,
              count: int) -> None:
    """Swap the `count` fittest individuals of two subpopulations sorted by fitness (in place).

    ARX computes the count as `(int) fraction * k`, a cast of the fraction alone, which is 0 for any fraction below
    1, so ARX never exchanges anybody; the paper swaps the fittest `immigration fraction`, as done here."""
    if count <= 0:
        return
    first[:count], second[:count] = second[:count].copy(), first[:count].copy()
    first_losses[:count], second_losses[:count] = second_losses[:count].copy(), first_losses[:count].copy()


def sort_by_fitness(levels: np.ndarray, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Fittest first: least loss, then fewer generalization steps, then the earlier row (a stable order)."""
    order = np.lexsort((levels.sum(axis=1), losses))
    return levels[order], losses[order]


# --- the search --------------------------------------------------------------------------------------------------------

class _Stop(Exception):
    """A limit was reached in the middle of evaluating a generation."""


class GeneticSearch:
    """One run of the genetic algorithm over `lattice`; `run()` returns the counters (`complete` is True only when
    every transformation of the lattice was evaluated, which proves the best found optimal)."""

    def __init__(self, evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                 progress: Progress, parameters: GeneticParameters | None = None, check_limit: int | None = None,
                 evaluated: dict[Node, Evaluation] | None = None) -> None:
        self.parameters = parameters or GeneticParameters()
        if self.parameters.iterations is None and deadline.seconds is None and check_limit is None:
            raise ValueError("the genetic algorithm needs a number of iterations, a time limit or a check limit")
        self.check_limit = check_limit
        # Evaluations made before the run (the automatic choice's samples), already offered to the incumbent.
        self.evaluated = dict(evaluated or {})
        self.stopped: str | None = None
        self.evaluator = evaluator
        self.lattice = lattice
        self.incumbent = incumbent
        self.deadline = deadline
        self.progress = progress
        self.lower = np.asarray(lattice.lower, dtype=np.int64)
        self.upper = np.asarray(lattice.upper, dtype=np.int64)
        self.rng = np.random.default_rng(self.parameters.seed)
        # The places of a sorted subpopulation that selection and immigration look at (see `_evaluate`).
        elite, _, parents, immigrants = self.parameters.counts()
        self._ranked = min(self.parameters.subpopulation_size, max(elite, parents, immigrants))
        # transformation -> (loss, number of classes, whether the loss is only a lower bound of an abandoned check)
        self.fitness: dict[Node, tuple[float, int, bool]] = {}
        self.counters_abandoned = 0
        self.counters_bounded = 0   # rows ranked by their generalization's bound alone, never checked
        self.climbed: set[Node] = set()   # solutions a hill climb started from or passed through
        self.solutions: set[Node] = set()  # the evaluated transformations that are solutions
        # Evaluated individuals a new one may roll its classes up from (the current populations).
        self.pool = np.empty((0, self.lower.size), dtype=np.int64)
        self.pool_classes = np.empty(0, dtype=np.int64)

    # evaluation ------------------------------------------------------------------------------------------------------
    def _hint(self, row: np.ndarray) -> Node | None:
        """The evaluated specialization of `row` in the pool with the fewest classes (cheapest to roll up from)."""
        if self.pool.shape[0] == 0:
            return None
        below = np.all(self.pool <= row[None, :], axis=1)
        if not below.any():
            return None
        index = np.flatnonzero(below)
        return tuple(int(v) for v in self.pool[index[np.argmin(self.pool_classes[index])]])

    def _evaluate(self, rows: np.ndarray, kept: np.ndarray | None = None, ranked: int = 0) -> np.ndarray:
        """The loss of each row, evaluating the transformations not seen before (and offering the solutions to the
        incumbent). Raises _Stop when a limit is reached first.

        `ranked` is how many places of the next generation's order matter (elite, parents, immigrants: selection
        and immigration look at no other rank), and `kept` the exact losses of the rows carried over unchanged (the
        elite). Once `ranked` exact losses are known (the carried-over ones and those of the rows evaluated so
        far), their largest is a threshold: a row sure to lose more than it cannot take one of those places, since
        the threshold only falls as more rows are evaluated. Such a row is ranked by a lower bound of its loss
        instead of finished: its generalization alone (`quality.bound`) is not even checked when it already exceeds
        the threshold, and risk-based suppression stops as soon as the loss it has reached does. Selection then
        sees exactly what it would have seen; only the order among the other rows may differ, and mutation draws
        its sources from them uniformly, so the run is the same algorithm (with the same seed, the same run every
        time). A remembered lower bound is finished when a later threshold could rank it.

        Rows are evaluated most generalized first (the cheapest checks, which set a threshold soonest)."""
        losses = np.empty(rows.shape[0])
        best = [] if kept is None else sorted(float(v) for v in kept)[:ranked]
        order = np.argsort(-self._bounds(rows), kind="stable") if ranked > 0 else np.arange(rows.shape[0])
        for i in order:
            row = rows[i]
            node = tuple(int(v) for v in row)
            threshold = best[ranked - 1] if 0 < ranked <= len(best) else None
            losses[i], exact = self._loss(node, row, threshold)
            if exact and ranked > 0 and (len(best) < ranked or losses[i] < best[-1]):
                best.append(float(losses[i]))
                best.sort()
                del best[ranked:]
        return losses

    def _bounds(self, rows: np.ndarray) -> np.ndarray:
        return np.array([self.evaluator.quality.bound(tuple(int(v) for v in row)) for row in rows])

    def _loss(self, node: Node, row: np.ndarray, threshold: float | None) -> tuple[float, bool]:
        """The loss of one row and whether it is exact (else a lower bound above `threshold`)."""
        known = self.fitness.get(node)
        if known is not None and known[2] and (threshold is None or known[0] <= threshold):
            known = None   # only a lower bound, and it could rank here: finish the evaluation
        if known is not None:
            return known[0], not known[2]
        quality = self.evaluator.quality
        # A row sure to lose more than the threshold is left unfinished only when it cannot beat the best solution
        # either (the threshold may come from non-solutions, which rank by a loss no solution of theirs reaches).
        incumbent = self.incumbent
        if threshold is not None and node not in self.evaluated and quality.suppression_only_adds_loss:
            bound = quality.bound(node)
            if bound > threshold and incumbent.rules_out(node, bound):   # not checked at all
                self.counters_bounded += 1
                return float(bound), False
        cannot_win = None if threshold is None else (
            lambda _node, loss: loss > threshold and incumbent.rules_out(_node, loss))
        evaluation = self.evaluated.pop(node, None)
        if evaluation is None:
            if self._must_stop():
                raise _Stop
            before = self.evaluator.checked
            evaluation = self.evaluator.evaluate(node, self._hint(row), cannot_win)
            self.progress.update(self.evaluator.checked - before)
            self.incumbent.offer(evaluation)
        loss = evaluation.loss
        if loss is None:   # not a solution: ranked by the loss of what it would suppress, as in ARX
            loss = quality.loss(node, quality.codes_to_read(evaluation), evaluation.sizes, evaluation.suppressed)
        if evaluation.solution:
            self.solutions.add(node)
        first = node not in self.fitness
        known = (float(loss), int(evaluation.sizes.size), bool(evaluation.abandoned))
        self.fitness[node] = known
        if evaluation.abandoned:
            self.counters_abandoned += 1
        if first:
            self.pool = np.vstack([self.pool, row[None, :]])
            self.pool_classes = np.append(self.pool_classes, known[1])
        return known[0], not known[2]

    def _must_stop(self) -> bool:
        """The deadline (time, memory) or the check limit, as ARX's GA enforces both; refreshes the bar's status."""
        if self.stopped is None:
            self.stopped = self.deadline.stop_reason(self.evaluator.checked, self.check_limit)
        self.progress.status(self.incumbent, self.deadline)
        return self.stopped is not None

    def _reset_pool(self, populations: list[np.ndarray]) -> None:
        rows = np.unique(np.concatenate(populations), axis=0)
        rows = rows[[tuple(int(v) for v in r) in self.fitness for r in rows]] if rows.size else rows
        self.pool = rows
        self.pool_classes = np.array([self.fitness[tuple(int(v) for v in r)][1] for r in rows], dtype=np.int64)

    # hill climb ------------------------------------------------------------------------------------------------------
    def _neighbours(self, node: Node) -> np.ndarray:
        """One attribute one level up or down (in a seeded random order), then one up and another down (likewise):
        the moves that trade generalization of one attribute for another's at about the same suppression."""
        row = np.asarray(node, dtype=np.int64)
        m = row.size
        steps = []
        for i in range(m):
            for delta in (1, -1):
                if self.lower[i] <= row[i] + delta <= self.upper[i]:
                    moved = row.copy()
                    moved[i] += delta
                    steps.append(moved)
        up = np.flatnonzero(row < self.upper)
        down = np.flatnonzero(row > self.lower)
        pairs = []
        for i in up:
            for j in down:
                if i != j:
                    moved = row.copy()
                    moved[i] += 1
                    moved[j] -= 1
                    pairs.append(moved)
        out = [np.empty((0, m), dtype=np.int64)]
        for group in (steps, pairs):
            if group:
                block = np.array(group, dtype=np.int64)
                out.append(block[self.rng.permutation(block.shape[0])])
        return np.concatenate(out)

    def middle(self) -> Node:
        """Every attribute halfway up its allowed levels (rounded up): the balanced generalization, the opposite of
        the triangle's extremes, where good solutions under the Loss metric often lie (see `_climb`)."""
        return tuple(int(v) for v in (self.lower + self.upper + 1) // 2)

    def _climb(self, start: Node | None = None) -> tuple[Node, float] | None:
        """First-improvement hill climb over `_neighbours`, from `start` (a transformation; default the best
        solution) until none of them is better: returns the local optimum reached and its loss, or None when
        `start` is not a solution or was climbed from before. Not in the paper: crossover and mutation find the
        region of good solutions quickly but then rarely hit the one-level trades that improve them (MACH2019 under
        population uniqueness stayed at 0.6453 from the second second to the twentieth). A neighbour is checked
        only when its generalization alone might beat the point the climb is at, and risk-based suppression stops
        once it cannot, so a climb from a local optimum costs a fraction of a full check per neighbour.

        The climb moves to the first neighbour that is a solution of less loss than the point it is at; only when
        there is none, also among `_triples`, to one of equal loss that the tie-breaking prefers (it became the
        best solution): a plateau is walked only after the moves out of it were tried (on MACH2019 under population
        uniqueness the climb walked equal-loss permutations of the Q attributes at 0.2 s a step before trying the
        three-attribute move out). From `middle()` the climb reaches regions the
        operators and the climb from the best rarely get to (10 s, one core: MACH2019 under population uniqueness
        0.6703 in 3.7 s where the genetic algorithm stays at 0.6453; creditcard under population uniqueness 0.5328
        in 3.6 s)."""
        if start is None:
            if self.incumbent.best is None:
                return None
            start = tuple(self.incumbent.best.levels)
        if start in self.climbed:
            return None
        row = np.asarray(start, dtype=np.int64)
        loss, exact = self._loss(start, row, None)
        if not exact or start not in self.solutions:
            return None
        current, current_loss = start, loss
        while True:
            self.climbed.add(current)
            moved, tie = self._first_better(self._neighbours(current), current_loss)
            if moved is None and self.parameters.climb_triples:
                moved, later = self._first_better(self._triples(current, current_loss), current_loss)
                tie = tie or later
            moved = moved or tie
            if moved is None:
                return current, current_loss
            current, current_loss = moved
            if current in self.climbed:
                return current, current_loss

    def _first_better(self, rows: np.ndarray, current_loss: float
                      ) -> tuple[tuple[Node, float] | None, tuple[Node, float] | None]:
        """The first of `rows` that is a solution of less loss than `current_loss`, and the first that became the
        best solution at an equal loss (the tie-breaking prefers it), each with its loss, or None."""
        tie = None
        for row in rows:
            node = tuple(int(v) for v in row)
            known = self.fitness.get(node)
            if known is not None and not known[2]:
                if node in self.solutions and known[0] < current_loss:
                    return (node, known[0]), tie   # known exactly: only below the best solution
                continue
            loss, _ = self._loss(node, row, current_loss)
            if node in self.solutions:
                if loss < current_loss:
                    return (node, loss), tie
                if tie is None and loss == current_loss and tuple(self.incumbent.best.levels) == node:
                    tie = (node, loss)
        return None, tie

    def _triples(self, node: Node, current_loss: float) -> np.ndarray:
        """Three-attribute moves from a local optimum of `_neighbours`, in a seeded random order, at most as many as
        there are pair moves: two attributes up and a third down, kept only where both pairs they extend (one of the
        two up, the third down) were checked and are not solutions (a little more generalization may make them
        one), and only when the generalization alone might beat the point the climb is at. MACH2019 under
        population uniqueness: from the 0.6453 plateau two Q attributes from level 0 to 1 and religion one down.
        Where every transformation is a solution (a suppression limit of 100 % under k-anonymity) no pair fails
        and there are none: a filter on solutions instead (one up, two down) kept 910 moves on MACH2019 k=5 and
        checked them for 7 s without an improvement."""
        row = np.asarray(node, dtype=np.int64)
        m = row.size
        up = [int(i) for i in np.flatnonzero(row < self.upper)]
        down = [int(i) for i in np.flatnonzero(row > self.lower)]

        def moved(changes: tuple[tuple[int, int], ...]) -> Node:
            out = list(node)
            for index, delta in changes:
                out[index] += delta
            return tuple(out)

        def failed(other: Node) -> bool:
            return other in self.fitness and other not in self.solutions

        candidates = []
        for k in down:
            for a in range(len(up)):
                i = up[a]
                if i == k or not failed(moved(((i, 1), (k, -1)))):
                    continue
                for j in up[a + 1:]:
                    if j != k and failed(moved(((j, 1), (k, -1)))):
                        candidates.append(moved(((i, 1), (j, 1), (k, -1))))
        quality = self.evaluator.quality
        kept = [c for c in candidates if c not in self.fitness and quality.bound(c) < current_loss]
        if not kept:
            return np.empty((0, m), dtype=np.int64)
        block = np.array(kept, dtype=np.int64)
        return block[self.rng.permutation(block.shape[0])[:max(1, m * (m - 1))]]

    def _climb_and_adopt(self, start: Node | None, levels: np.ndarray, losses: np.ndarray, counters: dict) -> None:
        """Climb from `start` (`_climb`) and put the local optimum into the subpopulation `levels` (in place)."""
        top = self._climb(start)
        if top is not None:
            counters["climbs"] += 1
            self._adopt(levels, losses, top)

    def _adopt(self, levels: np.ndarray, losses: np.ndarray, climbed: tuple[Node, float]) -> None:
        """Put a climb's local optimum in place of the least fit row of a subpopulation (in place), unless there."""
        node, loss = climbed
        row = np.asarray(node, dtype=np.int64)
        if np.all(levels == row[None, :], axis=1).any():
            return
        worst = int(np.argmax(losses))
        levels[worst] = row
        losses[worst] = float(loss)

    # one generation --------------------------------------------------------------------------------------------------
    def _next_generation(self, levels: np.ndarray, losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """From a subpopulation sorted fittest first: elite, crossover children, mutants (evaluated)."""
        p = self.parameters
        size = levels.shape[0]
        elite, children, parents, _ = p.counts()
        parents = min(parents, size)
        mutants = size - elite - children
        pairs = select_parents(losses[:parents], children, self.rng)
        bred = crossover(levels[pairs[0]], levels[pairs[1]], self.rng)
        chosen = self.rng.integers(0, size, size=mutants)
        mutated = mutate(levels[chosen], self.lower, self.upper, p.mutation_probability, self.rng)
        new = np.concatenate([bred, mutated])
        return np.concatenate([levels[:elite], new]), np.concatenate([losses[:elite],
                                                                     self._evaluate(new, losses[:elite], self._ranked)])

    def run(self) -> dict:
        p = self.parameters
        counters = {"complete": False, "pruned_by_bound": 0, "pruned_by_privacy": 0, "iterations": 0,
                    "immigrations": 0, "climbs": 0, "seed": p.seed}
        size = p.subpopulation_size
        _, _, _, immigrants = p.counts()
        # Both subpopulations are drawn before either is evaluated, so the random stream (and the result) does not
        # depend on where a deadline falls.
        first = initial_population(self.lower, self.upper, size, self.rng, with_triangle=True)
        second = initial_population(self.lower, self.upper, size, self.rng, with_triangle=False)
        try:
            # Climbs (a 10 s run may see few iterations): from the best of subpopulation 1 as soon as it is known
            # (the second one then has a better solution to be ranked against), then from the middle.
            first_losses = self._evaluate(first, None, self._ranked)
            if p.climb:
                self._climb_and_adopt(None, first, first_losses, counters)
            second_losses = self._evaluate(second, None, self._ranked)
            if p.climb:
                for start in (None, self.middle()):
                    self._climb_and_adopt(start, first, first_losses, counters)
            t = 0
            while p.iterations is None or t < p.iterations:
                if len(self.fitness) >= self.lattice.size:
                    counters["complete"] = True   # every transformation evaluated: the incumbent is the optimum
                    break
                if self._must_stop():
                    break
                self._reset_pool([first, second])
                first, first_losses = self._next_generation(*sort_by_fitness(first, first_losses))
                second, second_losses = self._next_generation(*sort_by_fitness(second, second_losses))
                t += 1
                counters["iterations"] = t
                if p.climb:
                    self._climb_and_adopt(None, first, first_losses, counters)
                # After every `immigration_interval` iterations (ARX also swaps before the first, at t = 0, when
                # subpopulation 2 has not evolved at all; the paper says "every interval iterations").
                if t % p.immigration_interval == 0 and immigrants > 0:
                    first, first_losses = sort_by_fitness(first, first_losses)
                    second, second_losses = sort_by_fitness(second, second_losses)
                    immigrate(first, first_losses, second, second_losses, immigrants)
                    counters["immigrations"] += 1
            else:
                if len(self.fitness) >= self.lattice.size:
                    counters["complete"] = True
        except _Stop:
            pass
        counters["evaluated"] = len(self.fitness)
        counters["abandoned"] = self.counters_abandoned
        counters["bounded"] = self.counters_bounded
        counters["stopped"] = (self.stopped if self.stopped is not None else
                               None if counters["complete"] else f"{counters['iterations']} iterations done")
        return counters


__all__ = ["GeneticParameters", "GeneticSearch", "crossover", "immigrate",
           "initial_population", "mutate", "select_parents", "sort_by_fitness", "triangle"]

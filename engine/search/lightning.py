"""Bottom-up greedy best-first search, ARX's "Lightning" (Meurers et al. 2021, section P1.3 of the digest), and the
machinery it shares with the top-down search (engine.search.topdown).

Lattices of many quasi-identifiers (creditcard's 24 give about 5 x 10^13 transformations) cannot be searched for the
proven optimum. Lightning starts at the bottom and repeatedly expands the checked transformation of least loss that
is not expanded yet: it checks every direct generalization (one level up in one attribute) and queues it by its loss.
Best-first alone never leaves the neighbourhood of the bottom when the loss there is low and many transformations
tie, so every `stepping` = rank(top) expansions it instead dives: a greedy depth-first descent without backtracking
that expands a transformation, moves to its successor of least loss, expands that, and so on to the top (ARX's
`LIGHTNINGAlgorithm.dfs`). A transformation whose lower bound of loss (generalization alone, and the class-size bound
of the transformation it was reached from) cannot beat the best solution is skipped with all its generalizations:
the bound is monotone upwards, so none of them can win ("insufficient utility").

The search ends at the time limit, the memory bound or the check limit with the best solution found, `complete` False.
It is complete (the optimum proven) only when the queue runs empty: every transformation was then checked or is a
generalization of one whose bound ruled it out.

Two deliberate additions to ARX: the top is checked first as a safety net, so a search stopped after one step still
has a solution whenever the top is one (with a suppression limit of 100 % it always is); and a successor whose bound
already rules it out is tagged instead of checked (ARX checks it and prunes it when it is polled; the result is the
same, one check cheaper). As in ARX, transformations that are not solutions are still queued by the loss of their
output (with the records the privacy models could not protect suppressed), so the search can walk through them.
"""
from __future__ import annotations

import heapq

from ..classes import Evaluation
from ..lattice import Lattice
from .common import Deadline, Incumbent, Progress
from .evaluator import Evaluator
from .tags import make_tags

Node = tuple[int, ...]


class GreedySearch:
    """Checking, stopping and queueing shared by the greedy best-first searches.

    `losses` keeps the loss of every checked transformation (its queue priority); `class_bounds` the bound its
    classes give for all its generalizations. A check counts against `check_limit` (transformations checked by the
    evaluator, including any checked before the search started, as ARX counts them). `evaluated` holds evaluations
    made before the search (the automatic choice's samples, already offered to the incumbent), reused, not redone."""

    def __init__(self, evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                 progress: Progress, check_limit: int | None = None,
                 evaluated: dict[Node, Evaluation] | None = None) -> None:
        self.evaluator = evaluator
        self.quality = evaluator.quality
        self.lattice = lattice
        self.incumbent = incumbent
        self.deadline = deadline
        self.progress = progress
        self.check_limit = check_limit
        self.evaluated = dict(evaluated or {})
        self.losses: dict[Node, float] = {}
        self.class_bounds: dict[Node, float] = {}
        self.expanded: set[Node] = set()
        self.queued: set[Node] = set()
        self.queue: list[tuple[float, int, Node]] = []
        self.stopped: str | None = None
        self.counters: dict = {"complete": False, "pruned_by_bound": 0, "expanded": 0}

    # --- stopping ------------------------------------------------------------------------------------------------
    def must_stop(self) -> bool:
        if self.stopped is not None:
            return True
        self.stopped = self.deadline.stop_reason(self.evaluator.checked, self.check_limit)
        self.progress.status(self.incumbent, self.deadline)
        return self.stopped is not None

    # --- checking ------------------------------------------------------------------------------------------------
    def check(self, node: Node, hint: Node | None = None, early_stop: bool = False) -> float:
        """Evaluate `node` once (later calls return the remembered loss), offer it to the incumbent, return its loss.

        A transformation that is not a solution gets the loss of its output as evaluated (classes the models reject
        suppressed, even beyond the limit), which is what ARX orders its queue by. With `early_stop`, risk-based
        suppression stops once the loss it has reached cannot beat the best solution: the node then gets that loss,
        a lower bound of its own that is still worse than the best solution's (engine.search.evaluator)."""
        loss = self.losses.get(node)
        if loss is not None:
            return loss
        evaluation = self.evaluated.pop(node, None)
        if evaluation is None:
            before = self.evaluator.checked
            cannot_win = self.incumbent.rules_out if early_stop else None
            evaluation = self.evaluator.evaluate(node, hint, cannot_win)
            self.progress.update(self.evaluator.checked - before)
            self.incumbent.offer(evaluation)
        loss = evaluation.loss
        if loss is None:
            loss = self.quality.loss(node, self.quality.codes_to_read(evaluation), evaluation.sizes,
                                     evaluation.suppressed)
        self.losses[node] = loss
        self.class_bounds[node] = self.quality.lower_bound_from_classes(evaluation.sizes)
        return loss

    def push(self, node: Node) -> None:
        if node not in self.queued and node not in self.expanded:
            self.queued.add(node)
            heapq.heappush(self.queue, (self.losses[node], sum(node), node))

    def pop(self) -> Node | None:
        """The queued transformation of least loss (then least rank, then smallest levels: deterministic)."""
        while self.queue:
            node = heapq.heappop(self.queue)[2]
            self.queued.discard(node)
            if node not in self.expanded:
                return node
        return None

    def result(self, exhausted: bool) -> dict:
        self.counters["complete"] = exhausted and self.stopped is None
        if self.stopped is not None:
            self.counters["stopped"] = self.stopped
        self.progress.status(self.incumbent, self.deadline)
        return self.counters


class LightningSearch(GreedySearch):
    """ARX's `LIGHTNINGAlgorithm`: best-first from the bottom, a greedy dive every `stepping` expansions."""

    def __init__(self, evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline,
                 progress: Progress, check_limit: int | None = None,
                 evaluated: dict[Node, Evaluation] | None = None) -> None:
        super().__init__(evaluator, lattice, incumbent, deadline, progress, check_limit, evaluated)
        self.insufficient = make_tags(lattice, upward=True)   # these and all generalizations cannot win
        self.stepping = max(sum(lattice.top), 1)              # ARX: the level (rank) of the top, at least 1

    def bound(self, node: Node, parent: Node | None) -> float:
        """A lower bound of the loss of `node` and of all its generalizations."""
        bound = self.quality.bound(node)
        if parent is not None:
            bound = max(bound, self.class_bounds.get(parent, 0.0))
        return bound

    def prune(self, node: Node, parent: Node | None) -> bool:
        """Already known not to win, or shown now by its bound (then tagged with all its generalizations)."""
        if node in self.insufficient:
            return True
        if self.incumbent.rules_out(node, self.bound(node, parent)):
            self.insufficient.tag(node)
            self.counters["pruned_by_bound"] += 1
            return True
        return False

    def expand(self, node: Node) -> Node | None:
        """Check and queue every successor not expanded and not pruned; return the one of least loss."""
        best: Node | None = None
        best_loss = float("inf")
        for successor in self.lattice.successors(node):
            if successor in self.expanded or self.prune(successor, node):
                continue
            if self.must_stop():
                return None
            loss = self.check(successor, node)
            self.push(successor)
            if loss < best_loss:
                best, best_loss = successor, loss
        self.expanded.add(node)
        self.counters["expanded"] += 1
        return best

    def dive(self, node: Node) -> None:
        """Greedy depth-first descent without backtracking (the successor of least loss each time, to the top)."""
        while node is not None and not self.must_stop():
            node = self.expand(node)

    def run(self) -> dict:
        top, bottom = self.lattice.top, self.lattice.bottom
        self.check(top)        # safety net: a solution whenever the top is one, however early the search stops
        self.check(bottom)     # both before any limit is looked at: a run never ends with nothing checked
        self.push(bottom)
        step = 0
        while not self.must_stop():
            node = self.pop()
            if node is None:
                return self.result(exhausted=True)
            if self.prune(node, None):
                continue
            step += 1
            if step % self.stepping == 0:
                self.dive(node)
            else:
                self.expand(node)
        return self.result(exhausted=False)


def lightning(evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline, progress: Progress,
              check_limit: int | None = None, evaluated: dict[Node, Evaluation] | None = None) -> dict:
    return LightningSearch(evaluator, lattice, incumbent, deadline, progress, check_limit, evaluated).run()

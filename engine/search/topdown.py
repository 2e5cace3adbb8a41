"""Top-down greedy best-first search (Meurers et al. 2021, section P1.4 of the digest; ARX's
`LIGHTNINGTopDownAlgorithm`).

The mirror image of Lightning (engine.search.lightning): it starts at the top, which with a suppression limit of 100 %
is always a solution, and repeatedly expands the checked transformation of least loss that is not expanded yet by
checking its direct specializations (one level down in one attribute). Good solutions of high-dimensional tables sit
far above the bottom (much generalization keeps suppression low), so coming from the top reaches them sooner; the paper
found it the best balance of speed and final quality, and much better than bottom-up under population uniqueness.

Not in ARX: under a risk-based model (population uniqueness) the check of a predecessor stops as soon as the
suppression it needs makes it lose to the best solution found, and the predecessor is queued by the loss reached so
far, a lower bound of its own that is still above the best solution's. Nodes that beat the best solution are still
expanded first, and a check that would only have found a worse node costs a few risk estimates instead of a full
bisection (the order among the worse nodes may change, deterministically).

As in ARX there is no bound pruning (the loss bound is monotone upwards only: it says nothing about what lies below)
and no periodic dive. The search ends at the time limit, the memory bound or the check limit with the best solution
found; it is complete (the optimum proven) only when the queue runs empty, i.e. every transformation was checked.
"""
from __future__ import annotations

from collections.abc import Iterator

from ..classes import Evaluation
from ..lattice import Lattice
from .common import Deadline, Incumbent, Progress
from .evaluator import Evaluator
from .lightning import GreedySearch

Node = tuple[int, ...]


def predecessors(lattice: Lattice, node: Node) -> Iterator[Node]:
    """Direct specializations: one attribute one level down (within the attribute's lowest allowed level)."""
    for i, (level, lo) in enumerate(zip(node, lattice.lower)):
        if level > lo:
            yield node[:i] + (level - 1,) + node[i + 1:]


class TopDownSearch(GreedySearch):
    def expand(self, node: Node) -> None:
        for predecessor in predecessors(self.lattice, node):
            if predecessor in self.expanded:
                continue
            if self.must_stop():
                return
            # No hint: the class cache rolls up from a cached specialization, never from above. A predecessor whose
            # risk-based suppression already loses to the best solution is queued by the loss reached so far.
            self.check(predecessor, early_stop=True)
            self.push(predecessor)
        self.expanded.add(node)
        self.counters["expanded"] += 1

    def run(self) -> dict:
        top = self.lattice.top
        self.check(top)   # before any limit is looked at: a run never ends with nothing checked
        self.push(top)
        while not self.must_stop():
            node = self.pop()
            if node is None:
                return self.result(exhausted=True)
            self.expand(node)
        return self.result(exhausted=False)


def top_down(evaluator: Evaluator, lattice: Lattice, incumbent: Incumbent, deadline: Deadline, progress: Progress,
             check_limit: int | None = None, evaluated: dict[Node, Evaluation] | None = None) -> dict:
    return TopDownSearch(evaluator, lattice, incumbent, deadline, progress, check_limit, evaluated).run()

"""The privacy-model protocol: what every model tells the search, and the two ways a model can act.

Each model declares whether it is monotone (a transformation that satisfies it implies every generalization does)
with and without record suppression (Kohlmayer et al. 2015, section 4), and the smallest class size it implies
(k for k-anonymity). The configuration (engine.privacy.configuration) derives from these declarations which
predictive properties the search may use; the search never looks at a model's type or name.

A model acts in one of two ways:

* `ClassModel`: decided per equivalence class (k-anonymity, l-diversity, t-closeness, delta-disclosure,
  beta-likeness, k-map, delta-presence); the classes that violate it are suppressed.
* `RiskBasedModel`: decided on the whole released table (population uniqueness, average risk, sample uniqueness);
  when it does not hold, whole classes are suppressed in a given order until it does (ARX's
  `RiskBasedCriterion.enforce`).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from ..classes import Evaluation
from ..distributions import ClassView
from .suppression_order import SuppressionOrder


class PrivacyModel(ABC):
    name: str = ""
    monotone_with_suppression: bool = False
    monotone_without_suppression: bool = False
    minimal_class_size: int = 1   # every released class holds at least this many records

    def is_monotone(self, suppression_limit: float) -> bool:
        """Monotone under this suppression limit (no suppression allowed means generalization only)."""
        return self.monotone_without_suppression if suppression_limit <= 0 else self.monotone_with_suppression

    def describe(self) -> dict:
        return {"model": self.name}


class ClassModel(PrivacyModel):
    """Decided per class, on what `engine.distributions.ClassView` shows of it (size, sensitive values, population
    matches). `attribute` names the sensitive attribute a model protects, if any."""

    attribute: str | None = None

    @abstractmethod
    def violating(self, classes: "ClassView") -> np.ndarray:
        """Boolean mask of the classes that must be suppressed."""

    def blocks_release(self, classes: "ClassView") -> bool:
        """True when the transformation fails whatever is suppressed (delta-presence: classes of the population
        table that hold no released record cannot be suppressed)."""
        return False

    def suppression(self, classes: "ClassView", minimal: int) -> tuple[np.ndarray, int] | None:
        """The classes to suppress when this is the only class model (`violating` or smaller than `minimal`) and the
        records they hold, in one compiled call where the model has one for this view; None otherwise (the
        evaluator then combines `violating` itself). Why: on the search's thread every numpy or numba call over
        the classes may hand the GIL to the worker thread (engine.ahead), so one call per check costs less than
        four."""
        return None


class RiskBasedModel(PrivacyModel):
    """A table-level model enforced by suppressing whole classes, shortest prefix of an order found by bisection."""

    def __init__(self) -> None:
        self.evaluations = 0   # calls of the risk model, for benchmarks

    @abstractmethod
    def assess(self, kept_sizes: np.ndarray) -> tuple[bool, dict | None]:
        """Whether the model holds for a released table with these class sizes, and what to report about it."""

    def _assess(self, kept_sizes: np.ndarray) -> tuple[bool, dict | None]:
        if kept_sizes.size == 0:
            return True, None   # nothing released, nothing at risk (ARX: an empty distribution fulfils)
        self.evaluations += 1
        return self.assess(kept_sizes)

    def enforce(self, evaluation: Evaluation, order: np.ndarray | Callable[[], np.ndarray], max_suppressed: int,
                visible: np.ndarray | None = None,
                hopeless: Callable[[np.ndarray], bool] | None = None) -> Evaluation:
        """Suppress a prefix of `order` (candidate classes, first to go first) until the model holds. `order` may be
        a function that returns it: it is then called only when the model does not hold as it is (the order sorts
        every class; a search under population uniqueness often finds the model holding at once).

        `visible` marks the classes the model sees (default: those not suppressed); ARX hides completely generalized
        classes from risk models without counting them as suppressed. `hopeless(suppressed)` lets the search stop
        early: the bisection never ends on a prefix shorter than one where the model failed, so when the caller says
        the table with that prefix suppressed already cannot beat its best solution (quality only falls as more is
        suppressed), the evaluation is abandoned instead of finished, with that prefix suppressed.

        The prefix length is found exactly as ARX's `HashGroupifyDistribution.suppressWhileNotFulfilledBinary` does
        (bisection with Java's truncating division, early abort once the records suppressed exceed the limit without
        the model holding, a last look one class further). The bisection assumes the risk falls as more classes go,
        which an estimator need not honour; unlike ARX, the prefix it ends on is then checked once more and a
        transformation whose released table still fails the model is not a solution (fail closed).
        """
        sizes = evaluation.sizes
        kept = ~evaluation.suppressed if visible is None else visible
        holds, details = self._assess(sizes[kept])
        key = self.name
        if holds:
            evaluation.details[key] = details
            return evaluation
        if callable(order):
            order = order()
        order = SuppressionOrder.of(order, sizes)   # read as sizes in order and prefixes (sorted as far as read)
        base_suppressed = evaluation.suppressed_records
        cumulative = np.concatenate([[0], np.cumsum(order.sizes)]) + base_suppressed
        mask = kept.copy()
        last = {"details": details}

        def state(prefix: int) -> str:
            mask[:] = kept
            mask[order.first(prefix)] = False
            ok, last["details"] = self._assess(sizes[mask])
            if ok:
                return "fulfilled"
            return "abort" if cumulative[prefix] > max_suppressed else "not_fulfilled"

        length = order.size
        if length == 0:
            evaluation.solution = False
            evaluation.details[key] = details
            return evaluation
        low, high = 0, length - 1
        mid = (low + high) // 2
        result = "abort"
        while low <= high:
            result = state(mid + 1)
            if result == "abort":
                break
            if result == "fulfilled":
                high = mid - 1
            else:
                if hopeless is not None:
                    suppressed = evaluation.suppressed.copy()
                    suppressed[order.first(mid + 1)] = True
                    if hopeless(suppressed):
                        # Left with the suppression it had reached: its loss is a lower bound of the finished one's.
                        evaluation.suppressed = suppressed
                        evaluation.suppressed_records = int(cumulative[mid + 1])
                        evaluation.solution = False
                        evaluation.abandoned = True
                        evaluation.details[key] = last["details"]
                        return evaluation
                low = mid + 1
            mid = int((low + high) / 2)   # Java's division truncates towards zero
        prefix = mid + 1
        if result != "abort":
            result = state(prefix)
            if result == "not_fulfilled" and prefix < length:
                prefix += 1
                result = state(prefix)
        suppressed = evaluation.suppressed.copy()
        suppressed[order.first(prefix)] = True
        evaluation.suppressed = suppressed
        evaluation.suppressed_records = int(cumulative[prefix])
        evaluation.details[key] = last["details"]
        evaluation.solution = result == "fulfilled" and evaluation.suppressed_records <= max_suppressed
        return evaluation

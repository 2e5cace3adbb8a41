"""Common shape of the quality models.

Every model reports a normalized information loss in [0, 1] (0 = the original data); quality = 1 - loss. Each model
also gives a lower bound of its loss that ignores suppression: it is monotone under generalization and is what the
search prunes with. Models whose bound needs the equivalence classes (Discernibility, AECS) also give one from a class
table, which the search propagates from an evaluated transformation to its generalizations.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from .. import kernels
from ..encoding import EncodedTable

Levels = Sequence[int]
BOUND_MEMO_LIMIT = 1 << 20   # transformations whose bound QualityModel.bound remembers


class QualityModel(ABC):
    name: str = ""
    # Without suppression every model here only loses quality as levels rise; with suppression none does, because
    # more generalization can mean less suppression (Kohlmayer et al. 2015, section 4.3).
    monotone_with_suppression: bool = False
    monotone_without_suppression: bool = True
    # Suppressing more classes of one transformation never lowers the loss (a suppressed record costs at least what
    # it cost generalized). Lets the search abandon a risk-based suppression that can no longer win.
    suppression_only_adds_loss: bool = True

    def is_monotone(self, suppression_limit: float) -> bool:
        return self.monotone_without_suppression if suppression_limit <= 0 else self.monotone_with_suppression

    def suppression_keys(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray,
                         index: np.ndarray | None = None) -> np.ndarray | None:
        """Per class (of classes index[j] of the table (codes, sizes) when `index` is given), the tie-breaker after
        class size when risk-based suppression picks classes to suppress.

        None means ARX's order for models whose per-class loss is just the class size (the entropy family,
        Precision, AECS, Discernibility): size, then first record. Models with a real per-class loss return it, and
        among classes of one size the least lossy, i.e. most specific and riskiest, go first.
        """
        return None

    def __init__(self, table: EncodedTable) -> None:
        self.table = table
        self.n = table.n
        self.d = len(table.attributes)
        # Compiled sums once a search has loaded engine.kernels (the same integers), unless the reference is forced
        # when the model is built (`_compiled`).
        self._reference = kernels.reference_forced()
        self._loaded = None

    def _compiled(self):
        """engine.kernels' functions when this model computes compiled (numba loaded, the reference not forced when
        it was built), else None; remembered once loaded, so a check reads no environment variable."""
        if self._loaded is None and not self._reference:
            self._loaded = kernels.loaded()
        return self._loaded

    def codes_to_read(self, evaluation) -> np.ndarray:
        """An evaluation's codes in the form this model's `loss`, `attribute_losses` and `suppression_terms` read:
        the array (Evaluation.codes, gathered once if the table is lazy). A model that reads a lazy class table
        through its origins (engine.classes.LazyCodes) takes the table as the cache holds it instead
        (Evaluation.held_codes), so that a check gathers no (d, u) codes for it."""
        return evaluation.codes

    def loss_without_suppression(self, levels: Levels) -> float | None:
        """The loss when no record is suppressed, where it depends on the levels alone (None: it needs the classes).
        Must equal `loss(...)` with nothing suppressed, to the last bit: the search uses either."""
        return None

    @abstractmethod
    def lower_bound(self, levels: Levels) -> float:
        """Loss from generalization alone (suppression ignored); monotone in every level."""

    def bound(self, levels: Levels) -> float:
        """`lower_bound`, remembered per transformation: a search asks for the same transformations' bounds many
        times (queue keys, pruning, tie-breaking), and each costs a few small numpy calls. At most
        BOUND_MEMO_LIMIT are kept, so a heuristic's long walk does not grow memory without bound."""
        memo = self.__dict__.setdefault("_bound_memo", {})
        key = tuple(levels)
        value = memo.get(key)
        if value is None:
            value = self.lower_bound(key)
            if len(memo) < BOUND_MEMO_LIMIT:
                memo[key] = value
        return value

    def level_bound_reader(self, upper: Levels):
        """A function of a level vector (every level from 0 to `upper`) returning `bound`'s value to the bit,
        cheaper than `bound` for a search that asks for thousands (the models prepare every bound of the lattice at
        once); None when the model has none."""
        return None

    def lower_bound_from_classes(self, sizes: np.ndarray) -> float:
        """A bound valid for every generalization of the transformation whose class sizes are `sizes`."""
        return 0.0

    def compiled_loss_arguments(self, levels: Levels) -> tuple | None:
        """The arguments after (codes, sizes, minimal, limit) of engine._kernels_numba.suppress_and_loss_terms for
        this model at `levels`, when it computes its loss from those terms (`loss_from_terms`) on the compiled path;
        None otherwise (the evaluator then calls `loss`)."""
        return None

    def loss_from_terms(self, terms: np.ndarray) -> float:
        """The loss from the per-attribute terms `compiled_loss_arguments` asks for: `loss`'s value to the bit."""
        raise NotImplementedError

    @abstractmethod
    def loss(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray, suppressed: np.ndarray) -> float:
        """Normalized loss of a transformation given its classes and which of them are suppressed."""

    def attribute_losses(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray,
                         suppressed: np.ndarray) -> dict[str, float] | None:
        """Normalized loss per quasi-identifier, where the model has one (for reports)."""
        return None

    def quality(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray, suppressed: np.ndarray) -> float:
        return float(min(1.0, max(0.0, 1.0 - self.loss(levels, codes, sizes, suppressed))))

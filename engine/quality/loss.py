"""Loss (Iyengar 2002), in the normalized form of ARX.

The share of a generalized value is the fraction of the hierarchy's rows beneath its label; a suppressed record costs
1 per attribute. Per attribute, S_a sums the shares over all n input records and is normalized between the original
data (every share 1/|D_a|, so S_a = n/|D_a|) and full suppression (S_a = n). Attributes are aggregated by geometric
mean (default), arithmetic mean or sum. The gs factor weighs generalization against suppression; 0.5 is neutral:
generalization costs are scaled by min(1, 2 gs), suppression costs by min(1, 2 (1 - gs)).
"""
from __future__ import annotations

import numpy as np

from ..encoding import EncodedTable
from .base import Levels, QualityModel
from .sums import add_reduce, multiply_reduce, numpy_order


class LevelArrays:
    """Per attribute, one array per level (label rows, label shares), laid end to end in one array of `dtype`, so a
    compiled kernel reads attribute i at its level from one offset: `at(levels)`."""

    def __init__(self, per_attribute: list[list[np.ndarray]], dtype) -> None:
        parts = [part for levels in per_attribute for part in levels]
        self.flat = np.concatenate(parts).astype(dtype)
        self.starts = np.concatenate([[0], np.cumsum([part.size for part in parts])[:-1]]).astype(np.int64)
        self.first = np.concatenate([[0], np.cumsum([len(levels) for levels in per_attribute])[:-1]]).astype(int)

    def at(self, levels: Levels) -> tuple[np.ndarray, np.ndarray]:
        """The array, and where each attribute's array at its level starts in it."""
        return self.flat, self.starts[self.first + np.asarray(levels, dtype=int)]


class Loss(QualityModel):
    name = "loss"

    def __init__(self, table: EncodedTable, aggregation: str = "geometric_mean", gs_factor: float = 0.5) -> None:
        super().__init__(table)
        if aggregation not in {"geometric_mean", "arithmetic_mean", "sum"}:
            raise ValueError(f"unknown aggregation {aggregation!r}")
        self.aggregation = aggregation
        self.generalization_weight = min(1.0, 2.0 * gs_factor)
        self.suppression_weight = min(1.0, 2.0 * (1.0 - gs_factor))
        self._bound_weight = min(self.generalization_weight, self.suppression_weight)
        n = float(self.n)
        self._floor = np.array([n / a.domain_size for a in table.attributes])
        self._span = np.array([n - f for f in self._floor])
        self._positive_span = self._span > 0
        self._safe_span = np.where(self._positive_span, self._span, 1.0)
        # Sums of shares are kept as integers, Σ records x hierarchy rows under their label, and divided by the
        # hierarchy's rows once: exact, so any order of summation (numpy's or the compiled path's) gives the same
        # bits. `_rows[i][level]` holds the rows under each label.
        self._domain = np.array([float(a.domain_size) for a in table.attributes])
        self._rows = [[np.rint(share * a.domain_size).astype(np.int64) for share in a.share] for a in table.attributes]
        # Σ records x rows from generalization alone, per attribute and level, and S_a from it.
        self._generalized_rows = [
            np.array([int(np.dot(a.counts[lv].astype(np.int64), rows[lv])) for lv in range(a.levels)], dtype=np.int64)
            for a, rows in zip(table.attributes, self._rows)
        ]
        self._generalized_sum = [g / float(a.domain_size) for g, a in zip(self._generalized_rows, table.attributes)]
        self._flat_rows: LevelArrays | None = None     # `_weights`, built on first use
        self._flat_shares: LevelArrays | None = None   # `_shares`, built on first use
        self._bound_terms: list[np.ndarray] | None = None        # per attribute and level (lower_bound)
        self._unsuppressed_terms: list[np.ndarray] | None = None  # per attribute and level (nothing suppressed)
        # The same terms plus 1, as Python floats, for the geometric mean of levels alone (`_geometric`)
        self._bound_plus_one: list[list[float]] | None = None
        self._unsuppressed_plus_one: list[list[float]] | None = None
        # The terms as Python floats for the arithmetic mean or the sum of levels alone (`_additive`)
        self._bound_lists: list[list[float]] | None = None
        self._unsuppressed_lists: list[list[float]] | None = None

    def _normalize(self, sums: np.ndarray) -> np.ndarray:
        # (sums - floor) / span where the span is positive, else 0: dividing by the span with 1 in place of the
        # others gives the same quotients without numpy's error state (whose context costs more than the division)
        loss = np.where(self._positive_span, (sums - self._floor) / self._safe_span, 0.0)
        return np.clip(loss, 0.0, 1.0)

    def aggregate(self, per_attribute: np.ndarray) -> float:
        if self.aggregation == "geometric_mean":
            size = per_attribute.size
            if size and numpy_order("geometric", size):   # numpy's bits in Python floats (engine.quality.sums)
                return multiply_reduce([value + 1.0 for value in per_attribute.tolist()]) ** (1.0 / size) - 1.0
            return float(np.prod(per_attribute + 1.0) ** (1.0 / size) - 1.0)
        if self.aggregation == "arithmetic_mean":
            return float(per_attribute.mean())
        return float(per_attribute.sum())

    def suppression_keys(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray,
                         index: np.ndarray | None = None) -> np.ndarray:
        """ARX's per-class loss (`MetricMDNMLoss` for one class): size x share per attribute, un-normalized, through
        the configured aggregation, so classes are ordered exactly as ARX orders them for risk-based suppression.
        With `index`, of the classes index[j] of the whole table (codes, sizes): compiled where numba is loaded
        (engine._suppression_numba, numpy's bits), without gathering their codes first."""
        compiled = self._compiled() if index is not None else None
        if compiled is not None:
            from .. import _suppression_numba as keys_kernel

            shares, offsets = self._shares(levels)
            combine = {"geometric_mean": keys_kernel.PRODUCT, "arithmetic_mean": keys_kernel.MEAN}.get(
                self.aggregation, keys_kernel.SUM)
            keys = keys_kernel.suppression_keys(codes, sizes, index, shares, offsets, combine)
            return keys ** (1.0 / codes.shape[0]) - 1.0 if combine == keys_kernel.PRODUCT else keys
        if index is not None:
            codes, sizes = codes[:, index], sizes[index]
        values = np.empty((codes.shape[0], codes.shape[1]))
        for i, (attribute, level) in enumerate(zip(self.table.attributes, levels)):
            values[i] = sizes * attribute.share[level][codes[i]]
        if self.aggregation == "geometric_mean":
            return np.prod(values + 1.0, axis=0) ** (1.0 / values.shape[0]) - 1.0
        if self.aggregation == "arithmetic_mean":
            return values.mean(axis=0)
        return values.sum(axis=0)

    def _level_terms(self, weight: float, plus: float | None = None) -> list[np.ndarray]:
        """Per attribute and level, the normalized loss of generalization alone weighted by `weight`: the same
        elementwise operations `_normalize` applies to a vector of levels, done once for every level."""
        terms = []
        for i, sums in enumerate(self._generalized_sum):
            weighted = sums * weight if plus is None else sums * weight + plus
            with np.errstate(divide="ignore", invalid="ignore"):
                values = np.where(self._span[i] > 0, (weighted - self._floor[i]) / self._span[i], 0.0)
            terms.append(np.clip(values, 0.0, 1.0))
        return terms

    def _plus_one(self, terms: list[np.ndarray]) -> list[list[float]] | None:
        """Each term plus 1 (the elementwise add `aggregate` does) as Python floats, for `_geometric`; None unless
        the geometric mean is the aggregation and the Python arithmetic gives aggregate's bits here
        (engine.quality.sums)."""
        if self.aggregation != "geometric_mean" or not numpy_order("geometric", len(terms)):
            return None
        return [(t + 1.0).tolist() for t in terms]

    def _python_terms(self, terms: list[np.ndarray]) -> list[list[float]] | None:
        """The terms as Python floats for `_additive`; None unless the aggregation is the arithmetic mean or the sum
        and add_reduce (then the division by the count, as ndarray.mean divides) gives numpy's bits here
        (engine.quality.sums)."""
        if self.aggregation == "geometric_mean" or not numpy_order(self._additive_operation, len(terms)):
            return None
        return [t.tolist() for t in terms]

    @property
    def _additive_operation(self) -> str:
        return "mean" if self.aggregation == "arithmetic_mean" else "add"

    def _additive(self, lists: list[list[float]], levels: Levels) -> float:
        """`aggregate`'s arithmetic mean or sum of the per-attribute terms at `levels` in Python floats, numpy's bits
        (numpy's pairwise order replayed, engine.quality.sums): a branch-and-bound search asks for one bound per
        transformation it queues, and building and reducing an array costs several times the additions."""
        total = add_reduce(list(map(list.__getitem__, lists, levels)))
        return total / len(lists) if self.aggregation == "arithmetic_mean" else total

    @staticmethod
    def _geometric(plus_one: list[list[float]], levels: Levels) -> float:
        """`aggregate`'s geometric mean of the per-attribute terms at `levels` in Python floats: numpy's
        multiply.reduce multiplies left to right and its float64 power is C's pow, as Python's is, so the bits are
        aggregate's; a search asks for thousands of these and the numpy calls cost five times the arithmetic
        (tests/engine/test_quality_level_sums.py compares every level vector)."""
        return multiply_reduce(list(map(list.__getitem__, plus_one, levels))) ** (1.0 / len(plus_one)) - 1.0

    def loss_without_suppression(self, levels: Levels) -> float:
        if self._unsuppressed_terms is None:
            self._unsuppressed_terms = self._level_terms(self.generalization_weight, 0.0)
            self._unsuppressed_plus_one = self._plus_one(self._unsuppressed_terms)
            self._unsuppressed_lists = self._python_terms(self._unsuppressed_terms)
        if self._unsuppressed_plus_one is not None:
            return self._geometric(self._unsuppressed_plus_one, levels)
        if self._unsuppressed_lists is not None:
            return self._additive(self._unsuppressed_lists, levels)
        return self.aggregate(np.array([t[lv] for t, lv in zip(self._unsuppressed_terms, levels)]))

    def level_bound_reader(self, upper: Levels):
        """`lower_bound` of a level vector from the product of its terms plus 1, made for the whole lattice at
        once (the same multiplications in the same order, elementwise), then the same power in Python floats."""
        self.lower_bound(tuple(0 for _ in upper))   # makes the terms and checks the order of operations
        plus_one = self._bound_plus_one
        if plus_one is None or len(upper) != self.d:
            return None
        shape = tuple(hi + 1 for hi in upper)
        product = None
        for axis, (terms, height) in enumerate(zip(plus_one, shape)):
            column = np.array(terms[:height], dtype=np.float64).reshape(
                [height if a == axis else 1 for a in range(len(shape))])
            product = column if product is None else product * column
        item = np.broadcast_to(product, shape).copy().item
        power = 1.0 / len(plus_one)
        return lambda levels: item(levels) ** power - 1.0

    def lower_bound(self, levels: Levels) -> float:
        if self._bound_terms is None:
            self._bound_terms = self._level_terms(self._bound_weight)
            self._bound_plus_one = self._plus_one(self._bound_terms)
            self._bound_lists = self._python_terms(self._bound_terms)
        if self._bound_plus_one is not None:
            return self._geometric(self._bound_plus_one, levels)
        if self._bound_lists is not None:
            return self._additive(self._bound_lists, levels)
        return self.aggregate(np.array([t[lv] for t, lv in zip(self._bound_terms, levels)]))

    def _kept_rows(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray, suppressed: np.ndarray
                   ) -> tuple[np.ndarray, int]:
        """Per attribute, Σ over the kept records of the hierarchy rows under their label (an integer), and the
        suppressed records. The reference sums over whichever side has fewer classes (the kept ones directly, or
        all records minus the suppressed ones); the compiled path (`loss_terms`, over the kept classes) gives the
        same integers."""
        n_suppressed = int(sizes[suppressed].sum())
        count_suppressed = int(np.count_nonzero(suppressed))
        from_kept = count_suppressed * 2 > suppressed.size
        side = ~suppressed if from_kept else suppressed
        side_codes, side_sizes = codes[:, side], sizes[side].astype(np.int64)
        kept = np.empty(self.d, dtype=np.int64)
        for i, (rows, level) in enumerate(zip(self._rows, levels)):
            side_rows = int(np.dot(side_sizes, rows[level][side_codes[i]])) if side_sizes.size else 0
            kept[i] = side_rows if from_kept else self._generalized_rows[i][level] - side_rows
        return kept, n_suppressed

    def _weights(self, levels: Levels) -> tuple[np.ndarray, np.ndarray]:
        """Every attribute's and level's rows under each label in one array, and where attribute i at `levels[i]`
        starts in it."""
        if self._flat_rows is None:
            self._flat_rows = LevelArrays(self._rows, np.int64)
        return self._flat_rows.at(levels)

    def _shares(self, levels: Levels) -> tuple[np.ndarray, np.ndarray]:
        """Every attribute's and level's label shares (EncodedAttribute.share) in one array, and where attribute i
        at `levels[i]` starts in it."""
        if self._flat_shares is None:
            self._flat_shares = LevelArrays([a.share for a in self.table.attributes], np.float64)
        return self._flat_shares.at(levels)

    def compiled_loss_arguments(self, levels: Levels) -> tuple | None:
        if self._compiled() is None:
            return None
        weights, offsets = self._weights(levels)
        return (weights, offsets, self._domain, self.generalization_weight, self.suppression_weight, self._floor,
                self._safe_span, self._positive_span)

    def loss_from_terms(self, terms: np.ndarray) -> float:
        return self.aggregate(terms)

    def _attribute_array(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray, suppressed: np.ndarray) -> np.ndarray:
        compiled = self._compiled()
        if compiled is not None:
            # The sums and the normalization below in one compiled call, to the bit (engine._kernels_numba.loss_terms)
            return compiled.loss_terms(codes, sizes, suppressed, *self.compiled_loss_arguments(levels))
        kept_rows, n_suppressed = self._kept_rows(levels, codes, sizes, suppressed)
        kept = kept_rows.astype(np.float64) / self._domain
        sums = self.generalization_weight * kept + self.suppression_weight * float(n_suppressed)
        return self._normalize(sums)

    def loss(self, levels: Levels, codes: np.ndarray, sizes: np.ndarray, suppressed: np.ndarray) -> float:
        return self.aggregate(self._attribute_array(levels, codes, sizes, suppressed))

    def attribute_losses(self, levels, codes, sizes, suppressed) -> dict[str, float]:
        values = self._attribute_array(levels, codes, sizes, suppressed)
        return {a.name: float(v) for a, v in zip(self.table.attributes, values)}

"""t-closeness (Li et al. 2007): each class's distribution of a sensitive attribute is within Earth Mover's Distance
t of the table's, with three ground distances, computed as ARX does.

* equal: D = 1/2 sum_i |p_i - q_i| over every value of the table (ARX sums 1 + sum over the class's values of
  (|q_i - p_i| - q_i), the same quantity).
* ordered: values in an order (the policy's, the hierarchy's rows, or numeric/text order, engine.sensitive), and
  D = 1/(m-1) sum_i |sum_(j<=i) (p_j - q_j)| with m the number of distinct values of the table.
* hierarchical: the hierarchy's tree; a node at level L (leaves: 0, root: H) costs L/H x min(positive, negative
  extra) of its children, where a leaf's extra is p_i - q_i and an inner node's is the sum of its children's.
  ARX computes this in integers scaled by |table| x |class|; it is done here in floating point on the same scaled
  integers, then divided.

The table's distribution q is over every input record (suppressed ones included), as ARX's `DataManager` gives it.
Suppressed records are never checked: a class that fails is suppressed whole, and the released classes are the
ones that pass. Monotone without suppression (the distance is convex in p, so a merge of passing classes passes),
not with suppression (Kohlmayer et al. 2015).
"""
from __future__ import annotations

import numpy as np

from .base import ClassModel
from .registry import register

CHUNK_CELLS = 1 << 22   # classes x values handled per dense block

# The compiled decision per distance (engine.privacy._distribution_kernels); with "_dense", on a dense histogram.
_SPARSE_KERNELS = {"equal": "t_closeness_equal", "ordered": "t_closeness_ordered",
                   "hierarchical": "t_closeness_hierarchical"}


class TClosenessModel(ClassModel):
    name = "t_closeness"
    monotone_with_suppression = False
    monotone_without_suppression = True

    def __init__(self, attribute: str, t: float, distance: str = "equal", order: list[str] | None = None,
                 source: str | None = None, field: str | None = None) -> None:
        if not 0 <= t <= 1:
            raise ValueError("t is in [0, 1]")
        if distance not in ("equal", "ordered", "hierarchical"):
            raise ValueError(f"unknown distance {distance!r}")
        self.attribute = attribute
        self.t = float(t)
        self.distance = distance
        self.explicit_order = order
        self._source, self._field = source, field
        self._prepared: dict | None = None
        self._kernels: tuple | None = None   # (sensitive, dense kernel, sparse kernel, arguments), `compiled`
        self._equal: tuple | None = None     # (sensitive, q, smallest class read, the equal distance's kernels)

    def _prepare(self, sensitive) -> dict:
        if self._prepared is None or self._prepared["of"] is not sensitive:
            prepared = {"of": sensitive, "q": sensitive.distribution, "m": sensitive.cardinality}
            if self.distance == "ordered":
                prepared["order"] = sensitive.order(self.explicit_order, self._source, self._field)
            if self.distance == "hierarchical":
                prepared["tree"] = sensitive.tree()
                prepared["counts"] = sensitive.counts.astype(np.float64)
            self._prepared = prepared
        return self._prepared

    def distances(self, classes, sensitive) -> np.ndarray:
        """Per class, the distance of its distribution to the table's (the quantity compared with t)."""
        prepared = self._prepare(sensitive)
        distribution = classes.distribution(self.attribute)
        if self.distance == "equal":
            q = prepared["q"]
            p = distribution.counts / classes.sizes[distribution.classes].astype(np.float64)
            qv = q[distribution.values]
            return (1.0 + distribution.per_class(np.abs(qv - p) - qv)) / 2.0
        out = np.empty(classes.class_count)
        step = max(1, CHUNK_CELLS // max(prepared["m"], 1))
        for start in range(0, classes.class_count, step):
            rows = np.arange(start, min(start + step, classes.class_count))
            counts = distribution.dense(rows, prepared["m"])
            if self.distance == "ordered":
                out[rows] = self._ordered(counts, classes.sizes[rows], prepared)
            else:
                out[rows] = self._hierarchical(counts, classes.sizes[rows], prepared)
        return out

    @staticmethod
    def _ordered(counts: np.ndarray, sizes: np.ndarray, prepared: dict) -> np.ndarray:
        order = prepared["order"]
        p = counts[:, order] / sizes[:, None].astype(np.float64)
        cumulative = np.abs(np.cumsum(p - prepared["q"][order][None, :], axis=1))
        # Summed value by value, as ARX does (and as numpy's sum(axis=1) happens to for this layout, but not for a
        # single row, which it sums pairwise): the compiled decision sums in the same order.
        distance = np.zeros(counts.shape[0])
        for column in cumulative.T:
            distance += column
        return distance   # compared with t (m - 1), as ARX does

    @staticmethod
    def _hierarchical(counts: np.ndarray, sizes: np.ndarray, prepared: dict) -> np.ndarray:
        tree = prepared["tree"]
        table_size = prepared["counts"].sum()
        height = float(len(tree))
        sizes = sizes.astype(np.float64)
        extra = prepared["counts"][None, :] * sizes[:, None] - counts * table_size   # p_i Q - q_i P, per leaf
        cost = np.zeros(counts.shape[0])
        for level, parent in enumerate(tree, start=1):
            membership = np.zeros((parent.size, int(parent.max()) + 1))
            membership[np.arange(parent.size), parent] = 1.0    # child -> parent, summed by one product
            positive = np.maximum(extra, 0.0) @ membership
            negative = np.maximum(-extra, 0.0) @ membership
            cost += (level / height) * np.minimum(positive, negative).sum(axis=1)
            extra = positive - negative
        return cost / (table_size * sizes)

    def compiled(self, classes) -> tuple[np.ndarray, np.ndarray]:
        """The compiled decision (engine.privacy._distribution_kernels; numba is loaded): per class the distance
        (as `distances` gives it, to the last bit) and the violation (as `violating` on the reference path), on the
        view's dense histogram when it has one, else on the sparse one."""
        sensitive = classes.sensitive_attribute(self.attribute)
        kernels = self._kernels
        if kernels is None or kernels[0] is not sensitive:
            kernels = self._kernels = (sensitive, *self._kernel_arguments(sensitive))
        _, dense_kernel, sparse_kernel, arguments = kernels
        dense = classes.dense_counts(self.attribute)
        if dense is not None:
            return dense_kernel(dense, classes.sizes, *arguments)
        distribution = classes.distribution(self.attribute)
        return sparse_kernel(distribution.classes, distribution.values, distribution.counts, classes.sizes,
                             *arguments)

    def _kernel_arguments(self, sensitive) -> tuple:
        """The distance's dense and sparse kernels and their arguments after the histogram and the class sizes,
        prepared once per sensitive attribute: less Python per check."""
        from . import _distribution_kernels as compiled

        prepared = self._prepare(sensitive)
        if self.distance == "equal":
            arguments = (prepared["q"], self.t)
        elif self.distance == "ordered":
            arguments = (prepared["q"], prepared["order"].astype(np.int64), self.t * (prepared["m"] - 1.0))
        else:
            tree = prepared["tree"]
            widths = [prepared["m"]] + [int(parent.max()) + 1 for parent in tree]
            starts = np.cumsum([0] + [parent.size for parent in tree[:-1]]).astype(np.int64)
            arguments = (prepared["counts"], np.concatenate(tree).astype(np.int64), starts,
                         np.array(widths, dtype=np.int64), self.t)
        kernel = _SPARSE_KERNELS[self.distance]
        return getattr(compiled, kernel + "_dense"), getattr(compiled, kernel), arguments

    def _equal_kernels(self, classes) -> tuple | None:
        """(the view's dense histogram, whether it is the class-major one, then the prepared kernels and arguments,
        `_equal`) on the compiled path with a dense histogram and the equal distance, else None. The class cache's
        class-major matrix whenever the view holds one, with the kernels that decide the classes smaller than
        `equal_smallest_read` by their size alone, unread; else the value-major one (a joint projection's)."""
        if self.distance != "equal" or getattr(classes, "kernels", None) is None:
            return None
        sensitive = classes.sensitive[0] if classes.sensitive else None
        equal = self._equal
        if equal is None or equal[0] is not sensitive:   # once per attribute, not per check
            if sensitive is None or sensitive.name != self.attribute:
                return None   # a dense histogram is the view's first sensitive attribute's
            from . import _distribution_kernels as compiled

            q = self._prepare(sensitive)["q"]
            equal = self._equal = (sensitive, q, compiled.equal_smallest_read(q, self.t),
                                   compiled.t_closeness_equal_violating_bounded_held,
                                   compiled.t_closeness_equal_suppression_bounded_held,
                                   compiled.t_closeness_equal_violating, compiled.t_closeness_equal_suppression)
        if classes.counts_by_class is not None:
            return classes.counts_by_class, True, equal
        dense = classes.dense_counts(self.attribute)
        return None if dense is None else (dense, False, equal)

    def suppression(self, classes, minimal: int) -> tuple[np.ndarray, int] | None:
        equal, by_class = self._equal, getattr(classes, "counts_by_class", None)
        if equal is not None and by_class is not None and classes.sensitive[0] is equal[0]:
            # the search's common case, prepared (`_equal_kernels`): one compiled call and nothing else
            suppressed, count = equal[4](by_class, classes.sizes, equal[1], self.t, minimal, equal[2])
            return suppressed, int(count)
        found = self._equal_kernels(classes)
        if found is None:
            return None
        dense, by_class, (_, q, smallest_read, _, bounded, _, every) = found
        if by_class:
            suppressed, count = bounded(dense, classes.sizes, q, self.t, minimal, smallest_read)
        else:
            suppressed, count = every(dense, classes.sizes, q, self.t, minimal)
        return suppressed, int(count)

    def violating(self, classes) -> np.ndarray:
        if getattr(classes, "kernels", None) is not None:
            # The equal distance's decision alone, without a division per value and class where the class is far
            # from t, and without reading the classes too small to pass (engine.privacy._distribution_kernels.
            # t_closeness_equal_violating_bounded): the same bits.
            found = self._equal_kernels(classes)
            if found is not None:
                dense, by_class, (_, q, smallest_read, bounded, _, every, _) = found
                if by_class:
                    return bounded(dense, classes.sizes, q, self.t, smallest_read)
                return every(dense, classes.sizes, q, self.t)
            return self.compiled(classes)[1]
        sensitive = classes.sensitive_attribute(self.attribute)
        distance = self.distances(classes, sensitive)
        if self.distance == "ordered":
            return distance > self.t * (self._prepare(sensitive)["m"] - 1.0)
        return ~(distance <= self.t)

    def describe(self) -> dict:
        return {"model": self.name, "attribute": self.attribute, "t": self.t, "distance": self.distance}


@register("t_closeness")
def _from_spec(spec, source: str | None, index: int, context: dict | None = None) -> TClosenessModel:
    return TClosenessModel(spec.attribute, spec.t, spec.distance, spec.order, source, f"privacy[{index}].order")

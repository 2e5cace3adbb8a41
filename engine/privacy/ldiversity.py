"""l-diversity of a sensitive attribute (Machanavajjhala et al. 2007), in ARX's three variants.

* distinct: a class holds at least l distinct values. Monotone with and without suppression (Kohlmayer et al.
  2015): merging classes never loses a value, and merging into a class of l values keeps l.
* entropy: the class's entropy of the values is at least log2(l), with the Shannon (plug-in) estimator or
  Grassberger's (2003) bias-corrected one, H = ln N - 1/N sum n_i G(n_i), G(n) = psi(n) + 1/2 (-1)^n
  (psi((n+1)/2) - psi(n/2)). Classes with fewer than floor(l) values fail before any entropy is computed (ARX's
  `minSize = (int) l` shortcut).
* recursive (c,l): with the class's counts sorted descending r_1 >= r_2 >= ..., r_1 < c (r_l + r_(l+1) + ... + r_n).

Each variant implies classes of at least floor(l) records (`minimal_class_size`), which the search uses for
Flash2P's first phase. Recursive diversity is monotone only without suppression (a merged class can fail where
suppression had removed the failing part). Entropy diversity declares no monotonicity at all, unlike ARX: the Shannon
entropy is concave, so in exact arithmetic merging classes that pass gives one that passes, but ARX's arithmetic
(kept here, so that every class passes or fails exactly as in ARX) is not exact: {x 1, y 1} has 1.0 bit and
{x 3, y 3} 0.9999999999999998, so 2-diversity holds for two classes and fails for their merge
(tests/engine/test_privacy_monotonicity.py); and Grassberger's estimator is not concave for small counts. Declaring
nothing makes the search check what ARX's would prune, so its optimum is the exhaustive one.
"""
from __future__ import annotations

import math

import numpy as np
from scipy.special import digamma

from .base import ClassModel
from .registry import register

LOG2 = math.log(2.0)


def grassberger_g(counts: np.ndarray) -> np.ndarray:
    """G(n) of Grassberger's estimator for integer counts n >= 1."""
    n = counts.astype(np.float64)
    sign = np.where(counts % 2 == 0, 1.0, -1.0)
    return digamma(n) + 0.5 * sign * (digamma((n + 1.0) / 2.0) - digamma(n / 2.0))


class LDiversityModel(ClassModel):
    name = "l_diversity"

    def __init__(self, attribute: str, l: float, variant: str = "distinct", estimator: str = "shannon",
                 c: float | None = None) -> None:
        if l < 1:
            raise ValueError("l must be at least 1")
        if variant not in ("distinct", "entropy", "recursive"):
            raise ValueError(f"unknown l-diversity variant {variant!r}")
        if variant == "recursive" and (c is None or c <= 0):
            raise ValueError("recursive l-diversity needs c > 0")
        self.attribute = attribute
        self.l = float(l)
        self.variant = variant
        self.estimator = estimator if variant == "entropy" else "shannon"
        self.c = None if c is None else float(c)
        self.minimal_size = int(l)   # ARX's minSize: fewer distinct values than this always fail
        self.minimal_class_size = self.minimal_size
        self.monotone_without_suppression = variant != "entropy"
        self.monotone_with_suppression = variant == "distinct"
        self._fast: tuple | None = None   # (sensitive attribute, class-major suppression kernel), `suppression`

    def violating(self, classes) -> np.ndarray:
        if getattr(classes, "kernels", None) is not None:
            if self.variant == "entropy":
                layout = self._layout(classes)
                if layout is not None:
                    return self._entropy_decision(layout[0], classes.sizes, layout[1])
            return self.compiled(classes)[1]
        distribution = classes.distribution(self.attribute)
        distinct = distribution.distinct()
        if self.variant == "distinct":
            return distinct < self.minimal_size
        if self.variant == "entropy":
            return (distinct < self.minimal_size) | (self.entropy(classes) < self.threshold)
        return (distinct < self.minimal_size) | ~self._recursive_holds(distribution, classes.class_count)

    VARIANT_CODES = {("distinct", "shannon"): 0, ("entropy", "shannon"): 1, ("entropy", "grassberger"): 2,
                     ("recursive", "shannon"): 3}

    def compiled(self, classes) -> tuple[np.ndarray, np.ndarray]:
        """The compiled decision (engine.privacy._distribution_kernels; numba is loaded): per class the statistic
        and the violation, the violation bit for bit the reference's (`violating` on a view built without kernels).
        The statistic is the entropy in bits for the entropy variants, equal to `entropy` to the last bit."""
        from . import _distribution_kernels as compiled

        log_table, term_table = self._tables(int(classes.sizes.sum()))
        variant = self.VARIANT_CODES[(self.variant, self.estimator)]
        c = 0.0 if self.c is None else self.c
        dense = classes.dense_counts(self.attribute)
        if dense is not None:
            return compiled.l_diversity_dense(dense, variant, self.minimal_size, self.threshold, c, term_table,
                                              log_table, LOG2)
        distribution = classes.distribution(self.attribute)
        return compiled.l_diversity(distribution.classes, distribution.counts, classes.class_count,
                                    variant, self.minimal_size, self.threshold, c, term_table, log_table, LOG2)

    def suppression(self, classes, minimal: int) -> tuple[np.ndarray, int] | None:
        """The entropy variants on the compiled path with a dense histogram: the decision, the classes smaller than
        `minimal` and the records suppressed in one compiled call (engine.privacy._distribution_kernels.
        l_diversity_entropy_suppression), the same classes as `violating` | (sizes < minimal)."""
        fast = self._fast
        by_class = getattr(classes, "counts_by_class", None)
        if fast is not None and by_class is not None and classes.sensitive[0] is fast[0]:
            # the search's common case, the kernel looked up before (below): one compiled call and nothing else
            suppressed, total = self._with_entropy_arguments(fast[1], by_class, classes.sizes, False, minimal)
            return suppressed, int(total)
        if self.variant != "entropy" or getattr(classes, "kernels", None) is None:
            return None
        layout = self._layout(classes)
        if layout is None:
            return None
        from . import _distribution_kernels as compiled

        dense, value_major = layout
        if value_major:
            kernel = compiled.l_diversity_entropy_suppression
        else:
            kernel = compiled.l_diversity_entropy_suppression_bounded_held
            self._fast = (classes.sensitive[0], kernel)
        suppressed, total = self._with_entropy_arguments(kernel, dense, classes.sizes, value_major, minimal)
        return suppressed, int(total)

    def _layout(self, classes) -> tuple[np.ndarray, bool] | None:
        """The view's dense histogram of the attribute and whether it is value-major: the class cache's
        class-major matrix whenever the view holds one (its kernels leave the classes too small to hold `minimal`
        values unread, two in three of ADULT l=3's), else ClassView.dense_layout's."""
        if classes.counts_by_class is not None and classes.sensitive and \
                classes.sensitive[0].name == self.attribute:
            return classes.counts_by_class, False
        return classes.dense_layout(self.attribute)

    def _with_entropy_arguments(self, kernel, dense, sizes, value_major, *before):
        """kernel(dense, sizes, *before, the decision's arguments), with the arguments kept between checks and
        rebuilt when the kernel refuses (an empty array first: tables that do not cover the view's records)."""
        values = dense.shape[0] if value_major else dense.shape[1]
        arguments = getattr(self, "_entropy_arguments", None)
        if arguments is None or arguments[0] != values:
            arguments = self._entropy_decision_arguments(values, int(sizes.sum()))
        result = kernel(dense, sizes, *before, *arguments[1:])
        if (result[0] if isinstance(result, tuple) else result).size != sizes.size:
            arguments = self._entropy_decision_arguments(values, int(sizes.sum()))
            result = kernel(dense, sizes, *before, *arguments[1:])
        return result

    def _entropy_decision(self, dense: np.ndarray, sizes: np.ndarray, value_major: bool = True) -> np.ndarray:
        """The entropy variants' violation on a dense histogram, (values, classes) or with `value_major` False
        (classes, values), with its classes' sizes: the compiled decision's bits, most classes decided by a bound
        (engine.privacy._distribution_kernels.l_diversity_entropy_violating). The kernel's arguments are kept
        between checks (the per-check Python is most of a small check's cost); the kernel refuses, with an empty
        result, a view whose records the tables do not cover, and the tables are then rebuilt."""
        from . import _distribution_kernels as compiled

        kernel = (compiled.l_diversity_entropy_violating if value_major
                  else compiled.l_diversity_entropy_violating_bounded_held)
        return self._with_entropy_arguments(kernel, dense, sizes, value_major)

    def _entropy_decision_arguments(self, values: int, records: int) -> tuple:
        """(values, then the kernel's arguments after the histogram and sizes), with tables covering `records`; the
        margin is taken for as many records as the tables cover, an upper bound on any class they can serve."""
        log_table, term_table = self._tables(records)
        excess, largest = self._bound_figures
        factor = 2.0 ** (self.threshold + excess + decision_margin(values, log_table.size - 1, largest))
        arguments = (values, self.VARIANT_CODES[("entropy", self.estimator)], self.minimal_size, self.threshold,
                     term_table, log_table, LOG2, factor)
        self._entropy_arguments = arguments
        return arguments

    def _tables(self, records: int) -> tuple[np.ndarray, np.ndarray]:
        """ln n, and the entropy's term per count n (log2 n = ln n / ln 2 for Shannon's estimator, G(n) for
        Grassberger's), for n = 0 .. records (entry 0 is 0: a missing value adds nothing), computed with numpy and
        scipy as the reference computes them, so that the compiled decision uses the same bits."""
        cached = getattr(self, "_table_cache", None)
        if cached is None or cached[0].size <= records:
            n = np.arange(records + 1, dtype=np.int64)
            log_table = np.zeros(records + 1)
            log_table[1:] = np.log(n[1:].astype(np.float64))
            if self.estimator == "grassberger":
                term_table = np.zeros(records + 1)
                term_table[1:] = grassberger_g(n[1:])
            else:
                term_table = log_table / LOG2
            cached = (log_table, term_table)
            self._table_cache = cached
            # For the bound of _entropy_decision: how far a term exceeds log2 n (bits; 0 for Shannon's, whose term
            # is log2 n itself; Grassberger's G(2) exceeds ln 2), and the largest |term| in bits (or more).
            excess = term_table[1:] - log_table[1:] if self.estimator == "grassberger" else np.zeros(1)
            self._bound_figures = (max(0.0, float(excess.max(initial=0.0)) / LOG2),
                                   float(np.abs(term_table).max(initial=0.0)) / LOG2)
        return cached

    @property
    def threshold(self) -> float:
        """log2(l), in bits, computed as ARX does (ln l / ln 2)."""
        return math.log(self.l) / math.log(2.0)

    def entropy(self, classes) -> np.ndarray:
        """Per class, the entropy (bits) of the sensitive values under the model's estimator."""
        distribution = classes.distribution(self.attribute)
        counts = distribution.counts.astype(np.float64)
        total = distribution.per_class(counts)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.estimator == "grassberger":
                weighted = distribution.per_class(counts * grassberger_g(distribution.counts))
                return (np.log(total) - weighted / total) / LOG2
            # ARX: -(sum f log2 f / N - log2 N), each log2 as ln(x) / ln(2)
            weighted = distribution.per_class(counts * (np.log(counts) / LOG2))
            return -((weighted / total) - np.log(total) / LOG2)

    def _recursive_holds(self, distribution, class_count: int) -> np.ndarray:
        # Rank each class's counts from the largest (rank 0); r_1 is rank 0, r_l.. are ranks >= l - 1.
        order = np.lexsort((-distribution.counts, distribution.classes))
        classes = distribution.classes[order]
        counts = distribution.counts[order].astype(np.float64)
        starts = np.searchsorted(classes, classes, side="left")
        rank = np.arange(classes.size) - starts
        largest = np.zeros(class_count)
        largest[classes[rank == 0]] = counts[rank == 0]
        tail = np.bincount(classes, weights=np.where(rank >= self.minimal_size - 1, counts, 0.0),
                           minlength=class_count)
        return largest < tail * self.c

    def describe(self) -> dict:
        out = {"model": self.name, "attribute": self.attribute, "variant": self.variant, "l": self.l}
        if self.variant == "entropy":
            out["estimator"] = self.estimator
        if self.variant == "recursive":
            out["c"] = self.c
        return out


def decision_margin(values: int, records: int, largest_term: float) -> float:
    """Bits that cover every rounding between the entropy bound of the dense decision and the reference's
    floating-point entropy, for classes of at most `records` records over `values` values with terms of at most
    `largest_term` in magnitude (bits).

    Why it suffices (u = 2^-53, first order, each numpy or libm logarithm assumed within 2 ulps, hence the factor 4):
    the reference's sum W of <= `values` products n T(n) is off by at most (values + 1) u sum n |T(n)|, that is
    (values + 1) u N largest_term; dividing by N, the log of N over ln 2, the subtraction and the last division add
    a few u times |log2 N| + |h| <= 2 log2(records) + largest_term; the table's ln n against the true ln n moves the
    plug-in entropy by at most 2u log2(records); Shannon's term log2 n = ln n / ln 2 is itself rounded (2u |T(n)|).
    (values + 16) x 4u x (largest_term + 4 log2(records) + 8) is above their sum. The test
    fl(N x N) >= fl(sum n^2 x factor), with factor = 2^(bar) rounded (Python's power, within an ulp or two), implies
    N^2 / sum n^2 >= 2^bar (1 - 6u), i.e. log2 of it >= bar - 9u: the 1e-12 added covers that. For ADULT (14 values,
    30,162 records) the margin is about 2e-12 bits."""
    unit = 2.0 ** -53
    return 4.0 * (values + 16) * unit * (largest_term + 4.0 * math.log2(records + 1) + 8.0) + 1e-12


@register("l_diversity")
def _from_spec(spec, source: str | None, index: int, context: dict | None = None) -> LDiversityModel:
    return LDiversityModel(spec.attribute, spec.l, spec.variant, spec.estimator, spec.c)

"""What a class-based privacy model sees of one transformation: its equivalence classes and, per class, the
distribution of each sensitive attribute (and, with a research subset, how many population records it matches).

The class cache (engine.classes) groups records by their quasi-identifiers and sensitive values together (a "joint"
class per combination), so that rolling up a transformation carries the sensitive values along for free.
`ClassView` projects those joint classes onto the quasi-identifiers and hands out each sensitive attribute's
per-class distribution as sparse triplets (class, value, count), sorted by class: a class with a handful of values
costs a handful of entries, never a row of the whole domain. On the compiled path with one sensitive attribute of
a small domain, the cache instead keeps quasi-identifier classes with a dense (values, classes) histogram, rolled up
together, and the view hands that matrix out as it is (`dense_counts`; `distribution` reads the sparse entries off
it).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .grouping import combined_key


@dataclass(frozen=True)
class SparseDistribution:
    """Per-class value counts: entry i says class `classes[i]` holds `counts[i]` records with value `values[i]`.
    Entries are sorted by class, and within a class by value; counts are positive."""

    classes: np.ndarray
    values: np.ndarray
    counts: np.ndarray
    class_count: int

    def per_class(self, weights: np.ndarray) -> np.ndarray:
        """Sum of `weights` (one per entry) for every class."""
        return np.bincount(self.classes, weights=weights, minlength=self.class_count)

    def distinct(self) -> np.ndarray:
        return np.bincount(self.classes, minlength=self.class_count)

    def dense(self, rows: np.ndarray, cardinality: int) -> np.ndarray:
        """(len(rows), cardinality) counts of the classes `rows` (ascending); for models that need every value."""
        out = np.zeros((rows.size, cardinality), dtype=np.float64)
        start, stop = np.searchsorted(self.classes, [rows[0], rows[-1] + 1]) if rows.size else (0, 0)
        cls = self.classes[start:stop]
        keep = np.isin(cls, rows)
        position = np.searchsorted(rows, cls[keep])
        out[position, self.values[start:stop][keep]] = self.counts[start:stop][keep]
        return out


@dataclass
class ClassView:
    """The classes of one transformation as the privacy models see them.

    `codes` (attributes, classes) and `sizes` are the quasi-identifier classes in order of first appearance in the
    input. `sensitive_names` lists the sensitive attributes in table order; `distribution(name)` gives one's per-class
    counts. `population_sizes` is set when a research subset is declared: records of the population table per class.
    """

    held_codes: np.ndarray   # the codes, or the class cache's lazy table of them (engine.classes.LazyCodes)
    sizes: np.ndarray
    sensitive: tuple = ()                          # EncodedSensitive, in table order
    joint_class: np.ndarray | None = None          # (joint,) QI class of every joint class
    joint_values: np.ndarray | None = None         # (sensitive, joint) value codes (int64 on the reference path)
    joint_sizes: np.ndarray | None = None          # (joint,)
    population: Callable[["ClassView"], "PopulationCounts"] | None = None
    # engine._distribution_numba when the view was built on the compiled path (project(..., places=...)): its
    # histograms are built compiled, and the distribution-based models decide compiled (engine.privacy).
    kernels: object = None
    # On the compiled path with one sensitive attribute: its value per joint class, from which `dense_counts` builds
    # the counts per (value, class) on first request (engine._distribution_numba.dense_histogram); the models then
    # decide on them, with no sparse sort.
    dense_values: np.ndarray | None = None
    # A view of the class cache's dense form has no joint classes but the cached class-major (classes, values)
    # histogram: `dense_counts` hands out its value-major copy, `distribution` reads the sparse entries off it.
    counts_by_class: np.ndarray | None = None
    _dense: np.ndarray | None = None
    _dense_built: bool = False
    _distributions: dict[str, SparseDistribution] = field(default_factory=dict)
    _population: "PopulationCounts | None" = None

    @property
    def codes(self) -> np.ndarray:
        """The codes (attributes, classes) as an array: a lazy table's (the dense form's, engine.classes) gathered
        once, on first request (the distribution-based models never ask; a solution's quality model does)."""
        codes = self.held_codes
        if not isinstance(codes, np.ndarray):
            codes = self.held_codes = codes.array()
        return codes

    @property
    def class_count(self) -> int:
        return int(self.sizes.size)

    @property
    def sensitive_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.sensitive)

    def dense_counts(self, name: str) -> np.ndarray | None:
        """The dense (values, classes) counts of sensitive attribute `name`, or None where the view has no dense
        form (reference path, several sensitive attributes, or a histogram too large to hold dense)."""
        if not self.sensitive or self.sensitive[0].name != name:
            return None
        if not self._dense_built:
            if self.counts_by_class is not None:
                self._dense = self.kernels.value_major(self.counts_by_class)
            elif self.dense_values is not None:
                dense = self.kernels.dense_histogram(self.joint_class, self.dense_values, self.joint_sizes,
                                                     self.class_count, self.sensitive[0].cardinality)
                self._dense = dense if dense.shape[1] == self.class_count else None
            else:
                return None
            self._dense_built = True
        return self._dense

    def dense_layout(self, name: str) -> tuple[np.ndarray, bool] | None:
        """The dense counts of sensitive attribute `name` in whichever layout costs nothing more: (the value-major
        matrix, True) when it is built (`dense_counts`, on the worker thread after a prefetch), else (the class
        cache's class-major (classes, values) matrix, False) when the view has one, else `dense_counts` built now;
        None where the view has no dense form. For decisions that can read either (entropy l-diversity), so that a
        view rolled up on the search's thread needs no transpose."""
        if not self.sensitive or self.sensitive[0].name != name:
            return None
        if not self._dense_built and self.counts_by_class is not None:
            return self.counts_by_class, False
        dense = self.dense_counts(name)
        return None if dense is None else (dense, True)

    def sensitive_attribute(self, name: str):
        for attribute in self.sensitive:
            if attribute.name == name:
                return attribute
        raise KeyError(f"{name!r} is not a sensitive attribute of this table")

    def distribution(self, name: str) -> SparseDistribution:
        cached = self._distributions.get(name)
        if cached is not None:
            return cached
        if self.counts_by_class is not None and self.sensitive[0].name == name:
            # Built from the class cache's dense form (no joint classes): the same entries, read off the matrix.
            result = SparseDistribution(*self.kernels.sparse_from_counts(self.counts_by_class), self.class_count)
            self._distributions[name] = result
            return result
        if self.joint_class is None or name not in self.sensitive_names:
            raise KeyError(f"{name!r} is not a sensitive attribute of this table")
        row = self.sensitive_names.index(name)
        card = self.sensitive[row].cardinality
        if self.kernels is not None:
            values = self.joint_values[row].astype(np.int64)
            result = SparseDistribution(*self.kernels.histogram(self.joint_class, values,
                                                                self.joint_sizes, self.class_count, card),
                                        self.class_count)
            self._distributions[name] = result
            return result
        key = self.joint_class.astype(np.int64) * card + self.joint_values[row]
        if len(self.sensitive_names) == 1:
            # Joint classes are already distinct (class, value) pairs: no grouping, only a sort.
            order = np.argsort(key, kind="stable")
            unique_key, counts = key[order], self.joint_sizes[order]
        else:
            inverse, uniques = pd.factorize(key, sort=True)
            counts = np.bincount(inverse, weights=self.joint_sizes, minlength=len(uniques)).astype(np.int64)
            unique_key = np.asarray(uniques, dtype=np.int64)
        result = SparseDistribution(unique_key // card, unique_key % card, counts.astype(np.int64), self.class_count)
        self._distributions[name] = result
        return result

    def population_counts(self) -> "PopulationCounts":
        if self._population is None:
            if self.population is None:
                raise KeyError("no research subset is declared: there is no population table")
            self._population = self.population(self)
        return self._population


class PopulationCounts:
    """With a research subset: per released class, the population records it matches (`sizes`), and the population
    records whose generalized values match no class of the subset (classes of the population table holding no
    subset record: ARX's entries with count 0), as (sizes of those classes).

    `unmatched_sizes` may be given as a function that computes them on first read: only delta-presence with a lower
    bound reads them, and grouping the unmatched tuples was half of a compiled count (engine.subset)."""

    def __init__(self, sizes: np.ndarray, unmatched_sizes: np.ndarray | Callable[[], np.ndarray]) -> None:
        self.sizes = sizes
        self._unmatched = unmatched_sizes

    @property
    def unmatched_sizes(self) -> np.ndarray:
        if callable(self._unmatched):
            self._unmatched = self._unmatched()
        return self._unmatched


def project(joint_codes: np.ndarray, joint_sizes: np.ndarray, attributes: int, cardinalities: list[int],
            sensitive: tuple = (), places: np.ndarray | None = None, joint_key: np.ndarray | None = None
            ) -> ClassView:
    """Group joint classes (quasi-identifiers + sensitive rows, `sensitive` the EncodedSensitive of those rows) into
    quasi-identifier classes. With `places` (the class cache's fixed radix, one place per row; only when numba is
    loaded, engine.kernels) the grouping and the histograms run compiled (engine._distribution_numba), with the
    same result to the last bit. `joint_key` (the joint classes' keys in that radix, when the cache holds them) saves
    rebuilding the quasi-identifier key from every attribute."""
    if not sensitive:
        return ClassView(joint_codes, joint_sizes)
    if places is not None:
        from . import _distribution_numba as compiled

        dense_values = None
        if joint_key is not None and len(sensitive) == 1:
            # One sensitive row, the radix's lowest place: quotient and remainder are the class and the value.
            codes, sizes, inverse, dense_values = compiled.project_dense(joint_codes, joint_sizes, joint_key,
                                                                         attributes, int(places[attributes - 1]))
        elif joint_key is not None:
            # The sensitive rows hold the radix's lowest places: the quasi-identifier key is the quotient.
            codes, sizes, inverse = compiled.project_keyed(joint_codes, joint_sizes, joint_key, attributes,
                                                           int(places[attributes - 1]))
        else:
            codes, sizes, inverse = compiled.project(joint_codes, joint_sizes, attributes, places)
        # The value rows stay a view of the joint codes: only a sparse histogram reads them (as int64).
        return ClassView(codes, sizes, tuple(sensitive), inverse, joint_codes[attributes:], joint_sizes,
                         kernels=compiled, dense_values=dense_values)
    qi = joint_codes[:attributes]
    key = combined_key(qi, cardinalities)
    inverse, uniques = pd.factorize(key, sort=False)
    count = len(uniques)
    member = np.empty(count, dtype=np.int64)
    member[inverse[::-1]] = np.arange(inverse.size)[::-1]   # first joint class of each class
    sizes = np.bincount(inverse, weights=joint_sizes, minlength=count).astype(np.int64)
    return ClassView(qi[:, member], sizes, tuple(sensitive), inverse.astype(np.int64),
                     joint_codes[attributes:].astype(np.int64), joint_sizes)


def view_from_records(codes: np.ndarray, sizes: np.ndarray, record_class: np.ndarray,
                      sensitive: "list | tuple" = ()) -> ClassView:
    """A view of classes given per record (local recoding's combined output): `sensitive` are EncodedSensitive."""
    if not sensitive:
        return ClassView(codes, sizes)
    rows = np.stack([s.records for s in sensitive])
    cards = [s.cardinality for s in sensitive]
    key = combined_key(np.vstack([record_class[None, :], rows]), [max(int(sizes.size), 1)] + cards)
    inverse, uniques = pd.factorize(key, sort=False)
    member = np.empty(len(uniques), dtype=np.int64)
    member[inverse] = np.arange(inverse.size)
    joint_sizes = np.bincount(inverse, minlength=len(uniques)).astype(np.int64)
    return ClassView(codes, sizes, tuple(sensitive), record_class[member].astype(np.int64), rows[:, member],
                     joint_sizes)

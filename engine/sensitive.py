"""Sensitive attributes, encoded once per table: what the attribute-disclosure models (l-diversity, t-closeness,
delta-disclosure, beta-likeness) compare each equivalence class against.

A sensitive attribute is never generalized. Each record's value becomes a dense code (values sorted, as
`np.unique` gives them); the table-wide distribution is computed over every input record, suppressed or not, as
ARX's `DataManager.getDistribution` does, so a class is always compared with the data the custodian holds and not
with what a transformation happens to release.

Two optional structures serve t-closeness: an order of the values (ordered distance) and the tree of the attribute's
hierarchy (hierarchical distance, Li et al. 2007).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .codes import sorted_codes
from .errors import InputError
from .hierarchy import Hierarchy


@dataclass(frozen=True)
class EncodedSensitive:
    name: str
    records: np.ndarray           # (n,) code of each record's value
    values: np.ndarray            # (m,) the value of each code
    counts: np.ndarray            # (m,) records per value
    hierarchy: Hierarchy | None = None

    @property
    def cardinality(self) -> int:
        return int(self.values.size)

    @property
    def distribution(self) -> np.ndarray:
        """Share of the records holding each value."""
        return self.counts / float(self.counts.sum())

    def order(self, explicit: "list[str] | str | None" = None, source: str | None = None, field: str | None = None
              ) -> np.ndarray:
        """Codes from the lowest to the highest value, for the ordered distance.

        An order listed in the policy wins; `"hierarchy"` takes the attribute's hierarchy rows (as a custodian wrote
        them). By default the order is ARX's (`DataManager.getOrder` sorts by the attribute's data type): numeric
        when every value is a number, else text order (np.unique's, which is Java's String order for text in the
        Basic Multilingual Plane)."""
        if isinstance(explicit, list):
            position = {value: i for i, value in enumerate(explicit)}
            if len(position) != len(explicit):
                raise InputError(source, field, "the order lists a value twice")
            missing = [str(v) for v in self.values if v not in position]
            if missing:
                raise InputError(source, field, f"{len(missing)} value(s) of {self.name!r} are not in the order, "
                                                f"first: {missing[0]!r}")
            rank = np.array([position[v] for v in self.values])
        elif explicit == "hierarchy":
            if self.hierarchy is None:
                raise InputError(source, field, f"order: hierarchy needs a hierarchy on {self.name!r}")
            position = {value: i for i, value in enumerate(self.hierarchy.values.astype(str))}
            rank = np.array([position[v] for v in self.values])
        else:
            try:
                rank = np.array([float(v) for v in self.values])
            except ValueError:
                rank = np.arange(self.cardinality)   # np.unique already sorted the values as text
        return np.argsort(rank, kind="stable")

    def tree(self) -> "list[np.ndarray]":
        """The hierarchy as parent maps: entry L-1 maps each node of level L-1 (level 0: the codes) to its parent at
        level L, for L = 1 .. height. The last level must be a single root, as in every ARX hierarchy ('*')."""
        if self.hierarchy is None:
            raise ValueError("no hierarchy")
        rows = {value: i for i, value in enumerate(self.hierarchy.values.astype(str))}
        row = np.array([rows[v] for v in self.values])
        parents, current = [], np.arange(self.cardinality)
        for level in range(1, self.hierarchy.levels):
            codes, _ = self.hierarchy.level_codes(level)
            label = codes[row]                                   # label code at this level of each value
            nodes, dense = np.unique(label, return_inverse=True)
            parent = np.zeros(int(current.max()) + 1, dtype=np.int64)
            parent[current] = dense.ravel()
            parents.append(parent)
            current = dense.ravel()
        if np.unique(current).size != 1:
            raise InputError(self.hierarchy.source, self.name,
                             "hierarchical t-closeness needs a hierarchy whose last level is one value (a root)")
        return parents


def encode_sensitive(name: str, column: np.ndarray, hierarchy: Hierarchy | None = None,
                     source: str | None = None) -> EncodedSensitive:
    values, records = sorted_codes(column)
    if hierarchy is not None:
        known = set(hierarchy.values.astype(str))
        unknown = [str(v) for v in values if v not in known]
        if unknown:
            raise InputError(source, f"attributes.{name}",
                             f"{len(unknown)} value(s) in the data are not in the hierarchy, first: {unknown[0]!r}")
    counts = np.bincount(records.ravel(), minlength=values.size).astype(np.int64)
    return EncodedSensitive(name, records.astype(np.int64).ravel(), values, counts, hierarchy)

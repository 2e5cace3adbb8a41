"""Integer encoding of the quasi-identifiers, done once per table.

Every record's value becomes a dense code among the values present in the data; for each hierarchy level a lookup
array maps those codes to dense codes of the generalized labels. Applying a transformation is then one fancy-index
per attribute, and the per-level statistics the quality models need (label shares, record counts) are precomputed.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from .codes import sorted_codes
from .errors import InputError
from .grouping import group
from .hierarchy import Hierarchy
from .sensitive import encode_sensitive

__all__ = ["EncodedAttribute", "EncodedTable", "encode_attribute", "encode_table", "sorted_codes"]


@dataclass(frozen=True)
class EncodedAttribute:
    name: str
    hierarchy: Hierarchy
    records: np.ndarray            # (n,) dense code of each record's original value
    to_level: list[np.ndarray]     # per level: (m,) original-value code -> generalized code at that level
    labels: list[np.ndarray]       # per level: label of each generalized code
    share: list[np.ndarray]        # per level: hierarchy rows under the label / hierarchy rows (Loss)
    counts: list[np.ndarray]       # per level: records per generalized code
    min_level: int
    max_level: int

    @property
    def levels(self) -> int:
        return len(self.to_level)

    @property
    def domain_size(self) -> int:
        return len(self.hierarchy)

    def cardinality(self, level: int) -> int:
        return int(self.labels[level].size)

    def roll_up(self, from_level: int, to_level: int) -> np.ndarray:
        """Map generalized codes at `from_level` to codes at `to_level` (>= from_level); valid by monotonicity."""
        first_member = np.zeros(self.cardinality(from_level), dtype=np.int64)
        first_member[self.to_level[from_level]] = np.arange(self.to_level[from_level].size)
        return self.to_level[to_level][first_member]


def encode_attribute(name: str, column: np.ndarray, hierarchy: Hierarchy, source: str | None = None,
                     min_level: int | None = None, max_level: int | None = None) -> EncodedAttribute:
    present, records = sorted_codes(column)
    originals = hierarchy.values.astype(str)
    order = np.argsort(originals, kind="stable")
    position = np.searchsorted(originals, present, sorter=order)
    position = np.minimum(position, originals.size - 1)
    row = order[position]
    unknown = originals[row] != present
    if unknown.any():
        offending = ", ".join(repr(str(v)) for v in present[unknown][:10])
        raise InputError(source, f"attributes.{name}",
                         f"{int(unknown.sum())} value(s) in the data are not in the hierarchy, first: {offending}")
    n_rows = len(hierarchy)
    to_level, labels, share, counts = [], [], [], []
    record_counts = np.bincount(records, minlength=present.size)
    for level in range(hierarchy.levels):
        row_codes, row_labels = hierarchy.level_codes(level)
        rows_per_label = np.bincount(row_codes, minlength=row_labels.size)
        used_codes = row_codes[row]                         # hierarchy label code of each present value
        if level == 0:
            # Level-0 codes are the record codes themselves, so class tables at level 0 roll up directly.
            dense_labels, dense = used_codes, np.arange(present.size)
        else:
            dense_labels, dense = np.unique(used_codes, return_inverse=True)
        to_level.append(dense.astype(np.int64).ravel())
        labels.append(row_labels[dense_labels])
        share.append(rows_per_label[dense_labels] / n_rows)
        counts.append(np.bincount(dense.ravel(), weights=record_counts, minlength=dense_labels.size).astype(np.int64))
    lo = 0 if min_level is None else min_level
    hi = hierarchy.max_level if max_level is None else max_level
    return EncodedAttribute(name, hierarchy, records.astype(np.int64), to_level, labels, share, counts, lo, hi)


@dataclass(frozen=True)
class EncodedTable:
    """The quasi-identifiers of one table, encoded; `n` records, attributes in policy order. `sensitive` holds the
    sensitive attributes a privacy model names (engine.sensitive), in policy order."""

    attributes: list[EncodedAttribute]
    n: int
    sensitive: tuple = ()
    population: object = None   # engine.subset.PopulationTable when a research subset is declared

    def sensitive_attribute(self, name: str):
        return next(s for s in self.sensitive if s.name == name)

    @property
    def names(self) -> list[str]:
        return [a.name for a in self.attributes]

    @property
    def heights(self) -> tuple[int, ...]:
        return tuple(a.levels for a in self.attributes)

    def base_classes(self) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
        """Distinct level-0 tuples: (codes (d, m), counts (m,), class of each record (n,))."""
        codes = np.stack([a.records for a in self.attributes])
        return group(codes, np.ones(self.n, dtype=np.int64), [a.cardinality(0) for a in self.attributes])


def encode_table(frame: pd.DataFrame, hierarchies: dict[str, Hierarchy], source: str | None = None,
                 level_bounds: dict[str, tuple[int | None, int | None]] | None = None,
                 sensitive: dict[str, Hierarchy | None] | None = None) -> EncodedTable:
    """`sensitive` names the sensitive attributes the privacy models use, each with its hierarchy or None."""
    bounds = level_bounds or {}
    attributes = [
        encode_attribute(name, frame[name].to_numpy(), h, source, *bounds.get(name, (None, None)))
        for name, h in hierarchies.items()
    ]
    encoded_sensitive = tuple(encode_sensitive(name, frame[name].to_numpy(), h, source)
                              for name, h in (sensitive or {}).items())
    return EncodedTable(attributes, int(frame.shape[0]), encoded_sensitive)

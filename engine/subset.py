"""Research subsets (delta-presence, k-map): the input table is the population, the subset is what is released.

`resolve_subset` turns a policy's subset rule into a mask over the input's rows. `PopulationTable` counts, for the
classes of a transformation of the subset, how many population records fall into each, and how many fall into
generalized tuples that hold no subset record (ARX's classes with count 0). The population is grouped once into its
distinct tuples; per transformation each tuple's generalized codes are looked up in the subset's code space (a label
the subset never shows gets a code past the subset's) and matched to the subset's classes by key. Once numba is
loaded (engine.kernels) that match runs compiled (engine._population_numba), from rows of every tuple's codes per
attribute and level built once; the numpy code stays the reference it is tested against.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import kernels
from .classes import combined_key, group
from .distributions import PopulationCounts
from .encoding import EncodedTable
from .errors import InputError
from .hierarchy import Hierarchy


def subset_specs(policy) -> list[tuple[str, object]]:
    specs = [(f"privacy[{i}]", spec) for i, spec in enumerate(policy.privacy)]
    return [(where, spec.subset) for where, spec in specs if getattr(spec, "subset", None) is not None]


def resolve_subset(policy, frame: pd.DataFrame) -> np.ndarray | None:
    """The policy's research subset as a boolean mask over the input rows, or None when it declares none."""
    found = subset_specs(policy)
    if not found:
        return None
    where, spec = found[0]
    field = f"{where}.subset"
    n = int(frame.shape[0])
    if spec.file is not None:
        path = policy.resolve(spec.file)
        if not path.is_file():
            raise InputError(policy.source, f"{field}.file", f"subset file {str(path)!r} does not exist")
        rows = _read_row_numbers(path, n)
        mask = np.zeros(n, dtype=bool)
        mask[rows] = True
    elif spec.where is not None:
        mask = np.ones(n, dtype=bool)
        for name, values in spec.where.items():
            if name not in frame.columns:
                raise InputError(policy.source, f"{field}.where.{name}", "no such column in the input")
            mask &= frame[name].isin([str(v) for v in values]).to_numpy()
    else:
        rng = np.random.default_rng(spec.seed)
        mask = np.zeros(n, dtype=bool)
        mask[rng.choice(n, size=max(1, int(round(spec.sample * n))), replace=False)] = True
    if not mask.any():
        raise InputError(policy.source, field, "the research subset selects no record")
    return mask


def _read_row_numbers(path: Path, n: int) -> np.ndarray:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), None, f"cannot read the subset file ({type(exc).__name__})") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if not line.isdigit():
            raise InputError(str(path), f"line {number}", "expected a 0-based row number of the input")
        row = int(line)
        if row >= n:
            raise InputError(str(path), f"line {number}", f"row {row} is past the input's {n} records")
        rows.append(row)
    if len(set(rows)) != len(rows):
        raise InputError(str(path), None, "a row number is listed twice")
    return np.array(rows, dtype=np.int64)


class PopulationTable:
    def __init__(self, sample: EncodedTable, population: pd.DataFrame, hierarchies: dict[str, Hierarchy]) -> None:
        self.sample = sample
        self.records = int(population.shape[0])
        codes, lookups = [], []
        self.widths: list[list[int]] = []   # per attribute and level: the subset's codes plus the unknown labels
        for attribute in sample.attributes:
            values, record_codes = np.unique(population[attribute.name].to_numpy().astype(str), return_inverse=True)
            codes.append(record_codes.ravel())
            hierarchy = hierarchies[attribute.name]
            row_of = pd.Index(hierarchy.values.astype(str)).get_indexer(values)
            if (row_of < 0).any():
                raise InputError(hierarchy.source, attribute.name, "a population value is not in the hierarchy")
            per_level, widths = [], []
            for level in range(attribute.levels):
                row_codes, row_labels = hierarchy.level_codes(level)
                labels = row_labels[row_codes[row_of]].astype(str)
                code = pd.Index(attribute.labels[level].astype(str)).get_indexer(labels).astype(np.int64)
                # A label the subset never shows gets a code of its own past the subset's codes, so population
                # classes holding no subset record stay apart from each other.
                unknown = code < 0
                extra, _ = pd.factorize(labels[unknown])
                code[unknown] = attribute.cardinality(level) + extra
                per_level.append(code)
                widths.append(attribute.cardinality(level) + (int(extra.max()) + 1 if extra.size else 0))
            lookups.append(per_level)
            self.widths.append(widths)
        cards = [int(c.max()) + 1 for c in codes]
        self.codes, self.counts, _ = group(np.stack(codes), np.ones(self.records, dtype=np.int64), cards)
        self.lookups = lookups
        self._rows: tuple[np.ndarray, np.ndarray] | None = None   # `level_rows`, built on the first compiled count

    def level_rows(self) -> tuple[np.ndarray, np.ndarray]:
        """Every distinct tuple's generalized code per attribute and level, int32 (one row each, attribute by
        attribute), and select[i, level], the row of attribute i at that level: the compiled count reads one row
        per attribute instead of gathering through the lookups at every check."""
        if self._rows is None:
            heights = [len(per_level) for per_level in self.lookups]
            select = np.zeros((len(heights), max(heights, default=0)), dtype=np.int64)
            rows = []
            for i, (per_level, column) in enumerate(zip(self.lookups, self.codes)):
                for level, lookup in enumerate(per_level):
                    select[i, level] = len(rows)
                    rows.append(lookup[column].astype(np.int32))
            self._rows = (np.stack(rows) if rows else np.zeros((0, self.counts.size), np.int32), select)
        return self._rows

    def places(self, levels: tuple[int, ...]) -> np.ndarray | None:
        """Each attribute's place in a mixed-radix key over the widths at `levels` (last attribute 1), or None when
        their product passes 2^62 (the count then takes the reference path, which re-densifies its keys)."""
        places = np.ones(len(levels), dtype=np.int64)
        span = 1
        for i in range(len(levels) - 1, -1, -1):
            places[i] = span
            span *= self.widths[i][levels[i]]
            if span >= 1 << 62:
                return None
        return places

    def counts_for(self, levels: tuple[int, ...], classes) -> PopulationCounts:
        """Population records per class of `classes` (the subset's classes at `levels`), and the sizes of the
        population's generalized tuples that match no subset class (in order of first appearance): compiled where
        numba is loaded, the numpy reference otherwise."""
        compiled = kernels.default()
        places = self.places(levels) if compiled is not None else None
        if places is not None:
            from ._population_numba import population_counts, unmatched_sizes

            rows, select = self.level_rows()
            sizes, keys, pending = population_counts(rows, select, np.asarray(levels, dtype=np.int64), places,
                                                     self.counts, np.asarray(classes.codes))
            return PopulationCounts(sizes, lambda: unmatched_sizes(keys, pending, self.counts))
        return self.reference_counts_for(levels, classes)

    def reference_counts_for(self, levels: tuple[int, ...], classes) -> PopulationCounts:
        """`counts_for` in numpy: the reference the compiled count is tested against."""
        generalized = np.stack([lookup[level][row] for lookup, level, row in zip(self.lookups, levels, self.codes)])
        cards = [a.cardinality(level) for a, level in zip(self.sample.attributes, levels)]
        widths = [w[level] for w, level in zip(self.widths, levels)]
        known = np.all(generalized < np.array(cards)[:, None], axis=0)
        # One key computation for both sides: combined_key re-densifies on overflow, so keys of separate calls
        # would not be comparable.
        both = combined_key(np.concatenate([classes.codes.astype(np.int64), generalized], axis=1), widths)
        class_keys, keys = both[:classes.class_count], both[classes.class_count:]
        order = np.argsort(class_keys, kind="stable")
        position = np.searchsorted(class_keys, keys, sorter=order)
        position = np.minimum(position, max(class_keys.size - 1, 0))
        matched = known & (class_keys[order[position]] == keys) if class_keys.size else np.zeros_like(known)
        sizes = np.bincount(order[position[matched]], weights=self.counts[matched],
                            minlength=classes.class_count).astype(np.int64)
        unmatched = ~matched
        if unmatched.any():
            _, unmatched_sizes, _ = group(generalized[:, unmatched], self.counts[unmatched], widths)
        else:
            unmatched_sizes = np.zeros(0, dtype=np.int64)
        return PopulationCounts(sizes, unmatched_sizes)

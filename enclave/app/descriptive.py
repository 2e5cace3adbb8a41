"""Descriptive statistics of a numeric attribute by group, and the histogram (or bar chart) of any attribute.

Released values are labels; an attribute is numeric when it is not a quasi-identifier (those are generalized into
intervals and groups, which are categories) and every label it has, other than a missing value, reads as a finite
number: the insensitive and sensitive attributes a custodian releases as they are (an amount, a length of stay).
The number of each label is parsed once per request (a few thousand labels at most), and every per-record step is
an array operation on the integer codes: the value of each record is `numbers[codes]`, group sums are `np.bincount`
with weights, and medians, minima and maxima come from one sort of integer keys (group, rank of the value).
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from .analyses import CohortSpec
from .table import MISSING, CodedTable, Column, FilterError, percent

MAX_BINS = 100


def label_numbers(column: Column) -> np.ndarray | None:
    """The number of each label (NaN for a missing value), or None when some other label is not a finite number.
    Parsed once per column (kept on the column, as its label positions are)."""
    if "_numbers" not in column.__dict__:
        object.__setattr__(column, "_numbers", _parse_numbers(column))
    return column.__dict__["_numbers"]


def _parse_numbers(column: Column) -> np.ndarray | None:
    out = np.full(len(column.labels), np.nan)
    seen = False
    for i, label in enumerate(column.labels):
        if label == MISSING:
            continue
        try:
            value = float(label.strip())
        except ValueError:
            return None
        if not math.isfinite(value):
            return None
        out[i] = value
        seen = True
    return out if seen else None


def numeric_attributes(table: CodedTable, quasi_identifiers: Iterable[str]) -> list[str]:
    """Attributes released as numbers: not quasi-identifiers, every label a number (or missing)."""
    qis = set(quasi_identifiers)
    return [name for name in table.names if name not in qis and label_numbers(table.columns[name]) is not None]


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def _group_stats(values: np.ndarray, groups: np.ndarray, n_groups: int) -> list[dict]:
    """count, mean, sd (n - 1), median, min, max and sum of `values` per group code (0 .. n_groups - 1)."""
    count = np.bincount(groups, minlength=n_groups)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # empty groups; values near 1e308
        total = np.bincount(groups, weights=values, minlength=n_groups)
        mean = total / count
        squares = np.bincount(groups, weights=(values - mean[groups]) ** 2, minlength=n_groups)
        sd = np.sqrt(squares / (count - 1))
    order = np.lexsort((values, groups))  # by group, then by value: one sort for min, max and median
    ordered = values[order]
    ends = np.cumsum(count)
    starts = ends - count
    out = []
    for g in range(n_groups):
        n = int(count[g])
        if n == 0:
            out.append({"count": 0, "mean": None, "sd": None, "median": None, "min": None, "max": None, "sum": 0.0})
            continue
        low, high = ordered[starts[g] + (n - 1) // 2], ordered[starts[g] + n // 2]
        # Halves first: (low + high) overflows for values near the largest float, the halves' sum cannot.
        # A mean, sd or sum beyond the floats (values near 1e308) is None rather than an infinity JSON cannot carry.
        out.append({"count": n, "mean": _finite(mean[g]), "sd": _finite(sd[g]) if n > 1 else None,
                    "median": float(low / 2 + high / 2), "min": float(ordered[starts[g]]),
                    "max": float(ordered[ends[g] - 1]), "sum": _finite(total[g])})
    return out


def numeric_column(table: CodedTable, attribute: str, quasi_identifiers: Iterable[str]) -> np.ndarray:
    """The numbers of `attribute`'s labels (FilterError when it is not a numeric attribute of the release)."""
    column = table.column(attribute)
    numbers = label_numbers(column) if attribute not in set(quasi_identifiers) else None
    if numbers is None:
        raise FilterError(f"{attribute!r} is not a numeric attribute of this release (numeric attributes: "
                          f"{', '.join(numeric_attributes(table, quasi_identifiers)) or 'none'})")
    return numbers


def describe(table: CodedTable, attribute: str, group: str | None, cohort: CohortSpec,
             quasi_identifiers: Iterable[str]) -> dict:
    """Count, mean, standard deviation, median, min, max and sum of numeric `attribute` in the cohort, per value of
    `group` (every value listed, empty ones with count 0) and over the whole cohort. Missing values are left out and
    counted."""
    qis = list(quasi_identifiers)
    numbers = numeric_column(table, attribute, qis)
    if group == attribute:
        raise FilterError("choose a grouping attribute other than the described one")
    column = table.column(attribute)
    mask = table.mask(cohort.filters, cohort.exclude_suppressed)
    codes = column.codes[mask]
    values = numbers[codes]
    known = ~np.isnan(values)
    missing = int(codes.size - np.count_nonzero(known))
    values = values[known]
    overall = _group_stats(values, np.zeros(values.size, dtype=np.intp), 1)[0]
    rows: list[dict] = []
    if group is not None:
        by = table.column(group)
        groups = by.codes[mask][known].astype(np.intp)
        rows = [{"group": label, **stats} for label, stats in zip(by.labels, _group_stats(values, groups,
                                                                                         len(by.labels)))]
    return {"attribute": attribute, "group": group, "rows": rows, "total": {"group": "all", **overall},
            "missing": missing, "records": int(codes.size), "cohort": cohort.describe()}


def histogram(table: CodedTable, attribute: str, cohort: CohortSpec, quasi_identifiers: Iterable[str],
              bins: int | None = None) -> dict:
    """A numeric attribute's histogram (`bins` equal-width bins over its range in the cohort, Sturges' number by
    default), or for any other attribute the count of each value (a bar chart). Counts come from np.bincount of the
    codes; a numeric histogram then bins the labels' numbers weighted by their counts."""
    column = table.column(attribute)
    numbers = label_numbers(column) if attribute not in set(quasi_identifiers) else None
    counts = table.frequencies(attribute, table.mask(cohort.filters, cohort.exclude_suppressed))
    total = int(counts.sum())
    if numbers is None:
        if bins is not None:
            raise FilterError(f"{attribute!r} is not numeric: its values are categories, drawn one bar each "
                              "(leave the number of bins empty)")
        rows = [{"label": label, "low": None, "high": None, "count": int(n), "percent": percent(n, total)}
                for label, n in zip(column.labels, counts)]
        return {"attribute": attribute, "kind": "bar", "rows": rows, "total": total, "missing": 0,
                "cohort": cohort.describe()}
    known = ~np.isnan(numbers) & (counts > 0)
    missing = int(counts[np.isnan(numbers)].sum())
    counted = total - missing
    if bins is None:
        bins = min(MAX_BINS, max(1, math.ceil(math.log2(counted) + 1))) if counted else 1
    if not 1 <= bins <= MAX_BINS:
        raise FilterError(f"the number of bins must be 1 to {MAX_BINS}")
    if counted:
        low, high = float(numbers[known].min()), float(numbers[known].max())
        if low == high:
            low, high = low - 0.5, high + 0.5
        if not math.isfinite(high - low) or high - low <= 0:
            raise FilterError(f"the values of {attribute!r} span too wide a range to be binned")
        hist, edges = np.histogram(numbers[known], bins=bins, range=(low, high), weights=counts[known])
    else:
        hist, edges = np.zeros(bins), np.linspace(0.0, 1.0, bins + 1)
    rows = [{"label": f"[{_edge(edges[i])}, {_edge(edges[i + 1])}" + ("]" if i == bins - 1 else ")"),
             "low": float(edges[i]), "high": float(edges[i + 1]), "count": int(round(h)),
             "percent": percent(h, counted)} for i, h in enumerate(hist)]
    return {"attribute": attribute, "kind": "histogram", "rows": rows, "total": counted, "missing": missing,
            "bins": bins, "cohort": cohort.describe()}


def _edge(value: float) -> str:
    return f"{value:.6g}"

"""The analyses researchers run on de-identified data, as plain results (dicts) that pages and the JSON API share.

Explorative analysis, hypothesis generation and feasibility questions need counts more than anything: how many
records match (cohort count), how an attribute is distributed (frequency table), how two attributes go together
(cross-tabulation with row and column percentages), and whether two cohorts differ on an attribute (Pearson's
chi-square test of homogeneity). Every function takes the in-memory CodedTable and validated parameters; none loops
over records.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.special import chdtrc  # scipy.stats alone would add ~60 MB to the app's memory

from .table import CodedTable, FilterError, percent

KINDS = ("cohort", "frequencies", "crosstab", "compare", "descriptive", "histogram", "regression")


def pearson_chi_square(observed: np.ndarray) -> tuple[float, float, int, np.ndarray]:
    """Pearson's chi-square test of independence on a contingency table (no continuity correction): statistic,
    p-value (upper tail of the chi-square distribution), degrees of freedom, expected counts. The same numbers as
    scipy.stats.chi2_contingency(correction=False), from scipy.special, which the app can afford to keep loaded."""
    observed = np.asarray(observed, dtype=np.float64)
    total = observed.sum()
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / total
    statistic = float(((observed - expected) ** 2 / expected).sum())
    dof = (observed.shape[0] - 1) * (observed.shape[1] - 1)
    return statistic, float(chdtrc(dof, statistic)), int(dof), expected


@dataclass
class CohortSpec:
    """A cohort: selected values per attribute (OR within, AND across) and whether suppressed records count."""

    filters: dict[str, list[str]] = field(default_factory=dict)
    exclude_suppressed: bool = False

    def describe(self) -> str:
        parts = [f"{name} ∈ {{{', '.join(values)}}}" for name, values in self.filters.items() if values]
        if self.exclude_suppressed:
            parts.append("suppressed records excluded")
        return "; ".join(parts) or "all records"


def clean_filters(table: CodedTable, filters: Mapping[str, Sequence[str]] | None) -> dict[str, list[str]]:
    """Check attribute and value names (FilterError on an unknown one), drop empty selections, keep label order."""
    out: dict[str, list[str]] = {}
    for name, values in (filters or {}).items():
        column = table.column(name)
        chosen = {column.index_of(str(value)) for value in values}
        if chosen:
            out[name] = [column.labels[i] for i in sorted(chosen)]
    return out


def cohort_count(table: CodedTable, cohort: CohortSpec, facets: bool = False) -> dict:
    count = table.count(cohort.filters, cohort.exclude_suppressed)
    result = {"count": count, "total": table.n, "percent": percent(count, table.n),
              "description": cohort.describe()}
    if facets:
        result["facets"] = table.facets(cohort.filters, cohort.exclude_suppressed)
    return result


def frequency_table(table: CodedTable, attribute: str, cohort: CohortSpec) -> dict:
    """Count and percentage of each value of `attribute` in the cohort (values that do not occur are kept at 0)."""
    column = table.column(attribute)
    counts = table.frequencies(attribute, table.mask(cohort.filters, cohort.exclude_suppressed))
    total = int(counts.sum())
    cumulative = np.cumsum(counts)
    rows = [{"value": label, "count": int(n), "percent": percent(n, total), "cumulative_percent": percent(c, total)}
            for label, n, c in zip(column.labels, counts, cumulative)]
    return {"attribute": attribute, "total": total, "rows": rows, "cohort": cohort.describe()}


def cross_tabulation(table: CodedTable, row: str, col: str, cohort: CohortSpec) -> dict:
    """Counts of `row` × `col` in the cohort with row, column and total percentages and the margins."""
    if row == col:
        raise FilterError("choose two different attributes for a cross-tabulation")
    counts = table.crosstab(row, col, table.mask(cohort.filters, cohort.exclude_suppressed))
    row_totals = counts.sum(axis=1)
    col_totals = counts.sum(axis=0)
    total = int(counts.sum())
    with np.errstate(divide="ignore", invalid="ignore"):
        row_pct = np.where(row_totals[:, None] > 0, 100.0 * counts / row_totals[:, None], 0.0)
        col_pct = np.where(col_totals[None, :] > 0, 100.0 * counts / col_totals[None, :], 0.0)
    total_pct = 100.0 * counts / total if total else np.zeros_like(counts, dtype=float)
    return {
        "row": row, "col": col,
        "row_labels": list(table.column(row).labels), "col_labels": list(table.column(col).labels),
        "counts": counts.tolist(), "row_percent": row_pct.tolist(), "col_percent": col_pct.tolist(),
        "total_percent": total_pct.tolist(),
        "row_totals": row_totals.tolist(), "col_totals": col_totals.tolist(), "total": total,
        "cohort": cohort.describe(),
    }


def chi_square(observed: np.ndarray) -> dict:
    """Pearson's chi-square test of homogeneity on a 2 × k table, without continuity correction (so the statistic
    is the textbook sum of (O - E)² / E). Values absent from both cohorts are dropped first: they have expected
    count 0 and say nothing. Reports how many expected counts are below 5, where the chi-square approximation is
    unreliable."""
    observed = np.asarray(observed, dtype=np.int64)
    keep = observed.sum(axis=0) > 0
    table = observed[:, keep]
    if table.shape[0] < 2 or (table.sum(axis=1) == 0).any():
        return {"ok": False, "reason": "a cohort is empty: nothing to compare"}
    if table.shape[1] < 2:
        return {"ok": False, "reason": "fewer than two values occur in the two cohorts: nothing to test"}
    statistic, p_value, dof, expected = pearson_chi_square(table)
    small = int((expected < 5).sum())
    return {
        "ok": True, "test": "Pearson's chi-square test of homogeneity (no continuity correction)",
        "statistic": float(statistic), "dof": int(dof), "p_value": float(p_value),
        "expected": expected.tolist(), "values_tested": int(table.shape[1]),
        "expected_below_5": small, "expected_cells": int(expected.size),
        "min_expected": float(expected.min()),
        "warning": (f"{small} of {expected.size} expected counts are below 5: the chi-square approximation may be "
                    "unreliable (merge sparse values or use an exact test)") if small else None,
    }


def compare_cohorts(table: CodedTable, attribute: str, a: CohortSpec, b: CohortSpec) -> dict:
    """The distribution of `attribute` in cohorts A and B side by side, with a chi-square test of homogeneity."""
    column = table.column(attribute)
    mask_a = table.mask(a.filters, a.exclude_suppressed)
    mask_b = table.mask(b.filters, b.exclude_suppressed)
    counts_a = table.frequencies(attribute, mask_a)
    counts_b = table.frequencies(attribute, mask_b)
    total_a, total_b = int(counts_a.sum()), int(counts_b.sum())
    overlap = int(np.count_nonzero(mask_a & mask_b))
    rows = [{"value": label, "count_a": int(x), "percent_a": percent(x, total_a),
             "count_b": int(y), "percent_b": percent(y, total_b)}
            for label, x, y in zip(column.labels, counts_a, counts_b)]
    test = chi_square(np.vstack([counts_a, counts_b]))
    return {"attribute": attribute, "rows": rows, "total_a": total_a, "total_b": total_b,
            "cohort_a": a.describe(), "cohort_b": b.describe(), "overlap": overlap, "chi_square": test}

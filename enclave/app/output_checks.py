"""An analysis made into an output: its table as shown (`data`), its SDC checks per cell, its cohorts, remedies.

`build(context, kind, query, rules)` runs the analysis exactly as its own JSON endpoint does (the query is validated
by that endpoint's pydantic model) and checks every cell of its result with the `outputs` library, straight from
the integer codes: counts (cohort, frequencies, cross-tabulations, histograms, the cohorts compared) get threshold
and zeros; descriptive statistics get, per column, ACRO's checks of that statistic (count, median, min, max:
threshold and zeros; mean and sum: threshold, NK, p% and negative values; standard deviation: degrees of freedom);
a regression its residual degrees of freedom; the chi-square test of a comparison its residual degrees of freedom
(records minus the test's degrees of freedom minus one, as a model's n minus its parameters). Structural zeros
(a suppressed record's `*` against a real value) are reported as `structural-zeros`, not failed.

`data` is one shape for every kind (`row_labels` x `col_labels` cells, optional totals), so one template draws every
output and one CSV writer writes it; `flags` places each check's flagged cells in that grid. Cohorts are kept as
their definitions (filters and `exclude_suppressed`) and re-evaluated on the in-memory table for differencing
(every kind, models included: a model's n counts its cohort, and fits on nested cohorts differ by the few records).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from outputs import checks as sdc
from outputs import remedies
from outputs.differencing import EarlierOutput, check_differencing
from outputs.rules import RuleSet

from . import analyses, descriptive, regression
from .analyses import CohortSpec
from .context import AppContext
from .table import FilterError

TABLE_KINDS = ("cohort", "frequencies", "crosstab", "compare", "descriptive", "histogram")
OUTPUT_KINDS = (*TABLE_KINDS, "regression")
REMEDIES = ("suppress", "round", "opensafely")
DESCRIPTIVE_COLUMNS = (("count", "count"), ("mean", "mean"), ("sd", "std"), ("median", "median"), ("min", "min"),
                       ("max", "max"), ("sum", "sum"))
COEFFICIENT_COLUMNS = ("coef", "se", "statistic", "p_value", "ci_low", "ci_high")
MAX_OUTPUT_CELLS = 10_000    # more than a checker can review; also bounds the work of checking and storing
MAX_SUPPRESS_CELLS = 2_500   # secondary suppression's linear programs: ~3 s at 60 x 40, ~24 s at 100 x 100


class OutputError(FilterError):
    """An output that cannot be made (HTTP 422 with the reason, or `status`)."""

    def __init__(self, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Built:
    """An analysis as an output: the table shown, the checks, the cohorts behind it and what a remedy needs."""

    kind: str
    data: dict
    checks: list[sdc.Check]
    cohorts: list[CohortSpec]
    positions: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # check index -> grid cells
    counts: np.ndarray | None = None  # an additive count table a remedy works on (None: not a count table)
    count_labels: tuple = ()
    statistic: str = "count"
    remedy: dict | None = None

    @property
    def status(self) -> str:
        return sdc.combine(c.status for c in self.checks)


def _grid(kind: str, row_axis: str, col_axis: str | None, row_labels: Sequence[str], col_labels: Sequence[str],
          cells: list[list[Any]], **extra: Any) -> dict:
    return {"layout": kind, "row_axis": row_axis, "col_axis": col_axis, "row_labels": list(row_labels),
            "col_labels": list(col_labels), "cells": cells, "row_totals": None, "col_totals": None, "total": None,
            "totals_basis": None, "notes": [], **extra}


def _num(value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return int(value) if value.is_integer() and abs(value) < 2 ** 53 else value
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return _num(float(value))
    return value


def _cohort(context: AppContext, query: Any) -> CohortSpec:
    return CohortSpec(analyses.clean_filters(context.table, query.filters), query.exclude_suppressed)


def _checks_to_grid(verdict_checks: Sequence[sdc.Check], to_cell) -> tuple[list[sdc.Check], dict]:
    out, where = [], {}
    for check in verdict_checks:
        where[len(out)] = [to_cell(p) for p in check.positions]
        out.append(check)
    return out, where


def impossible(spec: CohortSpec, labels: Sequence[Sequence[str]], qi_axes: Sequence[bool],
               qis: set[str]) -> np.ndarray:
    """Cells the cohort makes impossible: a suppressed record has `*` in every quasi-identifier, so a cohort that
    leaves suppressed records out, or selects real values of some quasi-identifier, has no record with `*` in any
    quasi-identifier axis; and a cohort selecting only `*` of one has no record with a real value in another."""
    no_star = spec.exclude_suppressed or any(
        name in qis and values and sdc.SUPPRESSED not in values for name, values in spec.filters.items())
    only_star = any(name in qis and values and set(values) == {sdc.SUPPRESSED} for name, values in spec.filters.items())
    shape = tuple(len(axis) for axis in labels)
    out = np.zeros(shape, dtype=bool)
    for axis, (axis_labels, is_qi) in enumerate(zip(labels, qi_axes)):
        if not is_qi:
            continue
        star = np.array([label == sdc.SUPPRESSED for label in axis_labels], dtype=bool)
        flags = (star & no_star) | (~star & only_star)
        view = [1] * len(shape)
        view[axis] = shape[axis]
        out |= flags.reshape(view)
    return out


def build(context: AppContext, kind: str, query: Any, rules: RuleSet) -> Built:
    """The output of one analysis (`query`: the analysis's validated pydantic query). FilterError on bad input;
    OutputError (413) for a table of more than MAX_OUTPUT_CELLS cells."""
    built = _build(context, kind, query, rules)
    cells = len(built.data["row_labels"]) * len(built.data["col_labels"])
    if cells > MAX_OUTPUT_CELLS:
        raise OutputError(f"the table has {cells} cells; an output holds at most {MAX_OUTPUT_CELLS} (choose "
                          "attributes with fewer values or a narrower cohort)", 413)
    return built


def _build(context: AppContext, kind: str, query: Any, rules: RuleSet) -> Built:
    table = context.table
    qis = set(context.quasi_identifiers())
    if kind == "cohort":
        spec = _cohort(context, query)
        n = table.count(spec.filters, spec.exclude_suppressed)
        stats = sdc.table_stats(np.array([n]), [["records"]], axes=["cohort"], qi_axes=[False])
        verdict = sdc.check_table(stats, "count", rules)
        data = _grid("count", "cohort", None, ["records"], ["count"], [[n]], cohort=spec.describe())
        checks, where = _checks_to_grid(verdict.checks, lambda p: (0, 0))
        return Built(kind, data, checks, [spec], where, np.array([n]), (("records",),))
    if kind == "frequencies":
        spec = _cohort(context, query)
        column = table.column(query.attribute)
        mask = table.mask(spec.filters, spec.exclude_suppressed)
        qi_axes = [query.attribute in qis]
        stats = sdc.cell_stats([column.codes], [column.labels], mask=mask, axes=[query.attribute],
                               qi_axes=qi_axes, impossible=impossible(spec, [column.labels], qi_axes, qis))
        verdict = sdc.check_table(stats, "frequencies", rules)
        counts = stats.count
        data = _grid("frequencies", query.attribute, None, column.labels, ["count"],
                     [[int(n)] for n in counts], total=int(counts.sum()), totals_basis="true",
                     cohort=spec.describe())
        checks, where = _checks_to_grid(verdict.checks, lambda p: (p[0], 0))
        return Built(kind, data, checks, [spec], where, counts, (tuple(column.labels),))
    if kind == "crosstab":
        spec = _cohort(context, query)
        if query.row == query.col:
            raise FilterError("choose two different attributes for a cross-tabulation")
        r, c = table.column(query.row), table.column(query.col)
        mask = table.mask(spec.filters, spec.exclude_suppressed)
        qi_axes = [query.row in qis, query.col in qis]
        stats = sdc.cell_stats([r.codes, c.codes], [r.labels, c.labels], mask=mask, axes=[query.row, query.col],
                               qi_axes=qi_axes, impossible=impossible(spec, [r.labels, c.labels], qi_axes, qis))
        verdict = sdc.check_table(stats, "crosstab", rules)
        counts = stats.count
        data = _grid("crosstab", query.row, query.col, r.labels, c.labels, counts.tolist(),
                     row_totals=counts.sum(axis=1).tolist(), col_totals=counts.sum(axis=0).tolist(),
                     total=int(counts.sum()), totals_basis="true", cohort=spec.describe())
        checks, where = _checks_to_grid(verdict.checks, lambda p: (p[0], p[1]))
        return Built(kind, data, checks, [spec], where, counts, (tuple(r.labels), tuple(c.labels)))
    if kind == "compare":
        return _compare(context, query, rules, qis)
    if kind == "descriptive":
        return _descriptive(context, query, rules, qis)
    if kind == "histogram":
        spec = _cohort(context, query)
        result = descriptive.histogram(table, query.attribute, spec, list(qis), query.bins)
        labels = [row["label"] for row in result["rows"]]
        counts = np.array([row["count"] for row in result["rows"]], dtype=np.int64)
        if result["kind"] == "bar":
            column = table.column(query.attribute)
            qi_axes = [query.attribute in qis]
            stats = sdc.cell_stats([column.codes], [column.labels], mask=table.mask(spec.filters,
                                   spec.exclude_suppressed), axes=[query.attribute], qi_axes=qi_axes,
                                   impossible=impossible(spec, [column.labels], qi_axes, qis))
        else:
            stats = sdc.table_stats(counts, [labels], axes=[query.attribute], qi_axes=[False])
        verdict = sdc.check_table(stats, "histogram", rules)
        data = _grid("histogram", query.attribute, None, labels, ["count"], [[int(n)] for n in counts],
                     total=int(counts.sum()), totals_basis="true", cohort=spec.describe(),
                     missing=result["missing"])
        checks, where = _checks_to_grid(verdict.checks, lambda p: (p[0], 0))
        return Built(kind, data, checks, [spec], where, counts, (tuple(labels),), "histogram")
    if kind == "regression":
        return _regression(context, query, rules, qis)
    raise OutputError(f"unknown kind of output {kind!r} (one of {', '.join(OUTPUT_KINDS)})")


def _compare(context: AppContext, query: Any, rules: RuleSet, qis: set[str]) -> Built:
    table = context.table
    a, b = _cohort(context, query.a), _cohort(context, query.b)
    result = analyses.compare_cohorts(table, query.attribute, a, b)
    labels = [row["value"] for row in result["rows"]]
    counts = np.array([[row["count_a"], row["count_b"]] for row in result["rows"]], dtype=np.int64)
    qi = [query.attribute in qis]
    never = np.column_stack([impossible(spec, [labels], qi, qis) for spec in (a, b)])  # per cohort, its column
    stats = sdc.table_stats(counts, [labels, ["A", "B"]], axes=[query.attribute, "cohort"],
                            qi_axes=[query.attribute in qis, False], impossible=never)
    verdict = sdc.check_table(stats, "crosstab", rules)
    checks, where = _checks_to_grid(verdict.checks, lambda p: (p[0], p[1]))
    test = result["chi_square"]
    if test.get("ok"):
        records = int(counts.sum())
        residual = records - test["dof"] - 1
        dof = sdc.check_model(residual, "chi-square", rules).checks[0]
        checks.append(sdc.Check(dof.rule, dof.status, reason=dof.reason + f" ({records} records, the test's "
                                 f"{test['dof']} degrees of freedom and one for the total)"))
    data = _grid("compare", query.attribute, "cohort", labels, ["A", "B"], counts.tolist(),
                 col_totals=counts.sum(axis=0).tolist(), totals_basis="true",
                 cohort=f"A: {a.describe()}; B: {b.describe()}",
                 test={k: _num(test[k]) for k in ("statistic", "dof", "p_value") if k in test} or None)
    return Built("compare", data, checks, [a, b], where, counts, (tuple(labels), ("A", "B")))


def _descriptive(context: AppContext, query: Any, rules: RuleSet, qis: set[str]) -> Built:
    table = context.table
    spec = _cohort(context, query)
    result = descriptive.describe(table, query.attribute, query.group, spec, list(qis))
    numbers = descriptive.numeric_column(table, query.attribute, list(qis))
    mask = table.mask(spec.filters, spec.exclude_suppressed)
    values = numbers[table.column(query.attribute).codes[mask]]
    known = ~np.isnan(values)
    values = values[known]
    top = max(int(rules.safe_nk_n), 2)
    parts: list[tuple[list[str], sdc.CellStats]] = []
    rows = list(result["rows"])
    if query.group is not None:
        by = table.column(query.group)
        groups = by.codes[mask][known]
        qi_axes = [query.group in qis]
        parts.append((list(by.labels), sdc.cell_stats([groups], [by.labels], values=values, axes=[query.group],
                                                      qi_axes=qi_axes, top=top,
                                                      impossible=impossible(spec, [by.labels], qi_axes, qis))))
    parts.append((["all"], sdc.cell_stats([np.zeros(values.size, dtype=np.intp)], [["all"]], values=values,
                                          axes=["cohort"], qi_axes=[False], top=top)))
    rows.append(result["total"])
    row_labels = [str(r["group"]) for r in rows]
    col_labels = [name for name, _ in DESCRIPTIVE_COLUMNS]
    checks: list[sdc.Check] = []
    where: dict[int, list[tuple[int, int]]] = {}
    offset = 0
    for labels, stats in parts:
        for j, (column, statistic) in enumerate(DESCRIPTIVE_COLUMNS):
            for check in sdc.check_table(stats, statistic, rules).checks:
                cells = tuple((labels[p[0]], column) for p in check.positions)
                grid = tuple((offset + p[0], j) for p in check.positions)  # places in the table shown
                where[len(checks)] = list(grid)
                reason = f"{column}: {check.reason}" if check.positions else check.reason
                checks.append(sdc.Check(check.rule, check.status, cells, grid, reason))
        offset += len(labels)
    checks = _merge(checks, where)
    cells = [[_num(r[name]) for name in col_labels] for r in rows]
    data = _grid("descriptive", query.group or "cohort", "statistic", row_labels, col_labels, cells,
                 cohort=spec.describe(), attribute=query.attribute, missing=result["missing"])
    return Built("descriptive", data, checks[0], [spec], checks[1], None, (), "mean")


def _merge(checks: list[sdc.Check], where: dict) -> tuple[list[sdc.Check], dict]:
    """One check per rule (its cells from every column), so `checks` lists each rule once, as for other tables."""
    merged: dict[str, sdc.Check] = {}
    places: dict[str, list] = {}
    for i, check in enumerate(checks):
        if check.rule not in merged:
            merged[check.rule] = check
            places[check.rule] = list(where.get(i, []))
            continue
        old = merged[check.rule]
        status = sdc.combine([old.status, check.status])
        if old.status == sdc.PASS and check.status != sdc.PASS:
            reason = check.reason           # a passing column's "every cell ..." gives way to the first flagged one
        elif check.status != sdc.PASS and check.reason not in old.reason:
            reason = f"{old.reason}; {check.reason}"
        else:
            reason = old.reason
        merged[check.rule] = sdc.Check(check.rule, status, old.cells + check.cells, old.positions + check.positions,
                                       reason)
        places[check.rule] += where.get(i, [])
    out = list(merged.values())
    return out, {i: places[c.rule] for i, c in enumerate(out)}


def _regression(context: AppContext, query: Any, rules: RuleSet, qis: set[str]) -> Built:
    spec = _cohort(context, query)
    model = regression.RegressionSpec(
        query.model, query.outcome,
        [regression.Predictor(p.attribute, p.reference, p.categorical) for p in query.predictors],
        query.event, query.confidence)
    result = regression.fit(context.table, model, spec, list(qis))
    columns = list(COEFFICIENT_COLUMNS) + (["odds_ratio"] if query.model == "logit" else [])
    cells = [[_num(c.get(name)) for name in columns] for c in result["coefficients"]]
    verdict = sdc.check_model(result["df_resid"], query.model, rules)
    data = _grid("coefficients", "term", "estimate", [c["term"] for c in result["coefficients"]], columns, cells,
                 cohort=spec.describe(), model=result["model_name"], n=result["n"], df_resid=result["df_resid"],
                 df_model=result["df_model"], outcome=result["outcome"], references=result["references"],
                 fit={k: _num(v) for k, v in result["fit"].items()})
    return Built("regression", data, list(verdict.checks), [spec], {}, None, (), query.model)


# ---------------------------------------------------------------------------------------------------------------
# Differencing against the recipient's earlier outputs

def cohort_record(spec: CohortSpec) -> dict:
    return {"filters": {k: list(v) for k, v in spec.filters.items()}, "exclude_suppressed": spec.exclude_suppressed}


def cohort_mask(context: AppContext, record: dict) -> np.ndarray | None:
    """An earlier output's cohort re-evaluated on this release (None when it names what this release lacks)."""
    try:
        filters = analyses.clean_filters(context.table, record.get("filters") or {})
    except FilterError:
        return None
    return context.table.mask(filters, bool(record.get("exclude_suppressed")))


def differencing(context: AppContext, built: Built, earlier: Sequence[dict], rules: RuleSet) -> sdc.Check | None:
    """Fail naming every earlier output on this release (and, in a comparison, the other cohort) whose cohort
    differs from one of this output's by 1 to threshold - 1 records. Models too, both ways: a model's n is a count
    of its cohort, and two fits on A and "A without three records" differ by what those three contribute."""
    release = context.release.release_id
    n = context.table.n
    previous: list[EarlierOutput] = []
    for record in earlier:
        if record.get("release", {}).get("id") != release:
            continue
        for cohort in record.get("cohorts", []):
            mask = cohort_mask(context, cohort)
            if mask is not None:
                previous.append(EarlierOutput(str(record["id"]), record["name"], release, mask))
    masks = [context.table.mask(s.filters, s.exclude_suppressed) for s in built.cohorts]
    found = [check_differencing(masks[0], release, previous, n, rules)]
    if len(masks) == 2:  # a comparison: cohort B against the earlier outputs and against this output's cohort A
        own_a = EarlierOutput("A", "cohort A of this comparison", release, masks[0])
        found.append(check_differencing(masks[1], release, [*previous, own_a], n, rules))
    failing = [c for c in found if c.status != sdc.PASS]
    if not failing:
        return found[0]
    cells = tuple(dict.fromkeys(cell for c in failing for cell in c.cells))
    return sdc.Check("differencing", sdc.FAIL, cells, (), "; ".join(dict.fromkeys(c.reason for c in failing)))


# ---------------------------------------------------------------------------------------------------------------
# Remedies

def apply_remedy(built: Built, remedy: dict, rules: RuleSet) -> Built:
    """The output with a remedy applied: hidden or rounded cells in `data`, what was done in `remedy`, each check
    whose every flagged cell is now hidden or rounded turned `review` (a checker looks), the rest as they were."""
    kind = remedy.get("kind")
    if kind not in REMEDIES:
        raise OutputError(f"unknown remedy {kind!r} (one of {', '.join(REMEDIES)})")
    if built.kind == "regression":
        raise OutputError("a model has no remedy here: its check is the residual degrees of freedom (fit it on a "
                          "larger cohort or with fewer parameters)")
    data = dict(built.data)
    grid_shape = (len(data["row_labels"]), len(data["col_labels"]))
    primary = np.zeros(grid_shape, dtype=bool)
    for i, check in enumerate(built.checks):
        if check.status == sdc.FAIL:
            for cell in built.positions.get(i, []):
                primary[cell] = True
    if built.counts is None:   # descriptive statistics: hide the failing cells, drop the cohort's row
        if kind != "suppress":
            raise OutputError("rounding applies to counts; descriptive statistics take suppression")
        cells = [[None if primary[i, j] else v for j, v in enumerate(row)] for i, row in enumerate(data["cells"])]
        covered = primary.copy()
        actions = [f"primary suppression of {int(primary.sum())} cell(s) failing a check"]
        done = {"kind": kind, "actions": actions, "hidden": _names(data, primary)}
        if data["row_axis"] != "cohort" and primary.any():
            cells = cells[:-1]
            covered[-1, :] = True
            data["row_labels"] = data["row_labels"][:-1]
            done["hidden"] = _names(data, primary[:-1])
            actions.append("the whole cohort's row dropped (with groups hidden it would give them away)")
        data["cells"] = cells
        return _remedied(built, data, covered, primary, done, "hidden by suppression")
    shape = built.counts.shape
    counts = built.counts
    labels = built.count_labels
    if kind == "suppress":
        if counts.size > MAX_SUPPRESS_CELLS:
            raise OutputError(f"suppression takes tables of at most {MAX_SUPPRESS_CELLS} cells (this one has "
                              f"{counts.size}): round it, or choose attributes with fewer values", 413)
        result = remedies.suppress(counts, primary.reshape(shape) if counts.ndim == 2 else primary[:, 0],
                                   margins=True, rules=rules, labels=labels)
        how = "hidden by suppression"
    elif kind == "round":
        result = remedies.round_table(counts, rules, base=remedy.get("base"), labels=labels)
        how = f"rounded to a multiple of {remedy.get('base') or rules.safe_round_base}"
    else:
        result = remedies.opensafely(counts, rules, labels=labels)
        how = "redacted or rounded (OpenSAFELY profile)"
    shown = result.cells.reshape(grid_shape)
    hidden = result.hidden.reshape(grid_shape)
    data["cells"] = [[None if np.isnan(v) else _num(float(v)) for v in row] for row in shown]
    two_d = counts.ndim == 2

    def margin(values):
        return None if values is None else [None if np.isnan(v) else _num(float(v)) for v in values]

    data["row_totals"] = margin(result.row_totals) if two_d and built.kind != "compare" else None
    data["col_totals"] = margin(result.col_totals) if two_d else None
    grand = result.grand_total
    data["total"] = None if grand is None or np.isnan(grand) else _num(float(grand))
    data["totals_basis"] = result.totals_basis
    if built.kind == "compare":
        data["test"] = None
        data["notes"] = ["the chi-square test of the true table is not shown with a remedied table"]
    done = {"kind": kind, "actions": list(result.actions), "hidden": _names(data, hidden),
            "totals_basis": result.totals_basis}
    if kind == "round":
        done["base"] = int(remedy.get("base") or rules.safe_round_base)
    touched = np.ones(grid_shape, dtype=bool) if kind != "suppress" else hidden
    return _remedied(built, data, touched, primary, done, how)


def _names(data: dict, hidden: np.ndarray) -> list[list[str]]:
    one_d = data["col_axis"] is None
    return [[data["row_labels"][i]] if one_d else [data["row_labels"][i], data["col_labels"][j]]
            for i, j in np.argwhere(hidden)]


def _remedied(built: Built, data: dict, covered: np.ndarray, primary: np.ndarray, done: dict, how: str) -> Built:
    checks = []
    for i, check in enumerate(built.checks):
        cells = built.positions.get(i, [])
        if check.status != sdc.PASS and check.rule != "differencing" and cells and all(
                c[0] < covered.shape[0] and covered[c] for c in cells):
            check = sdc.Check(check.rule, sdc.REVIEW, check.cells, check.positions, f"{check.reason} ({how})")
        elif check.status != sdc.PASS and check.rule == "dof" and built.kind == "compare":
            check = sdc.Check(check.rule, sdc.REVIEW, reason=f"{check.reason} (the test is not shown)")
        checks.append(check)
    still = [tuple(c) for c in np.argwhere(primary) if not (c[0] < covered.shape[0] and covered[tuple(c)])]
    if still and done["kind"] == "suppress":
        raise OutputError("the suppression left a failing cell visible", 500)
    checks.append(sdc.Check("remedy", sdc.REVIEW, tuple(tuple(h) for h in done["hidden"]), (),
                            "; ".join(done["actions"]) + ": a checker reviews every remedied output"))
    return Built(built.kind, data, checks, built.cohorts, built.positions, built.counts, built.count_labels,
                 built.statistic, done)


__all__ = ["Built", "OUTPUT_KINDS", "OutputError", "REMEDIES", "TABLE_KINDS", "apply_remedy", "build",
           "cohort_mask", "cohort_record", "differencing"]

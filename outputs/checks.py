"""Per-cell disclosure checks of an output, computed with numpy from the integer codes of the release.

`cell_stats` turns micro-data (one integer code per record and axis, optionally a numeric value per record) into
the statistics every rule needs per cell: the count of records, the total of the values, and the largest
contributors. Cells are one combined index (`np.ravel_multi_index` of the codes); counts and totals are
`np.bincount`; the largest contributors come from `np.maximum.at` over the cell index, once per contributor kept (two
by default). No Python loop runs over records.

Which checks apply is ACRO's table (`STATISTIC_CHECKS`):

| statistic | checks |
|---|---|
| count, frequencies, crosstab, histogram | threshold, zeros |
| mean, sum | threshold, NK dominance, p% ratio; negative values make the output `review` |
| median, min, max | threshold, zeros |
| std | degrees of freedom (count - 1 per cell) |
| ols, logit, probit (regression) | residual degrees of freedom |
| chi-square and other tests | degrees of freedom |

- threshold: a cell of fewer than `safe_threshold` records fails (strict `<`: 10 passes, 9 fails; an empty cell has
  0 records and fails too, as in ACRO);
- zeros: an empty cell fails while zeros are disclosive (`zeros_are_disclosive`);
- NK (`nk-rule`): the `safe_nk_n` largest contributors holding `safe_nk_k` or more of the cell's total fail it (`>=`);
- p% (`p-ratio`): (total - largest - second) / largest below `safe_pratio_p` fails (strict `<`);
- negative: a cell with a negative contributor is `review`: dominance is undefined there, so NK and p% skip it;
- dof: fewer than `safe_dof_threshold` degrees of freedom fail (strict `<`: 9 fails, 10 passes).

Structural zeros are not disclosive: a record whose every quasi-identifier is suppressed (`*`) is a category of its
own, so a cell pairing `*` on one quasi-identifier axis with a real value on another cannot hold a record; such
empty cells, and any empty cell the caller marks impossible for the release (`impossible=`), are reported under the
rule `structural-zeros` (status `pass`, with the cells and why) and skipped by threshold and zeros.

Where we differ from acro 1.0.2 (tests/outputs/test_acro_results.py runs acro itself when it is available): a
category of the release that no record in the cohort has is a zero cell here (the labels come from the release), while
acro, which builds its table from the records, drops that row or column; and a negative contributor makes dominance
undefined in its own cell only, so NK and p% still judge the other cells, where acro skips them in the whole table.

Statuses combine as ACRO's: any `fail` makes the output `fail`; else any `review` makes it `review`; else `pass`.
Every check returns `{rule, status, cells, reason}`; `cells` names each flagged cell by its labels, one label per
axis (`["Female", "Other"]` in a cross-tabulation, `["Other"]` in a frequency table).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from .rules import DEFAULT_RULES, RuleSet

PASS, REVIEW, FAIL = "pass", "review", "fail"
_RANK = {PASS: 0, REVIEW: 1, FAIL: 2}
SUPPRESSED = "*"

THRESHOLD, ZEROS, NK, PRATIO, NEGATIVE, DOF, STRUCTURAL = (
    "threshold", "zeros", "nk-rule", "p-ratio", "negative", "dof", "structural-zeros")

STATISTIC_CHECKS: Mapping[str, tuple[str, ...]] = {
    "count": (THRESHOLD, ZEROS),
    "frequencies": (THRESHOLD, ZEROS),
    "crosstab": (THRESHOLD, ZEROS),
    "histogram": (THRESHOLD, ZEROS),
    "mean": (THRESHOLD, NK, PRATIO, NEGATIVE),
    "sum": (THRESHOLD, NK, PRATIO, NEGATIVE),
    "median": (THRESHOLD, ZEROS),
    "min": (THRESHOLD, ZEROS),
    "max": (THRESHOLD, ZEROS),
    "std": (DOF,),
}
MODEL_KINDS = ("ols", "logit", "probit", "regression")
TEST_KINDS = ("chi-square", "test")


def combine(statuses: Iterable[str]) -> str:
    """ACRO's combination: any fail -> fail, else any review -> review, else pass."""
    worst = PASS
    for status in statuses:
        if _RANK[status] > _RANK[worst]:
            worst = status
    return worst


@dataclass(frozen=True)
class Check:
    """One rule's verdict on an output: which cells it flags (by label and by position) and why."""

    rule: str
    status: str
    cells: tuple[tuple[str, ...], ...] = ()
    positions: tuple[tuple[int, ...], ...] = ()
    reason: str = ""

    def to_dict(self) -> dict:
        return {"rule": self.rule, "status": self.status, "cells": [list(c) for c in self.cells],
                "reason": self.reason}


@dataclass(frozen=True)
class Verdict:
    """The checks of one output and their combined status."""

    checks: tuple[Check, ...]
    statistic: str = "count"
    rules: RuleSet = DEFAULT_RULES
    status: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "status", combine(c.status for c in self.checks))

    def failing(self) -> dict[str, list[list[str]]]:
        """Rule -> flagged cells, for the rules whose status is not `pass`."""
        return {c.rule: [list(cell) for cell in c.cells] for c in self.checks if c.status != PASS}

    def with_checks(self, *checks: Check) -> Verdict:
        """This verdict with further checks (differencing against earlier outputs), the status combined again."""
        return Verdict(self.checks + tuple(checks), self.statistic, self.rules)

    def check(self, rule: str) -> Check | None:
        return next((c for c in self.checks if c.rule == rule), None)

    def to_dict(self) -> dict:
        """The status, the checks, and the rule set they ran under with each number's origin."""
        return {"status": self.status, "statistic": self.statistic, "checks": [c.to_dict() for c in self.checks],
                "rules": self.rules.record()}


@dataclass(frozen=True)
class CellStats:
    """The statistics of every cell of a table (arrays of the table's shape).

    `top[..., j]` is the (j+1)-th largest contributor of each cell (0 where the cell has fewer contributors);
    `negative` marks cells with a negative contributor; `structural` marks empty cells no record can be in."""

    axes: tuple[str, ...]
    labels: tuple[tuple[str, ...], ...]
    count: np.ndarray
    total: np.ndarray | None = None
    top: np.ndarray | None = None
    negative: np.ndarray | None = None
    structural: np.ndarray | None = None
    structural_reason: str = ""

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(labels) for labels in self.labels)

    def name(self, flat: int) -> tuple[str, ...]:
        index = np.unravel_index(int(flat), self.shape)
        return tuple(self.labels[axis][int(i)] for axis, i in enumerate(index))

    def cells(self, mask: np.ndarray) -> tuple[tuple[tuple[str, ...], ...], tuple[tuple[int, ...], ...]]:
        """Labels and positions of the cells a boolean mask (of the table's shape) flags, in row-major order."""
        flat = np.flatnonzero(mask.reshape(-1))
        positions = tuple(tuple(int(i) for i in np.unravel_index(int(f), self.shape)) for f in flat)
        return tuple(self.name(f) for f in flat), positions


def structural_mask(labels: Sequence[Sequence[str]], qi_axes: Sequence[bool], count: np.ndarray,
                    suppressed_label: str = SUPPRESSED, impossible: np.ndarray | None = None) -> np.ndarray:
    """Empty cells no record can be in: `*` on some quasi-identifier axis and a real value on another (a record
    suppressed in one quasi-identifier is suppressed in all), plus empty cells the caller marks `impossible`."""
    shape = tuple(len(axis) for axis in labels)
    star = [np.array([label == suppressed_label for label in axis_labels], dtype=bool) if is_qi
            else None for axis_labels, is_qi in zip(labels, qi_axes)]
    any_star = np.zeros(shape, dtype=bool)
    any_real = np.zeros(shape, dtype=bool)
    for axis, flags in enumerate(star):
        if flags is None:
            continue
        view = [1] * len(shape)
        view[axis] = shape[axis]
        any_star |= flags.reshape(view)
        any_real |= ~flags.reshape(view)
    mask = any_star & any_real
    if impossible is not None:
        impossible = np.asarray(impossible, dtype=bool)
        if impossible.shape != shape:
            raise ValueError(f"impossible: shape {impossible.shape} is not the table's {shape}")
        mask |= impossible
    return mask & (count == 0)


def cell_stats(codes: Sequence[np.ndarray], labels: Sequence[Sequence[str]], values: np.ndarray | None = None,
               mask: np.ndarray | None = None, axes: Sequence[str] | None = None, top: int = 2,
               qi_axes: Sequence[bool] | None = None, impossible: np.ndarray | None = None,
               suppressed_label: str = SUPPRESSED) -> CellStats:
    """Per-cell statistics of micro-data: `codes[a][i]` is record i's code on axis a (0 <= code < len(labels[a])),
    `values[i]` its value (for mean/sum/...: totals and largest contributors), `mask` the cohort (None: every
    record). `top`: how many largest contributors to keep per cell (NK's n and p%'s two: max(n, 2)).
    `qi_axes[a]`: axis a is a quasi-identifier (its `*` is the suppressed category; default: every axis)."""
    if not codes:
        raise ValueError("a table needs at least one axis")
    shape = tuple(len(axis) for axis in labels)
    if len(codes) != len(shape):
        raise ValueError(f"{len(codes)} code arrays for {len(shape)} axes")
    arrays = [np.asarray(c) for c in codes]
    n = arrays[0].shape[0]
    if any(a.shape != (n,) for a in arrays):
        raise ValueError("every axis needs one code per record")
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (n,):
            raise ValueError("the cohort mask needs one entry per record")
        arrays = [a[mask] for a in arrays]
    for axis, (a, size) in enumerate(zip(arrays, shape)):
        if a.size and (int(a.min()) < 0 or int(a.max()) >= size):
            raise ValueError(f"axis {axis}: codes outside 0..{size - 1}")
    size = int(np.prod(shape))
    cell = np.ravel_multi_index([a.astype(np.intp, copy=False) for a in arrays], shape) if size else \
        np.zeros(0, dtype=np.intp)
    count = np.bincount(cell, minlength=size)
    total = top_values = negative = None
    if values is not None:
        v = np.asarray(values, dtype=np.float64)
        if v.shape != (n,):
            raise ValueError("values need one entry per record")
        if mask is not None:
            v = v[mask]
        if not np.isfinite(v).all():
            raise ValueError("values must be finite (drop missing values before checking)")
        total = np.bincount(cell, weights=v, minlength=size)
        negative = np.bincount(cell, weights=(v < 0), minlength=size) > 0
        top_values = _largest(cell, v, count, max(int(top), 1)).reshape(shape + (max(int(top), 1),))
        total = total.reshape(shape)
        negative = negative.reshape(shape)
    count = count.reshape(shape)
    names = tuple(axes) if axes is not None else tuple(f"axis{i}" for i in range(len(shape)))
    label_tuple = tuple(tuple(str(label) for label in axis) for axis in labels)
    qi = list(qi_axes) if qi_axes is not None else [True] * len(shape)
    structural = structural_mask(label_tuple, qi, count, suppressed_label, impossible)
    return CellStats(names, label_tuple, count, total, top_values, negative, structural,
                     "a suppressed record has * in every quasi-identifier, so no record can pair * with a value"
                     + ("; or the release makes the combination impossible" if impossible is not None else ""))


def _largest(cell: np.ndarray, values: np.ndarray, count: np.ndarray, k: int) -> np.ndarray:
    """The k largest values of each cell (0 where a cell has fewer), shape (cells, k): k rounds of `np.maximum.at`,
    each removing one record holding its cell's maximum (the first, so ties count as separate contributors). Tens
    of times faster than sorting a million records by (cell, value); k is the NK rule's n, not the record count."""
    size = count.size
    out = np.zeros((size, k), dtype=np.float64)
    work = values.copy()
    for j in range(k):
        best = np.full(size, -np.inf)
        np.maximum.at(best, cell, work)
        has = count > j
        out[has, j] = best[has]
        if j + 1 < k:
            hits = np.flatnonzero(work == best[cell])
            _, first = np.unique(cell[hits], return_index=True)
            work[hits[first]] = -np.inf
    return out


def table_stats(counts: np.ndarray, labels: Sequence[Sequence[str]], axes: Sequence[str] | None = None,
                qi_axes: Sequence[bool] | None = None, impossible: np.ndarray | None = None) -> CellStats:
    """Cell statistics of an already counted table (for counts only: no contributors)."""
    count = np.asarray(counts)
    if count.ndim != len(labels) or count.shape != tuple(len(a) for a in labels):
        raise ValueError(f"table of shape {count.shape} does not match its labels")
    if (count < 0).any() or not np.array_equal(count, np.round(count)):
        raise ValueError("counts must be non-negative integers")
    label_tuple = tuple(tuple(str(label) for label in axis) for axis in labels)
    qi = list(qi_axes) if qi_axes is not None else [True] * count.ndim
    names = tuple(axes) if axes is not None else tuple(f"axis{i}" for i in range(count.ndim))
    return CellStats(names, label_tuple, count.astype(np.int64), structural=structural_mask(
        label_tuple, qi, count, SUPPRESSED, impossible),
        structural_reason="a suppressed record has * in every quasi-identifier, so no record can pair * with a value")


def _flagged(rule: str, stats: CellStats, mask: np.ndarray, status_if_any: str, reason: str,
             ok_reason: str) -> Check:
    if not mask.any():
        return Check(rule, PASS, reason=ok_reason)
    cells, positions = stats.cells(mask)
    return Check(rule, status_if_any, cells, positions, reason)


def _live(stats: CellStats) -> np.ndarray:
    return ~stats.structural if stats.structural is not None else np.ones(stats.shape, dtype=bool)


def check_threshold(stats: CellStats, rules: RuleSet = DEFAULT_RULES) -> Check:
    t = rules.safe_threshold
    mask = (stats.count < t) & _live(stats)
    return _flagged(THRESHOLD, stats, mask, FAIL, f"fewer than {t} records in the cell",
                    f"every cell has at least {t} records")


def check_zeros(stats: CellStats, rules: RuleSet = DEFAULT_RULES) -> Check:
    mask = (stats.count == 0) & _live(stats)
    if not rules.zeros_are_disclosive:
        return Check(ZEROS, PASS, reason="zeros are not disclosive under these rules")
    return _flagged(ZEROS, stats, mask, FAIL, "an empty cell (zeros are disclosive)", "no empty cell")


def _defined(stats: CellStats) -> np.ndarray:
    """Cells where dominance is defined: records present, positive total, no negative contributor."""
    if stats.total is None or stats.top is None or stats.negative is None:
        raise ValueError("dominance checks need values (cell_stats(..., values=...))")
    return (stats.count > 0) & (stats.total > 0) & ~stats.negative


def check_nk(stats: CellStats, rules: RuleSet = DEFAULT_RULES) -> Check:
    n, k = rules.safe_nk_n, rules.safe_nk_k
    if stats.top.shape[-1] < n:
        raise ValueError(f"cell_stats kept {stats.top.shape[-1]} largest contributors; the NK rule needs {n}")
    defined = _defined(stats)
    share = np.divide(stats.top[..., :n].sum(axis=-1), stats.total, out=np.zeros(stats.shape), where=defined)
    mask = defined & (share >= k)
    return _flagged(NK, stats, mask, FAIL, f"the {n} largest contributors hold {k:.0%} or more of the cell's total",
                    f"no cell dominated by its {n} largest contributors")


def check_pratio(stats: CellStats, rules: RuleSet = DEFAULT_RULES) -> Check:
    p = rules.safe_pratio_p
    defined = _defined(stats) & (stats.top[..., 0] > 0)
    rest = stats.total - stats.top[..., 0] - (stats.top[..., 1] if stats.top.shape[-1] > 1 else 0)
    ratio = np.divide(rest, stats.top[..., 0], out=np.zeros(stats.shape), where=defined)
    mask = defined & (ratio < p)
    return _flagged(PRATIO, stats, mask, FAIL,
                    f"the others than the two largest contributors make less than {p:.0%} of the largest: the second"
                    f" largest could estimate the largest", f"every cell's p ratio is at least {p:.0%}")


def check_negative(stats: CellStats, rules: RuleSet = DEFAULT_RULES) -> Check:
    if stats.negative is None:
        raise ValueError("the negative-values check needs values")
    return _flagged(NEGATIVE, stats, stats.negative, REVIEW,
                    "a negative contributor: dominance (NK, p%) is undefined, a checker must review the cell",
                    "no negative value")


def check_cell_dof(stats: CellStats, rules: RuleSet = DEFAULT_RULES) -> Check:
    """Standard deviations: each cell's degrees of freedom are its count - 1."""
    t = rules.safe_dof_threshold
    mask = ((stats.count - 1) < t) & _live(stats)
    return _flagged(DOF, stats, mask, FAIL, f"fewer than {t} degrees of freedom (records - 1) in the cell",
                    f"every cell has at least {t} degrees of freedom")


def check_dof(dof: float, rules: RuleSet = DEFAULT_RULES, what: str = "model") -> Check:
    """A model's (or a test's) residual degrees of freedom against `safe_dof_threshold` (`df_resid` of
    statsmodels for OLS, logit and probit)."""
    t = rules.safe_dof_threshold
    if dof is None or not np.isfinite(dof):
        return Check(DOF, FAIL, reason=f"the {what}'s residual degrees of freedom are unknown")
    if dof < t:
        return Check(DOF, FAIL, reason=f"the {what} has {dof:g} residual degrees of freedom, fewer than {t}")
    return Check(DOF, PASS, reason=f"the {what} has {dof:g} residual degrees of freedom (at least {t})")


def check_structural(stats: CellStats) -> Check | None:
    if stats.structural is None or not stats.structural.any():
        return None
    cells, positions = stats.cells(stats.structural)
    return Check(STRUCTURAL, PASS, cells, positions,
                 f"structural zeros, not disclosive: {stats.structural_reason}")


_CELL_CHECKS = {THRESHOLD: check_threshold, ZEROS: check_zeros, NK: check_nk, PRATIO: check_pratio,
                NEGATIVE: check_negative, DOF: check_cell_dof}


def check_table(stats: CellStats, statistic: str = "count", rules: RuleSet = DEFAULT_RULES) -> Verdict:
    """Every check ACRO runs for `statistic` on a table, plus the structural zeros it skipped."""
    try:
        rule_names = STATISTIC_CHECKS[statistic]
    except KeyError:
        raise ValueError(f"unknown statistic {statistic!r}; one of {', '.join(STATISTIC_CHECKS)}") from None
    checks = [_CELL_CHECKS[name](stats, rules) for name in rule_names]
    structural = check_structural(stats)
    if structural is not None:
        checks.append(structural)
    return Verdict(tuple(checks), statistic, rules)


def check_model(df_resid: float, kind: str = "ols", rules: RuleSet = DEFAULT_RULES) -> Verdict:
    """A regression (OLS, logit, probit) or a test: its residual degrees of freedom."""
    if kind not in MODEL_KINDS + TEST_KINDS:
        raise ValueError(f"unknown model kind {kind!r}; one of {', '.join(MODEL_KINDS + TEST_KINDS)}")
    what = "test" if kind in TEST_KINDS else "model"
    return Verdict((check_dof(df_resid, rules, what),), kind, rules)


__all__ = ["FAIL", "PASS", "REVIEW", "STATISTIC_CHECKS", "CellStats", "Check", "Verdict", "cell_stats",
           "check_dof", "check_model", "check_table", "combine", "structural_mask", "table_stats"]

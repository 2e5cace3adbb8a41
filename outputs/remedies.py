"""Remedies for a failing table: suppression that really hides (also with margins shown), and rounding.

**Suppression.** Primary suppression hides every cell a check failed. With totals shown that is not enough: a row
with one hidden cell gives it away (total minus the others), and so can longer chains through the other rows,
columns and the grand total (acro 1.0.2 publishes the cells outright when the labels are integers, see
tests/outputs). So secondary suppression hides further cells until `audit` - the linear-programming bounds a reader
can derive for each hidden quantity from everything shown (cells, row and column totals, grand total, all cells
non-negative) - leaves every primarily hidden quantity an interval at least `protection` wide (default: the
threshold, so a reader cannot even tell that a hidden cell is below it). Margins that fail a check themselves (a
column total of 3) are hidden and protected the same way. Complements come first from rectangles: each primary
cell gets the cheapest rectangle of complements that lets it move by `protection` (the hypercube method's idea);
then, while a quantity is still too narrow, the cheapest of the cells or totals in its lines that widens it most.
If that cannot protect everything, the margins are dropped instead and only the
primary cells are hidden (without totals nothing links a hidden cell to what is shown). Totals that are shown are
the true table's; `Remedied.totals_basis` says so (`true`), or `published-cells` where a profile recomputes them from
what is shown.

**Rounding** to a base (`safe_round_base`, 5 by default): every count to the nearest multiple, halves up; margins
are the sums of the rounded cells rounded again (acro's behaviour: [[25,12,3],[30,9,0]] -> [[25,10,5],[30,10,0]],
grand total 80). **OpenSAFELY profile**: redact counts of 7 or fewer (zeros too while zeros are disclosive), then
round the rest to the nearest 5; totals are recomputed from the published cells and rounded.

A remedied output records what was done (`actions`) and its status is at least `review`: a checker looks at it.
Suppression with margins is for additive tables (counts, sums); a table of means or medians is shown without them.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from .checks import FAIL, REVIEW, Verdict
from .rules import DEFAULT_RULES, RuleSet

TRUE_TOTALS = "true"
PUBLISHED_TOTALS = "published-cells"
ROUNDED_TOTALS = "rounded-cells"

OPENSAFELY_REDACT_AT_MOST = 7
OPENSAFELY_BASE = 5


@dataclass(frozen=True)
class Remedied:
    """A table as it may be shown after a remedy: hidden cells are NaN; margins are None when not shown, and a
    hidden margin is NaN. `actions` says what was done, in words a checker reads."""

    remedy: str
    cells: np.ndarray
    hidden: np.ndarray
    primary: np.ndarray
    row_totals: np.ndarray | None = None
    col_totals: np.ndarray | None = None
    grand_total: float | None = None
    totals_basis: str | None = None
    actions: tuple[str, ...] = ()
    status: str = REVIEW
    labels: tuple[tuple[str, ...], ...] = field(default=())

    def shown_numbers(self) -> list[float]:
        """Every number a reader sees (cells and totals), for tests and summaries."""
        numbers = [float(x) for x in self.cells.reshape(-1) if not np.isnan(x)]
        for margin in (self.row_totals, self.col_totals):
            if margin is not None:
                numbers += [float(x) for x in margin if not np.isnan(x)]
        if self.grand_total is not None and not np.isnan(self.grand_total):
            numbers.append(float(self.grand_total))
        return numbers

    def to_dict(self) -> dict:
        def show(array: np.ndarray | None):
            if array is None:
                return None
            return [None if np.isnan(x) else (int(x) if float(x).is_integer() else float(x)) for x in array]

        cells = self.cells if self.cells.ndim == 2 else self.cells.reshape(1, -1)
        grand = None if self.grand_total is None or np.isnan(self.grand_total) else self.grand_total
        hidden = [[int(i) for i in p] for p in np.argwhere(self.hidden)]
        names = [[self.labels[a][int(i)] for a, i in enumerate(p)] for p in hidden] if self.labels else hidden
        return {"remedy": self.remedy, "status": self.status, "cells": [show(row) for row in cells],
                "row_totals": show(self.row_totals), "col_totals": show(self.col_totals),
                "grand_total": None if grand is None else (int(grand) if float(grand).is_integer() else grand),
                "totals_basis": self.totals_basis, "hidden": names, "actions": list(self.actions)}


def primary_mask(verdict: Verdict, shape: Sequence[int]) -> np.ndarray:
    """The cells any failing check of `verdict` flags (primary suppression)."""
    mask = np.zeros(tuple(shape), dtype=bool)
    for check in verdict.checks:
        if check.status == FAIL:
            for position in check.positions:
                mask[position] = True
    return mask


def _as_2d(table: np.ndarray) -> np.ndarray:
    array = np.asarray(table, dtype=np.float64)
    if array.ndim == 1:
        return array.reshape(1, -1)
    if array.ndim != 2:
        raise ValueError("remedies take a frequency table (1-D) or a cross-tabulation (2-D)")
    return array


# ---------------------------------------------------------------------------------------------------------------
# What a reader can derive: linear-programming bounds of hidden quantities from everything shown.

@dataclass(frozen=True)
class Shown:
    """What is published of a 2-D additive table: which cells, row totals, column totals and the grand total."""

    hidden: np.ndarray              # (r, c) bool
    rows: np.ndarray | None         # (r,) bool: row total shown (None: no row totals at all)
    cols: np.ndarray | None         # (c,) bool
    grand: bool


def derivable_bounds(values: np.ndarray, shown: Shown, targets: Sequence[tuple]) -> list[tuple[float, float]]:
    """For each target - ("cell", i, j), ("row", i), ("col", j) or ("grand",) - the smallest and largest value a
    reader can derive from the shown numbers (cells non-negative); +inf when nothing bounds it from above."""
    from scipy.optimize import linprog

    values = _as_2d(values)
    hidden = shown.hidden
    index = -np.ones(hidden.shape, dtype=np.int64)
    flat = np.argwhere(hidden)
    index[hidden] = np.arange(len(flat))
    m = len(flat)
    published = np.where(hidden, 0.0, values)
    a_rows: list[np.ndarray] = []
    b: list[float] = []

    def constraint(cells: np.ndarray, total: float) -> None:
        row = np.zeros(m)
        row[index[cells]] = 1.0
        a_rows.append(row)
        b.append(total)

    r, c = hidden.shape
    if shown.rows is not None:
        for i in range(r):
            if shown.rows[i] and hidden[i].any():
                cells = np.zeros_like(hidden)
                cells[i] = hidden[i]
                constraint(cells, values[i].sum() - published[i].sum())
    if shown.cols is not None:
        for j in range(c):
            if shown.cols[j] and hidden[:, j].any():
                cells = np.zeros_like(hidden)
                cells[:, j] = hidden[:, j]
                constraint(cells, values[:, j].sum() - published[:, j].sum())
    if shown.grand and hidden.any():
        constraint(hidden, values.sum() - published.sum())
    a_eq = np.array(a_rows) if a_rows else None
    b_eq = np.array(b) if b else None
    out: list[tuple[float, float]] = []
    for target in targets:
        select = np.zeros(hidden.shape, dtype=bool)
        if target[0] == "cell":
            select[target[1], target[2]] = True
        elif target[0] == "row":
            select[target[1]] = True
        elif target[0] == "col":
            select[:, target[1]] = True
        else:
            select[:] = True
        constant = float(published[select].sum())
        objective = np.zeros(m)
        objective[index[select & hidden]] = 1.0
        if m == 0 or not objective.any():
            out.append((constant, constant))
            continue
        low = linprog(objective, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
        high = linprog(-objective, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs")
        lo = constant + (low.fun if low.status == 0 else 0.0)
        hi = constant + (-high.fun if high.status == 0 else np.inf)
        out.append((lo, hi))
    return out


def audit(values: np.ndarray, shown: Shown, targets: Sequence[tuple], protection: float
          ) -> dict[tuple, tuple[float, float]]:
    """The targets whose derivable interval is narrower than `protection` ({} when every one is protected)."""
    bounds = derivable_bounds(values, shown, targets)
    return {t: b for t, b in zip(targets, bounds) if b[1] - b[0] < protection}


def _margin_fails(value: float, rules: RuleSet) -> bool:
    return value < rules.safe_threshold or (value == 0 and rules.zeros_are_disclosive)


def suppress(table: np.ndarray, primary: np.ndarray, margins: bool = True, rules: RuleSet = DEFAULT_RULES,
             protection: float | None = None, labels: Sequence[Sequence[str]] = (),
             max_steps: int | None = None) -> Remedied:
    """Suppress the `primary` cells of an additive table (counts or sums) and, with `margins`, enough further cells
    (or totals) that no primarily hidden quantity can be narrowed below `protection` from what is shown; if that
    fails, drop the margins. See the module docstring."""
    values = _as_2d(table)
    one_d = np.asarray(table).ndim == 1
    primary2 = np.asarray(primary, dtype=bool).reshape(values.shape)
    protection = float(rules.safe_threshold if protection is None else protection)
    label_tuple = tuple(tuple(a) for a in labels)
    actions = [f"primary suppression of {int(primary2.sum())} cell(s) failing a check"]
    if not margins:
        return _suppressed(values, primary2, primary2, None, None, None, one_d, actions, label_tuple)
    r, c = values.shape
    rows = np.ones(r, dtype=bool)
    cols = np.ones(c, dtype=bool) if not one_d else None   # a frequency table's column totals are its cells
    grand = not one_d                                      # ... and its only row total is the grand total
    targets: list[tuple] = [("cell", int(i), int(j)) for i, j in np.argwhere(primary2)]
    for i in range(r):
        if _margin_fails(values[i].sum(), rules):
            rows[i] = False
            targets.append(("row", i))
    if cols is not None:
        for j in range(c):
            if _margin_fails(values[:, j].sum(), rules):
                cols[j] = False
                targets.append(("col", j))
    if grand and _margin_fails(values.sum(), rules):
        grand = False
        targets.append(("grand",))
    hidden = primary2.copy()
    _rectangles(values, hidden, primary2, protection)
    _pair_lines(values, hidden, rows, cols)
    added = [_describe(("cell", int(i), int(j)), label_tuple, one_d) for i, j in np.argwhere(hidden & ~primary2)]
    steps = max_steps if max_steps is not None else r * c + r + c + 1
    required = _requirements(hidden, primary2, targets, protection)
    failing = _unprotected(values, Shown(hidden, rows, cols, grand), required, list(required))
    while failing and steps > 0:
        steps -= 1
        choice = _best_complement(values, hidden, rows, cols, grand, failing)
        if choice is None:
            break
        before = hidden.copy()
        kind = choice[0]
        if kind == "cell":
            hidden[choice[1], choice[2]] = True
        elif kind == "row":
            rows[choice[1]] = False
        elif kind == "col":
            cols[choice[1]] = False
        else:
            grand = False
        added.append(_describe(choice, label_tuple, one_d))
        hidden_now = _pair_lines(values, hidden.copy(), rows, cols)
        added += [_describe(("cell", int(i), int(j)), label_tuple, one_d)
                  for i, j in np.argwhere(hidden_now & ~hidden)]
        hidden[:] = hidden_now
        # Hiding more only widens what a reader can derive (a constant becomes a variable, or an equation goes), so
        # what was protected stays protected: re-check the failing quantities and the newly hidden cells only.
        new_cells = [("cell", int(i), int(j)) for i, j in np.argwhere(hidden & ~before)]
        required.update({t: 1.0 for t in new_cells if t not in required})
        failing = _unprotected(values, Shown(hidden, rows, cols, grand), required, list(failing) + new_cells)
    if failing:
        actions.append("margins dropped: secondary suppression could not keep every hidden cell from being narrowed"
                       f" below {protection:g} with totals shown")
        return _suppressed(values, primary2, primary2, None, None, None, one_d, actions, label_tuple)
    if added:
        actions.append("secondary suppression (so no hidden cell can be derived from the totals): "
                       + ", ".join(added))
    failing_margins = [t for t in targets if t[0] != "cell"]
    if failing_margins:
        actions.append(f"{len(failing_margins)} total(s) failing a check hidden")
    actions.append(f"totals shown are those of the true table; every hidden cell or total that failed a check can "
                   f"be narrowed to no less than {protection:g} wide, and no hidden cell can be derived exactly")
    row_totals = np.where(rows, values.sum(axis=1), np.nan)
    col_totals = None if cols is None else np.where(cols, values.sum(axis=0), np.nan)
    grand_total = (float(values.sum()) if grand else np.nan) if not one_d else None
    return _suppressed(values, hidden, primary2, row_totals, col_totals, grand_total, one_d, actions, label_tuple)


def _rectangles(values: np.ndarray, hidden: np.ndarray, primary: np.ndarray, protection: float) -> np.ndarray:
    """Hide, for each primary cell (i, j), the cheapest rectangle (i, l), (k, j), (k, l) whose cells (i, l) and
    (k, j) hold at least `protection`: then the reader cannot rule out the cell being `protection` larger (those
    two smaller by as much, (k, l) larger), whatever totals are shown, so its interval is at least that wide, and
    so is every cell of the rectangle's. Cost: the values newly hidden (already hidden cells cost nothing). A
    frequency table (one row) takes one partner (0, l) holding at least `protection`. In place; returns `hidden`."""
    r, c = values.shape
    for i, j in sorted(map(tuple, np.argwhere(primary)), key=lambda p: values[p]):
        price = np.where(hidden, 0.0, values)
        row_ok = values[i] >= protection
        row_ok[j] = False
        if r == 1:
            if row_ok.any():
                l = int(np.argmin(np.where(row_ok, price[i], np.inf)))
                hidden[i, l] = True
            continue
        col_ok = values[:, j] >= protection
        col_ok[i] = False
        if not row_ok.any() or not col_ok.any():
            continue   # no rectangle protects it; the linear-programming step below looks further
        cost = np.where(col_ok, price[:, j], np.inf)[:, None] + np.where(row_ok, price[i], np.inf)[None, :] + price
        cost[i, :] = np.inf
        cost[:, j] = np.inf
        k, l = np.unravel_index(int(np.argmin(cost)), cost.shape)
        if np.isfinite(cost[k, l]):
            hidden[i, l] = hidden[k, j] = hidden[k, l] = True
    return hidden


def _pair_lines(values: np.ndarray, hidden: np.ndarray, rows: np.ndarray, cols: np.ndarray | None) -> np.ndarray:
    """The classic first step of secondary suppression, without linear programs: while a line whose total is shown
    holds exactly one hidden cell (which the total gives away), hide one more cell of it: one whose crossing line
    already holds a hidden cell if there is one (that closes a cycle), the smallest value first. Changes `hidden`
    in place and returns it; `audit` then checks what no pairing rule can (chains through several lines)."""
    r, c = hidden.shape
    changed = True
    while changed:
        changed = False
        lines = [("row", i) for i in range(r) if rows[i]]
        if cols is not None:
            lines += [("col", j) for j in range(c) if cols[j]]
        for kind, k in lines:
            line = hidden[k] if kind == "row" else hidden[:, k]
            if int(line.sum()) != 1 or line.size < 2:
                continue
            free = np.flatnonzero(~line)
            if kind == "row":
                crossing = hidden[:, free].sum(axis=0) > 0
                cost = values[k, free]
            else:
                crossing = hidden[free, :].sum(axis=1) > 0
                cost = values[free, k]
            pick = free[np.lexsort((cost, ~crossing))[0]]
            if kind == "row":
                hidden[k, pick] = True
            else:
                hidden[pick, k] = True
            changed = True
    return hidden


def _describe(item: tuple, labels: tuple, one_d: bool) -> str:
    if item[0] == "cell":
        if labels:
            names = [labels[-1][item[2]]] if one_d else [labels[0][item[1]], labels[1][item[2]]]
            return "cell [" + ", ".join(names) + "]"
        return f"cell {item[1:] if not one_d else (item[2],)}"
    if item[0] == "row":
        return f"total of row {labels[0][item[1]] if labels and not one_d else item[1]}"
    if item[0] == "col":
        return f"total of column {labels[-1][item[1]] if labels else item[1]}"
    return "grand total"


def _requirements(hidden: np.ndarray, primary: np.ndarray, targets: list[tuple], protection: float
                  ) -> dict[tuple, float]:
    """How wide each hidden quantity's derivable interval must be: `protection` for what failed a check (primary
    cells, failing totals); at least 1 for a secondary cell (it hides a safe value, but must not be pinned exactly:
    a recovered complement is a step towards the others)."""
    required = {t: protection for t in targets}
    for i, j in np.argwhere(hidden & ~primary):
        required[("cell", int(i), int(j))] = 1.0
    return required


def _unprotected(values: np.ndarray, shown: Shown, required: dict[tuple, float], names: list[tuple]
                 ) -> dict[tuple, tuple[float, float]]:
    """Those of `names` whose derivable interval is narrower than required: name -> (width, required)."""
    names = list(dict.fromkeys(names))
    bounds = derivable_bounds(values, shown, names)
    return {t: (hi - lo, required[t]) for t, (lo, hi) in zip(names, bounds) if hi - lo < required[t]}


CANDIDATES_TRIED = 6   # the cheapest complements whose effect is computed at each step


def _best_complement(values: np.ndarray, hidden: np.ndarray, rows: np.ndarray, cols: np.ndarray | None,
                     grand: bool, failing: dict) -> tuple | None:
    """The item to hide next: of the cheapest few cells (and, for a hidden total, totals) in the lines of the least
    protected quantity, the one that widens its interval most, the smaller value first on a tie."""
    worst = min(failing, key=lambda t: failing[t][0] / failing[t][1])
    need = failing[worst][1]
    r, c = hidden.shape
    lines_r: set[int] = set()
    lines_c: set[int] = set()
    if worst[0] == "cell":
        lines_r.add(worst[1])
        lines_c.add(worst[2])
    elif worst[0] == "row":
        lines_r.add(worst[1])
    elif worst[0] == "col":
        lines_c.add(worst[1])
    candidates: list[tuple] = []
    for i in lines_r:
        candidates += [("cell", i, j) for j in range(c) if not hidden[i, j]]
    for j in lines_c:
        candidates += [("cell", i, j) for i in range(r) if not hidden[i, j]]
    if not candidates:   # every cell of the target's lines is hidden: widen through any other cell
        candidates = [("cell", int(i), int(j)) for i, j in np.argwhere(~hidden)]
    if worst[0] != "cell":
        candidates += [("row", i) for i in range(r) if rows[i] and i not in lines_r]
        if cols is not None:
            candidates += [("col", j) for j in range(c) if cols[j] and j not in lines_c]
        if grand:
            candidates.append(("grand",))
    candidates = list(dict.fromkeys(candidates))
    if not candidates:
        return None

    def cost(item: tuple) -> float:
        if item[0] == "cell":
            return float(values[item[1], item[2]])
        if item[0] == "row":
            return float(values[item[1]].sum())
        if item[0] == "col":
            return float(values[:, item[1]].sum())
        return float(values.sum())

    candidates.sort(key=cost)
    best, best_width = None, -1.0
    for item in candidates[:CANDIDATES_TRIED]:
        h, rw, cl, gr = hidden.copy(), rows.copy(), None if cols is None else cols.copy(), grand
        if item[0] == "cell":
            h[item[1], item[2]] = True
        elif item[0] == "row":
            rw[item[1]] = False
        elif item[0] == "col":
            cl[item[1]] = False
        else:
            gr = False
        _pair_lines(values, h, rw, cl)
        lo, hi = derivable_bounds(values, Shown(h, rw, cl, gr), [worst])[0]
        width = min(hi - lo, need)
        if width > best_width:
            best, best_width = item, width
        if width >= need:
            break   # the cheapest that protects it
    return best


def _suppressed(values, hidden, primary, row_totals, col_totals, grand_total, one_d, actions, labels) -> Remedied:
    cells = np.where(hidden, np.nan, values)
    if one_d:
        cells, hidden, primary = cells.reshape(-1), hidden.reshape(-1), primary.reshape(-1)
        grand_total = None if row_totals is None else float(row_totals[0])
        row_totals = None
    basis = TRUE_TOTALS if grand_total is not None or row_totals is not None else None
    return Remedied("suppression", cells, hidden, primary, row_totals, col_totals, grand_total, basis,
                    tuple(actions), REVIEW, labels)


# ---------------------------------------------------------------------------------------------------------------
# Rounding

def round_to_base(values: np.ndarray, base: int) -> np.ndarray:
    """The nearest multiple of `base`, halves up (12.5 -> 15 at base 5 would be 15; integers never tie at odd
    bases)."""
    if base < 1:
        raise ValueError("the rounding base must be at least 1")
    array = np.asarray(values, dtype=np.float64)
    return np.floor(array / base + 0.5) * base


def round_table(table: np.ndarray, rules: RuleSet = DEFAULT_RULES, base: int | None = None, margins: bool = True,
                labels: Sequence[Sequence[str]] = ()) -> Remedied:
    """Every cell rounded to the base; margins are the sums of the rounded cells, rounded again."""
    base = int(rules.safe_round_base if base is None else base)
    values = np.asarray(table, dtype=np.float64)
    rounded = round_to_base(values, base)
    actions = [f"rounded to nearest {base}"]
    return _with_rounded_margins("rounding", rounded, np.zeros(values.shape, dtype=bool), margins, base, actions,
                                 labels, ROUNDED_TOTALS)


def opensafely(table: np.ndarray, rules: RuleSet = DEFAULT_RULES, margins: bool = True,
               redact_at_most: int = OPENSAFELY_REDACT_AT_MOST, base: int = OPENSAFELY_BASE,
               keep_zeros: bool | None = None, labels: Sequence[Sequence[str]] = ()) -> Remedied:
    """The OpenSAFELY profile: redact counts of `redact_at_most` or fewer (zeros too unless `keep_zeros`, which
    defaults to zeros not being disclosive under `rules`), then round the rest to the nearest `base`; totals are
    recomputed from the published cells and rounded."""
    values = np.asarray(table, dtype=np.float64)
    keep = (not rules.zeros_are_disclosive) if keep_zeros is None else keep_zeros
    redact = values <= redact_at_most
    if keep:
        redact &= values != 0
    rounded = np.where(redact, np.nan, round_to_base(values, base))
    actions = [f"redacted {int(redact.sum())} count(s) of {redact_at_most} or fewer"
               + ("" if keep else " (zeros included)"), f"rounded to nearest {base}"]
    return _with_rounded_margins("opensafely", rounded, redact, margins, base, actions, labels, PUBLISHED_TOTALS)


def _with_rounded_margins(remedy: str, rounded: np.ndarray, hidden: np.ndarray, margins: bool, base: int,
                          actions: list[str], labels: Sequence[Sequence[str]], basis: str) -> Remedied:
    label_tuple = tuple(tuple(a) for a in labels)
    row_totals = col_totals = grand = None
    if margins:
        shown = np.nan_to_num(rounded, nan=0.0)
        if rounded.ndim == 2:
            row_totals = round_to_base(shown.sum(axis=1), base)
            col_totals = round_to_base(shown.sum(axis=0), base)
        grand = float(round_to_base(shown.sum(), base))
        actions = actions + ["totals are sums of the published (rounded) cells, rounded again"]
    return Remedied(remedy, rounded, hidden, hidden.copy(), row_totals, col_totals, grand,
                    basis if margins else None, tuple(actions), REVIEW, label_tuple)


def remedy_status(verdict: Verdict, remedied: Remedied) -> str:
    """The status of a remedied output: at least `review` (ACRO: a remedy makes an output `review`), and still
    `fail` when a suppression left a cell that failed a check visible (a caller's primary mask that missed it).
    Rounding protects every cell it rounds, so a rounded output (and the OpenSAFELY profile's) is `review`."""
    if remedied.remedy in ("rounding", "opensafely"):
        return REVIEW
    shape = remedied.hidden.shape
    primary = primary_mask(verdict, shape) if verdict.checks else np.zeros(shape, dtype=bool)
    return FAIL if (primary & ~remedied.hidden).any() else REVIEW


__all__ = ["PUBLISHED_TOTALS", "ROUNDED_TOTALS", "Remedied", "Shown", "TRUE_TOTALS", "audit", "derivable_bounds",
           "opensafely", "primary_mask", "remedy_status", "round_table", "round_to_base", "suppress"]

"""An attacker's view of a suppressed table, written independently of outputs.remedies: from the published numbers
only (cells, row totals, column totals, grand total; NaN = hidden), what can be said about each hidden cell?

`single_hidden_lines` finds rows or columns with a shown total and exactly one hidden cell (total minus the others
gives it away). `intervals` solves, with scipy's linprog, the smallest and largest value each hidden cell can have
given every published equation and non-negative cells: a cell is recovered when its interval is a point, and is
narrowed when the interval is shorter than a protection margin."""
from __future__ import annotations

import numpy as np
from scipy.optimize import linprog


def _view(remedied):
    cells = np.asarray(remedied.cells, dtype=float)
    cells = cells.reshape(1, -1) if cells.ndim == 1 else cells
    r, c = cells.shape
    if remedied.cells.ndim == 1:
        rows = np.array([np.nan if remedied.grand_total is None else remedied.grand_total])
        cols = None
        grand = None
    else:
        rows = None if remedied.row_totals is None else np.asarray(remedied.row_totals, dtype=float)
        cols = None if remedied.col_totals is None else np.asarray(remedied.col_totals, dtype=float)
        grand = remedied.grand_total
    return cells, rows, cols, grand


def single_hidden_lines(remedied) -> list[str]:
    cells, rows, cols, grand = _view(remedied)
    found = []
    if rows is not None:
        for i, total in enumerate(rows):
            if not np.isnan(total) and np.isnan(cells[i]).sum() == 1:
                found.append(f"row {i}")
    if cols is not None:
        for j, total in enumerate(cols):
            if not np.isnan(total) and np.isnan(cells[:, j]).sum() == 1:
                found.append(f"column {j}")
    return found


def intervals(remedied, sums: dict | None = None) -> dict:
    """(row, column) of each hidden cell -> (lowest, highest) value consistent with everything published; with
    `sums` ({name: [cells]}), also the interval of each named sum of cells (a hidden total)."""
    cells, rows, cols, grand = _view(remedied)
    hidden = np.argwhere(np.isnan(cells))
    var = {tuple(map(int, p)): k for k, p in enumerate(hidden)}
    n = len(var)
    if n == 0:
        return {}
    equations, rhs = [], []

    def add(members: list[tuple[int, int]], total: float) -> None:
        row = np.zeros(n)
        known = 0.0
        for cell in members:
            if cell in var:
                row[var[cell]] = 1.0
            else:
                known += cells[cell]
        if row.any():
            equations.append(row)
            rhs.append(total - known)

    r, c = cells.shape
    if rows is not None:
        for i in range(r):
            if not np.isnan(rows[i]):
                add([(i, j) for j in range(c)], rows[i])
    if cols is not None:
        for j in range(c):
            if not np.isnan(cols[j]):
                add([(i, j) for i in range(r)], cols[j])
    if grand is not None and not np.isnan(grand):
        add([(i, j) for i in range(r) for j in range(c)], grand)
    a = np.array(equations) if equations else None
    b = np.array(rhs) if rhs else None
    out = {}
    wanted = {cell: [cell] for cell in var}
    wanted.update(sums or {})
    for name, members in wanted.items():
        objective = np.zeros(n)
        known = 0.0
        for cell in members:
            if cell in var:
                objective[var[cell]] = 1.0
            else:
                known += cells[cell]
        if not objective.any():
            out[name] = (known, known)
            continue
        low = linprog(objective, A_eq=a, b_eq=b, bounds=(0, None), method="highs")
        high = linprog(-objective, A_eq=a, b_eq=b, bounds=(0, None), method="highs")
        assert low.status == 0, "the published numbers must be consistent"
        out[name] = (known + low.fun, known + (-high.fun) if high.status == 0 else np.inf)
    return out


def hidden_totals(remedied) -> dict[str, list[tuple[int, int]]]:
    """The hidden row and column totals of a 2-D table, each as the list of its cells."""
    cells, rows, cols, grand = _view(remedied)
    r, c = cells.shape
    found = {}
    if rows is not None:
        found.update({f"row {i}": [(i, j) for j in range(c)] for i in range(r) if np.isnan(rows[i])})
    if cols is not None:
        found.update({f"column {j}": [(i, j) for i in range(r)] for j in range(c) if np.isnan(cols[j])})
    return found

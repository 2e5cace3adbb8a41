"""An airlock output as the checkers' pages draw it: the table read from its stored data.csv, each cell marked with the
checks that flag it (from its stored meta.json), and the analysis it came from in words.

Both files were written inside the enclave, so nothing here trusts them: the CSV is parsed with bounds (rows,
columns, cell length) and every value reaches the page only as text through Jinja's autoescaping; meta.json is read
as data (unknown shapes are ignored, not rendered as markup). The enclave's own rendering.html is never used.

Which cells a check flags comes two ways in meta.json, and both are used: `flags` ({row, col, rule, status}, the
cell's position in the data grid, what the app highlights) and each check's `cells` (one label per axis, as ACRO
names them). Positions are exact; labels are matched against the table's row labels and column headers, so an output
whose meta.json has only checks (an ACRO-style record) is still highlighted. `structural-zeros` marks cells that
cannot hold a record (status pass): shown, but not as failing.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from typing import Any

from outputs.airlock.store import MAX_CSV_CELL_CHARS as MAX_CELL_CHARS  # the airlock refuses more: shown whole
from outputs.airlock.store import MAX_CSV_COLUMNS as MAX_COLUMNS
from outputs.airlock.store import MAX_CSV_ROWS as MAX_ROWS

RANK = {"pass": 0, "review": 1, "fail": 2}
STRUCTURAL = "structural-zeros"


@dataclass(slots=True)
class Cell:
    """A cell some check marks (unmarked cells stay plain strings: a table of 100,000 cells makes few objects)."""

    text: str
    marks: list[dict[str, str]] = field(default_factory=list)  # {rule, status, reason}

    @property
    def css(self) -> str:
        """flag-fail / flag-review for a cell a check fails or sends to review; flag-structural for a structural
        zero; "" otherwise."""
        statuses = [m["status"] for m in self.marks if m["rule"] != STRUCTURAL]
        if statuses:
            worst = max(statuses, key=lambda s: RANK.get(s, 0))
            return f"flag-{worst}" if worst in ("fail", "review") else ""
        return "flag-structural" if self.marks else ""

    @property
    def title(self) -> str:
        return "; ".join(f"{m['rule']} ({m['status']}): {m['reason']}" if m["reason"] else
                         f"{m['rule']} ({m['status']})" for m in self.marks)


@dataclass
class Table:
    header: list[str]
    rows: list[list[str | Cell]]  # each row: its label first; a Cell where a check marks the value
    truncated: bool = False
    error: str | None = None
    flagged: int = 0  # cells marked fail or review


def _clip(text: str) -> str:
    return text if len(text) <= MAX_CELL_CHARS else text[:MAX_CELL_CHARS] + "…"


def parse_csv(data: bytes) -> Table:
    """The CSV as a table (header, rows of cells); a file that is not UTF-8 CSV gives an empty table with the error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Table([], [], error=f"data.csv is not UTF-8 (byte {exc.start})")
    try:
        lines = list(_rows(csv.reader(io.StringIO(text, newline=""))))
    except csv.Error as exc:
        return Table([], [], error=f"data.csv is not CSV: {exc}")
    if not lines:
        return Table([], [], error="data.csv is empty")
    truncated = len(lines) > MAX_ROWS + 1 or any(len(line) > MAX_COLUMNS for line in lines)
    long_cells = any(len(x) > MAX_CELL_CHARS for line in lines for x in line)
    header = [_clip(x) for x in lines[0][:MAX_COLUMNS]]
    rows = lines[1:MAX_ROWS + 1]
    if truncated or long_cells:
        rows = [[_clip(x) for x in line[:MAX_COLUMNS]] for line in rows]
    return Table(header, rows, truncated=truncated)


def _rows(reader: Any):
    for i, row in enumerate(reader):
        yield row
        if i > MAX_ROWS + 1:
            break


def _meta_checks(meta: dict[str, Any]) -> list[dict[str, Any]]:
    checks = meta.get("checks")
    return [c for c in checks if isinstance(c, dict)] if isinstance(checks, list) else []


def mark(table: Table, meta: dict[str, Any]) -> Table:
    """Mark the cells the output's checks flag (by position from `flags`, by labels from each check's `cells`; a
    rule that has positions in `flags` is not matched again by labels)."""
    checks = _meta_checks(meta)
    reasons: dict[str, str] = {}
    for check in checks:  # a flag names its rule: the first reason given for that rule
        if check.get("reason") and str(check.get("rule")) not in reasons:
            reasons[str(check.get("rule"))] = str(check["reason"])
    rows = table.rows
    seen: set[tuple[int, int, str]] = set()
    marked: dict[tuple[int, int], Cell] = {}

    def put(r: int, c: int, rule: str, status: str, reason: str | None = None) -> None:
        if (r, c, rule) in seen or not (0 <= r < len(rows)) or not (1 <= c < len(rows[r])):
            return
        seen.add((r, c, rule))
        cell = marked.get((r, c))
        if cell is None:
            cell = marked[(r, c)] = Cell(str(rows[r][c]))
            rows[r][c] = cell
        cell.marks.append({"rule": rule, "status": status,
                           "reason": reasons.get(rule, "") if reason is None else reason})

    flags = meta.get("flags")
    placed: set[str] = set()
    for flag in flags if isinstance(flags, list) else []:
        if isinstance(flag, dict) and isinstance(flag.get("row"), int) and isinstance(flag.get("col"), int):
            rule = str(flag.get("rule", ""))
            placed.add(rule)
            put(flag["row"], flag["col"] + 1, rule, str(flag.get("status", "")))
    row_index = {str(row[0]): i for i, row in reversed(list(enumerate(rows))) if row}
    col_index = {name: j for j, name in reversed(list(enumerate(table.header))) if j > 0}
    for check in checks:
        rule, status = str(check.get("rule", "")), str(check.get("status", ""))
        reason = str(check.get("reason") or "")
        if (status == "pass" and rule != STRUCTURAL) or rule in placed:
            continue
        cells = check.get("cells")
        for labels in cells if isinstance(cells, list) else []:
            if not isinstance(labels, list) or not labels:
                continue
            r = row_index.get(str(labels[0]))
            if r is None:
                continue
            if len(labels) >= 2:
                c = col_index.get(str(labels[1]))
                if c is not None:
                    put(r, c, rule, status, reason)
            else:  # one axis: the row's value cells (not a total column)
                for c in range(1, len(rows[r])):
                    if table.header[c:c + 1] != ["total"]:
                        put(r, c, rule, status, reason)
    table.flagged = sum(1 for cell in marked.values() if cell.css in ("flag-fail", "flag-review"))
    return table


def output_table(data_csv: bytes | None, meta: dict[str, Any]) -> Table:
    if data_csv is None:
        return Table([], [], error="no data.csv in this output")
    return mark(parse_csv(data_csv), meta)


def read_meta(data: bytes | None) -> dict[str, Any]:
    """meta.json as a dict ({} when absent or not a JSON object)."""
    if data is None:
        return {}
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def analysis_lines(meta: dict[str, Any]) -> list[tuple[str, str]]:
    """The analysis behind an output as (label, text) pairs: kind, query fields, cohorts, remedy, rules, who and
    when. Values are JSON text (never markup)."""
    out: list[tuple[str, str]] = []

    def text(value: Any) -> str:
        return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)

    if meta.get("kind"):
        out.append(("analysis", text(meta["kind"])))
    query = meta.get("query")
    if isinstance(query, dict):
        for key, value in query.items():
            if value not in (None, "", [], {}):
                out.append((f"query: {key}", text(value)))
    cohorts = meta.get("cohorts")
    for i, cohort in enumerate(cohorts if isinstance(cohorts, list) else []):
        out.append((f"cohort {i + 1}", text(cohort)))
    for key in ("remedy", "remedied_from", "status_before_remedy", "created_at", "created_by"):
        if meta.get(key) not in (None, "", [], {}):
            out.append((key.replace("_", " "), text(meta[key])))
    return [(label, value[:2000]) for label, value in out]

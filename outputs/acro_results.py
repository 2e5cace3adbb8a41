"""ACRO's `results.json` layout for outputs, so SACRO's outputs viewer (and acro's `load_records`) can read them.

acro 1.0.2 writes, per output, `{uid, status, type, properties, files: [{name, sdc}], outcome, command, summary,
timestamp, comments, exception}` under `results`, with `version` at the top. `sdc` is `{"summary": {...},
"cells": {...}}`: `summary` counts the flagged cells per rule (`suppressed`: whether suppression was applied;
`negative`, `missing`, `threshold`, `p-ratio`, `nk-rule`, `all-values-are-same`), `cells` lists each rule's flagged
cells as `[row, column]` positions. `outcome` is the table of per-cell notes (`"ok"` or `"threshold; "`) as pandas'
`DataFrame.to_json` writes it: `{column label: {row label: note}}`.

We add what ACRO does not check under our own names in the same two dicts (`zeros`, `dof`, `structural-zeros`,
`differencing`) and keep `properties.method` and, for models, `properties.dof` as ACRO does. The labels in
`outcome` are the table's labels; positions in `cells` index the table's rows and columns as shown.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from .checks import PASS, Verdict
from .remedies import Remedied

ACRO_LAYOUT_VERSION = "1.0.2"   # the acro release whose layout this follows
ACRO_RULES = ("negative", "missing", "threshold", "p-ratio", "nk-rule", "all-values-are-same")


def sdc_block(verdict: Verdict, suppressed: bool = False) -> dict:
    """`{"summary": ..., "cells": ...}` of one output, ACRO's keys first, then ours for the rules ACRO lacks."""
    summary: dict = {"suppressed": bool(suppressed)}
    cells: dict = {}
    for rule in ACRO_RULES:
        summary[rule] = 0
        cells[rule] = []
    for check in verdict.checks:
        flagged = [list(_pair(p)) for p in check.positions] if check.status != PASS else []
        # a check about the whole output (dof, differencing) flags no cell: it counts once when it does not pass
        summary[check.rule] = len(flagged) if flagged else int(check.status != PASS)
        cells[check.rule] = flagged
    return {"summary": summary, "cells": cells}


def _pair(position: Sequence[int]) -> tuple[int, ...]:
    """ACRO's cells are [row, column]; a frequency table is one column, so its cell i is [i, 0]."""
    return (int(position[0]), 0) if len(position) == 1 else tuple(int(p) for p in position)


def outcome_table(verdict: Verdict, labels: Sequence[Sequence[str]]) -> dict:
    """Per-cell notes in pandas' `to_json` orientation: {column label: {row label: "ok" | "rule; rule; "}}."""
    if not labels:
        return {}
    rows = list(labels[0])
    cols = list(labels[1]) if len(labels) > 1 else ["count"]
    notes = {(r, c): "" for r in range(len(rows)) for c in range(len(cols))}
    for check in verdict.checks:
        if check.status == PASS:
            continue
        for position in check.positions:
            key = _pair(position)[:2]
            if key in notes:
                notes[key] += f"{check.rule}; "
    return {str(cols[c]): {str(rows[r]): (notes[(r, c)] or "ok") for r in range(len(rows))}
            for c in range(len(cols))}


def summary_text(verdict: Verdict) -> str:
    """ACRO's one-line summary: the status, then per failing rule how many cells may need suppressing."""
    parts = [verdict.status]
    for check in verdict.checks:
        if check.status == PASS:
            continue
        if check.positions:
            parts.append(f"{check.rule}: {len(check.positions)} cells may need suppressing")
        else:
            parts.append(check.reason)
    return "; ".join(parts) + ("; " if len(parts) > 1 else "")


def acro_record(uid: str, verdict: Verdict, *, method: str, files: Sequence[str], status: str | None = None,
                labels: Sequence[Sequence[str]] = (), remedied: Remedied | None = None,
                properties: Mapping | None = None, command: str = "", comments: Sequence[str] = (),
                exception: str = "", timestamp: str | None = None) -> dict:
    """One output in ACRO's layout. `status` overrides the verdict's (a remedied output is at least `review`)."""
    kind = "regression" if verdict.statistic in ("ols", "logit", "probit", "regression") else "table"
    props = {"method": method, **(properties or {})}
    sdc = sdc_block(verdict, suppressed=remedied is not None and remedied.remedy == "suppression")
    if remedied is not None:
        props["mitigation"] = remedied.remedy
        props["mitigation_actions"] = list(remedied.actions)
    return {
        "uid": uid,
        "status": status or verdict.status,
        "type": kind,
        "properties": props,
        "files": [{"name": name, "sdc": sdc} for name in files],
        "outcome": outcome_table(verdict, labels) if kind == "table" else {},
        "command": command or method,
        "summary": summary_text(verdict),
        "timestamp": timestamp or datetime.now(timezone.utc).isoformat(),
        "comments": list(comments),
        "exception": exception,
    }


def results_document(records: Mapping[str, dict] | Sequence[dict]) -> dict:
    """The whole `results.json`: `{"version", "results": {uid: record}}` (records from `acro_record`)."""
    if not isinstance(records, Mapping):
        records = {record["uid"]: record for record in records}
    return {"version": ACRO_LAYOUT_VERSION, "producer": "safeshare.outputs", "results": dict(records)}


__all__ = ["ACRO_LAYOUT_VERSION", "acro_record", "outcome_table", "results_document", "sdc_block", "summary_text"]

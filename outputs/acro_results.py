"""ACRO's `results.json` layout for outputs, so SACRO's outputs viewer (and acro's `load_records`) can read them.

acro 1.0.2 writes, per output, `{uid, status, type, properties, files: [{name, sdc}], outcome, command, summary,
timestamp, comments, exception}` under `results`, with `version` at the top (checked against a real acro 1.0.2
run: tests/outputs/acro_probe.py). `sdc` is `{"summary": {check: flagged cells}, "cells": {check: [[row, column],
...]}}`, keyed by acro's check names: `MinimumThresholdCheck`, `PresenceOfZeroCheck`, `NKCheck`, `PPercentCheck`,
`PresenceOfLinkedTableCheck` (differencing), `RequiredZeroCheck`; a model's files carry `sdc: {}` and its residual
degrees of freedom go to `properties.dof`. acro lists a cell with a negative contributor under `NKCheck` and
`PPercentCheck` (status `review`, "dominance not defined"), and so do we. `outcome` is the table of per-cell notes
(`"ok"` or `"MinimumThresholdCheck; "`) as pandas' `DataFrame.to_json` writes it: `{column label: {row label:
note}}`. `properties.mitigation` is `none`, `suppress` or `round` as in acro, with our `mitigation_actions`.

What acro has no check for is kept under our own rule names in the same dicts (`structural-zeros`), so nothing is
lost when a viewer ignores it.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone

from .checks import PASS, Verdict
from .remedies import Remedied

ACRO_LAYOUT_VERSION = "1.0.2"   # the acro release whose layout this follows

# our rule -> acro 1.0.2's check names (a negative contributor makes both dominance checks `review` in acro)
ACRO_CHECKS: dict[str, tuple[str, ...]] = {
    "threshold": ("MinimumThresholdCheck",),
    "zeros": ("PresenceOfZeroCheck",),
    "nk-rule": ("NKCheck",),
    "p-ratio": ("PPercentCheck",),
    "negative": ("NKCheck", "PPercentCheck"),
    "differencing": ("PresenceOfLinkedTableCheck",),
    "dof": ("MinimumDoFCheck",),
}
TABLE_CHECKS = ("RequiredZeroCheck", "PresenceOfZeroCheck", "PresenceOfLinkedTableCheck", "MinimumThresholdCheck")
MAGNITUDE_CHECKS = ("NKCheck", "PPercentCheck", "PresenceOfLinkedTableCheck", "MinimumThresholdCheck")
MODEL_STATISTICS = ("ols", "logit", "probit", "regression")


def acro_names(rule: str) -> tuple[str, ...]:
    return ACRO_CHECKS.get(rule, (rule,))


def sdc_block(verdict: Verdict) -> dict:
    """`{"summary": ..., "cells": ...}` of one table output under acro's check names ({} for a model, as acro)."""
    if verdict.statistic in MODEL_STATISTICS:
        return {}
    magnitude = any(c.rule in ("nk-rule", "p-ratio", "negative") for c in verdict.checks)
    summary: dict = {name: 0 for name in (MAGNITUDE_CHECKS if magnitude else TABLE_CHECKS)}
    cells: dict = {name: [] for name in summary}
    for check in verdict.checks:
        flagged = [list(_pair(p)) for p in check.positions] if check.status != PASS else []
        for name in acro_names(check.rule):
            listed = cells.setdefault(name, [])
            listed += [cell for cell in flagged if cell not in listed]
            # a check about the whole output (differencing) flags no cell: it counts once when it does not pass
            summary[name] = len(listed) if listed else max(summary.get(name, 0), int(check.status != PASS))
    return {"summary": summary, "cells": cells}


def _pair(position: Sequence[int]) -> tuple[int, ...]:
    """ACRO's cells are [row, column]; a frequency table is one column, so its cell i is [i, 0]."""
    return (int(position[0]), 0) if len(position) == 1 else tuple(int(p) for p in position)


def outcome_table(verdict: Verdict, labels: Sequence[Sequence[str]]) -> dict:
    """Per-cell notes in pandas' `to_json` orientation: {column label: {row label: "ok" | "Check; Check; "}}."""
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
            for name in acro_names(check.rule):
                if key in notes and f"{name}; " not in notes[key]:
                    notes[key] += f"{name}; "
    return {str(cols[c]): {str(rows[r]): (notes[(r, c)] or "ok") for r in range(len(rows))}
            for c in range(len(cols))}


def summary_text(verdict: Verdict) -> str:
    """acro's summary text: per check that does not pass, how many cells may need suppressing, or why."""
    if verdict.statistic in MODEL_STATISTICS:
        dof = next((c for c in verdict.checks if c.rule == "dof"), None)
        return f"MinimumDoFCheck: {dof.status} - {dof.reason}" if dof else verdict.status
    lines = []
    for check in verdict.checks:
        if check.status == PASS:
            continue
        names = " ".join(acro_names(check.rule))
        if check.positions:
            lines.append(f"{names}: {check.status} - {len(check.positions)} cells may need suppressing.")
        else:
            lines.append(f"{names}: {check.status} - {check.reason}")
    return f"{verdict.status}: " + (" ".join(lines) if lines else "all checks pass.")


def acro_record(uid: str, verdict: Verdict, *, method: str, files: Sequence[str], status: str | None = None,
                labels: Sequence[Sequence[str]] = (), remedied: Remedied | None = None,
                properties: Mapping | None = None, command: str = "", comments: Sequence[str] = (),
                exception: str = "", timestamp: str | None = None) -> dict:
    """One output in ACRO's layout. `status` overrides the verdict's (a remedied output is at least `review`)."""
    kind = "regression" if verdict.statistic in MODEL_STATISTICS else "table"
    props = {"method": method, **(properties or {})}
    if kind == "table":
        rounded = remedied is not None and remedied.remedy in ("rounding", "opensafely")
        props["mitigation"] = "none" if remedied is None else "round" if rounded else "suppress"
    if remedied is not None:
        props["mitigation_actions"] = list(remedied.actions)
    sdc = sdc_block(verdict)
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
    tool = {"name": "safeshare.outputs", "layout": f"ACRO results.json {ACRO_LAYOUT_VERSION}"}
    return {"version": ACRO_LAYOUT_VERSION, "tool": tool, "results": dict(records)}


__all__ = ["ACRO_CHECKS", "ACRO_LAYOUT_VERSION", "acro_names", "acro_record", "outcome_table", "results_document",
           "sdc_block", "summary_text"]

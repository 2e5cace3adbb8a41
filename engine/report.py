"""report.html of a release: what was done to the data and what it cost, readable without any other file.

Self-contained (inline CSS and SVG, no scripts, no external assets or links) so that it can be opened inside an
enclave under a strict Content-Security-Policy. Besides the summary, transformation and quality it shows:

* the release gate's verdict and reasons, near the top;
* the prosecutor risk profile before and after (share of records per re-identification risk level with the
  cumulative share, as in Prasser et al., JBHI 2018, Figs. 7 and 12): "before" is the input over the
  quasi-identifiers as they are, "after" the released (non-suppressed) records;
* per gate population its size, the model used, the estimated population uniques, population uniqueness and the
  |PU|/|SU| ratio, before and after (Table II of the paper);
* per-record risk of the released records per gate population (engine.individual_report): expected
  re-identifications, global risk, highest record risk, tau1 and tau2, a histogram of records by risk, and the
  released records that carry the most risk (their released values and rows in the data file);
* per attribute the top values of the input and of the output, with the number of distinct values;
* per declared sensitive attribute, attribute disclosure over the released classes (engine.disclosure_report).

The page is a pure rendering of the finished manifest (engine.manifest) and of what the run computed for it once
(engine.report_data): nothing here touches the input or runs a risk model. The markup is the Jinja templates in
engine/templates, autoescaped; the functions below turn figures into the rows and texts the templates show, and the
SVG charts (engine.svgcharts, which escape their own labels) are the only markup passed in, marked safe by name.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from functools import lru_cache

import numpy as np
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

from .disclosure_report import DISCLOSURE_STYLE, RELEASE_INTRO, disclosure_section
from .individual_report import RELEASE_INTRO as RECORD_RISK_INTRO, individual_section
from .manifest import Manifest, PopulationRisk
from .report_data import SUPPRESSED_LABEL, TOP_VALUES, ClassSizes, ReportData
from .svgcharts import Series, bar_chart, grouped_bar_chart, number, percent, step_chart

_BUCKETS = [(1, 1), (2, 2), (3, 4), (5, 9), (10, 19), (20, 49), (50, 99), (100, 999), (1000, None)]
BEFORE_COLOR, AFTER_COLOR = "#9aa4b1", "#2f6aa8"
BEFORE_LINE, AFTER_LINE = "#4b5563", "#c2410c"

_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:64rem;color:#222;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:left}
th{background:#f2f4f7}h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:1.8rem}h3{font-size:1rem;margin:1.2rem 0 .3rem}
td.num{text-align:right;font-variant-numeric:tabular-nums}caption{text-align:left;font-weight:600;padding:.2rem 0}
.gate{padding:.4rem 1rem;border-left:6px solid;margin:1rem 0}.gate h2{margin-top:.4rem}
.gate.passed{border-color:#2e7d32;background:#eef7ee}.gate.refused{border-color:#c62828;background:#fdecea}
.note{color:#555;font-size:.9rem}svg.chart{max-width:100%;height:auto}figure{margin:0 0 1rem}
.pair{display:flex;flex-wrap:wrap;gap:0 1.5rem;align-items:flex-start}table.dist{font-size:.85rem}
table.dist td.v{max-width:16rem;overflow-wrap:anywhere}table.dist td.b{width:8rem}
.hbar{display:inline-block;height:.7rem;vertical-align:middle}.hbar.input{background:""" + BEFORE_COLOR + """}
.hbar.output,.hbar.both{background:""" + AFTER_COLOR + """}.hbar.suppressed{background:#c62828}
tr.suppressed td{background:#fdf3f2}tr.other td{color:#666}small{font-weight:normal;color:#555}
table.populations{font-size:.85rem}
""" + DISCLOSURE_STYLE


# --- formatting ----------------------------------------------------------------------------------------------------
def risk_level_label(upper: float) -> str:
    return f"{upper * 100:.4g}%"


def risk_interval_label(lower: float, upper: float) -> str:
    return f"]{lower * 100:.4g}%, {upper * 100:.4g}%]"


def estimate_text(value: object, kind: str) -> str:
    """A population estimate as the populations table shows it; None is an estimator without a solution."""
    if value is None:
        return "no solution"
    value = float(value)
    if kind == "uniques":
        return f"{value:,.0f}" if value >= 100 else f"{value:.4g}"
    if kind == "uniqueness":
        return percent(value, 4)
    return f"{value:.4f}"


def _estimators_text(estimator: str | list[str] | None) -> str:
    """The gate's estimator(s) as the notes name them; with several, the gate held for the strictest."""
    if isinstance(estimator, list):
        return f"the strictest of {', '.join(estimator)}"
    return estimator or "?"


def model_text(entry: PopulationRisk) -> str:
    if entry.model is None:
        return "none needed" if entry.solved else "none"
    return entry.model


@lru_cache(maxsize=1)
def _environment() -> Environment:
    environment = Environment(loader=PackageLoader("engine", "templates"), autoescape=True, trim_blocks=True,
                              lstrip_blocks=True, keep_trailing_newline=True, undefined=StrictUndefined)
    environment.filters.update(percent=percent, number=number, thousands=lambda value: f"{value:,}",
                               estimate=estimate_text, model=model_text)
    return environment


def _render(template: str, manifest: Manifest, **context: object) -> str:
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return _environment().get_template(template).render(manifest=manifest, generated=generated,
                                                        style=Markup(_STYLE), **context)


# --- sections: figures to rows -------------------------------------------------------------------------------------
def class_size_distribution(sizes: np.ndarray, suppressed: np.ndarray) -> tuple[list[str], list[int]]:
    """Records per class-size bucket among released classes, plus the suppressed records as their own bar."""
    kept = sizes[~suppressed]
    labels, values = [], []
    for lo, hi in _BUCKETS:
        mask = kept >= lo if hi is None else (kept >= lo) & (kept <= hi)
        labels.append(f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}"))
        values.append(int(kept[mask].sum()))
    labels.append("suppressed")
    values.append(int(sizes[suppressed].sum()))
    return labels, values


def class_chart(data: ReportData) -> Markup:
    labels, values = class_size_distribution(np.asarray(data.class_sizes), np.asarray(data.class_suppressed))
    return Markup(bar_chart(labels, values, "Records by equivalence-class size", "class size", width=640,
                            height=260, color="#3b6ea5"))


def privacy_text(manifest: Manifest) -> str:
    return "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in manifest.privacy)


def local_recoding_line(manifest: Manifest) -> str:
    """Global, or local with the records each iteration's transformation released (engine.local)."""
    if manifest.recoding != "local":
        return "global"
    parts = manifest.local_recoding.iterations
    return "local: " + ", ".join(f'{p["released_records"]} records by iteration {p["iteration"]}' for p in parts)


def risk_profile(before: ClassSizes, after: ClassSizes) -> dict:
    """The risk section: the profile chart, the summary before/after and the levels any record is at."""
    profiles = (before.profile, after.profile)
    intervals = profiles[0]["intervals"]
    bars = [Series("before", [r["records"] for r in profiles[0]["intervals"]], BEFORE_COLOR),
            Series("after", [r["records"] for r in profiles[1]["intervals"]], AFTER_COLOR)]
    lines = [Series("before (cumulative)", [r["cumulative"] for r in profiles[0]["intervals"]], BEFORE_LINE, True),
             Series("after (cumulative)", [r["cumulative"] for r in profiles[1]["intervals"]], AFTER_LINE)]
    chart = grouped_bar_chart(
        [risk_level_label(row["upper"]) for row in intervals], bars, lines, chart_id="risk-profile",
        title="Prosecutor risk profile: share of records per re-identification risk level",
        x_label="re-identification risk (prosecutor model), upper bound of the interval",
        y_label="share of records", y2_label="cumulative share of records",
        tooltips=[f"risk {risk_interval_label(row['lower'], row['upper'])}" for row in intervals])
    summary = []
    for label, cell in [
        ("records", lambda s, p: f"{s.records:,}"),
        ("equivalence classes", lambda s, p: f"{int(s.sizes.size):,}"),
        ("sample uniques", lambda s, p: f"{s.uniques:,}"),
        ("sample uniqueness", lambda s, p: percent(s.uniqueness, 3)),
        ("average prosecutor risk", lambda s, p: percent(p["average_risk"], 3)),
        ("highest prosecutor risk", lambda s, p: percent(p["highest_risk"], 3)),
        ("records at the highest risk", lambda s, p: percent(p["records_at_highest_risk"], 3)),
    ]:
        summary.append([label, cell(before, profiles[0]), cell(after, profiles[1])])
    levels = [{"upper": number(b["upper"]), "interval": risk_interval_label(b["lower"], b["upper"]),
               "cells": [percent(b["records"], 2), percent(b["cumulative"], 2), percent(a["records"], 2),
                         percent(a["cumulative"], 2)]}
              for b, a in zip(profiles[0]["intervals"], profiles[1]["intervals"])
              if b["records"] != 0 or a["records"] != 0]
    return {"before": before, "after": after, "summary": summary, "chart": Markup(chart), "levels": levels}


def populations(manifest: Manifest, data: ReportData) -> dict | None:
    """The populations table: every gate population, its estimates on the input (`data.input_gate`, computed in the
    run) and on the release (the manifest's risk), and the notes under it; None when the gate checks none."""
    risk = manifest.risk
    if risk is None or not risk.populations:
        return None
    before = data.input_gate.risk.populations if data.input_gate is not None else []
    before_by_name = {entry.population: entry for entry in before}
    rows = [{"entry": entry, "before": before_by_name.get(entry.population), "size": float(entry.size),
             "fraction": f"{risk.released_records / float(entry.size):.3g}"} for entry in risk.populations]
    notes = []
    gate = manifest.gate
    if gate is not None and gate.max_pu_su_ratio is not None:
        most = gate.max_population_uniqueness if gate.max_population_uniqueness is not None else 1.0
        notes.append(f"The gate allows |PU|/|SU| up to {gate.max_pu_su_ratio:g} and population uniqueness up to "
                     f"{most:g} (estimator: {_estimators_text(risk.estimator)}).")
    if data.input_gate is not None and data.input_gate.gate.reasons:
        notes.append("The input itself would be refused: " + "; ".join(data.input_gate.gate.reasons) + ".")
    estimate = risk.privacy_model_estimate
    if estimate:
        notes.append(f"Privacy model estimate used by the search: population uniqueness "
                     f"{estimate_text(estimate.get('population_uniqueness'), 'uniqueness')} "
                     f"({estimate.get('model_used')}, N = {float(estimate.get('population_size', 0)):,.0f}).")
    return {"risk": risk, "rows": rows, "notes": notes, "accuracy": accuracy_rows(risk),
            "fields": [("population_uniques", "uniques"), ("population_uniqueness", "uniqueness"),
                       ("pu_su_ratio", "ratio")]}


def accuracy_rows(risk) -> list[list[str]]:
    """How far to trust each released risk figure (issue 29): per population and estimator, the model that produced
    the figure, whether it solved, and what benchmarks/risk_accuracy.py found about that estimator at this sampling
    fraction (engine.risk.accuracy). Manifests written before the findings existed are looked up now."""
    from .risk.accuracy import benchmark_finding, finding_text

    rows = []
    n = risk.released_records
    for entry in risk.populations:
        fraction = n / float(entry.size) if float(entry.size) > 0 else 0.0
        estimates = entry.estimates or [{"estimator": getattr(entry, "estimator", None) or
                                         (risk.estimator if isinstance(risk.estimator, str) else None),
                                         "model": entry.model, "solved": entry.solved,
                                         "benchmark": getattr(entry, "benchmark", None)}]
        for estimate in estimates:
            estimator = estimate.get("estimator")
            if estimate.get("model") is None and entry.model is None:
                continue   # no sample uniques: no model was needed
            finding = estimate.get("benchmark") or (benchmark_finding(estimator, fraction) if estimator else None)
            rows.append([entry.population, estimator or "?", estimate.get("model") or "none",
                         "yes" if estimate.get("solved") else "no", f"{fraction:.3g}", finding_text(finding)])
    model_estimate = risk.privacy_model_estimate
    if model_estimate and model_estimate.get("estimator"):
        fraction = float(model_estimate.get("sampling_fraction") or 0.0)
        finding = model_estimate.get("benchmark") or benchmark_finding(str(model_estimate["estimator"]), fraction)
        rows.append([f"privacy model (N = {float(model_estimate.get('population_size', 0)):,.0f})",
                     str(model_estimate["estimator"]), str(model_estimate.get("model_used") or "none"),
                     "yes" if model_estimate.get("solved") else "no", f"{fraction:.3g}", finding_text(finding)])
    return rows


def distribution_table(name: str, side: str, caption: str, values: Sequence[tuple[str, int]], records: int,
                       distinct: int, scale: float, suppressed: int = 0) -> dict:
    """One side's most frequent values, the rest as one row, and the suppressed records as their own row."""
    rows = []
    shown = 0
    for value, count in values:
        share = count / records if records else 0.0
        shown += count
        rows.append({"value": value, "count": count, "share": percent(share, 2),
                     "width": f"{100 * share / scale:.1f}"})
    rest_values = distinct - len(values) - (1 if suppressed and SUPPRESSED_LABEL not in {v for v, _ in values} else 0)
    rest = records - shown - suppressed
    other = ({"others": max(rest_values, 0), "records": rest, "share": percent(rest / records, 2)}
             if rest > 0 else None)
    suppressed_row = ({"records": suppressed, "share": percent(suppressed / records, 2),
                       "width": f"{100 * (suppressed / records) / scale:.1f}"} if suppressed else None)
    return {"name": name, "side": side, "caption": caption, "distinct": distinct, "rows": rows, "other": other,
            "suppressed": suppressed_row}


def distributions(data: ReportData) -> list[dict]:
    out = []
    for entry in data.distributions:
        records = entry["records"]
        scale = max([c for _, c in entry["input"]] + [c for _, c in entry["output"]] + [entry["suppressed"], 1])
        scale = scale / records if records else 1.0
        name = entry["name"]
        if entry["type"] == "quasi_identifying":
            kind = f'quasi-identifier, generalized to level {entry["level"]} of {entry["max_level"]}'
            tables = [distribution_table(name, "input", f'input: {entry["input_distinct"]:,} distinct values',
                                         entry["input"], records, entry["input_distinct"], scale),
                      distribution_table(name, "output", f'output: {entry["output_distinct"]:,} distinct values',
                                         entry["output"], records, entry["output_distinct"], scale,
                                         entry["suppressed"])]
        else:
            kind = f'{entry["type"]}, released unchanged'
            tables = [distribution_table(name, "both", f'input = output: {entry["input_distinct"]:,} distinct values',
                                         entry["input"], records, entry["input_distinct"], scale)]
        out.append({"name": name, "kind": kind, "input_distinct": entry["input_distinct"],
                    "output_distinct": entry["output_distinct"], "tables": tables})
    return out


def search(manifest: Manifest) -> dict | None:
    """How the search went: the best quality found over time (Meurers et al. 2021, Fig. 7), and why it ended.

    A heuristic's curve shows whether more time would likely have helped (still rising at the end) or not (flat
    long before); for a proven optimum it shows how soon the optimum was found."""
    points = [(float(s), float(q)) for s, q in manifest.quality_over_time]
    if not points:
        return None
    stopped = manifest.search_stopped
    limit = manifest.search_limits.get("time_limit_seconds")
    ending = ("optimum proven" if manifest.optimal else
              f"stopped: {stopped}" if stopped else "best solution found, optimum not proven")
    chart = step_chart(points, "Best quality found during the search", "seconds", "quality",
                       end=float(manifest.seconds or points[-1][0]))
    rows = [["algorithm", manifest.algorithm], ["time limit", "none" if limit is None else f"{limit:g} s"],
            ["outcome", ending], ["improvements", len(points)],
            ["last improvement", f"{points[-1][0]:.3f} s, quality {points[-1][1]:.6f}"]]
    return {"rows": rows, "chart": Markup(chart)}


def parallel(manifest: Manifest) -> dict | None:
    """P4 (engine.parallel): how the table was partitioned, each partition's own optimum, the seconds per step, and
    that the risk-based models were decided on the merged release, not per partition."""
    record = manifest.parallel
    if record is None:
        return None
    rows = [["partitions", f"{record.partitions} ({record.scheduler})"],
            ["partitioning", f"{record.partitioning}, sensitive distributions of the {record.statistics}"],
            ["transformation", record.transformation + (f", harmonized to the {record.harmonization}"
                                                        if record.harmonization else "")],
            ["quality row-weighted over partitions (as P4 reports it)", f"{record.quality_row_weighted:.6f}"],
            ["quality of the whole release", f"{manifest.quality[manifest.optimized_for]:.6f}"]]
    if record.risk_models_decided_on_merged_table:
        estimate = (manifest.risk.privacy_model_estimate if manifest.risk is not None else None) or {}
        text = "on the merged release (all partitions together), with the single-machine suppression order"
        if estimate.get("population_uniqueness") is not None:
            text += (f": population uniqueness {estimate_text(estimate['population_uniqueness'], 'uniqueness')} "
                     f"({estimate.get('model_used')}, N = {float(estimate.get('population_size', 0)):,.0f})")
        rows.append(["risk-based privacy models decided", text])
    partitions = [[i, ", ".join(f"{k}={v}" for k, v in (levels or {}).items()) or "no solution"]
                  for i, levels in enumerate(record.partition_transformations)]
    steps = [[step, f"{seconds:.3f}"] for step, seconds in record.seconds_per_step.items()]
    return {"rows": rows, "partitions": partitions, "steps": steps}


# --- the pages -----------------------------------------------------------------------------------------------------
def render_report(manifest: Manifest, data: ReportData) -> str:
    """The report of an in-memory release (`safeshare deid`)."""
    quality = [[name, f"{value:.6f}", "yes" if name == manifest.optimized_for else ""]
               for name, value in manifest.quality.items()]
    models = list(manifest.attribute_quality)
    attribute_quality = [[row.attribute] + [f"{manifest.attribute_quality[m][row.attribute]:.6f}" for m in models]
                         for row in data.transformation]
    summary = [
        ["records", manifest.records],
        ["suppressed records", manifest.suppressed_records],
        ["equivalence classes released", manifest.equivalence_classes],
        ["privacy models", privacy_text(manifest)],
        ["suppression limit", manifest.suppression_limit],
        ["search algorithm", manifest.algorithm],
        ["recoding", local_recoding_line(manifest)],
        ["transformations checked", f"{manifest.checked_transformations} of {manifest.lattice_size}"],
        ["optimum proven", "yes" if manifest.optimal else "no (time limit)"],
        ["seconds", f"{manifest.seconds:.3f}"],
        ["data sha256", manifest.data_sha256],
    ]
    transformation = [[row.attribute, f"{row.level} of {row.max_level}", row.labels, row.examples]
                      for row in data.transformation]
    return _render("report.html.j2", manifest, summary=summary, risk=risk_profile(data.before, data.after),
                   populations=populations(manifest, data), transformation=transformation, quality=quality,
                   models=models, attribute_quality=attribute_quality, class_chart=class_chart(data),
                   search=search(manifest), parallel=parallel(manifest), top_values=TOP_VALUES,
                   suppressed_label=SUPPRESSED_LABEL, distributions=distributions(data),
                   disclosure=Markup(disclosure_section(data.disclosure, RELEASE_INTRO)),
                   individual=Markup(individual_section(data.individual, RECORD_RISK_INTRO)))


def render_dataset_report(manifest: Manifest, data: ReportData) -> str:
    """The report of a partitioned dataset release (`safeshare deid --dataset`), from what the driver holds: the
    gate, the summary, the transformation, every quality model, the class sizes and P4's steps (no per-value
    distributions: the records stayed on the workers)."""
    record = manifest.parallel
    summary = [
        ["records", manifest.records],
        ["suppressed records", manifest.suppressed_records],
        ["equivalence classes released", manifest.equivalence_classes],
        ["smallest released class", manifest.smallest_class],
        ["privacy models", privacy_text(manifest)],
        ["suppression limit", manifest.suppression_limit],
        ["search", f"P4, {record.partitions} partitions ({record.scheduler}), {record.partitioning} partitioning, "
                   f"{record.harmonization} harmonization"],
        ["data", f'{len([f for f in manifest.files if f.startswith("data/")])} Parquet parts under data/'],
        ["data sha256 (of the parts' listing)", manifest.data_sha256],
        ["seconds", f"{manifest.seconds:.3f}"],
    ]
    quality = [[name, f"{value:.6f}", "yes" if name == manifest.optimized_for else ""]
               for name, value in manifest.quality.items()]
    kept = data.after.sizes
    edges = [(0.5, 1.0), (0.2, 0.5), (0.1, 0.2), (0.0, 0.1)]
    risk_rows = [[risk_interval_label(low, high), int(kept[(1.0 / kept > low) & (1.0 / kept <= high)].sum())]
                 for low, high in edges] if kept.size else []
    return _render("dataset_report.html.j2", manifest, kind="partitioned dataset", summary=summary,
                   transformation=[[name, level] for name, level in manifest.transformation.items()],
                   quality=quality, class_chart=class_chart(data), risk_rows=risk_rows, parallel=parallel(manifest),
                   individual=Markup(individual_section(data.individual, RECORD_RISK_INTRO)))


__all__ = ["TOP_VALUES", "class_size_distribution", "render_dataset_report", "render_report"]

"""report.html of a release: what was done to the data and what it cost, readable without any other file.

Self-contained (inline CSS and SVG, no scripts, no external assets or links) so that it can be opened inside an
enclave under a strict Content-Security-Policy. Besides the summary, transformation and quality it shows:

* the release gate's verdict and reasons, near the top;
* the prosecutor risk profile before and after (share of records per re-identification risk level with the
  cumulative share, as in Prasser et al., JBHI 2018, Figs. 7 and 12): "before" is the input over the
  quasi-identifiers as they are, "after" the released (non-suppressed) records;
* per gate population its size, the model used, the estimated population uniques, population uniqueness and the
  |PU|/|SU| ratio, before and after (Table II of the paper);
* per attribute the top values of the input and of the output, with the number of distinct values;
* per declared sensitive attribute, attribute disclosure over the released classes (engine.disclosure_report).

Everything is derived from the result of the search (encoded table, best transformation and its classes): the
only extra work is one grouping of the input's level-0 codes and one estimator call per population on it, and,
when sensitive attributes are declared, one grouping of the released classes with their sensitive values.
"""
from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import numpy as np

from .analysis import RISK_EDGES, prosecutor_profile
from .disclosure_report import DISCLOSURE_STYLE
from .svgcharts import Series, bar_chart, esc as _esc, grouped_bar_chart, number, percent, step_chart

if TYPE_CHECKING:
    from .deid import DeidResult

_BUCKETS = [(1, 1), (2, 2), (3, 4), (5, 9), (10, 19), (20, 49), (50, 99), (100, 999), (1000, None)]
TOP_VALUES = 15
SUPPRESSED_LABEL = "*"
BEFORE_COLOR, AFTER_COLOR = "#9aa4b1", "#2f6aa8"
BEFORE_LINE, AFTER_LINE = "#4b5563", "#c2410c"


def bar_chart_svg(labels: Sequence[str], values: Sequence[float], title: str, value_label: str,
                  width: int = 640, height: int = 260, color: str = "#3b6ea5") -> str:
    """A plain vertical bar chart as inline SVG."""
    return bar_chart(labels, values, title, value_label, width=width, height=height, color=color)


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


def _table(headers: Sequence[str] | None, rows: Sequence[Sequence[object]], cls: str = "") -> str:
    head = "" if headers is None else "<thead><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in headers) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    attr = f' class="{cls}"' if cls else ""
    return f"<table{attr}>{head}<tbody>{body}</tbody></table>"


# --- risk profile --------------------------------------------------------------------------------------------------
def input_class_sizes(result: "DeidResult") -> np.ndarray:
    """Sizes of the input's equivalence classes over the quasi-identifiers as they are (all at level 0)."""
    return result.table.base_classes()[1]


def released_class_sizes(result: "DeidResult") -> np.ndarray:
    return result.best.sizes[~result.best.suppressed]


def risk_level_label(upper: float) -> str:
    return f"{upper * 100:.4g}%"


def risk_interval_label(lower: float, upper: float) -> str:
    return f"]{lower * 100:.4g}%, {upper * 100:.4g}%]"


def _risk_summary_rows(before: np.ndarray, after: np.ndarray, profiles: tuple[dict, dict]) -> list[list[str]]:
    rows = []
    for label, fn in [
        ("records", lambda s, p: f"{int(s.sum()):,}"),
        ("equivalence classes", lambda s, p: f"{int(s.size):,}"),
        ("sample uniques", lambda s, p: f"{int((s == 1).sum()):,}"),
        ("sample uniqueness", lambda s, p: percent(float((s == 1).sum()) / s.sum() if s.sum() else 0.0, 3)),
        ("average prosecutor risk", lambda s, p: percent(p["average_risk"], 3)),
        ("highest prosecutor risk", lambda s, p: percent(p["highest_risk"], 3)),
        ("records at the highest risk", lambda s, p: percent(p["records_at_highest_risk"], 3)),
    ]:
        rows.append([label, fn(before, profiles[0]), fn(after, profiles[1])])
    return rows


def risk_profile_section(before: np.ndarray, after: np.ndarray) -> str:
    profiles = (prosecutor_profile(before), prosecutor_profile(after))
    intervals = profiles[0]["intervals"]
    categories = [risk_level_label(row["upper"]) for row in intervals]
    tooltips = [f"risk {risk_interval_label(row['lower'], row['upper'])}" for row in intervals]
    bars = [Series("before", [r["records"] for r in profiles[0]["intervals"]], BEFORE_COLOR),
            Series("after", [r["records"] for r in profiles[1]["intervals"]], AFTER_COLOR)]
    lines = [Series("before (cumulative)", [r["cumulative"] for r in profiles[0]["intervals"]], BEFORE_LINE, True),
             Series("after (cumulative)", [r["cumulative"] for r in profiles[1]["intervals"]], AFTER_LINE)]
    chart = grouped_bar_chart(
        categories, bars, lines, chart_id="risk-profile",
        title="Prosecutor risk profile: share of records per re-identification risk level",
        x_label="re-identification risk (prosecutor model), upper bound of the interval",
        y_label="share of records", y2_label="cumulative share of records", tooltips=tooltips)
    rows = []
    for b, a in zip(profiles[0]["intervals"], profiles[1]["intervals"]):
        if b["records"] == 0 and a["records"] == 0:
            continue
        rows.append(f'<tr data-upper="{number(b["upper"])}"><td>{_esc(risk_interval_label(b["lower"], b["upper"]))}'
                    f'</td><td class="num">{percent(b["records"], 2)}</td><td class="num">'
                    f'{percent(b["cumulative"], 2)}</td><td class="num">{percent(a["records"], 2)}</td>'
                    f'<td class="num">{percent(a["cumulative"], 2)}</td></tr>')
    detail = ('<table class="risk-levels"><thead><tr><th>risk level</th><th>before</th><th>before, cumulative</th>'
              '<th>after</th><th>after, cumulative</th></tr></thead><tbody>' + "".join(rows) + "</tbody></table>")
    summary = _table(["", "before (input)", "after (released)"], _risk_summary_rows(before, after, profiles),
                     cls="risk-summary")
    return (f'<h2 id="risk">Re-identification risk before and after</h2>'
            f'<p>A record\'s prosecutor risk is 1 / the size of its equivalence class over the quasi-identifiers. '
            f'<b>Before</b>: the input as it is ({int(before.sum()):,} records); <b>after</b>: the released, '
            f'non-suppressed records ({int(after.sum()):,}); shares are of these records.</p>'
            f'{summary}<figure>{chart}</figure>'
            f'<details><summary>Risk levels in numbers</summary>{detail}</details>')


# --- populations (PU / SU) -----------------------------------------------------------------------------------------
def _fmt_model(entry: dict | None) -> str:
    if entry is None:
        return "–"
    if entry.get("model") is None:
        return "none needed" if entry.get("solved") else "none"
    return str(entry["model"])


def _fmt_float(value: object, kind: str) -> str:
    if value is None:
        return "no solution"
    value = float(value)
    if kind == "uniques":
        return f"{value:,.0f}" if value >= 100 else f"{value:.4g}"
    if kind == "uniqueness":
        return percent(value, 4)
    return f"{value:.4f}"


_POPULATION_FIELDS = [("model", "model"), ("population_uniques", "uniques"), ("population_uniqueness", "uniqueness"),
                      ("pu_su_ratio", "ratio")]


def _population_cells(entry: dict | None, side: str) -> str:
    cells = []
    for field, kind in _POPULATION_FIELDS:
        if entry is None:
            cells.append(f'<td data-field="{side}-{field}">–</td>')
            continue
        if field == "model":
            cells.append(f'<td data-field="{side}-model">{_esc(_fmt_model(entry))}</td>')
            continue
        value = entry.get(field)
        data = "" if value is None else f' data-value="{number(value)}"'
        cells.append(f'<td class="num" data-field="{side}-{field}"{data}>{_esc(_fmt_float(value, kind))}</td>')
    return "".join(cells)


def populations_section(manifest: dict, result: "DeidResult", before: np.ndarray) -> str:
    risk = manifest.get("risk") or {}
    after_entries = risk.get("populations") or []
    if not after_entries:
        return ""
    from .gate import evaluate_gate

    before_risk, before_gate = evaluate_gate(result.policy.gate, before)
    before_by_name = {e["population"]: e for e in before_risk["populations"]}
    gate = manifest.get("gate") or {}
    max_ratio = gate.get("max_pu_su_ratio")
    rows = []
    for entry in after_entries:
        name = str(entry["population"])
        size = float(entry["size"])
        released = int(risk.get("released_records", 0))
        rows.append(f'<tr data-population="{_esc(name)}"><td>{_esc(name)}</td>'
                    f'<td class="num" data-field="size" data-value="{number(size)}">{size:,.0f}</td>'
                    f'<td class="num">{released / size:.3g}</td>'
                    f'{_population_cells(before_by_name.get(name), "before")}'
                    f'{_population_cells(entry, "after")}</tr>')
    su_before = float((before == 1).sum()) / before.sum() if before.sum() else 0.0
    notes = []
    if max_ratio is not None:
        notes.append(f"The gate allows |PU|/|SU| up to {max_ratio:g} and population uniqueness up to "
                     f"{gate.get('max_population_uniqueness', 1.0):g} (estimator: {risk.get('estimator', '?')}).")
    if before_gate["reasons"]:
        notes.append("The input itself would be refused: " + "; ".join(before_gate["reasons"]) + ".")
    estimate = risk.get("privacy_model_estimate")
    if estimate:
        notes.append(f"Privacy model estimate used by the search: population uniqueness "
                     f"{_fmt_float(estimate.get('population_uniqueness'), 'uniqueness')} "
                     f"({estimate.get('model_used')}, N = {float(estimate.get('population_size', 0)):,.0f}).")
    head = ('<thead><tr><th rowspan="2">population</th><th rowspan="2">size N</th><th rowspan="2">sampling '
            'fraction (released / N)</th><th colspan="4">before (input)</th><th colspan="4">after (released)</th></tr><tr>'
            + "<th>model</th><th>est. population uniques |PU|</th><th>population uniqueness</th>"
              "<th>|PU|/|SU|</th>" * 2 + "</tr></thead>")
    return (f'<h2 id="populations">Population uniqueness per population</h2>'
            f'<p>Sample uniqueness |SU|: before {percent(su_before, 3)} '
            f'({int((before == 1).sum()):,} of {int(before.sum()):,} records), after '
            f'{percent(float(risk.get("sample_uniqueness", 0.0)), 3)} ({int(risk.get("sample_uniques", 0)):,} of '
            f'{int(risk.get("released_records", 0)):,} released records). |PU|/|SU| is the probability that a '
            f'sample unique is also unique in the population.</p>'
            f'<table class="populations">{head}<tbody>{"".join(rows)}</tbody></table>'
            + "".join(f"<p class=\"note\">{_esc(n)}</p>" for n in notes))


# --- value distributions -------------------------------------------------------------------------------------------
def top_values(labels: np.ndarray, counts: np.ndarray, limit: int = TOP_VALUES) -> list[tuple[str, int]]:
    """The `limit` most frequent labels (count > 0), by count descending, then label."""
    present = np.flatnonzero(counts > 0)
    order = present[np.lexsort((labels[present].astype(str), -counts[present]))][:limit]
    return [(str(labels[i]), int(counts[i])) for i in order]


def attribute_distributions(result: "DeidResult") -> list[dict]:
    """Per released attribute: top values of input and output, distinct counts, suppressed records."""
    table, best = result.table, result.best
    n = int(table.n)
    kept = ~best.suppressed
    kept_sizes = best.sizes[kept]
    suppressed = int(best.sizes[best.suppressed].sum())
    out = []
    for index, (attribute, level) in enumerate(zip(table.attributes, best.levels)):
        in_counts = attribute.counts[0]
        out_counts = np.bincount(best.codes[index][kept], weights=kept_sizes,
                                 minlength=attribute.cardinality(level)).astype(np.int64)
        out_labels = attribute.labels[level]
        if "local" in result.extra:   # local recoding: classes are not codes of one level; count released values
            released = result.released[attribute.name].to_numpy(dtype=object)
            out_labels, out_counts = np.unique(released[released != SUPPRESSED_LABEL].astype(str), return_counts=True)
        distinct_out = {str(v) for v in out_labels[out_counts > 0]}
        if suppressed:
            distinct_out.add(SUPPRESSED_LABEL)
        out.append({"name": attribute.name, "type": "quasi_identifying", "level": int(level),
                    "max_level": int(attribute.hierarchy.max_level), "records": n,
                    "input": top_values(attribute.labels[0], in_counts), "input_distinct": int((in_counts > 0).sum()),
                    "output": top_values(out_labels, out_counts), "output_distinct": len(distinct_out),
                    "suppressed": suppressed})
    for name, spec in result.policy.attributes.items():
        if spec.type not in ("sensitive", "insensitive") or name not in result.input_frame.columns:
            continue
        counts = result.input_frame[name].value_counts(sort=False)
        values = top_values(counts.index.to_numpy().astype(str), counts.to_numpy())
        out.append({"name": name, "type": spec.type, "records": n, "input": values, "input_distinct": int(counts.size),
                    "output": values, "output_distinct": int(counts.size), "suppressed": 0})
    return out


def _distribution_table(name: str, side: str, caption: str, values: list[tuple[str, int]], records: int,
                        distinct: int, scale: float, suppressed: int = 0) -> str:
    rows = []
    shown = 0
    for value, count in values:
        share = count / records if records else 0.0
        shown += count
        rows.append(f'<tr data-value="{_esc(value)}" data-records="{count}"><td class="v">{_esc(value)}</td>'
                    f'<td class="num">{count:,}</td><td class="num">{percent(share, 2)}</td>'
                    f'<td class="b"><span class="hbar {side}" style="width:{100 * share / scale:.1f}%"></span></td></tr>')
    rest_values = distinct - len(values) - (1 if suppressed and SUPPRESSED_LABEL not in {v for v, _ in values} else 0)
    rest = records - shown - suppressed
    if rest > 0:
        rows.append(f'<tr class="other" data-other="{rest}"><td class="v"><i>{max(rest_values, 0):,} other '
                    f'value(s)</i></td><td class="num">{rest:,}</td><td class="num">{percent(rest / records, 2)}</td>'
                    f'<td></td></tr>')
    if suppressed:
        share = suppressed / records
        rows.append(f'<tr class="suppressed" data-suppressed="{suppressed}" data-value="{SUPPRESSED_LABEL}">'
                    f'<td class="v">{SUPPRESSED_LABEL} (suppressed records)</td><td class="num">{suppressed:,}</td>'
                    f'<td class="num">{percent(share, 2)}</td><td class="b"><span class="hbar suppressed" '
                    f'style="width:{100 * share / scale:.1f}%"></span></td></tr>')
    return (f'<table class="dist" data-attribute="{_esc(name)}" data-side="{side}" data-distinct="{distinct}">'
            f'<caption>{_esc(caption)}</caption><thead><tr><th>value</th><th>records</th><th>share</th><th></th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table>')


def distributions_section(result: "DeidResult") -> str:
    parts = [f'<h2 id="distributions">Value distributions per attribute</h2><p>The {TOP_VALUES} most frequent '
             f'values of each attribute in the input and in the output (generalized labels; suppressed records have '
             f'"{SUPPRESSED_LABEL}" in every quasi-identifier and are shown as their own row). Identifying attributes '
             f'are removed from the release and not shown.</p>']
    for entry in attribute_distributions(result):
        records = entry["records"]
        scale = max([c for _, c in entry["input"]] + [c for _, c in entry["output"]] + [entry["suppressed"], 1])
        scale = scale / records if records else 1.0
        name = entry["name"]
        if entry["type"] == "quasi_identifying":
            kind = f'quasi-identifier, generalized to level {entry["level"]} of {entry["max_level"]}'
            tables = (_distribution_table(name, "input", f'input: {entry["input_distinct"]:,} distinct values',
                                          entry["input"], records, entry["input_distinct"], scale)
                      + _distribution_table(name, "output", f'output: {entry["output_distinct"]:,} distinct values',
                                            entry["output"], records, entry["output_distinct"], scale,
                                            entry["suppressed"]))
        else:
            kind = f'{entry["type"]}, released unchanged'
            tables = _distribution_table(name, "both", f'input = output: {entry["input_distinct"]:,} distinct values',
                                         entry["input"], records, entry["input_distinct"], scale)
        parts.append(f'<section class="attribute" data-attribute="{_esc(name)}"><h3>{_esc(name)} '
                     f'<small>({_esc(kind)}; distinct values {entry["input_distinct"]:,} → '
                     f'{entry["output_distinct"]:,})</small></h3><div class="pair">{tables}</div></section>')
    return "".join(parts)


# --- attribute disclosure ------------------------------------------------------------------------------------------
def attribute_disclosure_section(result: "DeidResult") -> str:
    """Per declared sensitive attribute, the attribute-disclosure plots of the released classes (as `safeshare risk
    --html` shows them for the input), so the custodian sees what the release still discloses; empty when the
    policy declares no sensitive attribute."""
    from .disclosure_report import RELEASE_INTRO, disclosure_section, released_disclosure

    return disclosure_section(released_disclosure(result), RELEASE_INTRO)


# --- the page ------------------------------------------------------------------------------------------------------
def gate_section(gate: dict | None) -> str:
    if gate is None:
        return ""
    passed = bool(gate.get("passed"))
    reasons = gate.get("reasons") or []
    items = "".join(f"<li>{_esc(r)}</li>" for r in reasons) or "<li>every population is within the limits</li>"
    limits = (f'largest |PU|/|SU| allowed {gate.get("max_pu_su_ratio", "?")}, largest population uniqueness allowed '
              f'{gate.get("max_population_uniqueness", "?")}')
    return (f'<section class="gate {"passed" if passed else "refused"}" id="gate" '
            f'data-passed="{"true" if passed else "false"}"><h2>Release gate: {"passed" if passed else "REFUSED"}'
            f'</h2><ul class="reasons">{items}</ul><p class="note">{_esc(limits)}; see '
            f'<i>Population uniqueness per population</i> below.</p></section>')


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


def search_section(manifest: dict) -> str:
    """How the search went: the best quality found over time (Meurers et al. 2021, Fig. 7), and why it ended.

    A heuristic's curve shows whether more time would likely have helped (still rising at the end) or not (flat
    long before); for a proven optimum it shows how soon the optimum was found."""
    points = [(float(s), float(q)) for s, q in manifest.get("quality_over_time") or []]
    if not points:
        return ""
    stopped = manifest.get("search_stopped")
    limit = (manifest.get("search_limits") or {}).get("time_limit_seconds")
    ending = ("optimum proven" if manifest.get("optimal") else
              f"stopped: {stopped}" if stopped else "best solution found, optimum not proven")
    chart = step_chart(points, "Best quality found during the search", "seconds", "quality",
                       end=float(manifest.get("seconds") or points[-1][0]))
    rows = [["algorithm", manifest.get("algorithm")], ["time limit", "none" if limit is None else f"{limit:g} s"],
            ["outcome", ending], ["improvements", len(points)],
            ["last improvement", f"{points[-1][0]:.3f} s, quality {points[-1][1]:.6f}"]]
    return f"<h2>Search</h2>{_table(None, rows)}<figure>{chart}</figure>"


def parallel_section(manifest: dict) -> str:
    """P4 (engine.parallel): how the table was partitioned, each partition's own optimum, the seconds per step, and
    that the risk-based models were decided on the merged release, not per partition."""
    record = manifest.get("parallel")
    if not record:
        return ""
    rows = [["partitions", f'{record["partitions"]} ({record["scheduler"]})'],
            ["partitioning", f'{record["partitioning"]}, sensitive distributions of the {record["statistics"]}'],
            ["transformation", record["transformation"] + (f', harmonized to the {record["harmonization"]}'
                                                           if record.get("harmonization") else "")],
            ["quality row-weighted over partitions (as P4 reports it)", f'{record["quality_row_weighted"]:.6f}'],
            ["quality of the whole release", f'{manifest["quality"][manifest["optimized_for"]]:.6f}']]
    if record.get("risk_models_decided_on_merged_table"):
        estimate = (manifest.get("risk") or {}).get("privacy_model_estimate") or {}
        text = "on the merged release (all partitions together), with the single-machine suppression order"
        if estimate.get("population_uniqueness") is not None:
            text += (f": population uniqueness {_fmt_float(estimate['population_uniqueness'], 'uniqueness')} "
                     f"({estimate.get('model_used')}, N = {float(estimate.get('population_size', 0)):,.0f})")
        rows.append(["risk-based privacy models decided", text])
    partitions = [[i, ", ".join(f"{k}={v}" for k, v in (levels or {}).items()) or "no solution"]
                  for i, levels in enumerate(record["partition_transformations"])]
    steps = [[step, f"{seconds:.3f}"] for step, seconds in record["seconds_per_step"].items()]
    return (f'<h2 id="parallel">Partitioned anonymization (P4)</h2>{_table(None, rows)}'
            f'{_table(["partition", "its own optimum (first iteration under local transformation)"], partitions)}'
            f'{_table(["step", "seconds"], steps)}')


def local_recoding_line(manifest: dict) -> str:
    """Global, or local with the records each iteration's transformation released (engine.local)."""
    if manifest.get("recoding") != "local":
        return "global"
    parts = manifest["local_recoding"]["iterations"]
    return "local: " + ", ".join(f'{p["released_records"]} records by iteration {p["iteration"]}' for p in parts)


def report_head(manifest: dict, kind: str = "") -> str:
    """The report's document head (a Content-Security-Policy that allows nothing but inline styles and images),
    title and generation line; `kind` qualifies the heading (e.g. a partitioned dataset)."""
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    heading = _esc(manifest["dataset"]) + (f" ({_esc(kind)})" if kind else "")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>safeshare release report: {_esc(manifest["dataset"])}</title>
<style>{_STYLE}</style></head><body>
<h1>Release report: {heading}</h1>
<p>Generated {generated} by safeshare engine {_esc(manifest["engine_version"])}; optimized for
<b>{_esc(manifest["optimized_for"])}</b>.</p>"""


def render_report(result: "DeidResult", manifest: dict) -> str:
    best = result.best
    table = result.table
    transformation_rows = []
    for attribute, level in zip(table.attributes, best.levels):
        labels = attribute.labels[level]
        example = ", ".join(str(v) for v in labels[:4]) + (" …" if labels.size > 4 else "")
        transformation_rows.append([attribute.name, f"{level} of {attribute.hierarchy.max_level}", labels.size,
                                    example])
    quality_rows = [[name, f"{value:.6f}", "yes" if name == manifest["optimized_for"] else ""]
                    for name, value in manifest["quality"].items()]
    models = list(result.attribute_quality)
    attribute_rows = [[a.name] + [f"{result.attribute_quality[m][a.name]:.6f}" for m in models]
                      for a in table.attributes]
    labels, values = class_size_distribution(best.sizes, best.suppressed)
    chart = bar_chart_svg(labels, values, "Records by equivalence-class size", "class size")
    summary = [
        ["records", manifest["records"]],
        ["suppressed records", manifest["suppressed_records"]],
        ["equivalence classes released", manifest["equivalence_classes"]],
        ["privacy models", "; ".join(", ".join(f"{k}={v}" for k, v in p.items()) for p in manifest["privacy"])],
        ["suppression limit", manifest["suppression_limit"]],
        ["search algorithm", manifest["algorithm"]],
        ["recoding", local_recoding_line(manifest)],
        ["transformations checked", f'{manifest["checked_transformations"]} of {manifest["lattice_size"]}'],
        ["optimum proven", "yes" if manifest["optimal"] else "no (time limit)"],
        ["seconds", f'{manifest["seconds"]:.3f}'],
        ["data sha256", manifest["data_sha256"]],
    ]
    before = input_class_sizes(result)
    after = released_class_sizes(result)
    return f"""{report_head(manifest)}
{gate_section(manifest.get("gate"))}
<h2>Summary</h2>{_table(None, summary)}
{risk_profile_section(before, after)}
{populations_section(manifest, result, before)}
<h2>Transformation</h2>{_table(["attribute", "level", "distinct labels", "labels"], transformation_rows)}
<h2>Quality (1 = original data)</h2>{_table(["model", "quality", "optimized"], quality_rows)}
<h2>Quality per attribute</h2>{_table(["attribute"] + models, attribute_rows)}
<h2>Equivalence classes</h2>{chart}
{search_section(manifest)}
{parallel_section(manifest)}
{distributions_section(result)}
{attribute_disclosure_section(result)}
</body></html>
"""

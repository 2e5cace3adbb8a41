"""Risk analysis of a table as it is (no transformation): what `safeshare risk` reports.

Custodians look at this before choosing a privacy model: how many records are unique in the sample, how the
prosecutor risk (1 / class size) is spread over the records, what each super-population model estimates for the
share of the population that is unique, for each population the policy names, and, for each attribute declared
sensitive, how much the classes disclose of it (engine.disclosure_report).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from .classes import group
from .encoding import encode_table
from .errors import InputError
from .policy import DatasetPolicy, GateSpec, IndividualRisk, PopulationUniqueness
from .svgcharts import Series, bar_chart, esc, grouped_bar_chart, percent
from .table import load_input

ESTIMATORS = ("pitman", "zayatz", "snb", "dankar", "calibrated")

# Upper edges of the prosecutor risk intervals (as in ARX's risk profile), highest first.
RISK_EDGES = [1.0, 0.5, 0.334, 0.25, 0.2, 0.167, 0.143, 0.125, 0.1, 0.09, 0.08, 0.07, 0.06, 0.05, 0.04, 0.03, 0.02,
              0.01, 0.001, 0.0001, 0.00001, 0.000001, 0.0]


def class_sizes(policy: DatasetPolicy) -> np.ndarray:
    loaded = load_input(policy)
    table = encode_table(loaded.frame, loaded.hierarchies, policy.source)
    codes = np.stack([a.records for a in table.attributes])
    _, sizes, _ = group(codes, np.ones(table.n, dtype=np.int64), [a.cardinality(0) for a in table.attributes])
    return sizes


def size_histogram(sizes: np.ndarray) -> list[dict]:
    values, counts = np.unique(sizes, return_counts=True)
    return [{"size": int(s), "classes": int(c), "records": int(s * c)} for s, c in zip(values, counts)]


def prosecutor_profile(sizes: np.ndarray) -> dict:
    """Share of records per prosecutor-risk interval ]lower, upper], highest risk first, with cumulative shares."""
    n = float(sizes.sum())
    risk = 1.0 / sizes
    rows = []
    cumulative = 0.0
    for upper, lower in zip(RISK_EDGES[:-1], RISK_EDGES[1:]):
        mask = (risk <= upper) & (risk > lower)
        share = float(sizes[mask].sum()) / n if n else 0.0
        cumulative += share
        rows.append({"lower": lower, "upper": upper, "records": share, "cumulative": min(cumulative, 1.0)})
    return {
        "intervals": rows,
        "average_risk": float(sizes.size / n) if n else 0.0,
        "highest_risk": float(risk.max()) if risk.size else 0.0,
        "records_at_highest_risk": float(sizes[risk == risk.max()].sum() / n) if risk.size else 0.0,
    }


def configured_populations(policy: DatasetPolicy) -> list[str | float]:
    return [population for population, _ in _populations_with_fields(policy)]


def _populations_with_fields(policy: DatasetPolicy) -> list[tuple[str | float, str]]:
    """Each population the policy names once, with the field that names it first (for error messages)."""
    gate = policy.gate or GateSpec()
    populations = [(p, f"gate.populations[{i}]") for i, p in enumerate(gate.populations)]
    for index, spec in enumerate(policy.privacy):
        if isinstance(spec, (PopulationUniqueness, IndividualRisk)) and spec.population not in [
                p for p, _ in populations]:
            populations.append((spec.population, f"privacy[{index}].population"))
    return populations


def population_sizes(policy: DatasetPolicy, records: int) -> list[tuple[str | float, float]]:
    """(population, size) for every configured population; InputError naming the field when a population is
    unknown, not finite or smaller than the sample."""
    from .risk import resolve_population
    from .sitegate import check_population

    sizes = []
    for population, field_name in _populations_with_fields(policy):
        try:
            size = float(resolve_population(population))
        except InputError as exc:
            raise InputError(policy.source, field_name, exc.problem) from None
        check_population(size, records, policy.source, field_name)
        sizes.append((population, size))
    return sizes


def analyse(policy: DatasetPolicy, data=None, loglinear: str = "main", top: int = 10) -> dict:
    """`safeshare risk`'s figures for the policy's input, or for `data` (a DataFrame given in its place);
    `loglinear` and `top` choose the per-record risk's log-linear model and how many riskiest records it lists
    (engine.individual_report)."""
    from .disclosure_report import input_disclosure
    from .individual_report import individual_risk_report
    from .risk import population_uniqueness
    from .risk.accuracy import benchmark_finding

    loaded = load_input(policy, data)
    table = encode_table(loaded.frame, loaded.hierarchies, policy.source)
    sizes = table.base_classes()[1]   # what class_sizes(policy) gives, without reading the input twice
    n = int(sizes.sum())
    c1 = int((sizes == 1).sum())
    estimates = []
    sized = population_sizes(policy, n)
    for population, size in sized:
        entry = {"population": str(population), "size": size, "sampling_fraction": n / size, "models": {}}
        for estimator in ESTIMATORS:
            # each model's figure with what the calibration benchmark found at this sampling fraction (issue 29)
            entry["models"][estimator] = {**population_uniqueness(sizes, size, estimator=estimator).to_dict(),
                                          "benchmark": benchmark_finding(estimator, n / size)}
        estimates.append(entry)
    return {
        "dataset": policy.dataset,
        "records": n,
        "quasi_identifiers": policy.quasi_identifiers,
        "equivalence_classes": int(sizes.size),
        "sample_uniques": c1,
        "sample_uniqueness": c1 / n if n else 0.0,
        "class_size_histogram": size_histogram(sizes),
        "prosecutor_risk": prosecutor_profile(sizes),
        "population_estimates": estimates,
        "attribute_disclosure": input_disclosure(policy, table, loaded.frame),
        "individual_risk": individual_risk_report(loaded.frame, policy.quasi_identifiers,
                                                  [(str(p), size) for p, size in sized], loglinear, top),
    }


def format_analysis(report: dict) -> str:
    lines = [f"dataset            {report['dataset']} ({report['records']} records, "
             f"{report['equivalence_classes']} classes over {len(report['quasi_identifiers'])} quasi-identifiers)",
             f"sample uniques     {report['sample_uniques']} ({report['sample_uniqueness']:.4%})",
             "", "class sizes        size: classes (records)"]
    for row in report["class_size_histogram"][:12]:
        lines.append(f"                   {row['size']:>5}: {row['classes']} ({row['records']})")
    if len(report["class_size_histogram"]) > 12:
        lines.append(f"                   ... {len(report['class_size_histogram']) - 12} more sizes (see --json)")
    lines += ["", "prosecutor risk    interval            records   cumulative"]
    for row in report["prosecutor_risk"]["intervals"]:
        if row["records"] > 0:
            lines.append(f"                   ]{row['lower']:.6g}, {row['upper']:.6g}]".ljust(39)
                         + f"{row['records']:8.2%}   {row['cumulative']:8.2%}")
    lines += ["", "population uniqueness (estimated population uniques / N)"]
    for entry in report["population_estimates"]:
        cells = []
        for name, model in entry["models"].items():
            value = model.get("population_uniqueness")
            label = name if name not in ("dankar", "calibrated") else f"{name}->{model.get('model_used')}"
            cells.append(f"{label}={value:.6%}" if model.get("solved") and value is not None else f"{label}=no solution")
        lines.append(f"  {entry['population']} (N={entry['size']:.6g}, f={entry['sampling_fraction']:.3g}): "
                     + ", ".join(cells))
    from .disclosure_report import format_disclosure
    from .individual_report import format_individual

    lines += format_individual(report.get("individual_risk"))
    lines += format_disclosure(report.get("attribute_disclosure") or [])
    return "\n".join(lines)


# --- HTML (safeshare risk --html) -----------------------------------------------------------------------------------
SIZE_BUCKETS = [(1, 1), (2, 2), (3, 4), (5, 9), (10, 19), (20, 49), (50, 99), (100, 999), (1000, None)]
_PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:64rem;color:#222;padding:0 1rem}
table{border-collapse:collapse;margin:.5rem 0 1.5rem}td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:left}
th{background:#f2f4f7}h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:1.8rem}
h3{font-size:1rem;margin:1.2rem 0 .3rem}
td.num{text-align:right;font-variant-numeric:tabular-nums}svg.chart{max-width:100%;height:auto}figure{margin:0 0 1rem}
small{font-weight:normal;color:#555}
"""


def _rows(rows: list[list[object]], headers: list[str] | None = None) -> str:
    head = "" if headers is None else "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _size_buckets(histogram: list[dict]) -> tuple[list[str], list[int]]:
    """Records per class-size bucket, from the report's class-size histogram."""
    sizes = np.array([row["size"] for row in histogram], dtype=np.int64)
    records = np.array([row["records"] for row in histogram], dtype=np.int64)
    labels, values = [], []
    for lo, hi in SIZE_BUCKETS:
        mask = sizes >= lo if hi is None else (sizes >= lo) & (sizes <= hi)
        labels.append(f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}"))
        values.append(int(records[mask].sum()))
    return labels, values


def _risk_profile_chart(profile: dict) -> str:
    intervals = profile["intervals"]
    return grouped_bar_chart(
        [f"{row['upper'] * 100:.4g}%" for row in intervals],
        [Series("records", [row["records"] for row in intervals], "#2f6aa8")],
        [Series("cumulative", [row["cumulative"] for row in intervals], "#c2410c")],
        chart_id="risk-profile", title="Prosecutor risk profile: share of records per re-identification risk level",
        x_label="re-identification risk (prosecutor model), upper bound of the interval",
        y_label="share of records", y2_label="cumulative share of records",
        tooltips=[f"risk ]{row['lower'] * 100:.4g}%, {row['upper'] * 100:.4g}%]" for row in intervals])


def _population_rows(report: dict) -> list[list[object]]:
    from .risk.accuracy import finding_text

    rows = []
    for entry in report["population_estimates"]:
        for name, model in entry["models"].items():
            value = model.get("population_uniqueness")
            shown = percent(value, 4) if model.get("solved") and value is not None else "no solution"
            rows.append([entry["population"], f"{entry['size']:,.0f}", f"{entry['sampling_fraction']:.3g}",
                         name if name not in ("dankar", "calibrated") else f"{name} -> {model.get('model_used')}",
                         shown, finding_text(model.get("benchmark"))])
    return rows


def check_html_target(out: str) -> None:
    """`risk --html` must name a file that can be replaced atomically (engine.atomic.check_output_file)."""
    from .atomic import check_output_file

    check_output_file(out, "--html", "HTML")


def render_risk_html(report: dict) -> str:
    """`safeshare risk --html`: the report's figures as one self-contained page (inline CSS and SVG, no scripts,
    like a release's report.html), built from the same dict `--json` prints so the two never disagree."""
    from .disclosure_report import DISCLOSURE_STYLE, INPUT_INTRO, disclosure_section
    from .individual_report import INPUT_INTRO as RECORD_RISK_INTRO, individual_section

    profile = report["prosecutor_risk"]
    summary = [["records", f"{report['records']:,}"], ["equivalence classes", f"{report['equivalence_classes']:,}"],
               ["quasi-identifiers", ", ".join(report["quasi_identifiers"])],
               ["sample uniques", f"{report['sample_uniques']:,} ({percent(report['sample_uniqueness'], 3)})"],
               ["average prosecutor risk", percent(profile["average_risk"], 3)],
               ["highest prosecutor risk", percent(profile["highest_risk"], 3)],
               ["records at the highest risk", percent(profile["records_at_highest_risk"], 3)]]
    labels, values = _size_buckets(report["class_size_histogram"])
    sizes = bar_chart(labels, values, "Records by equivalence-class size", "class size")
    populations = _population_rows(report)
    population_html = (_rows(populations, ["population", "size N", "sampling fraction", "model",
                                           "population uniqueness",
                                           "benchmark finding (benchmarks/risk_accuracy.py)"]) if populations
                       else "<p>No population is configured.</p>")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>safeshare risk analysis: {esc(report["dataset"])}</title>
<style>{_PAGE_STYLE}{DISCLOSURE_STYLE}</style></head><body>
<h1>Risk analysis: {esc(report["dataset"])} <small>(the input as it is, no transformation)</small></h1>
<h2>Summary</h2>{_rows(summary)}
<h2>Equivalence classes</h2><figure>{sizes}</figure>
<h2 id="risk">Prosecutor risk</h2><figure>{_risk_profile_chart(profile)}</figure>
<h2 id="populations">Population uniqueness per population</h2>{population_html}
{individual_section(report.get("individual_risk"), RECORD_RISK_INTRO)}
{disclosure_section(report.get("attribute_disclosure") or [], INPUT_INTRO)}
</body></html>
"""

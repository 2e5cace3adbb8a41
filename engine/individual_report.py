"""Per-record re-identification risk of a table, as `safeshare risk` and the release report show it.

For each population the figures of two models (engine.risk.individual, engine.risk.loglinear):

* the negative-binomial model of Benedetti and Franconi (mu-Argus, sdcMicro) with equal sampling weights N / n: each
  record's risk E(1/F_k | f_k), the expected number of re-identifications (their sum), the global risk (their mean),
  the records above sdcMicro's high-risk bound, and a histogram of records by risk;
* Skinner and Shlomo's log-linear Poisson model (main effects, or every two-way interaction): tau1 (expected
  population uniques among the sample uniques), tau2 (expected correct matches of sample uniques), and its own
  per-record risk and expected re-identifications.

"Which records carry the risk": with equal weights the negative-binomial risk depends on the class size only, so it
cannot tell one sample unique from another; the log-linear model can (a unique made of rare values is likelier to be
unique in the population than one made of common values). The riskiest records are therefore ranked by the
log-linear risk (then the negative-binomial one) in the smallest population, where every risk is highest, and listed
with their quasi-identifier values and the first row numbers (0-based) of the records in that class.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from .svgcharts import bar_chart, esc, number, percent

TOP_RECORDS = 10
ROWS_PER_CLASS = 5
LOGLINEAR_CHOICES = ("main", "two_way", "none")


def table_codes(frame: pd.DataFrame, quasi_identifiers: Sequence[str]) -> tuple[np.ndarray, list[int]]:
    """Each quasi-identifier's values as codes 0..c-1 (a missing value is a value of its own), and the c's."""
    rows, cards = [], []
    for name in quasi_identifiers:
        codes, uniques = pd.factorize(frame[name].to_numpy(dtype=object), use_na_sentinel=False)
        rows.append(codes.astype(np.int64))
        cards.append(max(len(uniques), 1))
    return (np.stack(rows) if rows else np.zeros((0, len(frame)), dtype=np.int64)), cards


def individual_risk_report(frame: pd.DataFrame, quasi_identifiers: Sequence[str],
                           populations: Sequence[tuple[str, float]], loglinear: str = "main",
                           top: int = TOP_RECORDS, row_numbers: np.ndarray | None = None) -> dict:
    """Per-record risk of the records of `frame` (the released ones only: the caller leaves suppressed ones out)
    over `quasi_identifiers`, for each (label, size) population. `loglinear`: main, two_way or none.
    `row_numbers`: each record's row in the file the caller shows (default: its position in `frame`)."""
    from .classes import group
    from .risk.individual import individual_risk, key_risk
    from .risk.loglinear import LogLinearError, fit, poisson_measures

    if loglinear not in LOGLINEAR_CHOICES:
        raise ValueError(f"unknown log-linear model {loglinear!r}; use one of {', '.join(LOGLINEAR_CHOICES)}")
    codes, cards = table_codes(frame, quasi_identifiers)
    n = int(codes.shape[1])
    report: dict = {"records": n, "weights": "equal (N / n)", "loglinear_model": loglinear, "populations": [],
                    "riskiest": None}
    if n == 0 or not populations:
        return report
    keys, sizes, record_class = group(codes, np.ones(n, dtype=np.int64), cards)
    mu, fit_error = None, None
    if loglinear != "none":
        try:
            mu = fit(codes, cards, keys, loglinear)
        except LogLinearError as exc:
            fit_error = str(exc)
    smallest = None
    for label, size in populations:
        entry: dict = {"population": str(label), "size": float(size), "sampling_fraction": n / float(size),
                       "negative_binomial": individual_risk(sizes, size)}
        if loglinear != "none":
            if mu is None:
                entry["loglinear"] = {"interactions": loglinear, "solved": False, "error": fit_error}
            else:
                measures = poisson_measures(sizes, mu, n / float(size))
                expected = float(np.dot(sizes, measures["risk"]))
                entry["loglinear"] = {"interactions": loglinear, "solved": True,
                                      "sample_uniques": int((sizes == 1).sum()), "tau1": measures["tau1"],
                                      "tau2": measures["tau2"], "expected_reidentifications": expected,
                                      "global_risk": expected / n, "max_risk": float(measures["risk"].max())}
        report["populations"].append(entry)
        if smallest is None or float(size) < smallest[1]:
            smallest = (str(label), float(size))
    label, size = smallest
    nb = key_risk(sizes, size)
    ll = poisson_measures(sizes, mu, n / size) if mu is not None else None
    ranking = (-ll["risk"], -nb) if ll is not None else (-nb,)
    order = np.lexsort(tuple(reversed(ranking)))[:max(int(top), 0)]
    # first rows of each listed class, without a loop over the records
    listed = np.zeros(sizes.size, dtype=bool)
    listed[order] = True
    members = np.flatnonzero(listed[record_class])
    member_class = record_class[members]
    by_class = np.argsort(member_class, kind="stable")
    members, member_class = members[by_class], member_class[by_class]
    starts = np.searchsorted(member_class, order)
    records = []
    for rank, k in enumerate(order.tolist(), start=1):
        first = int(members[starts[rank - 1]])
        row = {"rank": rank, "class_size": int(sizes[k]),
               "values": {name: _text(frame[name].iloc[first]) for name in quasi_identifiers},
               "rows": _rows(members[starts[rank - 1]:starts[rank - 1] + min(int(sizes[k]), ROWS_PER_CLASS)],
                             row_numbers),
               "negative_binomial_risk": float(nb[k])}
        if ll is not None:
            row["loglinear_risk"] = float(ll["risk"][k])
            if sizes[k] == 1:
                row["population_unique_probability"] = float(np.exp(-ll["a"][k]))
        records.append(row)
    ranked = ll["risk"] if ll is not None else nb
    carried = float(np.dot(sizes[order], ranked[order]))
    total = float(np.dot(sizes, ranked))
    report["riskiest"] = {"population": label, "size": size,
                          "ranked_by": "loglinear_risk" if ll is not None else "negative_binomial_risk",
                          "share_of_expected_reidentifications": carried / total if total else 0.0,
                          "records": records}
    return report


def _rows(positions: np.ndarray, row_numbers: np.ndarray | None) -> list[int]:
    return (positions if row_numbers is None else np.asarray(row_numbers)[positions]).astype(int).tolist()


def class_size_report(sizes: np.ndarray, populations: Sequence[tuple[str, float]]) -> dict:
    """The negative-binomial figures alone, from class sizes (a partitioned release, whose records stay on the
    workers: no log-linear fit, no records to list)."""
    from .risk.individual import individual_risk

    sizes = np.asarray(sizes, dtype=np.int64)
    n = int(sizes.sum())
    entries = [{"population": str(label), "size": float(size), "sampling_fraction": n / float(size),
                "negative_binomial": individual_risk(sizes, size)} for label, size in populations] if n else []
    return {"records": n, "weights": "equal (N / n)", "loglinear_model": "none", "populations": entries,
            "riskiest": None}


def released_individual_risk(result) -> dict | None:
    """Per-record risk of a release (engine.pipeline.result.DeidResult): its released records over the released
    values, in every population the gate checked; rows are those of the released data file. None without
    populations."""
    populations = [(entry.population, float(entry.size)) for entry in result.risk.populations]
    if not populations:
        return None
    kept = ~np.asarray(result.record_suppressed, dtype=bool)
    names = list(result.table.names)
    frame = result.released.loc[kept, names].reset_index(drop=True)
    return individual_risk_report(frame, names, populations, row_numbers=np.flatnonzero(kept))


def _text(value: object) -> str:
    return "(missing)" if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


# --- text -----------------------------------------------------------------------------------------------------------
def format_individual(report: dict | None) -> list[str]:
    """The 'Per-record risk' lines of `safeshare risk`."""
    if not report or not report.get("populations"):
        return []
    lines = ["", "per-record risk    negative binomial (Benedetti-Franconi, equal weights N/n); "
             f"log-linear Poisson ({report['loglinear_model']} effects, Skinner-Shlomo)"]
    for entry in report["populations"]:
        nb = entry["negative_binomial"]
        lines.append(f"  {entry['population']} (N={entry['size']:.6g}, f={entry['sampling_fraction']:.3g}): "
                     f"expected re-identifications {nb['expected_reidentifications']:.4g} "
                     f"({nb['global_risk']:.4%} of records), highest record risk {nb['max_risk']:.4g}, "
                     f"{nb['high_risk_records']} record(s) above {nb['high_risk_threshold']:.3g}")
        ll = entry.get("loglinear")
        if ll is not None:
            if ll.get("solved"):
                lines.append(f"      log-linear: tau1 {ll['tau1']:.4g} population uniques among "
                             f"{ll['sample_uniques']} sample uniques, tau2 {ll['tau2']:.4g} expected matches, "
                             f"expected re-identifications {ll['expected_reidentifications']:.4g}")
            else:
                lines.append(f"      log-linear: not fitted ({ll.get('error')})")
    riskiest = report.get("riskiest")
    if riskiest and riskiest["records"]:
        smallest = next(e for e in report["populations"] if e["population"] == riskiest["population"])
        lines.append(f"  records by risk in {riskiest['population']}: " + ", ".join(
            f"]{row['lower']:g},{row['upper']:g}]: {row['records']}"
            for row in smallest["negative_binomial"]["histogram"] if row["records"]))
        lines.append(f"  riskiest records in {riskiest['population']} (ranked by {riskiest['ranked_by']}; they carry "
                     f"{riskiest['share_of_expected_reidentifications']:.2%} of the expected re-identifications)")
        for row in riskiest["records"]:
            values = ", ".join(f"{k}={v}" for k, v in row["values"].items())
            risk = row.get("loglinear_risk", row["negative_binomial_risk"])
            lines.append(f"    {row['rank']:>3}. risk {risk:.6g} (NB {row['negative_binomial_risk']:.4g}), "
                         f"class of {row['class_size']}, rows {row['rows']}: {values}")
    return lines


# --- HTML -----------------------------------------------------------------------------------------------------------
def histogram_chart(entry: dict, chart_id: str = "record-risk-histogram") -> str:
    """Records per negative-binomial risk interval, as a bar chart tagged with the population."""
    histogram = entry["negative_binomial"]["histogram"]
    labels = [f"≤{row['upper']:g}" if row["lower"] == 0 else f"{row['lower']:g}-{row['upper']:g}" for row in histogram]
    svg = bar_chart(labels, [row["records"] for row in histogram],
                    f"Records by individual re-identification risk, population {entry['population']}",
                    "risk E(1/F | f) of the record (negative-binomial model)")
    return svg.replace('<svg class="chart"', f'<svg class="chart" id="{esc(chart_id)}" '
                       f'data-population="{esc(entry["population"])}"', 1)


def individual_section(report: dict | None, intro: str) -> str:
    """'Per-record risk' for an HTML page: a table of the measures per population, the histogram for the smallest
    population and the riskiest records. Empty without populations."""
    if not report or not report.get("populations"):
        return ""
    head = ("<tr><th>population</th><th>size N</th><th>sampling fraction</th><th>expected re-identifications</th>"
            "<th>global risk</th><th>highest record risk</th><th>high-risk records</th><th>tau1</th><th>tau2</th>"
            "</tr>")
    rows = []
    for entry in report["populations"]:
        nb, ll = entry["negative_binomial"], entry.get("loglinear") or {}
        rows.append(
            f'<tr class="record-risk" data-population="{esc(entry["population"])}" '
            f'data-expected="{number(nb["expected_reidentifications"])}" data-max="{number(nb["max_risk"])}">'
            f'<td>{esc(entry["population"])}</td><td class="num">{entry["size"]:,.0f}</td>'
            f'<td class="num">{entry["sampling_fraction"]:.3g}</td>'
            f'<td class="num">{nb["expected_reidentifications"]:.4g}</td>'
            f'<td class="num">{percent(nb["global_risk"], 3)}</td><td class="num">{nb["max_risk"]:.4g}</td>'
            f'<td class="num">{nb["high_risk_records"]:,} (&gt; {nb["high_risk_threshold"]:.3g})</td>'
            f'<td class="num">{_figure(ll, "tau1")}</td><td class="num">{_figure(ll, "tau2")}</td></tr>')
    parts = [f'<section id="record-risk"><h2>Per-record risk</h2><p>{esc(intro)}</p>',
             f"<table>{head}{''.join(rows)}</table>"]
    parts.append(f"<figure>{histogram_chart(min(report['populations'], key=lambda e: e['size']))}</figure>")
    riskiest = report.get("riskiest")
    if riskiest:
        names = list(riskiest["records"][0]["values"]) if riskiest["records"] else []
        header = ("<tr><th>rank</th>" + "".join(f"<th>{esc(n)}</th>" for n in names)
                  + "<th>class size</th><th>risk (log-linear)</th><th>risk (negative binomial)</th><th>rows</th></tr>")
        body = "".join(_record_row(row) for row in riskiest["records"])
        parts.append(f"<h3>The records that carry the most risk <small>(population {esc(riskiest['population'])}, "
                     f"ranked by {esc(riskiest['ranked_by'].replace('_', ' '))}; together "
                     f"{percent(riskiest['share_of_expected_reidentifications'], 2)} of the expected "
                     f"re-identifications)</small></h3><table>{header}{body}</table>")
    parts.append("</section>")
    return "".join(parts)


def _figure(loglinear: dict, name: str) -> str:
    return f"{loglinear[name]:.4g}" if loglinear.get("solved") else "-"


def _record_row(row: dict) -> str:
    loglinear = f"{row['loglinear_risk']:.4g}" if "loglinear_risk" in row else "-"
    return (f'<tr class="risky-record" data-rank="{row["rank"]}" '
            f'data-risk="{number(row.get("loglinear_risk", row["negative_binomial_risk"]))}">'
            f'<td class="num">{row["rank"]}</td>' + "".join(f"<td>{esc(v)}</td>" for v in row["values"].values())
            + f'<td class="num">{row["class_size"]}</td><td class="num">{loglinear}</td>'
            f'<td class="num">{row["negative_binomial_risk"]:.4g}</td>'
            f'<td>{esc(", ".join(map(str, row["rows"])))}</td></tr>')


INPUT_INTRO = ("Each record's probability of being re-identified by an intruder who matches its quasi-identifiers "
               "against the population: E(1/F | f) under the negative-binomial model of Benedetti and Franconi "
               "(as in mu-Argus and sdcMicro; equal sampling weights N / n), summed into the expected number of "
               "re-identifications; and Skinner and Shlomo's log-linear Poisson model (tau1: expected population "
               "uniques among the sample uniques; tau2: expected correct matches of sample uniques). The input as "
               "it is, no transformation.")
RELEASE_INTRO = ("The same measures for the released records (suppressed records are not published and not "
                 "counted), over the released, generalized values.")

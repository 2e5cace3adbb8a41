"""Attribute disclosure of the sensitive attributes, as a custodian looks at it before (`safeshare risk`) and after
(report.html of a release) de-identification.

Re-identification risk says how well a record can be singled out; attribute disclosure says what is learnt about
someone once their class is known, even without singling them out: a class whose records all share one sensitive
value discloses it (homogeneity), a class whose distribution is far from the table's tells much more than the table
does (skewness). Per sensitive attribute and per class this gives the distinct values, the Shannon entropy (bits)
and the Earth Mover's Distance to the table-wide distribution, and the share of records in classes that would fail
distinct and entropy l-diversity for l = 2, 3, 5 and t-closeness for t = 0.1, 0.2, 0.5.

Every number comes from the privacy models themselves (engine.privacy.ldiversity, engine.privacy.tcloseness) on the
same ClassView the search uses, so "would fail l = 3" here means exactly what a policy with l = 3 would enforce. Every
attribute declared `type: sensitive` is analysed, not only those a privacy model names: the custodian needs the view
precisely to decide which models to name. Everything is vectorized over classes; the only loops run over attributes
and thresholds.
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from .errors import InputError
from .hierarchy import Hierarchy
from .privacy.ldiversity import LDiversityModel
from .privacy.tcloseness import TClosenessModel
from .sensitive import EncodedSensitive, encode_sensitive
from .svgcharts import Series, esc, grouped_bar_chart, number, percent

if TYPE_CHECKING:
    from .pipeline.result import DeidResult
    from .distributions import ClassView
    from .encoding import EncodedTable
    from .policy import DatasetPolicy

L_VALUES = (2, 3, 5)
T_VALUES = (0.1, 0.2, 0.5)
# Upper edges of the distance buckets: [0, 0.1], ]0.1, 0.2], ... ]0.9, 1]. Written as literals so that the edges
# 0.1, 0.2 and 0.5 are the very floats of T_VALUES: the records above an edge are the records failing that t.
DISTANCE_EDGES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0)
# Distinct-value counts are plotted one bar each up to this many bars, else in these buckets (lower, upper).
MAX_DISTINCT_BARS = 24
DISTINCT_BUCKETS = ((1, 1), (2, 2), (3, 3), (4, 4), (5, 9), (10, 19), (20, 49), (50, 99), (100, None))

EQUAL_COLOR, HIERARCHICAL_COLOR = "#2f6aa8", "#c2410c"
DISTINCT_COLOR, ENTROPY_COLOR = "#2f6aa8", "#7c3aed"


# --- which attributes, encoded how -------------------------------------------------------------------------------
def declared_sensitive(policy: "DatasetPolicy") -> list[str]:
    """Every attribute declared `type: sensitive`, in policy order (policy.sensitive_attributes lists only those a
    model names)."""
    return [name for name, spec in policy.attributes.items() if spec.type == "sensitive"]


def sensitive_hierarchy(policy: "DatasetPolicy", name: str, column: np.ndarray) -> Hierarchy | None:
    """The hierarchy the policy gives a sensitive attribute, or None. A hierarchy that cannot be read is dropped
    rather than raised for an attribute no model names: the de-identification never needed it, so the report must
    not start failing on it; only the hierarchical distance is then missing."""
    if policy.attributes[name].hierarchy is None:
        return None
    from .table import resolve_hierarchy

    try:
        return resolve_hierarchy(policy, name, column)
    except InputError:
        return None


def encode_declared(policy: "DatasetPolicy", frame: pd.DataFrame,
                    known: Sequence[EncodedSensitive] = ()) -> tuple[EncodedSensitive, ...]:
    """Every declared sensitive attribute of `frame`, encoded; those in `known` (what the privacy models were given)
    are reused as they are, so the table-wide distribution is the very one the models compare with."""
    by_name = {s.name: s for s in known}
    out = []
    for name in declared_sensitive(policy):
        if name in by_name:
            out.append(by_name[name])
            continue
        column = frame[name].to_numpy()
        hierarchy = sensitive_hierarchy(policy, name, column)
        try:
            out.append(encode_sensitive(name, column, hierarchy, policy.source))
        except InputError:   # values missing from an optional hierarchy: analyse without it
            out.append(encode_sensitive(name, column, None, policy.source))
    return tuple(out)


def input_view(table: "EncodedTable") -> "ClassView":
    """The classes of the table as it is: every quasi-identifier at level 0."""
    from .classes import ClassCache

    return ClassCache(table, budget_bytes=0).view(tuple(0 for _ in table.attributes))


# --- the numbers ---------------------------------------------------------------------------------------------------
def attribute_disclosure(view: "ClassView", kept: np.ndarray | None = None,
                         names: Sequence[str] | None = None) -> list[dict]:
    """One dict per sensitive attribute of `view` (or of `names`), over the classes with `kept` True (default: all;
    a release passes ~suppressed so that suppressed classes, which are not published, do not count)."""
    kept = np.ones(view.class_count, dtype=bool) if kept is None else np.asarray(kept, dtype=bool)
    return [disclosure_of(view, name, kept) for name in (names if names is not None else view.sensitive_names)]


def disclosure_of(view: "ClassView", name: str, kept: np.ndarray) -> dict:
    """Attribute disclosure of one sensitive attribute over the kept classes of `view`.

    Fields (stable, `safeshare risk --json`): attribute; values (distinct values in the table); classes, records
    and suppressed_records (kept classes, their records, the records of the others); has_hierarchy; per_class
    {size, distinct, entropy_bits, distance (equal-distance EMD to the table), hierarchical_distance (with a
    hierarchy)}; l_diversity and entropy_l_diversity {"2", "3", "5": share of the kept records in classes failing
    distinct / Shannon-entropy l-diversity}; t_closeness {"0.1", "0.2", "0.5": share in classes whose equal
    distance is above t} and, with a hierarchy, hierarchical_t_closeness; distinct_histogram [{distinct, classes,
    records}]; distance_histogram (and hierarchical_distance_histogram) [{lower, upper, classes, records}]."""
    sensitive = view.sensitive_attribute(name)
    sizes = view.sizes
    records = int(sizes[kept].sum())
    distinct = view.distribution(name).distinct()
    entropy = np.maximum(LDiversityModel(name, 2, "entropy").entropy(view), 0.0)   # -0.0 of one-value classes
    distance = TClosenessModel(name, 1.0, "equal").distances(view, sensitive)
    hierarchical = hierarchical_distances(view, sensitive)

    def share(violating: np.ndarray) -> float:
        return float(sizes[violating & kept].sum()) / records if records else 0.0

    per_class = {"size": sizes[kept].tolist(), "distinct": distinct[kept].tolist(),
                 "entropy_bits": entropy[kept].tolist(), "distance": distance[kept].tolist()}
    entry = {
        "attribute": name,
        "values": sensitive.cardinality,
        "classes": int(kept.sum()),
        "records": records,
        "suppressed_records": int(sizes[~kept].sum()),
        "has_hierarchy": hierarchical is not None,
        "per_class": per_class,
        "l_diversity": {str(l): share(LDiversityModel(name, l, "distinct").violating(view)) for l in L_VALUES},
        "entropy_l_diversity": {str(l): share(LDiversityModel(name, l, "entropy").violating(view))
                                for l in L_VALUES},
        "t_closeness": {str(t): share(~(distance <= t)) for t in T_VALUES},   # TClosenessModel.violating's rule
        "distinct_histogram": distinct_histogram(distinct[kept], sizes[kept]),
        "distance_histogram": distance_histogram(distance[kept], sizes[kept]),
    }
    if hierarchical is not None:
        per_class["hierarchical_distance"] = hierarchical[kept].tolist()
        entry["hierarchical_t_closeness"] = {str(t): share(~(hierarchical <= t)) for t in T_VALUES}
        entry["hierarchical_distance_histogram"] = distance_histogram(hierarchical[kept], sizes[kept])
    return entry


def hierarchical_distances(view: "ClassView", sensitive: EncodedSensitive) -> np.ndarray | None:
    """Per class, the hierarchical EMD to the table's distribution; None without a usable hierarchy (none, or one
    without a single root, which the hierarchical distance needs)."""
    if sensitive.hierarchy is None:
        return None
    try:
        sensitive.tree()
    except (InputError, ValueError):
        return None
    return TClosenessModel(sensitive.name, 1.0, "hierarchical").distances(view, sensitive)


def distinct_histogram(distinct: np.ndarray, sizes: np.ndarray) -> list[dict]:
    """Classes and records per number of distinct sensitive values in the class, for each number that occurs."""
    values, inverse = np.unique(distinct, return_inverse=True)
    classes = np.bincount(inverse.ravel(), minlength=values.size)
    records = np.bincount(inverse.ravel(), weights=sizes, minlength=values.size)
    return [{"distinct": int(v), "classes": int(c), "records": int(r)} for v, c, r in zip(values, classes, records)]


def distance_histogram(distance: np.ndarray, sizes: np.ndarray) -> list[dict]:
    """Classes and records per distance bucket [0, 0.1], ]0.1, 0.2], ..., ]0.9, 1]."""
    edges = np.asarray(DISTANCE_EDGES)
    bucket = np.minimum(np.searchsorted(edges, distance, side="left"), edges.size - 1)
    classes = np.bincount(bucket, minlength=edges.size)
    records = np.bincount(bucket, weights=sizes, minlength=edges.size)
    lowers = (0.0,) + DISTANCE_EDGES[:-1]
    return [{"lower": lo, "upper": hi, "classes": int(c), "records": int(r)}
            for lo, hi, c, r in zip(lowers, DISTANCE_EDGES, classes, records)]


# --- the table as it is (safeshare risk) and as released (report.html) ---------------------------------------------
def input_disclosure(policy: "DatasetPolicy", table: "EncodedTable", frame: pd.DataFrame) -> list[dict]:
    """Attribute disclosure of the input: `table` (its quasi-identifiers) with every declared sensitive attribute of
    `frame` added, at level 0."""
    names = declared_sensitive(policy)
    if not names:
        return []
    full = replace(table, sensitive=encode_declared(policy, frame, table.sensitive), population=None)
    return attribute_disclosure(input_view(full), names=names)


def released_disclosure(result: "DeidResult") -> list[dict]:
    """Attribute disclosure of a release: its released classes only (suppressed ones are not published), each
    compared with the distribution of the whole input, as the t-closeness model does."""
    policy = result.policy
    names = [n for n in declared_sensitive(policy) if n in result.input_frame.columns]
    if not names:
        return []
    sensitive = encode_declared(policy, result.input_frame, result.table.sensitive)
    table = replace(result.table, sensitive=sensitive, population=None)
    if result.local is not None or result.parallel is not None:
        view, kept = _released_view(result, sensitive)
    else:
        from .classes import ClassCache

        best = result.best
        view = ClassCache(table, budget_bytes=0).view(tuple(best.levels))
        if view.class_count != best.sizes.size or not np.array_equal(view.sizes, best.sizes):
            raise RuntimeError("internal error: the released classes differ from the search's")
        kept = ~best.suppressed
    return attribute_disclosure(view, kept, names)


def _released_view(result: "DeidResult", sensitive: tuple) -> tuple["ClassView", np.ndarray]:
    """Local recoding has no single level per attribute, and P4's classes are merged across partitions after each
    partition suppressed its own: in both, the classes are the released records' values (suppressed records apart,
    even where a released class is all '*' too), as engine.local and P4's compliance step group them."""
    from .classes import group
    from .distributions import view_from_records

    suppressed = np.asarray(result.record_suppressed, dtype=bool)
    rows, cards = [], []
    for name in result.table.names:
        codes, uniques = pd.factorize(result.released[name].to_numpy(dtype=object))
        rows.append(codes.astype(np.int64))
        cards.append(max(len(uniques), 1))
    rows.append(suppressed.astype(np.int64))
    cards.append(2)
    codes, sizes, record_class = group(np.stack(rows), np.ones(suppressed.size, dtype=np.int64), cards)
    view = view_from_records(codes[:-1], sizes, record_class.astype(np.int64), sensitive)
    return view, ~codes[-1].astype(bool)


# --- text -----------------------------------------------------------------------------------------------------------
def _shares(row: Mapping[str, float]) -> str:
    return ", ".join(f"{k}: {v:.2%}" for k, v in row.items())


def format_disclosure(entries: Sequence[dict]) -> list[str]:
    """The 'Attribute disclosure' lines of `safeshare risk` (one block per sensitive attribute)."""
    if not entries:
        return []
    lines = ["", "Attribute disclosure (share of records in classes that would fail each model)"]
    for entry in entries:
        lines.append(f"  {entry['attribute']}: {entry['values']} distinct values in the table, {entry['classes']} "
                     f"classes, {entry['records']} records")
        histogram = entry["distinct_histogram"]
        cells = [f"{row['distinct']}: {row['records']}" for row in histogram[:10]]
        more = f", ... {len(histogram) - 10} more (see --json)" if len(histogram) > 10 else ""
        lines.append(f"    records by distinct values in their class   {', '.join(cells)}{more}")
        lines.append(f"    distinct l-diversity, l =                   {_shares(entry['l_diversity'])}")
        lines.append(f"    entropy l-diversity (Shannon), l =          {_shares(entry['entropy_l_diversity'])}")
        lines.append(f"    t-closeness (equal distance), t =           {_shares(entry['t_closeness'])}")
        if "hierarchical_t_closeness" in entry:
            lines.append(f"    t-closeness (hierarchical distance), t =    "
                         f"{_shares(entry['hierarchical_t_closeness'])}")
    return lines


# --- HTML -----------------------------------------------------------------------------------------------------------
DISCLOSURE_STYLE = """
.disclosure-plots{display:flex;flex-wrap:wrap;gap:0 1rem}.disclosure-plots figure{margin:0 0 .8rem}
table.disclosure-shares{font-size:.85rem}
"""


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "-", name)


def _tag(svg: str, attribute: str, plot: str) -> str:
    """Mark a chart with the attribute and plot it shows, so that a reader (or a test) can find it."""
    return svg.replace('<svg class="chart"', f'<svg class="chart disclosure" data-attribute="{esc(attribute)}" '
                                             f'data-plot="{plot}"', 1)


def _chart(entry: dict, plot: str, categories: list[str], series: list[Series], title: str, x_label: str,
           tooltips: list[str] | None = None) -> str:
    svg = grouped_bar_chart(categories, series, title=title, x_label=x_label, y_label="share of records",
                            chart_id=f"disclosure-{_slug(entry['attribute'])}-{plot}", width=480, height=320,
                            tooltips=tooltips)
    return f"<figure>{_tag(svg, entry['attribute'], plot)}</figure>"


def _distinct_bars(histogram: list[dict], records: int) -> tuple[list[str], list[float], list[str]]:
    """Categories, record shares and tooltips of the distinct-values histogram: one bar per number of distinct
    values, or buckets when there are too many numbers for one bar each."""
    total = max(records, 1)
    if len(histogram) <= MAX_DISTINCT_BARS:
        rows = [(str(r["distinct"]), r["classes"], r["records"]) for r in histogram]
    else:
        distinct = np.array([r["distinct"] for r in histogram])
        classes = np.array([r["classes"] for r in histogram])
        counts = np.array([r["records"] for r in histogram])
        rows = []
        for lo, hi in DISTINCT_BUCKETS:
            mask = distinct >= lo if hi is None else (distinct >= lo) & (distinct <= hi)
            label = f"{lo}+" if hi is None else (str(lo) if lo == hi else f"{lo}-{hi}")
            rows.append((label, int(classes[mask].sum()), int(counts[mask].sum())))
    return ([label for label, _, _ in rows], [r / total for _, _, r in rows],
            [f"{label} distinct value(s): {r:,} records in {c:,} classes" for label, c, r in rows])


def _distance_label(row: dict) -> str:
    return f"[0, {row['upper']:g}]" if row["lower"] == 0 else f"]{row['lower']:g}, {row['upper']:g}]"


def disclosure_figures(entry: dict) -> str:
    """The four plots of one sensitive attribute: records by distinct values per class, records by distance to the
    table's distribution, and the shares of records failing l-diversity and t-closeness."""
    records = entry["records"]
    total = max(records, 1)
    categories, shares, tooltips = _distinct_bars(entry["distinct_histogram"], records)
    distinct = _chart(entry, "distinct", categories, [Series("records", shares, DISTINCT_COLOR)],
                      f"{entry['attribute']}: records by distinct values in their class",
                      "distinct values in the class", tooltips)
    histograms = [("equal distance", entry["distance_histogram"], EQUAL_COLOR)]
    if "hierarchical_distance_histogram" in entry:
        histograms.append(("hierarchical distance", entry["hierarchical_distance_histogram"], HIERARCHICAL_COLOR))
    distance = _chart(entry, "distance", [_distance_label(r) for r in entry["distance_histogram"]],
                      [Series(name, [r["records"] / total for r in rows], color) for name, rows, color in histograms],
                      f"{entry['attribute']}: records by distance of their class to the table (EMD)",
                      "distance to the table-wide distribution")
    l_chart = _chart(entry, "l-diversity", [f"l={l}" for l in entry["l_diversity"]],
                     [Series("distinct", list(entry["l_diversity"].values()), DISTINCT_COLOR),
                      Series("entropy (Shannon)", list(entry["entropy_l_diversity"].values()), ENTROPY_COLOR)],
                     f"{entry['attribute']}: records in classes failing l-diversity", "l")
    t_series = [Series("equal distance", list(entry["t_closeness"].values()), EQUAL_COLOR)]
    if "hierarchical_t_closeness" in entry:
        t_series.append(Series("hierarchical distance", list(entry["hierarchical_t_closeness"].values()),
                               HIERARCHICAL_COLOR))
    t_chart = _chart(entry, "t-closeness", [f"t={t}" for t in entry["t_closeness"]], t_series,
                     f"{entry['attribute']}: records in classes failing t-closeness", "t")
    return f'<div class="disclosure-plots">{distinct}{distance}{l_chart}{t_chart}</div>'


def _shares_table(entry: dict) -> str:
    rows = [("distinct l-diversity", "l", entry["l_diversity"]),
            ("entropy l-diversity (Shannon)", "l", entry["entropy_l_diversity"]),
            ("t-closeness, equal distance", "t", entry["t_closeness"])]
    if "hierarchical_t_closeness" in entry:
        rows.append(("t-closeness, hierarchical distance", "t", entry["hierarchical_t_closeness"]))
    body = "".join(
        f'<tr><td>{esc(label)}</td>' + "".join(
            f'<td class="num" data-model="{esc(label)}" data-{key}="{esc(k)}" data-value="{number(v)}">'
            f'{key} = {esc(k)}: {percent(v, 2)}</td>' for k, v in shares.items()) + "</tr>"
        for label, key, shares in rows)
    return f'<table class="disclosure-shares"><tbody>{body}</tbody></table>'


def disclosure_section(entries: Sequence[dict], intro: str) -> str:
    """'Attribute disclosure' for an HTML page: per sensitive attribute a line of facts, the four plots and the
    shares in numbers. Empty without sensitive attributes."""
    if not entries:
        return ""
    parts = [f'<section id="attribute-disclosure"><h2>Attribute disclosure</h2><p>{esc(intro)}</p>']
    for entry in entries:
        parts.append(
            f'<section class="disclosure" data-sensitive="{esc(entry["attribute"])}" '
            f'data-records="{entry["records"]}" data-classes="{entry["classes"]}">'
            f'<h3>{esc(entry["attribute"])} <small>({entry["values"]:,} distinct values in the table; '
            f'{entry["classes"]:,} classes, {entry["records"]:,} records'
            + (f', {entry["suppressed_records"]:,} suppressed records not counted' if entry["suppressed_records"]
               else "") + ")</small></h3>"
            f'{disclosure_figures(entry)}{_shares_table(entry)}</section>')
    parts.append("</section>")
    return "".join(parts)


INPUT_INTRO = ("For each sensitive attribute, over the equivalence classes of the input as it is: how many records "
               "sit in classes with few distinct values (homogeneity), how far each class's distribution is from "
               "the table's (Earth Mover's Distance: equal ground distance, and hierarchical where the attribute "
               "has a hierarchy), and the share of records in classes that would fail distinct or entropy "
               "l-diversity for l = 2, 3, 5 and t-closeness for t = 0.1, 0.2, 0.5.")
RELEASE_INTRO = ("The same view for the released classes (suppressed classes are not published and not counted); "
                 "distances are to the distribution of the whole input, as the t-closeness model measures them.")

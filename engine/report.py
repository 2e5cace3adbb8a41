"""report.html of a release: what was done to the data and what it cost, readable without any other file.

Self-contained (inline CSS and SVG, no scripts, no external assets) so that it can be opened inside an enclave under
a strict Content-Security-Policy.
"""
from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .deid import DeidResult

_BUCKETS = [(1, 1), (2, 2), (3, 4), (5, 9), (10, 19), (20, 49), (50, 99), (100, 999), (1000, None)]


def _esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def bar_chart_svg(labels: Sequence[str], values: Sequence[float], title: str, value_label: str,
                  width: int = 640, height: int = 260, color: str = "#3b6ea5") -> str:
    """A plain vertical bar chart as inline SVG."""
    left, bottom, top = 56, 48, 28
    plot_w, plot_h = width - left - 12, height - bottom - top
    peak = max(max(values, default=0), 1e-12)
    slot = plot_w / max(len(values), 1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="{_esc(title)}">',
             f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{_esc(title)}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#444"/>']
    for fraction in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - fraction)
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="10">'
                     f'{_esc(f"{peak * fraction:.3g}")}</text>')
    for i, (label, value) in enumerate(zip(labels, values)):
        h = plot_h * (value / peak)
        x = left + i * slot + slot * 0.15
        parts.append(f'<rect x="{x:.1f}" y="{top + plot_h - h:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" '
                     f'fill="{color}"><title>{_esc(label)}: {_esc(f"{value:.6g}")}</title></rect>')
        parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
                     f'font-size="10">{_esc(label)}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" font-size="11">'
                 f'{_esc(value_label)}</text></svg>')
    return "".join(parts)


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


def _table(headers: Sequence[str] | None, rows: Sequence[Sequence[object]]) -> str:
    head = "" if headers is None else "<thead><tr>" + "".join(f"<th>{_esc(h)}</th>" for h in headers) + "</tr></thead>"
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def render_report(result: "DeidResult", manifest: dict, extra_sections: Sequence[str] = ()) -> str:
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
        ["transformations checked", f'{manifest["checked_transformations"]} of {manifest["lattice_size"]}'],
        ["optimum proven", "yes" if manifest["optimal"] else "no (time limit)"],
        ["seconds", f'{manifest["seconds"]:.3f}'],
        ["data sha256", manifest["data_sha256"]],
    ]
    gate = manifest.get("gate")
    gate_html = ""
    if gate is not None:
        verdict = "passed" if gate.get("passed") else "REFUSED"
        reasons = "".join(f"<li>{_esc(r)}</li>" for r in gate.get("reasons", []))
        gate_html = f'<h2>Release gate: {verdict}</h2><ul>{reasons}</ul>'
    generated = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:">
<title>safeshare release report: {_esc(manifest["dataset"])}</title>
<style>
body{{font-family:system-ui,sans-serif;margin:2rem auto;max-width:60rem;color:#222}}
table{{border-collapse:collapse;margin:.5rem 0 1.5rem}}td,th{{border:1px solid #ccc;padding:.25rem .6rem;text-align:left}}
th{{background:#f2f4f7}}h1{{font-size:1.5rem}}h2{{font-size:1.15rem;margin-top:1.8rem}}
</style></head><body>
<h1>Release report: {_esc(manifest["dataset"])}</h1>
<p>Generated {generated} by safeshare engine {_esc(manifest["engine_version"])}; optimized for
<b>{_esc(manifest["optimized_for"])}</b>.</p>
<h2>Summary</h2>{_table(None, summary)}
{gate_html}
<h2>Transformation</h2>{_table(["attribute", "level", "distinct labels", "labels"], transformation_rows)}
<h2>Quality (1 = original data)</h2>{_table(["model", "quality", "optimized"], quality_rows)}
<h2>Quality per attribute</h2>{_table(["attribute"] + models, attribute_rows)}
<h2>Equivalence classes</h2>{chart}
{"".join(extra_sections)}
</body></html>
"""

"""Charts as inline SVG drawn by the server: no JavaScript chart library, no external asset, nothing to download.

Horizontal bars because released labels are long ("Married-civ-spouse", "[20, 40[") and some attributes have dozens
of values; the bars of an ordinal attribute in label order are its histogram. Colours and sizes are SVG presentation
attributes (allowed under the app's Content-Security-Policy, unlike style attributes). Every text is escaped.
"""
from __future__ import annotations

from collections.abc import Sequence
from html import escape

PALETTE = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#d69e2e", "#718096",
           "#c53030", "#2c5282", "#9c4221", "#276749")
FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif"
WIDTH = 760
LABEL_W = 220
VALUE_W = 110
ROW_H = 24


def _text(x: float, y: float, text: str, anchor: str = "start", size: int = 13, fill: str = "#1a202c",
          weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" font-weight="{weight}" '
            f'fill="{fill}">{escape(text)}</text>')


def _short(label: str, limit: int = 30) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _svg(height: float, body: list[str], title: str) -> str:
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0f}" '
            f'width="{WIDTH}" height="{height:.0f}" role="img" aria-label="{escape(title)}" '
            f'font-family="{escape(FONT)}"><title>{escape(title)}</title>{"".join(body)}</svg>')


def bar_chart(labels: Sequence[str], counts: Sequence[int], title: str, percents: Sequence[float] | None = None
              ) -> str:
    """One horizontal bar per label, its length proportional to the count, labelled with count (and percent)."""
    top = 8
    height = top + ROW_H * max(len(labels), 1) + 8
    plot_w = WIDTH - LABEL_W - VALUE_W
    peak = max([int(c) for c in counts] + [1])
    body: list[str] = []
    for i, (label, count) in enumerate(zip(labels, counts)):
        y = top + i * ROW_H
        length = plot_w * int(count) / peak
        body.append(_text(LABEL_W - 8, y + 16, _short(label), anchor="end"))
        body.append(f'<rect x="{LABEL_W}" y="{y + 3}" width="{length:.1f}" height="{ROW_H - 6}" '
                    f'fill="{PALETTE[0]}"><title>{escape(label)}: {int(count)}</title></rect>')
        value = f"{int(count):,}" + (f" ({percents[i]:.1f}%)" if percents is not None else "")
        body.append(_text(LABEL_W + length + 6, y + 16, value, size=12, fill="#2d3748"))
    body.append(f'<line x1="{LABEL_W}" y1="{top}" x2="{LABEL_W}" y2="{height - 8}" stroke="#4a5568" '
                f'stroke-width="1"/>')
    return _svg(height, body, title)


def _legend(names: Sequence[str], y: float) -> tuple[list[str], float]:
    """Legend swatches in rows across the chart's width; returns the elements and the height used."""
    body: list[str] = []
    x, row = 8.0, 0
    for i, name in enumerate(names):
        width = 28 + 7.2 * len(_short(name, 24))
        if x + width > WIDTH - 8 and x > 8:
            x, row = 8.0, row + 1
        yy = y + row * 22
        body.append(f'<rect x="{x:.1f}" y="{yy:.1f}" width="14" height="14" fill="{PALETTE[i % len(PALETTE)]}"/>')
        body.append(_text(x + 20, yy + 12, _short(name, 24), size=12))
        x += width + 12
    return body, (row + 1) * 22


def stacked_percent_bars(row_labels: Sequence[str], col_labels: Sequence[str],
                         row_percent: Sequence[Sequence[float]], title: str) -> str:
    """A 100 % bar per row value split by column value: how the column attribute is distributed in each row."""
    legend, legend_h = _legend(col_labels, 6)
    top = 6 + legend_h + 6
    height = top + ROW_H * max(len(row_labels), 1) + 8
    plot_w = WIDTH - LABEL_W - 16
    body = list(legend)
    for i, label in enumerate(row_labels):
        y = top + i * ROW_H
        body.append(_text(LABEL_W - 8, y + 16, _short(label), anchor="end"))
        x = float(LABEL_W)
        for j, share in enumerate(row_percent[i]):
            width = plot_w * float(share) / 100.0
            if width <= 0:
                continue
            body.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{ROW_H - 6}" '
                        f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(label)} · {escape(col_labels[j])}: '
                        f'{float(share):.1f}%</title></rect>')
            x += width
    return _svg(height, body, title)


def grouped_bars(labels: Sequence[str], series: Sequence[tuple[str, Sequence[float]]], title: str) -> str:
    """Side-by-side bars per label, one per series (percentages of each cohort), for comparing distributions."""
    legend, legend_h = _legend([name for name, _ in series], 6)
    top = 6 + legend_h + 6
    k = max(len(series), 1)
    group_h = ROW_H + (k - 1) * 12
    height = top + group_h * max(len(labels), 1) + 8
    plot_w = WIDTH - LABEL_W - VALUE_W
    peak = max([float(v) for _, values in series for v in values] + [1e-9])
    body = list(legend)
    bar_h = (group_h - 6) / k
    for i, label in enumerate(labels):
        y = top + i * group_h
        body.append(_text(LABEL_W - 8, y + group_h / 2 + 5, _short(label), anchor="end"))
        for s, (name, values) in enumerate(series):
            value = float(values[i])
            length = plot_w * value / peak
            yy = y + 3 + s * bar_h
            body.append(f'<rect x="{LABEL_W}" y="{yy:.1f}" width="{length:.1f}" height="{bar_h - 1:.1f}" '
                        f'fill="{PALETTE[s % len(PALETTE)]}"><title>{escape(name)} · {escape(label)}: '
                        f'{value:.1f}%</title></rect>')
            body.append(_text(LABEL_W + length + 6, yy + bar_h - 3, f"{value:.1f}%", size=11, fill="#2d3748"))
    body.append(f'<line x1="{LABEL_W}" y1="{top}" x2="{LABEL_W}" y2="{height - 8}" stroke="#4a5568" '
                f'stroke-width="1"/>')
    return _svg(height, body, title)

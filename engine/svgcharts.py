"""Charts as inline SVG strings, for report.html and the analytics app: no scripts, no fonts, no external
references, no style attributes (fonts and colours are SVG presentation attributes, which the app's
Content-Security-Policy allows), every text HTML-escaped.

The report's charts (vertical bars, grouped bars with line series, steps) carry each drawn value's exact number in a
`data-value` attribute (and a `<title>` tooltip), so that the figures can be checked by a machine and read without
hovering; the app's are horizontal (`horizontal_bar_chart`, `stacked_percent_bars`, `horizontal_grouped_bars`).
"""
from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

FONT_FAMILY = "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif"
FONT = f'font-family="{html.escape(FONT_FAMILY, quote=True)}"'  # attribute of each chart's root element


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def percent(share: float, digits: int = 1) -> str:
    """A share in [0, 1] as a percentage; tiny non-zero shares are not rounded to a misleading 0 %."""
    if share == 0:
        return "0%"
    smallest = 10.0 ** -digits
    if 0 < share * 100 < smallest:
        return f"<{smallest:g}%"
    return f"{share * 100:.{digits}f}%"


def number(value: object) -> str:
    """Exact text of a number for a data attribute (integers without a decimal point, floats by repr)."""
    if isinstance(value, (int,)) or (hasattr(value, "dtype") and getattr(value, "dtype").kind in "iu"):
        return str(int(value))
    return repr(float(value))


def nice_ceiling(value: float) -> float:
    """The smallest round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8 times a power of ten) >= value (value > 0)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        candidate = step * 10.0 ** exponent
        if candidate >= value * (1 - 1e-12):
            return candidate
    return 10.0 ** (exponent + 1)


@dataclass(frozen=True)
class Series:
    name: str
    values: Sequence[float]
    color: str
    dashed: bool = False


def _axis_label(value: float, as_percent: bool) -> str:
    return f"{value * 100:.4g}%" if as_percent else f"{value:.4g}"


def grouped_bar_chart(categories: Sequence[str], bars: Sequence[Series], lines: Sequence[Series] = (), *,
                      title: str, x_label: str, y_label: str, y2_label: str = "", chart_id: str = "",
                      as_percent: bool = True, width: int = 780, height: int = 360,
                      tooltips: Sequence[str] | None = None) -> str:
    """Grouped vertical bars (one group per category, one bar per series) on the left axis, scaled to the data,
    and optional line series on a right axis from 0 to 100 % (e.g. cumulative shares), with a legend."""
    left, right, top, bottom = 62, 62 if lines else 16, 34, 96
    plot_w, plot_h = width - left - right, height - top - bottom
    peak = max((float(v) for s in bars for v in s.values), default=0.0)
    # Headroom above the highest bar for its (rotated) value label.
    y_max = nice_ceiling(peak * 1.15) if peak > 0 else 1.0
    if as_percent and peak <= 1.0:
        y_max = min(y_max, 1.0)
    n = max(len(categories), 1)
    slot = plot_w / n
    bar_w = slot * 0.8 / max(len(bars), 1)
    base_y = top + plot_h
    labels = tooltips if tooltips is not None else categories
    out = [f'<svg class="chart" id="{esc(chart_id)}" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{esc(title)}" {FONT}>',
           f'<title>{esc(title)}</title>',
           f'<text x="{width / 2:.1f}" y="16" text-anchor="middle" font-size="13" font-weight="600">'
           f'{esc(title)}</text>']
    # Grid and left axis.
    for i in range(5):
        fraction = i / 4
        y = base_y - plot_h * fraction
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + plot_w}" y2="{y:.1f}" stroke="#e3e6ea"/>')
        out.append(f'<text x="{left - 6}" y="{y + 3.5:.1f}" text-anchor="end" font-size="10">'
                   f'{esc(_axis_label(y_max * fraction, as_percent))}</text>')
        if lines:
            out.append(f'<text x="{left + plot_w + 6}" y="{y + 3.5:.1f}" text-anchor="start" font-size="10" '
                       f'fill="#555">{fraction * 100:.0f}%</text>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{base_y}" stroke="#444"/>')
    out.append(f'<line x1="{left}" y1="{base_y}" x2="{left + plot_w}" y2="{base_y}" stroke="#444"/>')
    if lines:
        out.append(f'<line x1="{left + plot_w}" y1="{top}" x2="{left + plot_w}" y2="{base_y}" stroke="#888"/>')
    out.append(f'<text transform="translate(14 {top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle" '
               f'font-size="11">{esc(y_label)}</text>')
    if lines and y2_label:
        out.append(f'<text transform="translate({width - 12} {top + plot_h / 2:.1f}) rotate(90)" '
                   f'text-anchor="middle" font-size="11" fill="#555">{esc(y2_label)}</text>')
    # Bars with their value above them (rotated, only where there is room to read it).
    for j, series in enumerate(bars):
        for i, (category, value) in enumerate(zip(categories, series.values)):
            value = float(value)
            h = plot_h * min(value / y_max, 1.0) if y_max else 0.0
            x = left + i * slot + slot * 0.1 + j * bar_w
            shown = percent(value, 2) if as_percent else f"{value:.6g}"
            out.append(f'<rect class="bar" data-series="{esc(series.name)}" data-category="{esc(category)}" '
                       f'data-value="{number(value)}" x="{x:.2f}" y="{base_y - h:.2f}" width="{bar_w:.2f}" '
                       f'height="{h:.2f}" fill="{series.color}"><title>{esc(series.name)}, {esc(labels[i])}: '
                       f'{esc(shown)}</title></rect>')
            if value > 0 and value >= y_max * 0.02:
                text = esc(percent(value) if as_percent else f"{value:.3g}")
                cx = x + bar_w / 2 + 3
                if h > plot_h - 30:  # no room above: write the value inside the bar, from its top down
                    out.append(f'<text class="value" transform="translate({cx:.2f} {base_y - h + 3:.2f}) '
                               f'rotate(-90)" text-anchor="end" font-size="8.5" fill="#fff">{text}</text>')
                else:
                    out.append(f'<text class="value" transform="translate({cx:.2f} {base_y - h - 3:.2f}) '
                               f'rotate(-90)" font-size="8.5" fill="#333">{text}</text>')
    # Lines on the right axis (0..1).
    for series in lines:
        points = []
        for i, value in enumerate(series.values):
            x = left + i * slot + slot / 2
            y = base_y - plot_h * min(max(float(value), 0.0), 1.0)
            points.append((x, y, float(value)))
        dash = ' stroke-dasharray="5 3"' if series.dashed else ""
        out.append(f'<polyline class="line" data-series="{esc(series.name)}" fill="none" stroke="{series.color}" '
                   f'stroke-width="1.6"{dash} points="{" ".join(f"{x:.2f},{y:.2f}" for x, y, _ in points)}"/>')
        for i, (x, y, value) in enumerate(points):
            out.append(f'<circle class="point" data-series="{esc(series.name)}" data-category="{esc(categories[i])}" '
                       f'data-value="{number(value)}" cx="{x:.2f}" cy="{y:.2f}" r="2.2" fill="{series.color}">'
                       f'<title>{esc(series.name)}, {esc(labels[i])}: {esc(percent(value, 2))}</title></circle>')
    # Category labels, rotated.
    for i, category in enumerate(categories):
        x = left + i * slot + slot / 2
        out.append(f'<text transform="translate({x + 3:.2f} {base_y + 8}) rotate(-50)" text-anchor="end" '
                   f'font-size="9.5">{esc(category)}</text>')
    out.append(f'<text x="{left + plot_w / 2:.1f}" y="{height - 26}" text-anchor="middle" font-size="11">'
               f'{esc(x_label)}</text>')
    # Legend.
    x = left
    legend_y = height - 10
    for series in bars:
        out.append(f'<rect x="{x}" y="{legend_y - 9}" width="12" height="10" fill="{series.color}"/>'
                   f'<text class="legend" x="{x + 16}" y="{legend_y}" font-size="11">{esc(series.name)}</text>')
        x += 24 + 7 * len(series.name)
    for series in lines:
        dash = ' stroke-dasharray="5 3"' if series.dashed else ""
        out.append(f'<line x1="{x}" y1="{legend_y - 4}" x2="{x + 18}" y2="{legend_y - 4}" stroke="{series.color}" '
                   f'stroke-width="1.6"{dash}/><text class="legend" x="{x + 22}" y="{legend_y}" font-size="11">'
                   f'{esc(series.name)}</text>')
        x += 30 + 6.5 * len(series.name)
    out.append("</svg>")
    return "".join(out)


def bar_chart(labels: Sequence[str], values: Sequence[float], title: str, value_label: str,
              width: int = 640, height: int = 260, color: str = "#3b6ea5") -> str:
    """A plain vertical bar chart (one series, absolute values)."""
    left, bottom, top = 56, 48, 28
    plot_w, plot_h = width - left - 12, height - bottom - top
    peak = max(max(values, default=0), 1e-12)
    slot = plot_w / max(len(values), 1)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(title)}" {FONT}>',
             f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{esc(title)}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#444"/>']
    for fraction in (0.0, 0.5, 1.0):
        y = top + plot_h * (1 - fraction)
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="10">'
                     f'{esc(f"{peak * fraction:.3g}")}</text>')
    for i, (label, value) in enumerate(zip(labels, values)):
        h = plot_h * (value / peak)
        x = left + i * slot + slot * 0.15
        parts.append(f'<rect class="bar" data-category="{esc(label)}" data-value="{number(value)}" x="{x:.1f}" '
                     f'y="{top + plot_h - h:.1f}" width="{slot * 0.7:.1f}" height="{h:.1f}" fill="{color}">'
                     f'<title>{esc(label)}: {esc(f"{value:.6g}")}</title></rect>')
        parts.append(f'<text x="{x + slot * 0.35:.1f}" y="{top + plot_h + 14}" text-anchor="middle" '
                     f'font-size="10">{esc(label)}</text>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" font-size="11">'
                 f'{esc(value_label)}</text></svg>')
    return "".join(parts)


def step_chart(points: Sequence[tuple[float, float]], title: str, x_label: str, y_label: str, *, end: float | None = None,
               width: int = 640, height: int = 240, color: str = "#2f6aa8") -> str:
    """A rising step line through (x, y) points sorted by x: the best value so far, held until the next improvement
    and, with `end`, until that x (the end of the run). The y axis spans the values found (a search's first
    solutions are often far below its last, and the last improvements are what a reader wants to see)."""
    left, bottom, top = 56, 44, 28
    plot_w, plot_h = width - left - 16, height - bottom - top
    xs = [float(x) for x, _ in points]
    ys = [float(y) for _, y in points]
    x_max = max([end or 0.0] + xs + [1e-9])
    y_low, y_high = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if y_high - y_low < 1e-12:
        y_low, y_high = y_low - 0.5 * max(abs(y_low), 1e-3), y_high + 0.5 * max(abs(y_high), 1e-3)

    def px(x: float) -> float:
        return left + plot_w * (x / x_max)

    def py(y: float) -> float:
        return top + plot_h * (1 - (y - y_low) / (y_high - y_low))

    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
             f'aria-label="{esc(title)}" {FONT}>',
             f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{esc(title)}</text>',
             f'<line x1="{left}" y1="{top + plot_h}" x2="{left + plot_w}" y2="{top + plot_h}" stroke="#444"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + plot_h}" stroke="#444"/>']
    for value in (y_low, (y_low + y_high) / 2, y_high):
        parts.append(f'<text x="{left - 6}" y="{py(value) + 4:.1f}" text-anchor="end" font-size="10">'
                     f'{esc(f"{value:.4g}")}</text>')
    for value in (0.0, x_max / 2, x_max):
        parts.append(f'<text x="{px(value):.1f}" y="{top + plot_h + 14}" text-anchor="middle" font-size="10">'
                     f'{esc(f"{value:.3g}")}</text>')
    if points:
        path = [f"M{px(xs[0]):.1f},{py(ys[0]):.1f}"]
        for x, y in zip(xs[1:], ys[1:]):
            path.append(f"H{px(x):.1f}V{py(y):.1f}")
        if end is not None and end > xs[-1]:
            path.append(f"H{px(end):.1f}")
        parts.append(f'<path d="{"".join(path)}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in zip(xs, ys):
            parts.append(f'<circle class="improvement" data-x="{number(x)}" data-value="{number(y)}" cx="{px(x):.1f}" '
                         f'cy="{py(y):.1f}" r="3" fill="{color}"><title>{esc(f"{x:.3g}")}: '
                         f'{esc(f"{y:.6g}")}</title></circle>')
    parts.append(f'<text x="{left + plot_w / 2}" y="{height - 6}" text-anchor="middle" font-size="11">'
                 f'{esc(x_label)}</text>')
    parts.append(f'<text x="12" y="{top + plot_h / 2}" text-anchor="middle" font-size="11" '
                 f'transform="rotate(-90 12 {top + plot_h / 2})">{esc(y_label)}</text></svg>')
    return "".join(parts)


# --- horizontal charts (the analytics app) ---------------------------------------------------------------------------
# Horizontal bars because released labels are long ("Married-civ-spouse", "[20, 40[") and some attributes have dozens
# of values; the bars of an ordinal attribute in label order are its histogram.
PALETTE = ("#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#d53f8c", "#319795", "#d69e2e", "#718096",
           "#c53030", "#2c5282", "#9c4221", "#276749")
WIDTH = 760
LABEL_W = 220
VALUE_W = 110
ROW_H = 24


def _htext(x: float, y: float, text: str, anchor: str = "start", size: int = 13, fill: str = "#1a202c",
           weight: str = "normal") -> str:
    return (f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}" font-weight="{weight}" '
            f'fill="{fill}">{esc(text)}</text>')


def _short(label: str, limit: int = 30) -> str:
    return label if len(label) <= limit else label[: limit - 1] + "…"


def _hsvg(height: float, body: list[str], title: str) -> str:
    return (f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height:.0f}" '
            f'width="{WIDTH}" height="{height:.0f}" role="img" aria-label="{esc(title)}" '
            f'{FONT}><title>{esc(title)}</title>{"".join(body)}</svg>')


def horizontal_bar_chart(labels: Sequence[str], counts: Sequence[int], title: str,
                         percents: Sequence[float] | None = None) -> str:
    """One horizontal bar per label, its length proportional to the count, labelled with count (and percent)."""
    top = 8
    height = top + ROW_H * max(len(labels), 1) + 8
    plot_w = WIDTH - LABEL_W - VALUE_W
    peak = max([int(c) for c in counts] + [1])
    body: list[str] = []
    for i, (label, count) in enumerate(zip(labels, counts)):
        y = top + i * ROW_H
        length = plot_w * int(count) / peak
        body.append(_htext(LABEL_W - 8, y + 16, _short(label), anchor="end"))
        body.append(f'<rect x="{LABEL_W}" y="{y + 3}" width="{length:.1f}" height="{ROW_H - 6}" '
                    f'fill="{PALETTE[0]}"><title>{esc(label)}: {int(count)}</title></rect>')
        value = f"{int(count):,}" + (f" ({percents[i]:.1f}%)" if percents is not None else "")
        body.append(_htext(LABEL_W + length + 6, y + 16, value, size=12, fill="#2d3748"))
    body.append(f'<line x1="{LABEL_W}" y1="{top}" x2="{LABEL_W}" y2="{height - 8}" stroke="#4a5568" '
                f'stroke-width="1"/>')
    return _hsvg(height, body, title)


def _hlegend(names: Sequence[str], y: float) -> tuple[list[str], float]:
    """Legend swatches in rows across the chart's width; returns the elements and the height used."""
    body: list[str] = []
    x, row = 8.0, 0
    for i, name in enumerate(names):
        width = 28 + 7.2 * len(_short(name, 24))
        if x + width > WIDTH - 8 and x > 8:
            x, row = 8.0, row + 1
        yy = y + row * 22
        body.append(f'<rect x="{x:.1f}" y="{yy:.1f}" width="14" height="14" fill="{PALETTE[i % len(PALETTE)]}"/>')
        body.append(_htext(x + 20, yy + 12, _short(name, 24), size=12))
        x += width + 12
    return body, (row + 1) * 22


def stacked_percent_bars(row_labels: Sequence[str], col_labels: Sequence[str],
                         row_percent: Sequence[Sequence[float]], title: str) -> str:
    """A 100 % bar per row value split by column value: how the column attribute is distributed in each row."""
    legend, legend_h = _hlegend(col_labels, 6)
    top = 6 + legend_h + 6
    height = top + ROW_H * max(len(row_labels), 1) + 8
    plot_w = WIDTH - LABEL_W - 16
    body = list(legend)
    for i, label in enumerate(row_labels):
        y = top + i * ROW_H
        body.append(_htext(LABEL_W - 8, y + 16, _short(label), anchor="end"))
        x = float(LABEL_W)
        for j, share in enumerate(row_percent[i]):
            width = plot_w * float(share) / 100.0
            if width <= 0:
                continue
            body.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" height="{ROW_H - 6}" '
                        f'fill="{PALETTE[j % len(PALETTE)]}"><title>{esc(label)} · {esc(col_labels[j])}: '
                        f'{float(share):.1f}%</title></rect>')
            x += width
    return _hsvg(height, body, title)


def horizontal_grouped_bars(labels: Sequence[str], series: Sequence[tuple[str, Sequence[float]]], title: str
                            ) -> str:
    """Side-by-side bars per label, one per series (percentages of each cohort), for comparing distributions."""
    legend, legend_h = _hlegend([name for name, _ in series], 6)
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
        body.append(_htext(LABEL_W - 8, y + group_h / 2 + 5, _short(label), anchor="end"))
        for s, (name, values) in enumerate(series):
            value = float(values[i])
            length = plot_w * value / peak
            yy = y + 3 + s * bar_h
            body.append(f'<rect x="{LABEL_W}" y="{yy:.1f}" width="{length:.1f}" height="{bar_h - 1:.1f}" '
                        f'fill="{PALETTE[s % len(PALETTE)]}"><title>{esc(name)} · {esc(label)}: '
                        f'{value:.1f}%</title></rect>')
            body.append(_htext(LABEL_W + length + 6, yy + bar_h - 3, f"{value:.1f}%", size=11, fill="#2d3748"))
    body.append(f'<line x1="{LABEL_W}" y1="{top}" x2="{LABEL_W}" y2="{height - 8}" stroke="#4a5568" '
                f'stroke-width="1"/>')
    return _hsvg(height, body, title)

"""The regression page's coefficient plot, drawn on the server as SVG in the style of `engine.svgcharts`' horizontal
charts (same width, row height, fonts and escaping): per term a dot at the estimate and a line across its confidence
interval, a vertical line at zero. Every label is escaped; nothing the researcher typed becomes markup."""
from __future__ import annotations

import math
from collections.abc import Sequence

from engine.svgcharts import LABEL_W, PALETTE, ROW_H, WIDTH, _hsvg, _htext, _short, esc


def coefficient_chart(terms: Sequence[str], estimates: Sequence[float], lows: Sequence[float],
                      highs: Sequence[float], title: str) -> str:
    """A forest plot of the coefficients (the intercept is left to the table: on another scale, it would squeeze
    the others). Terms whose interval is not finite are listed without a line."""
    top, bottom = 8, 28
    values = [v for v in (*estimates, *lows, *highs) if math.isfinite(v)] + [0.0]
    low, high = min(values), max(values)
    if high == low:
        low, high = low - 1, high + 1
    span = high - low
    low, high = low - 0.05 * span, high + 0.05 * span
    plot_w = WIDTH - LABEL_W - 24
    height = top + ROW_H * max(len(terms), 1) + bottom

    def x(value: float) -> float:
        return LABEL_W + plot_w * (value - low) / (high - low)

    body = [f'<line x1="{x(0):.1f}" y1="{top}" x2="{x(0):.1f}" y2="{height - bottom}" stroke="#4a5568" '
            'stroke-width="1" stroke-dasharray="4 3"/>']
    for i, (term, estimate, lo, hi) in enumerate(zip(terms, estimates, lows, highs)):
        y = top + i * ROW_H + ROW_H / 2
        body.append(_htext(LABEL_W - 8, y + 5, _short(term), anchor="end"))
        if not all(math.isfinite(v) for v in (estimate, lo, hi)):
            continue
        body.append(f'<line x1="{x(lo):.1f}" y1="{y:.1f}" x2="{x(hi):.1f}" y2="{y:.1f}" stroke="{PALETTE[0]}" '
                    'stroke-width="2"/>')
        body.append(f'<circle cx="{x(estimate):.1f}" cy="{y:.1f}" r="4" fill="{PALETTE[0]}"><title>{esc(term)}: '
                    f'{estimate:.4g} [{lo:.4g}, {hi:.4g}]</title></circle>')
    axis_y = height - bottom + 16
    for value in (low, 0.0, high):
        body.append(_htext(x(value), axis_y, f"{value:.3g}", anchor="middle", size=11, fill="#2d3748"))
    return _hsvg(height, body, title)

"""Small inline SVG plots (no JavaScript, no image files): a scatter with interval bars, a forest plot, line charts.
Every label is escaped; colours come from CSS classes (ui/static/ui.css), so the page needs no inline style.

Each function takes plain numbers and returns `Markup` ready to place in a template.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

W, H = 560, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 14, 40


@dataclass(frozen=True)
class Point:
    label: str
    x: float
    y: float
    x_low: float | None = None
    x_high: float | None = None
    y_low: float | None = None
    y_high: float | None = None
    href: str | None = None
    css: str = ""


@dataclass(frozen=True)
class Row:
    label: str
    value: float
    low: float
    high: float
    href: str | None = None


class _Axes:
    def __init__(self, x0: float, x1: float, y0: float, y1: float, height: int = H) -> None:
        self.x0, self.x1 = x0, x1 if x1 > x0 else x0 + 1
        self.y0, self.y1 = y0, y1 if y1 > y0 else y0 + 1
        self.h = height

    def px(self, x: float) -> float:
        return LEFT + (x - self.x0) / (self.x1 - self.x0) * (W - LEFT - RIGHT)

    def py(self, y: float) -> float:
        return self.h - BOTTOM - (y - self.y0) / (self.y1 - self.y0) * (self.h - TOP - BOTTOM)


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round ticks inside [lo, hi] (steps of 1, 2, 2.5 or 5 times a power of ten)."""
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _frame(ax: _Axes, x_label: str, y_label: str) -> list[str]:
    base = ax.h - BOTTOM
    out = [f'<line class="axis" x1="{LEFT}" y1="{base}" x2="{W - RIGHT}" y2="{base}"/>']
    out += [
        f'<text class="tick" x="{ax.px(t):.1f}" y="{base + 14}" text-anchor="middle">{t:.2g}</text>'
        for t in _ticks(ax.x0, ax.x1)
    ]
    out.append(f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{base}"/>')
    out += [
        f'<text class="tick" x="{LEFT - 6}" y="{ax.py(t) + 4:.1f}" text-anchor="end">{t:.2g}</text>'
        for t in _ticks(ax.y0, ax.y1)
    ]
    return out + [
        f'<text class="label" x="12" y="{base / 2:.0f}" transform="rotate(-90 12 {base / 2:.0f})" '
        f'text-anchor="middle">{escape(y_label)}</text>',
        f'<text class="label" x="{(LEFT + W - RIGHT) / 2:.0f}" y="{ax.h - 6}" text-anchor="middle">{escape(x_label)}</text>',
    ]


def _svg(body: list[str], title: str, height: int = H, width: int = W) -> Markup:
    wide = " wide" if width > W else ""
    head = f'<svg class="plot{wide}" viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">'
    return Markup(head + "".join(body) + "</svg>")


def _linked(inner: str, href: str | None) -> str:
    return f'<a href="{escape(href)}">{inner}</a>' if href else inner


def _span(values: Sequence[float | None], pad: float = 0.05) -> tuple[float, float]:
    nums = [v for v in values if v is not None]
    lo, hi = min(nums, default=0.0), max(nums, default=1.0)
    margin = (hi - lo) * pad or 0.1
    return lo - margin, hi + margin


def scatter(
    points: Sequence[Point],
    *,
    x_label: str,
    y_label: str,
    x_line: float | None = None,
    y_line: float | None = None,
    title: str = "scatter",
) -> Markup:
    """Points with optional interval bars on both axes and dashed threshold lines."""
    xs = [0.0, 1.0, *(v for p in points for v in (p.x, p.x_low, p.x_high)), *([x_line] if x_line is not None else [])]
    ys = [0.0, 1.0, *(v for p in points for v in (p.y, p.y_low, p.y_high)), *([y_line] if y_line is not None else [])]
    ax = _Axes(*_span(xs), *_span(ys))
    body = _frame(ax, x_label, y_label)
    if x_line is not None:
        x = ax.px(x_line)
        body.append(f'<line class="threshold" x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{H - BOTTOM}"/>')
    if y_line is not None:
        y = ax.py(y_line)
        body.append(f'<line class="threshold" x1="{LEFT}" y1="{y:.1f}" x2="{W - RIGHT}" y2="{y:.1f}"/>')
    for p in points:
        cx, cy = ax.px(p.x), ax.py(p.y)
        label, marks = escape(p.label), []
        if p.x_low is not None and p.x_high is not None:
            x0, x1 = ax.px(p.x_low), ax.px(p.x_high)
            marks.append(f'<line class="ci" x1="{x0:.1f}" y1="{cy:.1f}" x2="{x1:.1f}" y2="{cy:.1f}"/>')
        if p.y_low is not None and p.y_high is not None:
            y0, y1 = ax.py(p.y_low), ax.py(p.y_high)
            marks.append(f'<line class="ci" x1="{cx:.1f}" y1="{y0:.1f}" x2="{cx:.1f}" y2="{y1:.1f}"/>')
        marks.append(
            f'<circle class="dot {escape(p.css)}" cx="{cx:.1f}" cy="{cy:.1f}" r="5"><title>{label}</title></circle>'
        )
        marks.append(f'<text class="point-label" x="{cx + 7:.1f}" y="{cy - 7:.1f}">{label}</text>')
        body.append(_linked("".join(marks), p.href))
    return _svg(body, title)


def forest(rows: Sequence[Row], *, x_label: str, title: str = "forest plot") -> Markup:
    """One interval per row (value with [low, high]) and a dashed line at 0; labels on the left."""
    height, width, label_w = TOP + BOTTOM + 26 * max(len(rows), 1), W + 240, 400
    ax = _Axes(*_span([0.0, *(v for r in rows for v in (r.low, r.high))]), 0, max(len(rows), 1), height)
    shift = lambda x: label_w + (ax.px(x) - LEFT) * (width - label_w - RIGHT) / (W - LEFT - RIGHT)  # noqa: E731
    body = [f'<line class="axis" x1="{label_w}" y1="{height - BOTTOM}" x2="{width - RIGHT}" y2="{height - BOTTOM}"/>']
    for t in _ticks(ax.x0, ax.x1):
        body.append(
            f'<text class="tick" x="{shift(t):.1f}" y="{height - BOTTOM + 14}" text-anchor="middle">{t:+.2g}</text>'
        )
    body.append(
        f'<text class="label" x="{(label_w + width) / 2:.0f}" y="{height - 6}" text-anchor="middle">{escape(x_label)}</text>'
    )
    body.append(f'<line class="threshold" x1="{shift(0):.1f}" y1="{TOP}" x2="{shift(0):.1f}" y2="{height - BOTTOM}"/>')
    for i, r in enumerate(rows):
        y = TOP + 13 + 26 * i
        marks = (
            f'<text class="row-label" x="{label_w - 8}" y="{y + 4}" text-anchor="end">{escape(r.label)}</text>'
            f'<line class="ci" x1="{shift(r.low):.1f}" y1="{y}" x2="{shift(r.high):.1f}" y2="{y}"/>'
            f'<circle class="dot" cx="{shift(r.value):.1f}" cy="{y}" r="4"><title>{escape(r.label)}: '
            f"{r.value:+.3g} [{r.low:+.3g}, {r.high:+.3g}]</title></circle>"
        )
        body.append(_linked(marks, r.href))
    return _svg(body, title, height, width)


def lines(
    series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
    *,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] | None = None,
    title: str = "lines",
) -> Markup:
    """One polyline with dots per series (colours s0, s1, ... in CSS) and a legend."""
    xs = [x for _, pts in series for x, _ in pts] or [0.0, 1.0]
    ys = [y for _, pts in series for _, y in pts] or [0.0, 1.0]
    ax = _Axes(min(xs), max(xs), *(y_range or _span(ys)))
    body = _frame(ax, x_label, y_label)
    for k, (name, pts) in enumerate(series):
        css = f"s{k % 6}"
        path = " ".join(f"{ax.px(x):.1f},{ax.py(y):.1f}" for x, y in pts)
        body.append(f'<polyline class="line {css}" points="{path}"/>')
        body += [
            f'<circle class="dot {css}" cx="{ax.px(x):.1f}" cy="{ax.py(y):.1f}" r="3"><title>{escape(name)} @ {x:g}: {y:.3g}</title></circle>'
            for x, y in pts
        ]
        body.append(
            f'<text class="legend {css}" x="{W - RIGHT - 4}" y="{TOP + 12 + 14 * k}" text-anchor="end">{escape(name)}</text>'
        )
    return _svg(body, title)

"""Inline SVG charts for the HTML report (no scripts, no external files).

Every bar carries a ``<title>`` so hovering shows its numbers offline.
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

PASS, FAIL, HIGHLIGHT, AXIS = "#3a923a", "#c8362b", "#6a1b9a", "#555"


def _svg(width: int, height: int, body: list[str], label: str) -> str:
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(label)}" class="chart">'
            f'<title>{escape(label)}</title>' + "".join(body) + "</svg>")


def histogram_labels(edges: Sequence[float]) -> list[str]:
    """Bin labels matching :func:`validators.metrics.histogram`."""
    labels = ["0"]
    for lo, hi in zip(edges[:-1], edges[1:]):
        labels.append(f"≤1e{int(round(math.log10(hi)))}")
    labels.append(f">1e{int(round(math.log10(edges[-1])))}")
    return labels


def histogram_svg(counts: Sequence[int], edges: Sequence[float], title: str, *,
                  limit: float | None = None) -> str:
    """A bar chart of absolute-error counts per decade.

    Args:
        counts: counts per bin (from ``OutputError.histogram``).
        edges: the bin edges (``validators.metrics.HISTOGRAM_EDGES``).
        title: the chart's accessible title.
        limit: the absolute tolerance; bins above it are drawn in the failure colour.

    Returns:
        The ``<svg>`` element as text.
    """
    labels = histogram_labels(edges)
    width, height, left, bottom, top = 460, 170, 34, 42, 14
    n = max(len(counts), 1)
    bar = (width - left - 6) / n
    peak = max(max(counts, default=0), 1)
    body = [f'<line x1="{left}" y1="{height - bottom}" x2="{width - 4}" y2="{height - bottom}" stroke="{AXIS}"/>',
            f'<text x="2" y="{top + 4}" font-size="9" fill="{AXIS}">{peak}</text>',
            f'<text x="2" y="{height - bottom}" font-size="9" fill="{AXIS}">0</text>']
    lowers = [0.0] + list(edges)  # bin 0 holds exact zeros; bin i > 0 holds (lowers[i], next edge]
    for i, (c, label) in enumerate(zip(counts, labels)):
        h = (height - bottom - top) * (c / peak)
        x = left + i * bar
        over = limit is not None and i > 0 and lowers[i] >= limit
        colour = FAIL if over else PASS
        body.append(f'<rect x="{x + 1:.1f}" y="{height - bottom - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                    f'fill="{colour}"><title>|error| {escape(label)}: {c} elements</title></rect>')
        body.append(f'<text x="{x + bar / 2:.1f}" y="{height - bottom + 10}" font-size="8" text-anchor="end" '
                    f'transform="rotate(-45 {x + bar / 2:.1f} {height - bottom + 10})">{escape(label)}</text>')
    body.append(f'<text x="{width / 2:.0f}" y="{height - 2}" font-size="9" text-anchor="middle" fill="{AXIS}">'
                "absolute error (elements per decade)</text>")
    return _svg(width, height, body, title)


#: Longest node label drawn under a bar (the full name is in the bar's tooltip).
MAX_LABEL = 24


def _short(name: str) -> str:
    return name if len(name) <= MAX_LABEL else name[:MAX_LABEL - 1] + "…"


def _text_px(text: str, font_size: float) -> float:
    """A generous estimate of a label's width: 0.62 em a character (DejaVu Sans averages ~0.55)."""
    return 0.62 * font_size * len(text)


def op_chart_svg(nodes: Sequence, title: str, *, highlight: str | None = None, floor: float = 1e-12) -> str:
    """A bar per FX node (graph order): log10 of its max relative error against PyTorch.

    Args:
        nodes: ``NodeError`` records (``name``, ``op``, ``max_abs``, ``max_rel``, ``passed``).
        title: the chart's accessible title.
        highlight: the culprit node's name (drawn in its own colour and labelled).
        floor: errors below it are drawn at it (exact zeros included).

    Returns:
        The ``<svg>`` element as text.
    """
    n = max(len(nodes), 1)
    bar = max(3.0, min(28.0, 900 / n))
    labelled = n <= 40
    labels = [_short(node.name) for node in nodes]
    # Node labels are rotated 60° below the axis, anchored at their end: a label of L px
    # reaches 0.87·L down and 0.5·L left of its bar; the margins make room for the longest.
    room = [_text_px(t, 8) for t in labels] if labelled else [0.0]
    left = max(40, math.ceil(max(0.5 * w - (i + 0.5) * bar + 6 for i, w in enumerate(room))))
    bottom, top, plot = (math.ceil(0.87 * max(room)) + 18 if labelled else 16), 16, 144
    width, height = max(360, int(left + bar * n + 10)), top + plot + bottom
    lo, hi = math.log10(floor), 1.0
    span = hi - lo

    def y(v: float) -> float:
        v = floor if v != v or v <= floor else min(v, 10 ** hi)
        return top + plot * (1 - (math.log10(v) - lo) / span)

    body = [f'<line x1="{left}" y1="{height - bottom}" x2="{width - 4}" y2="{height - bottom}" stroke="{AXIS}"/>']
    for k in range(int(lo), int(hi) + 1, 3):
        yy = y(10.0 ** k)
        body.append(f'<line x1="{left - 3}" y1="{yy:.1f}" x2="{width - 4}" y2="{yy:.1f}" stroke="#ddd"/>'
                    f'<text x="2" y="{yy + 3:.1f}" font-size="9" fill="{AXIS}">1e{k}</text>')
    for i, (node, label) in enumerate(zip(nodes, labels)):
        rel = node.max_rel if isinstance(node.max_rel, float) else math.inf
        yy = y(rel)
        x = left + i * bar
        colour = HIGHLIGHT if node.name == highlight else (PASS if node.passed else FAIL)
        tip = f"{node.name} ({node.op}): max rel {rel:.3e}, max abs {node.max_abs:.3e}"
        body.append(f'<rect x="{x + 0.5:.1f}" y="{yy:.1f}" width="{max(bar - 1, 1):.1f}" '
                    f'height="{height - bottom - yy:.1f}" fill="{colour}"><title>{escape(tip)}</title></rect>')
        if labelled:
            body.append(f'<text x="{x + bar / 2:.1f}" y="{height - bottom + 8}" font-size="8" text-anchor="end" '
                        f'transform="rotate(-60 {x + bar / 2:.1f} {height - bottom + 8})">{escape(label)}</text>')
        if node.name == highlight:
            mark = f"▼ {label}"
            half = _text_px(mark, 10) / 2
            cx = min(max(x + bar / 2, half + 2), width - half - 2)  # the whole mark stays inside the chart
            body.append(f'<text x="{cx:.1f}" y="{max(yy - 3, 10):.1f}" font-size="10" text-anchor="middle" '
                        f'fill="{HIGHLIGHT}">{escape(mark)}</text>')
    return _svg(width, height, body, title)

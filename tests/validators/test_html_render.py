"""The HTML report as headless Chromium draws it: charts, tables, nothing fetched, no errors.

Reuses the reports of ``conftest.py`` (a failing run with per-op localization charts,
a passing one with the per-op profile). Rendered at a narrow, phone-like width: the
page must not scroll sideways (wide tables and charts scroll in their own box). Then
the per-op chart with the long FX node names of real models (SDPA, BatchNorm in
training mode): every label must be drawn inside the chart.
"""

from __future__ import annotations

import pytest

from tests.validators.chromium import CHROMIUM, render
from validators.metrics import HISTOGRAM_EDGES
from validators.report.data import NodeError
from validators.report.svg import op_chart_svg

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed "
                                "(Debian: apt-get install chromium); it renders the HTML report")

WIDTH = 520  # Chromium does not open windows narrower than 500 px
BINS = len(HISTOGRAM_EDGES) + 1  # exact zeros, one per decade, then everything above the last edge


def _check(report, page: dict) -> None:
    """What every rendered report must show."""
    assert page["console"] == [], page["console"]  # no script errors, no other console messages
    assert page["resources"] == []  # self-contained: nothing fetched
    assert page["viewport"] == WIDTH and page["page_width"] <= WIDTH, "the page scrolls sideways"
    svgs = page["svgs"]
    assert svgs and all(s["svg"] for s in svgs), "an <svg> was not parsed as SVG"
    for s in svgs:
        assert s["box"]["width"] > 100 and s["box"]["height"] > 100, s
        assert s["clipped"] == [], f"labels cut off or not drawn in {s['label']}: {s['clipped']}"
        assert s["figure_width"] is not None and s["figure_width"] <= WIDTH, s
    histograms = [s for s in svgs if s["label"].endswith("absolute error histogram")]
    outputs = sum(len(t.worst()) for t in report.targets)
    assert len(histograms) == outputs and all(s["rects"] == BINS for s in histograms)
    charts = [s for s in svgs if s["label"].startswith("per-op max relative error")]
    profiles = [report.op_profile] if report.op_profile else [t.localization for t in report.targets if t.localization]
    assert [s["rects"] for s in charts] == [len(p.profile) for p in profiles] and charts
    summary = page["tables"][0]
    assert summary["header"][:5] == ["target", "status", "precision", "output", "max abs"]
    assert summary["rows"] == 1 + outputs
    assert all(t["box"]["right"] <= WIDTH for t in page["tables"])


def test_failing_report_renders_in_chromium(broken_report, tmp_path):
    report, out, _ = broken_report
    page = render(out / "report.html", tmp_path, width=WIDTH)
    _check(report, page)
    marks = [s for s in page["svgs"] if s["label"].startswith("per-op max relative error")]
    assert [s["label"] for s in marks] == ["per-op max relative error, tpu", "per-op max relative error, litert"]


def test_passing_report_renders_in_chromium(passing_report, tmp_path):
    paths = passing_report.write(tmp_path / "report")
    page = render(paths[2], tmp_path, width=WIDTH)
    _check(passing_report, page)


def test_long_node_names_fit_under_the_per_op_chart(tmp_path):
    names = ["scaled_dot_product_attention", "_native_batch_norm_legit_no_training", "upsample_bilinear2d", "add",
             "max_pool2d_with_indices", "linear_3"]
    nodes = [NodeError(n, "aten.op", 1e-7, 10.0 ** -(i + 3), i != 3) for i, n in enumerate(names)]
    page = tmp_path / "chart" / "report.html"
    page.parent.mkdir()
    page.write_text('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"></head><body>'
                    + op_chart_svg(nodes, "per-op max relative error, long names", highlight="linear_3")
                    + "</body></html>", encoding="utf-8")
    (chart,) = render(page, tmp_path, width=WIDTH)["svgs"]
    assert chart["rects"] == len(names) and chart["texts"] == 5 + len(names) + 1  # axis, nodes, culprit mark
    assert chart["clipped"] == [], f"labels cut off: {chart['clipped']}"

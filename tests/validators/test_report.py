"""Reports: versioned JSON, Markdown, self-contained HTML with charts, and repro folders."""

from __future__ import annotations

import json
import runpy
from html.parser import HTMLParser

import numpy as np
import torch

from converter.lowering.registry import override
from tests.validators.conftest import bad_relu
from tests.validators.models import relu_line
from validators.report import SCHEMA_VERSION

aten = torch.ops.aten


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs
        if tag not in ("meta", "line", "rect", "br", "path"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        if tag in ("line", "rect", "path"):
            return
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()


def test_write_returns_reports_then_repro_folders(broken_report):
    _, out, paths = broken_report
    assert [p.name for p in paths] == ["report.json", "report.md", "report.html", "tpu", "litert"]
    assert all(p.exists() for p in paths)
    assert not list(out.glob(".*tmp"))  # atomic writes leave no temp files


def test_json_is_versioned_and_complete(broken_report):
    report, out, _ = broken_report
    data = json.loads((out / "report.json").read_text())
    assert data["schema"] == "tpu-export/parity-report" and data["schema_version"] == SCHEMA_VERSION == 1
    assert data["passed"] is False and data == report.to_json()
    tpu = data["targets"][0]
    assert tpu["target"] == "tpu" and tpu["status"] == "fail" and tpu["repro_dir"] == str(out / "repro" / "tpu")
    assert tpu["localization"]["node"] == "relu" and tpu["localization"]["location"]["line"] == relu_line()
    assert {"max_abs", "max_rel", "mean_abs", "cosine", "passed", "histogram"} <= set(tpu["comparisons"][0])
    assert data["tolerances"]["float32"] == [1e-4, 1e-5]


def test_markdown_names_the_op_source_line_and_repro(broken_report):
    report, out, _ = broken_report
    md = (out / "report.md").read_text()
    assert md.startswith("# Parity report: MLP — FAIL")
    assert "### First divergence — tpu" in md and "### First divergence — litert" in md
    assert f"models.py:{relu_line()} in forward, module act (ReLU)" in md
    assert f"`{out / 'repro' / 'litert'}`" in md


def test_html_parses_and_embeds_its_charts(broken_report, passing_report):
    for report in (broken_report[0], passing_report):
        text = report.to_html()
        parser = _Collector()
        parser.feed(text)
        parser.close()
        assert parser.open == []
        outputs = sum(len(t.worst()) for t in report.targets)
        charts = 1 if report.op_profile else len([t for t in report.targets if t.localization])
        assert parser.tags.count("svg") == outputs + charts
        assert "script" not in parser.tags and "img" not in parser.tags and "link" not in parser.tags
        assert not [v for k, v in parser.attrs if k in ("src", "href")]  # nothing to fetch: readable offline
    assert "▼ relu" in broken_report[0].to_html()  # the culprit is marked on the per-op chart


def test_repro_folder_reproduces_the_failing_op(broken_report, monkeypatch):
    _, out, _ = broken_report
    repro = out / "repro" / "tpu"
    names = sorted(str(p.relative_to(repro)) for p in repro.rglob("*") if p.is_file())
    assert names == ["expected.npz", "got.npz", "inputs.npz", "program.pt2", "subgraph/node_inputs.npz",
                     "subgraph/repro.py", "summary.md"]
    with np.load(repro / "inputs.npz") as z:
        assert z.files == ["x"] and z["x"].shape == (4, 8)
    ep = torch.export.load(str(repro / "program.pt2"))
    assert any(n.target is aten.relu.default for n in ep.graph.nodes)
    summary = (repro / "summary.md").read_text()
    assert "max abs" in summary and "`aten.relu.default`" in summary
    script = runpy.run_path(str(repro / "subgraph" / "repro.py"), run_name="repro")
    assert script["OP"] is aten.relu.default
    monkeypatch.chdir(repro / "subgraph")
    assert script["main"]() == 0  # the real lowering of the op is right …
    with override(aten.relu.default, bad_relu):
        assert script["main"]() == 1  # … and the broken one is caught by the one-op repro

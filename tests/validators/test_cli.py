"""`tpu-export validate` exit codes and files; `tpu-export demo` ends with the HTML report path."""

from __future__ import annotations

import json

import torch

import converter.cli.demo as demo
import tests.validators.models as models_module
from converter.cli.main import main
from converter.lowering.registry import override
from tests.validators.conftest import bad_relu
from tests.validators.models import mlp

FACTORY = f"{models_module.__file__}:factory"
aten = torch.ops.aten


def test_validate_writes_reports_and_exits_0(tmp_path, capsys):
    code = main(["validate", FACTORY, "--targets", "tpu", "--report", str(tmp_path), "--num-random-inputs", "0",
                 "--no-op-profile"])
    assert code == 0
    assert {p.name for p in tmp_path.iterdir()} == {"report.json", "report.md", "report.html"}
    assert "# Parity report: MLP — PASS" in capsys.readouterr().out
    assert json.loads((tmp_path / "report.json").read_text())["op_profile"] is None  # --no-op-profile: no chart


def test_validate_checks_a_dynamic_export_at_other_sizes(tmp_path, capsys):
    code = main(["validate", FACTORY, "--targets", "tpu,onnx", "--report", str(tmp_path), "--num-random-inputs", "2",
                 "--dynamic", "0:0=batch:..9", "--no-op-profile"])
    assert code == 0, capsys.readouterr().out
    inputs = json.loads((tmp_path / "report.json").read_text())["inputs"]
    sample, *drawn = [i["tensors"][0]["shape"] for i in inputs]
    assert len(drawn) == 2 and all(2 <= s[0] <= 9 and s[0] != sample[0] for s in drawn), (sample, drawn)
    assert [s[1:] for s in drawn] == [sample[1:]] * 2  # (static dims keep their size)


def test_validate_exits_1_on_a_mismatch(tmp_path):
    with override(aten.relu.default, bad_relu):
        code = main(["validate", FACTORY, "--targets", "tpu", "--report", str(tmp_path), "--num-random-inputs", "0"])
    assert code == 1
    assert (tmp_path / "repro" / "tpu" / "subgraph" / "repro.py").exists()


def test_validate_exits_2_on_a_usage_error(tmp_path, capsys):
    assert main(["validate", FACTORY, "--targets", "tpu,nope", "--report", str(tmp_path)]) == 2
    assert "unknown target 'nope'" in capsys.readouterr().err


def test_demo_ends_with_the_parity_summary_and_the_html_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(demo, "build", mlp)  # the bundled CNN needs ops still landing; the flow is the same
    assert main(["demo", "--out", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-3].startswith("parity over 3 input sets: all targets match PyTorch")
    assert lines[-1] == f"HTML report: {tmp_path / 'report' / 'report.html'}"
    assert (tmp_path / "report" / "report.html").read_text().startswith("<!DOCTYPE html>")


def test_validate_takes_a_derived_dynamic_dim(tmp_path, capsys):
    # (--dynamic took a plain NAME only: a size that must be even had no spelling)
    code = main(["validate", FACTORY, "--targets", "tpu,onnx", "--report", str(tmp_path), "--num-random-inputs", "2",
                 "--dynamic", "0:0=2*b:1..5", "--no-op-profile"])
    assert code == 0, capsys.readouterr().out
    inputs = json.loads((tmp_path / "report.json").read_text())["inputs"]
    sample, *drawn = [i["tensors"][0]["shape"][0] for i in inputs]
    assert len(drawn) == 2 and all(s % 2 == 0 and 2 <= s <= 10 and s != sample for s in drawn), (sample, drawn)

"""validate(): every target against PyTorch and against each other, on sample and random inputs."""

from __future__ import annotations

import io

import pytest
import torch

from converter.errors import ConversionError, InputError, ParityError
from converter.lowering.registry import override
from tests.validators.conftest import bad_relu
from tests.validators.models import Counter, mlp, relu_line
from validators import assert_parity, validate
from validators.parity import Progress

aten = torch.ops.aten


def test_validate_passes_every_target(passing_report):
    assert passing_report.passed
    assert [t.target for t in passing_report.targets] == ["tpu", "litert", "stablehlo"]
    for t in passing_report.targets:
        assert t.status == "pass" and t.precision == "fp32" and t.localization is None
        assert t.artifact is not None


def test_validate_runs_sample_and_seeded_random_inputs(passing_report):
    assert [i.origin for i in passing_report.inputs] == ["sample", "random", "random"]
    assert all(i.specs == (("x", (4, 8), "float32"),) for i in passing_report.inputs)
    for t in passing_report.targets:
        assert sorted(c.input_index for c in t.comparisons) == [0, 1, 2]
        for c in t.comparisons:
            e = c.error
            assert c.reference == "pytorch" and e.name == "output_0" and e.shape == (4, 4)
            assert e.max_abs <= 1e-4 and e.cosine > 0.9999 and sum(e.histogram) == 16


def test_validate_compares_targets_with_each_other(passing_report):
    pairs = {(c.reference, c.target) for c in passing_report.cross}
    assert pairs == {("tpu", "litert"), ("tpu", "stablehlo"), ("litert", "stablehlo")}
    assert len(passing_report.cross) == 3 * 3  # pairs × input sets (one output)
    assert all(c.error.passed for c in passing_report.cross)


def test_validate_profiles_every_op_when_all_pass(passing_report):
    profile = passing_report.op_profile
    assert profile is not None and profile.kind == "none" and profile.method == "intermediates"
    ops = [n.op for n in profile.profile]
    assert ops.count("aten.linear.default") == 3 and ops.count("aten.relu.default") == 2
    assert all(n.passed for n in profile.profile)


def test_validate_restores_buffers_and_is_quiet_when_piped(capfd):
    torch.manual_seed(0)
    model = Counter().eval()
    report = validate(model, (torch.randn(2, 4),), targets=["tpu"], num_random_inputs=1, localize=False)
    assert report.passed  # the reference runs the input sets in sequence, like the stateful TPU module
    assert float(model.calls) == 0.0
    assert "[tpu-export validate]" not in capfd.readouterr().err


def test_validate_rejects_unknown_target():
    model, args = mlp()
    with pytest.raises(InputError, match="unknown target 'tpuu'"):
        validate(model, args, targets=["tpuu"])


def test_validate_records_conversion_errors_only_when_asked():
    def broken_builder(program, **_):
        raise ConversionError("this target cannot take the model")

    model, args = mlp()
    with pytest.raises(ConversionError, match="cannot take"):
        validate(model, args, targets=["tpu"], builders={"tpu": broken_builder}, num_random_inputs=0)
    report = validate(model, args, targets=["tpu"], builders={"tpu": broken_builder}, num_random_inputs=0,
                      errors="report")
    assert not report.passed
    assert report.target("tpu").status == "error" and "cannot take" in report.target("tpu").message
    assert "ERROR" in report.to_markdown()


def test_assert_parity_raises_with_the_markdown_summary():
    model, args = mlp()
    with override(aten.relu.default, bad_relu), pytest.raises(ParityError) as info:
        assert_parity(model, args, targets=["tpu"], num_random_inputs=0)
    message = str(info.value)
    assert message.startswith("# Parity report: MLP — FAIL")
    assert "`aten.relu.default`" in message and f"models.py:{relu_line()}" in message
    assert not info.value.report.passed


def test_low_precision_artifact_is_judged_by_task_level_agreement():
    model, args = mlp(torch.bfloat16)
    report = validate(model, args, targets=["tpu"], num_random_inputs=1, localize=False)
    t = report.target("tpu")
    assert t.precision == "bf16"
    assert {c.error.mode for c in t.comparisons} == {"top1"}  # a [batch, classes] output
    assert all(c.error.top1_agreement is not None and c.error.snr_db > 20 for c in t.comparisons)
    assert report.passed
    assert "top-1 agreement 100.0%" in report.to_markdown()


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty", [True, False])
def test_progress_shows_on_a_terminal_and_stays_quiet_when_piped(tty):
    stream = _Stream(tty)
    show = Progress(None, stream)
    show("tpu: input 1/3")
    show.close()
    assert ("tpu: input 1/3" in stream.getvalue()) is tty
    assert stream.getvalue() == "" or tty


def test_validate_checks_a_dynamic_export_at_other_sizes():
    # validate captured with static shapes, so the artifacts refused inputs of another batch size
    model, (x,) = mlp()
    batch = torch.export.Dim("batch", min=1, max=32)
    others = [(torch.randn(5, *x.shape[1:]),), (torch.randn(1, *x.shape[1:]),)]
    targets = ("tpu", "stablehlo", "onnx", "litert")
    report = validate(model, (x,), targets=targets, inputs=others, num_random_inputs=0, localize=False,
                      dynamic_shapes=({0: batch},))
    assert report.passed, [(t.target, t.status, t.message) for t in report.targets]
    assert [len(t.comparisons) for t in report.targets] == [3] * 4  # (the sample and both sizes, one output each)
    static = validate(model, (x,), targets=("onnx",), inputs=others, num_random_inputs=0, localize=False,
                      errors="report")
    assert not static.passed


class _Scalars(torch.nn.Module):
    """Python numbers among the outputs: a float ``.item()`` and a bool one (whose range checks export as
    ``sym_ite``)."""

    def forward(self, t):
        return t * 2, (t > 0).item(), t.item()


@pytest.mark.parametrize("value", [0.5, -0.5])
def test_python_numbers_a_model_returns_are_compared_on_every_target(value):
    # they were left out of PyTorch's outputs ("returned 3 outputs, PyTorch 1"), and sym_ite failed to lower
    x = torch.tensor(value)
    report = validate(_Scalars(), (x,), targets=["tpu", "onnx", "litert"], num_random_inputs=0, localize=False)
    for result in report.targets:
        assert result.status == "pass" and len(result.comparisons) == 3, (result.target, result.comparisons)

"""Every model family of ``examples/models.py`` through ``tpu-export validate``.

Per family, one validation (a module-scoped fixture) does what
``tpu-export validate examples/models.py:<family> --targets tpu,litert,stablehlo,onnx --report DIR
--no-op-profile`` does: the CLI's factory loader, :func:`validators.validate` with the
CLI's defaults (the sample plus 2 seeded random input sets; every output compared with
PyTorch and every pair of targets compared), the JSON / Markdown / HTML reports
written. One addition: the stablehlo target's builder saves the artifact and reloads
it with ``exporters.stablehlo.load``, so the StableHLO artifact validated is the
reloaded one. (``--no-op-profile`` skips the per-op chart of a passing run, one more
compile per family; a failing target is still localized to its first diverging op.)

The tests then read the report and re-run the kept artifacts on the sample: each
target must pass, match PyTorch fp32 with exact shapes and dtypes and max relative
error ≤ 1e-4 (``tests/models/compare.py``), the reloaded StableHLO must agree with the
tpu target, and the LiteRT flatbuffers and ONNX graphs must use the ops good code uses
(composites mapped whole, native convolutions and pools). A
failure to validate is kept and re-raised by each test that needs it, so the test
fails with the converter's own message.

Then the runtime behaviours: the compile cache with a dynamic batch dim,
BatchNorm running stats written back in train mode, a dynamic StableHLO export
reloaded at two batch sizes, ``TpuModule.stablehlo()``, and the error for an
unsupported op.
"""

from __future__ import annotations

import copy
import inspect
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.export import Dim

import examples.models as zoo
from converter import convert
from converter.cli.factory import load_factory
from converter.errors import UnsupportedOpError
from examples.models import FAMILIES, cnn, mlp
from exporters.stablehlo import LoadedStableHLO, load
from exporters.stablehlo import build as build_stablehlo
from tests.models.compare import FP32_REL_TOL, assert_outputs_close, flat_outputs
from validators import validate

# torch.export warns that nn.LSTM/nn.GRU assign ``_flat_weights`` while being traced; the
# weights are still captured as parameters, so the warning is noise for these tests.
pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes self.rnn._flat_weights:UserWarning")

#: The targets of ``tpu-export validate … --targets tpu,litert,stablehlo,onnx``.
TARGETS = ("tpu", "litert", "stablehlo", "onnx")

#: The same JAX program through jax.jit (tpu) and through jax.export (stablehlo)
#: on one backend: only XLA fusion differences are allowed between the two.
SAME_PROGRAM_REL_TOL = 1e-6

#: LiteRT op counts per family: what good mobile code looks like.
LITERT_OPS = {
    "mlp": {"FULLY_CONNECTED": 2, "GELU": 1, "TRANSPOSE": 0},
    "cnn": {"CONV_2D": 2, "MAX_POOL_2D": 1, "TRANSPOSE": 1, "RELU": 0, "ADD": 0, "MUL": 0},
    "mobilenet": {"DEPTHWISE_CONV_2D": 3, "TRANSPOSE": 1, "RELU6": 0, "MINIMUM": 0, "MUL": 0},
    "unet": {"TRANSPOSE": 2, "TRANSPOSE_CONV": 1, "RESIZE_BILINEAR": 1, "RESHAPE": 0, "MEAN": 8},
    # packed QKV split into three FULLY_CONNECTEDs, query scale and LayerNorm's ones / zeros gone
    "transformer_encoder": {"SLICE": 0, "FULLY_CONNECTED": 13, "MUL": 8},
    # kept whole by capture: batch-first steps sliced in place (no TRANSPOSE), gates by one SPLIT_V,
    # the first steps' f·c0 with a zero c0 gone
    "lstm": {"LOGISTIC": 34, "MUL": 34, "TRANSPOSE": 0, "SPLIT_V": 12, "SLICE": 12},
    # the reverse direction walks the steps backwards (no REVERSE_V2); h_n[0], h_n[1] read the finals
    "gru": {"TRANSPOSE": 0, "REVERSE_V2": 0, "RESHAPE": 2, "SLICE": 12, "CONCATENATION": 1},
    "mingpt": {"GATHER": 1, "STABLEHLO_SORT": 0},  # positions are constant: their lookup folds
    "llama": {"SELECT_V2": 0, "SOFTMAX": 2},  # the folded causal mask is an ADD (XNNPACK keeps it)
}

#: ONNX op counts per family: composites mapped whole, convolutions and pools native.
ONNX_OPS = {
    "mlp": {"Gelu": 1, "LayerNormalization": 1, "MatMul": 2, "Einsum": 0},
    "cnn": {"Conv": 2, "MaxPool": 1, "Transpose": 0},
    "unet": {"ConvTranspose": 1, "Resize": 2},
    "mingpt": {"Gather": 1, "Softmax": 2, "Gelu": 2},
    "tensor_ops": {"TopK": 3, "Pad": 3},
}


@dataclass
class Outcome:
    """A validation kept for several tests: its value or the error it raised."""

    value: Any = None
    error: BaseException | None = None

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _attempt(fn) -> Outcome:
    try:
        return Outcome(fn())
    except Exception as e:  # kept and re-raised by every test that uses this outcome
        return Outcome(error=e)


def _clone(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


# --------------------------------------------------------------------------- family fixtures


@pytest.fixture(scope="module", params=[pytest.param(name, marks=pytest.mark.xdist_group(f"family-{name}"))
                                        for name in FAMILIES])  # one worker validates a family, once
def family(request) -> dict:
    """One zoo model loaded as the CLI loads ``examples/models.py:<family>``, and its PyTorch fp32 outputs."""
    model, args, kwargs = load_factory(f"{Path(zoo.__file__)}:{request.param}")
    with torch.no_grad():
        expected = flat_outputs(model(*_clone(args), **kwargs))
    return {"name": request.param, "model": model, "args": args, "kwargs": kwargs, "expected": expected}


@pytest.fixture(scope="module")
def validated(family, tmp_path_factory) -> Outcome:
    """``tpu-export validate`` of the family on tpu, litert, stablehlo (reloaded) and onnx, reports written."""

    def build_reloaded(program, **options):
        artifact = build_stablehlo(program, **options)
        return load(artifact.save(str(tmp_path_factory.mktemp(f"{family['name']}_stablehlo") / "model")))

    def run():
        report = validate(family["model"], _clone(family["args"]), sample_kwargs=family["kwargs"], targets=TARGETS,
                          errors="report", op_profile=False, builders={"stablehlo": build_reloaded})
        out = tmp_path_factory.mktemp(f"{family['name']}_report")
        return report, out, report.write(out)

    return _attempt(run)


def _artifact(report, target: str) -> Any:
    result = next(t for t in report.targets if t.target == target)
    assert result.status == "pass", f"{target}: {result.status} {result.message}\n{report.to_markdown()}"
    return result.artifact


def test_family_validate_passes_and_writes_reports(family, validated):
    report, out, paths = validated.get()
    assert report.passed, report.to_markdown()
    assert [t.target for t in report.targets] == list(TARGETS)
    assert len(report.inputs) == 3 and len(report.cross) > 0  # sample + 2 random; targets compared pairwise
    assert [p.name for p in paths] == ["report.json", "report.md", "report.html"]  # no repro: nothing failed
    assert json.loads((out / "report.json").read_text())["passed"] is True
    assert (out / "report.md").read_text().startswith(f"# Parity report: {report.model} — PASS")


@pytest.mark.parametrize("target", TARGETS)
def test_family_matches_torch(family, validated, target):
    report, _, _ = validated.get()
    artifact = _artifact(report, target)
    got = artifact(*_clone(family["args"]), **family["kwargs"])  # compiled already: same shapes as the sample
    assert_outputs_close(got, family["expected"], FP32_REL_TOL, f"{family['name']}/{target}")
    expected_ops = {"litert": LITERT_OPS, "onnx": ONNX_OPS}.get(target, {}).get(family["name"], {})
    for op, count in expected_ops.items():
        assert artifact.ops[op] == count, f"{op} ×{artifact.ops[op]}, expected {count}; ops {dict(artifact.ops)}"
    if target == "onnx":
        assert artifact.input_names == [f"args_{i}" for i in range(len(family["args"]))]
        assert artifact.output_names == [f"output_{i}" for i in range(len(family["expected"]))]


def test_family_stablehlo_reload_matches_tpu(family, validated):
    report, _, _ = validated.get()
    loaded, tpu = _artifact(report, "stablehlo"), _artifact(report, "tpu")
    assert isinstance(loaded, LoadedStableHLO) and "stablehlo" in loaded.mlir_text
    shlo_out = flat_outputs(loaded(*_clone(family["args"])))
    tpu_out = flat_outputs(tpu(*_clone(family["args"])))
    assert_outputs_close(shlo_out, tpu_out, SAME_PROGRAM_REL_TOL, f"{family['name']}/stablehlo vs tpu")


# --------------------------------------------------------------------------- dynamic batch, compile cache

BATCH = {0: Dim("batch", min=2, max=64)}


@pytest.fixture(scope="module")
def mlp_dynamic():
    """The mlp captured with a dynamic batch dim (sample batch 4), for the tpu target."""
    model, (x,) = mlp()
    return _attempt(lambda: (model, convert(model, (x,), target="tpu", dynamic_shapes={"x": BATCH})))


def _torch(model, x):
    with torch.no_grad():
        return model(x)


def test_dynamic_batch_new_shape_compiles_once_and_is_cached(mlp_dynamic):
    model, tpu = mlp_dynamic.get()
    for batch in (6, 11):  # sizes no other test uses: each is new to the module's cache
        x = torch.randn(batch, 16)
        misses, hits = tpu.stats.misses, tpu.stats.hits
        assert_outputs_close(tpu(x), _torch(model, x), FP32_REL_TOL, f"mlp batch {batch}")
        assert (tpu.stats.misses, tpu.stats.hits) == (misses + 1, hits), "a new batch size compiles once"
        assert_outputs_close(tpu(x), _torch(model, x), FP32_REL_TOL, f"mlp batch {batch} again")
        assert (tpu.stats.misses, tpu.stats.hits) == (misses + 1, hits + 1), "the same shape hits the cache"
    assert tpu.stats.requests == tpu.stats.hits + tpu.stats.misses


def test_dynamic_batch_steady_state_does_not_recompile(mlp_dynamic):
    model, tpu = mlp_dynamic.get()
    x = torch.randn(5, 16)
    tpu(x)  # first call at batch 5 may compile
    misses, seconds, hits = tpu.stats.misses, tpu.stats.compile_seconds, tpu.stats.hits
    for _ in range(5):
        y = tpu(x)
    assert tpu.stats.misses == misses
    assert tpu.stats.compile_seconds == seconds
    assert tpu.stats.hits == hits + 5
    assert_outputs_close(y, _torch(model, x), FP32_REL_TOL, "mlp steady state")


def test_stablehlo_method_returns_stablehlo_text(mlp_dynamic):
    _, tpu = mlp_dynamic.get()
    text = tpu.stablehlo()
    assert isinstance(text, str) and "stablehlo" in text


def test_stablehlo_dynamic_batch_runs_at_two_batch_sizes_after_reload(tmp_path):
    model, (x,) = mlp()
    artifact = convert(model, (x,), target="stablehlo", dynamic_shapes={"x": BATCH})
    loaded = load(artifact.save(str(tmp_path / "mlp_dynamic")))
    assert loaded.signature["dynamic_dims"], loaded.signature
    for batch in (3, 9):
        x = torch.randn(batch, 16)
        assert_outputs_close(loaded(x), _torch(model, x), FP32_REL_TOL, f"reloaded mlp batch {batch}")


# --------------------------------------------------------------------------- training mode


def test_batchnorm_running_stats_written_back_in_train_mode():
    model, (x,) = cnn()
    model.train()
    initial = {k: v.clone() for k, v in model.named_buffers()}
    reference = copy.deepcopy(model)
    tpu = convert(model, (x,), target="tpu")
    got = tpu(x.clone())
    expected = reference(x.clone()).detach()
    assert_outputs_close(got, expected, FP32_REL_TOL, "cnn train-mode output")
    state = tpu.state_dict()
    updated = dict(reference.named_buffers())
    assert sum(k.endswith("running_mean") for k in updated) == 2
    for name, want in updated.items():
        assert not torch.equal(want, initial[name]), f"PyTorch did not update {name}; the test model is wrong"
        assert name in state, f"buffer {name} missing from TpuModule.state_dict(): {sorted(state)}"
        assert_outputs_close(state[name], want, FP32_REL_TOL, f"buffer {name}")
    # the written-back stats are the ones the next call updates
    x2 = torch.randn_like(x)
    assert_outputs_close(tpu(x2.clone()), reference(x2.clone()).detach(), FP32_REL_TOL, "cnn second call")
    state = tpu.state_dict()
    for name, want in reference.named_buffers():
        assert_outputs_close(state[name], want, FP32_REL_TOL, f"buffer {name} after two calls")


# --------------------------------------------------------------------------- unsupported op


@torch.library.custom_op("tpu_export_tests::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    """A custom op no lowering table knows."""
    return x.sin()


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesMystery(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        return mystery(y) * 2


def _mystery_call_line() -> int:
    lines, start = inspect.getsourcelines(UsesMystery.forward)
    return start + next(i for i, line in enumerate(lines) if "mystery(y)" in line)


@pytest.mark.parametrize("target", ["tpu", "stablehlo"])
def test_unsupported_op_error_names_op_target_and_source_line(target):
    with pytest.raises(UnsupportedOpError) as info:
        convert(UsesMystery(), (torch.randn(3),), target=target)
    message = str(info.value)
    assert "tpu_export_tests.mystery.default" in message, message
    assert f"'{target}'" in message, message
    assert f"test_families.py:{_mystery_call_line()}" in message, message

"""The ONNX target end to end: byte-identical re-export, dynamic batch and sequence,
the artifact (save, load, names, deduplicated weights), the error for an unsupported op,
``tpu-export convert --target onnx`` and ``validators.validate`` on the onnx target."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
import torch
from torch import nn
from torch.export import Dim

import examples.models as zoo
from converter.api import convert
from converter.cli.main import main
from converter.errors import InputError, UnsupportedOpError
from exporters.onnx import OPSET, OnnxArtifact, build
from tests.litert.adapter import JaxProgram
from tests.models.compare import FP32_REL_TOL, assert_outputs_close
from validators import validate


@pytest.fixture(scope="module")
def mlp_onnx():
    model, args = zoo.mlp()
    return model, args, convert(model, args, target="onnx")


def test_export_is_byte_identical_twice(mlp_onnx):
    model, args, art = mlp_onnx
    again = convert(model, args, target="onnx")
    assert again.to_bytes() == art.to_bytes()


def test_artifact_saves_atomically_and_loads(mlp_onnx, tmp_path):
    model, args, art = mlp_onnx
    path = art.save(tmp_path / "sub" / "m.onnx")
    assert os.listdir(tmp_path / "sub") == ["m.onnx"]  # no temp file left behind
    loaded = OnnxArtifact.load(path)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert [o.version for o in proto.opset_import] == [OPSET]
    assert loaded.input_names == ["args_0"] and loaded.output_names == ["output_0"]
    assert {i.name for i in proto.graph.initializer} >= {"weight_0"}
    with torch.no_grad():
        want = model(*args)
    got = loaded(*args)
    assert isinstance(got, torch.Tensor)
    assert_outputs_close(got, want, FP32_REL_TOL, "reloaded mlp")
    assert isinstance(loaded(args[0].numpy()), np.ndarray)  # NumPy in → NumPy out



def test_calling_an_artifact_leaves_the_callers_tensor_resizable(mlp_onnx):
    # the call's inputs were read with Tensor.numpy(), which marks a tensor's storage non-resizable for good;
    # a view with the negative bit set is read with its values
    model, args, art = mlp_onnx
    x = args[0].clone()
    torch.testing.assert_close(art(torch._neg_view(x)), model(-x), rtol=1e-5, atol=1e-5)
    art(x)
    x.resize_(x.numel() * 2)

def test_identical_weights_are_stored_once():
    w = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    art = build(JaxProgram(lambda x: ((x @ w) @ w, x @ w.copy()), [np.ones((2, 16), np.float32)]))
    weights = [t for t in art.model().graph.initializer if list(t.dims) == [16, 16]]
    assert len(weights) == 1


def test_dynamic_batch_and_sequence_run_at_other_sizes():
    model, (ids,) = zoo.mingpt()
    art = convert(model, (ids,), target="onnx", dynamic_shapes={"idx": {0: Dim("batch", max=8),
                                                                       1: Dim("seq", min=2, max=15)}})
    (inp,) = art.model().graph.input
    dims = inp.type.tensor_type.shape.dim
    assert all(d.dim_param and not d.dim_value for d in dims), dims  # both dims symbolic in the file
    for shape in [(2, 8), (3, 5), (1, 12)]:
        x = torch.randint(0, 64, shape)
        with torch.no_grad():
            want = model(x)
        assert_outputs_close(art(x), want, FP32_REL_TOL, f"mingpt {shape}")


class Nextafter(nn.Module):
    def forward(self, x):
        return torch.nextafter(x, x + 1) + 1


def test_unsupported_op_names_the_op_the_target_and_the_source_line():
    with pytest.raises(UnsupportedOpError) as info:
        convert(Nextafter(), (torch.rand(3) + 1,), target="onnx")
    msg = str(info.value)
    assert "aten.nextafter.default" in msg and "lax.nextafter" in msg and "'onnx'" in msg
    assert f"{__file__}:" in msg and "in forward" in msg, msg


def test_cli_convert_writes_an_onnx_file(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert main(["convert", f"{zoo.__file__}:cnn", "--target", "onnx", "-o", str(out)]) == 0
    assert f"wrote {out} (onnx)" in capsys.readouterr().out
    model, args = zoo.cnn()
    with torch.no_grad():
        want = model(*args)
    assert_outputs_close(OnnxArtifact.load(out)(*args), want, FP32_REL_TOL, "cnn via CLI")


def test_cli_convert_declares_dynamic_dims_and_their_ranges(tmp_path, capsys):
    out = tmp_path / "m.onnx"
    assert main(["convert", f"{zoo.__file__}:cnn", "--target", "onnx", "--dynamic", "0:0=batch:1..4",
                 "-o", str(out)]) == 0
    model, (x,) = zoo.cnn()
    art = OnnxArtifact.load(out)
    x4 = torch.cat([x] * 4)[:4]
    with torch.no_grad():
        assert_outputs_close(art(x4), model(x4), FP32_REL_TOL, "cnn at batch 4 via CLI")
    with pytest.raises(InputError, match=r"dim 0 of the ONNX model takes sizes up to 4"):
        art(torch.cat([x4, x4[:1]]))
    assert main(["inspect", str(out)]) == 0
    assert "input args_0 dim 0: sizes up to 4" in capsys.readouterr().out
    for bad, why in (("0:0=batch:5", "must be INPUT:DIM"), ("0:0=b:1..4,0:1=b:1..5", "two ranges")):
        assert main(["convert", f"{zoo.__file__}:cnn", "--target", "onnx", "--dynamic", bad,
                     "-o", str(tmp_path / "bad.onnx")]) == 2
        assert why in capsys.readouterr().err
    assert not (tmp_path / "bad.onnx").exists()


def test_cli_convert_makes_a_dim_of_a_keyword_input_dynamic(tmp_path, capsys):
    # (--dynamic numbered the positional inputs only: a factory with keyword inputs failed in torch.export)
    factory = tmp_path / "kw.py"
    factory.write_text("import torch\n\nclass Scale(torch.nn.Module):\n    def forward(self, x, *, scale):\n"
                       "        return x * scale\n\ndef build():\n"
                       "    return Scale(), (torch.ones(2, 3),), {\"scale\": torch.ones(2, 3)}\n")
    out = tmp_path / "kw.onnx"
    assert main(["convert", f"{factory}:build", "--target", "onnx", "--dynamic", "0:0=batch,1:0=batch",
                 "-o", str(out)]) == 0, capsys.readouterr().err
    x, s = torch.randn(5, 3), torch.randn(5, 3)
    assert torch.equal(OnnxArtifact.load(out)(x, scale=s), x * s)
    assert main(["inspect", str(out)]) == 0
    assert "keyword arguments: scale" in capsys.readouterr().out


def test_validate_runs_the_onnx_target(mlp_onnx):
    model, args, _ = mlp_onnx
    report = validate(model, args, targets=("onnx",), num_random_inputs=1)
    assert report.passed, report.to_markdown()
    (result,) = report.targets
    assert result.target == "onnx" and result.precision == "fp32"


def test_inspect_onnx_file_and_cli(mlp_onnx, tmp_path, capsys):
    from exporters.onnx.inspect import inspect_onnx

    _, _, art = mlp_onnx
    path = art.save(tmp_path / "m.onnx")
    text = inspect_onnx(path)
    assert f"ai.onnx {OPSET}" in text and "Gelu ×1" in text and "onnxruntime CPU: loads" in text, text
    assert main(["inspect", str(path)]) == 0
    assert "input" in capsys.readouterr().out


@pytest.mark.parametrize("content", [b"", b"not a model at all", b"\x08\x07\x12\x04junk" * 3])
def test_inspect_onnx_corrupt_file_one_line_error(tmp_path, content, capsys):
    from converter.errors import ExportError
    from exporters.onnx.inspect import inspect_onnx

    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(ExportError) as e:
        inspect_onnx(path)
    assert "\n" not in str(e.value) and "bad.onnx" in str(e.value)
    assert main(["inspect", str(path)]) != 0
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err


class _Scalars(nn.Module):
    """0-d outputs (a full reduction scaled by a constant, a 0-d input plus one) next to a 2-D one."""

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple:
        return x.sum() * 2.0 + 1, (x * s).amax(), s + 1, x.cumsum(1)


@pytest.mark.parametrize("target", ["onnx", "litert"])
def test_scalar_inputs_and_outputs_keep_their_0d_shape(target):
    # 0-d constants and outputs used to come back as shape (1,)
    x, s = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)), torch.tensor(2.5)
    model = _Scalars().eval()
    art = convert(model, (x, s), target=target)
    for got, want in zip(art(x, s), model(x, s)):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert [np.asarray(o).shape for o in art(x.numpy(), s.numpy())][:3] == [(), (), ()]


@pytest.mark.parametrize("name", ["cnn", "mingpt"])
def test_bfloat16_models_run_in_onnx_runtime_within_bfloat16_rounding(name):
    """ONNX Runtime's CPU kernels have almost no bfloat16 ops (MatMul refused the session) and ONNX's Conv takes
    none: bfloat16 computes as float32 inside, the file keeps bfloat16 at its inputs, outputs and weights."""
    model, args = getattr(zoo, name)()
    model = model.to(torch.bfloat16).eval()
    args = tuple(a.to(torch.bfloat16) if a.is_floating_point() else a for a in args)
    art = convert(model, args, target="onnx")
    with torch.no_grad():
        want = model(*args)
        reference = model.float()(*[a.float() if a.is_floating_point() else a for a in args])
    got = art(*args)
    got, want = (got[0] if isinstance(got, (list, tuple)) else got), (want[0] if isinstance(want, tuple) else want)
    reference = reference[0] if isinstance(reference, tuple) else reference
    assert got.dtype == torch.bfloat16
    scale = reference.abs().max()
    assert (got.float() - reference).abs().max() <= 2 * (want.float() - reference).abs().max() + 1e-2 * scale
    graph = art.model().graph
    bf16 = onnx.TensorProto.BFLOAT16
    assert {i.type.tensor_type.elem_type for i in graph.output} == {bf16}
    stored = {bf16: 0, onnx.TensorProto.FLOAT: 0}
    for t in graph.initializer:
        if t.data_type in stored:
            stored[t.data_type] += len(t.raw_data)
    assert stored[bf16] >= 4 * stored[onnx.TensorProto.FLOAT]  # (the weights; folded upcasts of biases are float32)
    assert {n.op_type for n in graph.node if any(a.name == "to" and a.i == bf16 for a in n.attribute)} == {"Cast"}


class _Rounds(nn.Module):
    def forward(self, x, y):
        return (x * y).to(torch.bfloat16).float() * 3.0, x.to(torch.bfloat16) + y.to(torch.bfloat16)


def test_a_conversion_to_bfloat16_rounds_inside_an_onnx_model():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    got, want = convert(_Rounds().eval(), (x, y), target="onnx")(x, y), _Rounds()(x, y)
    assert torch.equal(got[0], want[0]) and got[1].dtype == torch.bfloat16
    assert torch.equal(got[1], want[1])

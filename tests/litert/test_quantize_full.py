"""Full-integer LiteRT artifacts: ``quantize="int8-full"`` (int8 activations from calibrated ranges, per-channel int8
weights, int32 biases; ``int8_io=True`` makes the model's float inputs and outputs int8 too).

Each model is captured and lowered once; its artifacts are built from that program.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

import examples.models as zoo
from converter.api import prepare
from converter.cli.main import main
from converter.errors import InputError
from exporters.litert import build
from exporters.litert.inspect import inspect_bytes, read_model
from exporters.litert.quantize_full import params
from tests.litert.test_quantize import snr_db
from validators.parity import validate


class Net(nn.Module):
    """Convolutions (BatchNorm, ReLU folded), a depthwise one, a residual add, a max pool, a concatenation, a
    transposed convolution, a sigmoid, a resize, a mean and a linear head: the ops int8 kernels run."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.dw = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(), nn.Conv2d(16, 16, 1))
        self.down = nn.Conv2d(32, 32, 3, stride=2, padding=1)
        self.up = nn.ConvTranspose2d(32, 16, 2, stride=2)
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        h = torch.cat([h, h + self.dw(h)], 1)
        d = torch.relu(self.down(nn.functional.max_pool2d(h, 2, 1, 0)))
        u = torch.sigmoid(self.up(nn.functional.interpolate(d, scale_factor=0.5, mode="bilinear")))
        return self.head(torch.cat([u.mean((2, 3)), d.mean((2, 3))[:, :16]], 1))


def _net() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    model = Net().eval()
    with torch.no_grad():
        bn = model.stem[1]
        bn.running_mean.uniform_(-0.2, 0.2)
        bn.running_var.uniform_(0.5, 2.0)
    return model, (torch.randn(2, 3, 16, 16),)


def _calibration(args: tuple, n: int = 4) -> list:
    g = torch.Generator().manual_seed(1)
    return [tuple(torch.randn(a.shape, generator=g) for a in args) for _ in range(n)]


@pytest.fixture(scope="module")
def net() -> tuple:
    model, args = _net()
    program = prepare(model, args, target="litert")
    cal = _calibration(args)
    arts = {"fp32": build(program), "full": build(program, quantize="int8-full", calibration=cal),
            "io": build(program, quantize="int8-full", calibration=cal, int8_io=True)}
    return model, args, program, cal, arts


def _ops(art) -> list[tuple[str, list, list]]:
    """``(op, input dtypes, output dtypes)`` of each op of the artifact's model."""
    it = art.interpreter()
    dtype = {d["index"]: np.dtype(d["dtype"]) for d in it.get_tensor_details()}
    return [(op["op_name"], [dtype[i] for i in op["inputs"] if i >= 0], [dtype[i] for i in op["outputs"]])
            for op in it._get_ops_details()]


def test_full_integer_ops_compute_on_int8(net):
    _, _, _, _, arts = net
    full = arts["full"]
    assert full.precision == "int8"
    ops = _ops(full)
    # float32 in, one QUANTIZE (at the input, before its NCHW → NHWC transpose), int8 throughout, one DEQUANTIZE;
    # the concatenations' inputs of other ranges are requantized (int8 → int8 QUANTIZE)
    i8, i32, f32 = np.dtype(np.int8), np.dtype(np.int32), np.dtype(np.float32)
    assert [(op, ins) for op, ins, outs in ops if f32 in ins + outs] == [("QUANTIZE", [f32]), ("DEQUANTIZE", [i8])]
    assert ops[0][0] == "QUANTIZE" and ops[-1][0] == "DEQUANTIZE"
    assert sum(op == "QUANTIZE" and ins == [i8] for op, ins, _ in ops) == 2
    kinds = set()
    for op, ins, outs in ops[1:-1]:
        kinds.add(op)
        assert outs == [i8] * len(outs), (op, ins, outs)
        if op in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
            assert ins == [i8, i8, i32], (op, ins)
        elif op == "TRANSPOSE_CONV":
            assert ins == [i32, i8, i8, i32], (op, ins)  # (output shape, weights, input, bias)
    assert {"CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "ADD", "CONCATENATION",
            "MAX_POOL_2D", "LOGISTIC", "RESIZE_BILINEAR", "MEAN"} <= kinds, kinds
    weights = [d for d in full.interpreter().get_tensor_details()
               if d["dtype"] == np.int8 and len(d["quantization_parameters"]["scales"]) > 1]
    assert weights and all(not d["quantization_parameters"]["zero_points"].any() for d in weights)
    assert read_model(full.to_bytes())["weights_bytes"] <= 0.35 * read_model(arts["fp32"].to_bytes())["weights_bytes"]


def test_full_integer_matches_pytorch_on_new_inputs(net):
    model, args, _, _, arts = net
    x = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        want = model(x).numpy()
    got = arts["full"](x).numpy()
    assert snr_db(got, want) >= 30 and (got.argmax(1) == want.argmax(1)).all()
    note = arts["full"].notes[-1]
    assert "calibrated on 4 calibration input sets" in note and "dB SNR of the float32 model's" in note, note


def test_int8_io_takes_and_gives_int8(net):
    _, args, _, _, arts = net
    io, full = arts["io"], arts["full"]
    it = io.interpreter()
    (inp,), (out,) = it.get_input_details(), it.get_output_details()
    assert inp["dtype"] == np.int8 and out["dtype"] == np.int8 and inp["quantization"][0] > 0
    f32 = np.dtype(np.float32)
    assert not [op for op, ins, outs in _ops(io) if f32 in ins + outs], io.ops  # (integer from end to end)
    x = torch.randn(args[0].shape, generator=torch.Generator().manual_seed(8))
    # the call quantizes the float input and dequantizes the output as the float-io model's edge ops do
    scale, zero = out["quantization"]
    np.testing.assert_allclose(io(x).numpy(), full(x).numpy(), atol=1.01 * scale)
    raw = io.run_raw(np.clip(np.rint(x.numpy() / inp["quantization"][0]) + inp["quantization"][1], -128, 127)
                     .astype(np.int8))[0]
    assert raw.dtype == np.int8
    np.testing.assert_allclose((raw.astype(np.float32) - zero) * scale, io(x).numpy(), atol=1.01 * scale)
    assert "quantized: real = " in inspect_bytes(io.to_bytes())


def test_full_integer_is_deterministic_and_defaults_to_the_sample_inputs(net):
    _, _, program, cal, arts = net
    assert build(program, quantize="int8-full", calibration=cal).to_bytes() == arts["full"].to_bytes()
    sample = build(program, quantize="int8-full")
    assert "calibrated on the sample inputs" in sample.notes[-1]


def test_transformer_keeps_its_attention_mask_float():
    """minGPT's causal mask adds -inf (no int8 code holds it): that ADD and the softmax stay float32, the linear
    layers, layer norms and GELUs compute on int8."""
    model, args = zoo.mingpt()
    program = prepare(model, args, target="litert")
    g = torch.Generator().manual_seed(2)
    art = build(program, quantize="int8-full", calibration=[(torch.randint(0, 64, args[0].shape, generator=g),)
                                                            for _ in range(3)])
    ops = _ops(art)
    assert all(ins[0] == np.int8 for op, ins, _ in ops if op == "FULLY_CONNECTED")
    assert all(ins[0] == np.float32 for op, ins, _ in ops if op == "SOFTMAX")
    x = torch.randint(0, 64, args[0].shape, generator=g)
    with torch.no_grad():
        want = model(x).numpy()
    got = art(x).numpy()
    assert snr_db(got, want) >= 20 and (got.argmax(-1) == want.argmax(-1)).mean() >= 0.9
    assert "ADD" in art.notes[-1].split("float32 ops between DEQUANTIZE and QUANTIZE: ")[1]


def test_dynamic_batch_calibrated_at_some_sizes_runs_at_others():
    model, args = zoo.cnn()
    program = prepare(model, args, target="litert", dynamic_shapes=({0: Dim("b", min=1, max=16)},))
    art = build(program, quantize="int8-full", calibration=[(torch.randn(n, 3, 16, 16),) for n in (1, 3)])
    x = torch.randn(6, 3, 16, 16)
    with torch.no_grad():
        want = model(x).numpy()
    got = art(x).numpy()
    assert got.shape == (6, 10) and snr_db(got, want) >= 30


def test_full_integer_refusals(net):
    _, args, program, _, _ = net
    with pytest.raises(InputError, match=r"calibration set 1: input 'args_0' has shape \[2, 4, 16, 16\]"):
        build(program, quantize="int8-full", calibration=[args, (torch.randn(2, 4, 16, 16),)])
    with pytest.raises(InputError, match="needs at least one calibration input set"):
        build(program, quantize="int8-full", calibration=[])
    with pytest.raises(InputError, match="options of quantize='int8-full' only"):
        build(program, quantize="int8", calibration=[args])
    with pytest.raises(InputError, match="one signature"):
        build(program, quantize="int8-full", signatures={"other": program})


def test_params_cover_zero_and_the_range():
    p = params(-1.0, 3.0)
    assert np.isclose(p.scale[0], 4 / 255) and p.zero_point[0] == -64
    q = params(0.5, 2.0)  # (widened to hold 0: the lowest code is 0.0)
    assert q.zero_point[0] == -128 and np.isclose(q.scale[0], 2 / 255)
    assert np.isclose(params(0.0, 0.0).scale[0], 1 / 255)  # (all zeros: any scale holds them; a moderate one)


def test_a_float_mask_of_finfo_min_stays_float():
    """nn.TransformerEncoder's padding mask is ``finfo(float32).min`` where a key is masked: quantized, its scale
    (~1e36) overflowed the int8 kernels' fixed-point multipliers and the interpreter aborted the process."""
    model, args = zoo.transformer_encoder()
    program = prepare(model, args, target="litert")
    art = build(program, quantize="int8-full")
    with torch.no_grad():
        want = model(*args).numpy()
    assert snr_db(art(*args).numpy(), want) >= 25


def test_cli_convert_int8_full_with_calibration_file(tmp_path, capsys):
    cal = tmp_path / "cal.pt"
    torch.save(_calibration((torch.randn(2, 3, 16, 16),), 2), cal)
    out = tmp_path / "cnn_int8.tflite"
    factory = f"{zoo.__file__}:cnn"
    assert main(["convert", factory, "--target", "litert", "--quantize", "int8-full", "--calibration", str(cal),
                 "--int8-io", "-o", str(out)]) == 0
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "args_0       int8[2,3,16,16] quantized: real = " in text and "all ops delegated" in text, text
    bad = tmp_path / "bad.pt"
    torch.save({"x": 1}, bad)
    assert main(["convert", factory, "--target", "litert", "--quantize", "int8-full", "--calibration", str(bad),
                 "-o", str(tmp_path / "x.tflite")]) == 2
    assert main(["convert", factory, "--target", "litert", "--quantize", "int8", "--int8-io",
                 "-o", str(tmp_path / "x.tflite")]) == 2
    err = capsys.readouterr().err
    assert "must hold a non-empty list of input sets" in err and "--int8-io apply to --quantize int8-full" in err
    assert not (tmp_path / "x.tflite").exists()


def test_validate_int8_full_passes_by_task_agreement(net):
    model, args, _, _, _ = net
    report = validate(model, args, targets=("litert",), num_random_inputs=1, localize=False,
                      target_options={"litert": {"quantize": "int8-full", "int8_io": True}})
    result = report.targets[0]
    assert result.precision == "int8" and report.passed, report.to_markdown()
    assert {c.error.mode for c in result.comparisons} == {"top1"}


def test_gemma2_zero_weight_channel_and_soft_cap():
    """transformers' Gemma2 ties its head to the embedding, whose padding row is zeros: that output channel's
    weight scale of 1, next to the others' ~1e-4, crashed XNNPACK's int8 FULLY_CONNECTED (a double free that
    ended the process); it now takes the largest other channel's scale. Its logits are soft-capped,
    ``30 * tanh(x / 30)``: an int8 TANH (output scale 1/128) left them a few values 30/128 apart (3.7 dB SNR);
    a TANH whose range spans few of those codes stays float32."""
    pytest.importorskip("transformers")
    from converter.api import convert
    from examples.transformers_sweep import build as family

    model, args, _ = family("gemma2")
    art = convert(model, args, target="litert", quantize="int8-full")
    with torch.no_grad():
        want = model(*args).numpy()
    assert snr_db(art(*args).numpy(), want) >= 20


class TinyPlusMask(nn.Module):
    """Scores of range ~1e-6 plus a mask (zeros: scale 1/255), as MobileBERT's attention computes them."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.tanh(self.lin(x)) * 1e-6 + mask, -1)


def test_an_add_rescaling_a_million_fold_stays_float():
    """An int8 ADD's output multiplier (``2 * input scale / (2**20 * output scale)``) must stay below 1: the mask's
    scale 1/255 over the sum's ~4e-9 aborted the interpreter (transformers' MobileBERT). Such an op stays float32."""
    torch.manual_seed(0)
    model, args = TinyPlusMask().eval(), (torch.randn(2, 8), torch.zeros(2, 8))
    art = build(prepare(model, args, target="litert"), quantize="int8-full")
    assert ("ADD", [np.dtype(np.float32)] * 2) in [(op, ins) for op, ins, _ in _ops(art)], _ops(art)
    with torch.no_grad():
        want = model(*args).numpy()
    assert snr_db(art(*args).numpy(), want) >= 30

"""Low-precision LiteRT artifacts: ``quantize="fp16"`` (float16 weights + DEQUANTIZE) and
``quantize="int8"`` (dynamic-range int8 weights, per-channel scales, hybrid kernels).

Each model is captured and lowered once; the three artifacts are built from that program.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

import examples.models as zoo
from converter.api import prepare
from converter.cli.main import main
from converter.errors import InputError
from exporters.litert import build
from validators.parity import validate


class WideMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2),
                                      nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1, groups=64), nn.ReLU())
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


def _models() -> dict:
    torch.manual_seed(0)
    return {"mlp": (WideMLP().eval(), (torch.randn(8, 64),)), "cnn": (ConvNet().eval(), (torch.randn(2, 3, 16, 16),))}


#: file size relative to float32: (fp16 at most, int8 at most)
MAX_RATIO = {"mlp": (0.52, 0.28), "cnn": (0.55, 0.32)}


@pytest.fixture(scope="module")
def arts() -> dict:
    out = {}
    for name, (model, args) in _models().items():
        program = prepare(model, args, target="litert")
        out[name] = (model, args, {q: build(program, quantize=q) for q in ("fp32", "fp16", "int8")})
    return out


def snr_db(got: np.ndarray, want: np.ndarray) -> float:
    want = want.astype(np.float64)
    return float(10 * np.log10(np.sum(want ** 2) / max(np.sum((got.astype(np.float64) - want) ** 2), 1e-30)))


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_quantized_size_precision_and_accuracy(arts, name):
    model, args, by_mode = arts[name]
    fp32, fp16, int8 = by_mode["fp32"], by_mode["fp16"], by_mode["int8"]
    assert (fp32.precision, fp16.precision, int8.precision) == ("fp32", "fp16", "int8")
    max16, max8 = MAX_RATIO[name]
    assert fp16.size <= max16 * fp32.size and int8.size <= max8 * fp32.size, (fp32.size, fp16.size, int8.size)
    assert fp16.ops["DEQUANTIZE"] > 0 and int8.ops["DEQUANTIZE"] == 0
    assert {op: n for op, n in int8.ops.items()} == {op: n for op, n in fp32.ops.items()}
    x = torch.randn_like(args[0])
    with torch.no_grad():
        want = model(x).numpy()
    assert snr_db(fp16(x).numpy(), want) >= 55
    assert snr_db(int8(x).numpy(), want) >= 30
    assert "int8 dynamic-range" in " ".join(int8.notes) and "fp16 weights" in " ".join(fp16.notes)


def test_int8_weights_are_per_channel_symmetric(arts):
    details = arts["cnn"][2]["int8"].interpreter().get_tensor_details()
    # (the hybrid kernels' own scratch tensors for the quantized inputs carry no scales)
    quantized = [d for d in details if d["dtype"] == np.int8 and len(d["quantization_parameters"]["scales"])]
    # conv 32, conv 64, linear 10: one scale per output channel; the depthwise filter stays float32
    found = sorted((len(d["quantization_parameters"]["scales"]), int(d["quantization_parameters"]["quantized_dimension"]))
                   for d in quantized)
    assert found == [(10, 0), (32, 0), (64, 0)], found
    assert any(d["dtype"] == np.float32 and tuple(d["shape"]) == (1, 3, 3, 64) for d in details)
    assert all(not d["quantization_parameters"]["zero_points"].any() for d in quantized)
    halves = [d for d in arts["cnn"][2]["fp16"].interpreter().get_tensor_details() if d["dtype"] == np.float16]
    assert len(halves) == arts["cnn"][2]["fp16"].ops["DEQUANTIZE"] >= 4


def test_unknown_quantize_mode_is_an_input_error():
    program = prepare(*zoo.mlp(), target="litert")
    with pytest.raises(InputError, match="unknown LiteRT quantize mode 'int4'"):
        build(program, quantize="int4")
    with pytest.raises(InputError, match="target_options name targets"):
        validate(*zoo.mlp(), targets=("tpu",), target_options={"litert": {"quantize": "int8"}})


@pytest.mark.parametrize("mode", ["int8", "fp16"])
def test_validate_quantized_litert_passes_by_task_agreement(arts, mode):
    model, args, _ = arts["mlp"]
    report = validate(model, args, targets=("litert",), target_options={"litert": {"quantize": mode}},
                      num_random_inputs=1, localize=False)
    result = report.targets[0]
    assert result.precision == mode and report.passed, report.to_markdown()
    assert {c.error.mode for c in result.comparisons} == {"top1"}


def test_cli_convert_quantize_and_inspect(tmp_path, capsys):
    out = tmp_path / "mlp_int8.tflite"
    factory = f"{zoo.__file__}:mlp"
    assert main(["convert", factory, "--target", "litert", "--quantize", "int8", "-o", str(out)]) == 0
    assert main(["inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "weights by dtype: int8" in text and "quantized per channel" in text, text
    assert main(["convert", factory, "--target", "stablehlo", "--quantize", "int8", "-o", str(tmp_path / "s")]) == 2
    assert "--quantize applies to --target litert" in capsys.readouterr().err

"""bfloat16 models through ONNX and LiteRT, which both compute bfloat16 as float32 (``exporters/onnx/graph.py``,
``exporters/litert/emitter.py``): a bfloat16 minGPT within bfloat16's rounding of PyTorch, and the ops that read a
bfloat16 value's bits (``signbit``, ``topk`` and ``sort``'s order keys; values without ties, whose order is the
CPU's nth_element's) or select int16 values (ONNX Runtime's ``Where`` has no int16 kernel), exact; and a float16
model through LiteRT, which computes float16 as float32 as well."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import examples.models as zoo
from converter.api import build, convert
from tests.targets import one_capture

TARGETS = ["onnx", "litert"]
#: one worker: each model's capture serves both targets
pytestmark = pytest.mark.xdist_group("exporter-bfloat16")


class _Bits(nn.Module):
    def forward(self, x):
        values, indices = torch.topk(x, 3)
        x16 = x.clamp(-1000, 1000)  # (float → int out of range is undefined in C++: the CPU and XLA differ)
        small = torch.where(x > 0, x16.to(torch.int16), (x16 * 2).to(torch.int16))
        return (torch.signbit(x), values, indices, torch.sort(x, descending=True, stable=True)[1], small,
                torch.fmod(x16, 1.5), x.amax(-1), -x)


def _bits_input():
    return torch.tensor([[0.5, -0.0, 0.0, -2.5, 3.0, 7.0, -126.0, 1e-3],
                         [1.0, 2.0, 3.0, 2.5, 1.5, -1.0, -5.0, float("-inf")]], dtype=torch.bfloat16)


@one_capture
def _bits():
    return _Bits().eval(), (_bits_input(),)


@pytest.mark.parametrize("target", TARGETS)
def test_bits_order_keys_and_int16_selects_of_bfloat16_values_are_exact(target):
    x = _bits_input()
    got, want = build(_bits(), target=target)(x), _Bits()(x)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and torch.equal(g, w), f"output {i}: {g} vs {w}"


@one_capture
def _mingpt():
    model, (ids,) = zoo.mingpt()
    return model.to(torch.bfloat16).eval(), (ids,)


@pytest.mark.parametrize("target", TARGETS)
def test_a_bfloat16_mingpt_stays_within_bfloat16_rounding(target):
    model, (ids,) = zoo.mingpt()
    model = model.to(torch.bfloat16).eval()
    with torch.no_grad():
        want = model(ids)
        reference = model.float()(ids)
    got = build(_mingpt(), target=target)(ids)
    got, want, reference = (v[0] if isinstance(v, (tuple, list)) else v for v in (got, want, reference))
    assert got.dtype == torch.bfloat16
    bound = 2 * (want.float() - reference).abs().max() + 1e-2 * reference.abs().max()
    assert (got.float() - reference).abs().max() <= bound


def test_a_float16_cnn_runs_in_litert():
    """TFLite's CONV_2D and BATCH_MATMUL refuse float16 activations (the file failed in the interpreter): LiteRT
    computes float16 as float32 too, the artifact casting its inputs and outputs."""
    model, (images,) = zoo.cnn()
    model, images = model.half().eval(), images.half()
    with torch.no_grad():
        want = model(images)
    got = convert(model, (images,), target="litert")(images)
    assert got.dtype == torch.float16
    assert (got.float() - want.float()).abs().max() <= 2e-3 * want.float().abs().max()

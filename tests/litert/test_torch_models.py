"""End to end: PyTorch model → capture → passes → lowering (target "litert") → our
flatbuffer → LiteRT Interpreter, compared with PyTorch fp32 (max rel error 1e-4).

One conversion per model (module-scoped fixtures). A conversion failure is kept and
re-raised by the tests that need it, so a test fails with the exporter's own message.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from converter.api import convert
from converter.capture import capture
from converter.lowering import lower
from converter.passes import run_passes
from examples import models as zoo
from exporters.litert import build
from tests.litert.conftest import REL_TOL, outputs, rel_error


class SdpaBlock(nn.Module):
    """Pre-norm transformer block: LayerNorm, fused qkv, causal SDPA, GELU MLP."""

    def __init__(self, d: int = 32, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = [z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v)]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return F.softmax(x + self.fc2(F.gelu(self.fc1(self.ln2(x)))), dim=-1)


def sdpa_block() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return SdpaBlock().eval(), (torch.randn(2, 8, 32),)


MODELS = {"mlp": zoo.mlp, "cnn": zoo.cnn, "mobilenet": zoo.mobilenet, "unet": zoo.unet,
          "sdpa_block": sdpa_block, "mingpt": zoo.mingpt}
#: Op expectations per model: what good mobile code looks like.
EXPECT = {
    "mlp": {"FULLY_CONNECTED": 2, "GELU": 1, "TRANSPOSE": 0},
    "cnn": {"CONV_2D": 2, "MAX_POOL_2D": 1, "TRANSPOSE": 1, "RELU": 0, "ADD": 0, "MUL": 0},
    "mobilenet": {"DEPTHWISE_CONV_2D": 3, "TRANSPOSE": 1, "RELU6": 0, "MINIMUM": 0, "MUL": 0},
    "unet": {"TRANSPOSE": 2, "TRANSPOSE_CONV": 1, "RESIZE_BILINEAR": 1},
    "sdpa_block": {"BATCH_MATMUL": 2, "SOFTMAX": 2, "GELU": 1, "FULLY_CONNECTED": 4},
    "mingpt": {"GATHER": 1, "STABLEHLO_SORT": 0},  # positions are constant: their lookup folds
}


def lowered(model: nn.Module, args: tuple, dynamic_shapes: Any = None):
    ep = capture(model, args, dynamic_shapes=dynamic_shapes)
    ep, _ = run_passes(ep, inference=True)
    return lower(ep, target="litert")


class Converted:
    """A model, its sample inputs and its LiteRT artifact (or the conversion error)."""

    def __init__(self, name: str):
        self.model, self.args = MODELS[name]()
        try:
            self.art, self.error = convert(self.model, self.args, target="litert"), None
        except Exception as e:  # re-raised by each test that needs the artifact
            self.art, self.error = None, e

    def artifact(self):
        if self.error is not None:
            raise self.error
        return self.art


@pytest.fixture(scope="module")
def converted() -> dict[str, Converted]:
    return {}


def _get(cache: dict, name: str) -> Converted:
    if name not in cache:
        cache[name] = Converted(name)
    return cache[name]


@pytest.mark.parametrize("name", list(MODELS))
def test_torch_model_matches_pytorch(converted, name):
    c = _get(converted, name)
    art = c.artifact()
    with torch.no_grad():
        want = outputs(c.model(*c.args))
    got = art(*c.args)
    assert isinstance(got if not isinstance(got, tuple) else got[0], torch.Tensor)
    for g, w in zip(outputs(got), want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert rel_error(g, w) <= REL_TOL
    for op, count in EXPECT[name].items():
        assert art.ops[op] == count, f"{name}: {op} ×{art.ops[op]}, expected {count}; ops {dict(art.ops)}"


def test_torch_cnn_channels_last_io_has_no_transpose(converted):
    c = _get(converted, "mobilenet")
    art = build(lowered(c.model, c.args), channels_last_io=True)
    assert art.ops["TRANSPOSE"] == 0
    with torch.no_grad():
        want = c.model(*c.args)
    assert rel_error(outputs(art(*c.args))[0], want.numpy()) <= REL_TOL
    nhwc = c.args[0].permute(0, 2, 3, 1).numpy()
    assert rel_error(art.run_raw(nhwc)[0], want.numpy()) <= REL_TOL


def test_torch_mingpt_int64_ids_and_dynamic_batch_and_length():
    model, (ids,) = zoo.mingpt()
    batch, seq = Dim("batch", max=8), Dim("seq", min=2, max=15)
    art = build(lowered(model, (ids,), {"idx": {0: batch, 1: seq}}))
    assert art.interpreter().get_input_details()[0]["dtype"] == ids.numpy().dtype
    for shape in [(2, 8), (3, 5), (1, 12)]:
        x = torch.randint(0, 64, shape)
        with torch.no_grad():
            want = model(x)
        assert rel_error(outputs(art(x))[0], want.numpy()) <= REL_TOL, shape
    assert any("int64" in n for n in art.notes)


def test_torch_prefill_decode_signatures_share_weights():
    model, (ids,) = zoo.mingpt()
    prefill = lowered(model, (ids,))
    decode = lowered(model, (ids[:, :1],))
    both = build(signatures={"prefill": prefill, "decode": decode})
    single = build(prefill)
    assert both.signatures == ["prefill", "decode"]
    weights = sum(p.numel() * 4 for p in model.parameters())
    assert both.size - single.size < weights / 2  # the second signature adds graph, not weights
    for sig, x in (("prefill", ids), ("decode", ids[:, :1])):
        with torch.no_grad():
            want = model(x)
        assert rel_error(outputs(both(x, signature=sig))[0], want.numpy()) <= REL_TOL


def test_torch_export_is_byte_identical_twice(converted):
    c = _get(converted, "cnn")
    again = convert(c.model, c.args, target="litert")
    assert again.to_bytes() == c.artifact().to_bytes()

"""End to end: PyTorch model → capture → passes → lowering (target "litert") → our
flatbuffer → LiteRT Interpreter, compared with PyTorch fp32 (max rel error 1e-4).

Every model family of ``examples/models.py`` is validated on LiteRT (with its op
counts) by ``tests/models/test_families.py`` through ``tpu-export validate``; here are
a transformer block built for LiteRT's fused ops, and the LiteRT-only options:
NHWC I/O, dynamic batch and length, two signatures sharing weights, determinism.
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


#: Op expectations: what good mobile code looks like.
SDPA_BLOCK_OPS = {"BATCH_MATMUL": 2, "SOFTMAX": 2, "GELU": 1, "FULLY_CONNECTED": 4}


def lowered(model: nn.Module, args: tuple, dynamic_shapes: Any = None):
    ep = capture(model, args, dynamic_shapes=dynamic_shapes)
    ep, _ = run_passes(ep, inference=True)
    return lower(ep, target="litert")


def test_torch_sdpa_block_matches_pytorch():
    model, args = sdpa_block()
    art = convert(model, args, target="litert")
    with torch.no_grad():
        want = outputs(model(*args))
    got = art(*args)
    assert isinstance(got if not isinstance(got, tuple) else got[0], torch.Tensor)
    for g, w in zip(outputs(got), want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert rel_error(g, w) <= REL_TOL
    for op, count in SDPA_BLOCK_OPS.items():
        assert art.ops[op] == count, f"{op} ×{art.ops[op]}, expected {count}; ops {dict(art.ops)}"


def test_torch_cnn_channels_last_io_has_no_transpose():
    model, args = zoo.mobilenet()
    art = build(lowered(model, args), channels_last_io=True)
    assert art.ops["TRANSPOSE"] == 0
    with torch.no_grad():
        want = model(*args)
    assert rel_error(outputs(art(*args))[0], want.numpy()) <= REL_TOL
    nhwc = args[0].permute(0, 2, 3, 1).numpy()
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


def test_torch_export_is_byte_identical_twice():
    model, args = zoo.cnn()
    first = convert(model, args, target="litert")
    again = convert(model, args, target="litert")
    assert again.to_bytes() == first.to_bytes()


class NormAttention(nn.Module):
    """GroupNorm with a trained-looking affine on NHWC convs, then packed-QKV multi-head attention."""

    def __init__(self, c: int = 8, d: int = 16):
        super().__init__()
        self.conv = nn.Conv2d(3, c, 3, padding=1)
        self.norm = nn.GroupNorm(2, c)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        with torch.no_grad():  # not the ones / zeros the exporter leaves out
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.conv(x)).flatten(2)  # (N, C, HW)
        return self.attn(h, h, h, need_weights=False)[0]


def test_torch_group_norm_affine_and_packed_qkv_attention():
    torch.manual_seed(0)
    model, args = NormAttention().eval(), (torch.randn(2, 3, 4, 4),)
    art = convert(model, args, target="litert")
    with torch.no_grad():
        want = model(*args)
    assert rel_error(outputs(art(*args))[0], want.numpy()) <= REL_TOL
    # group statistics are one FULLY_CONNECTED each, the packed projection splits into Q/K/V
    # FULLY_CONNECTEDs (no SLICE), the query scale folds into Q's weights (MUL: d², w·rsqrt, d·r)
    assert art.ops["SLICE"] == 0 and art.ops["MEAN"] == 2, dict(art.ops)
    assert art.ops["FULLY_CONNECTED"] == 2 + 3 + 1 and art.ops["MUL"] == 3, dict(art.ops)


class StatefulLSTM(nn.Module):
    """Sequence-first bidirectional LSTM with projections, fed its initial state."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(3, 5, num_layers=2, proj_size=2, bidirectional=True)

    def forward(self, x, h0, c0):
        y, (h, c) = self.rnn(x, (h0, c0))
        return y, h, c


@pytest.mark.filterwarnings("ignore:The tensor attributes self.rnn._flat_weights:UserWarning")
@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN:UserWarning")
def test_torch_lstm_kept_whole_runs_with_dynamic_batch():
    torch.manual_seed(0)
    model = StatefulLSTM().eval()
    args = (torch.randn(4, 2, 3), torch.randn(4, 2, 2), torch.randn(4, 2, 5))
    batch = Dim("batch", max=8)
    art = build(lowered(model, args, {"x": {1: batch}, "h0": {1: batch}, "c0": {1: batch}}))
    for b in (2, 5):
        x, h0, c0 = torch.randn(4, b, 3), torch.randn(4, b, 2), torch.randn(4, b, 5)
        with torch.no_grad():
            want = outputs(model(x, h0, c0))
        got = outputs(art(x, h0, c0))
        assert len(got) == 3 and all(rel_error(g, w) <= REL_TOL for g, w in zip(got, want)), b
    # the reverse direction walks the steps backwards instead of reversing the sequence
    assert art.ops["REVERSE_V2"] == 0 and art.ops["TRANSPOSE"] == 0, dict(art.ops)

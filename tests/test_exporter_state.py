"""A model that writes its buffers in place (an in-place KV cache) behaves the same on every target, call after
call (``converter/lowering/stateful.py``): ONNX and LiteRT files take the buffers as inputs after the model's own
and return their new values after its outputs, the artifact carries them; a StableHLO module returns the new values
and the artifact writes them into its weights. Before, those three formats computed every call with the buffers'
converted values."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from converter import convert
from converter.api import prepare
from exporters.litert import LiteRTArtifact
from exporters.litert import build as build_litert
from exporters.onnx import OnnxArtifact
from exporters.stablehlo import load

TARGETS = ("tpu", "stablehlo", "onnx", "litert")


class _CachedAttention(nn.Module):
    """One attention head over an in-place KV cache: ``forward(x, pos)`` writes ``x``'s keys and values at
    positions ``pos`` and attends over the positions written so far."""

    def __init__(self, dim: int = 8, slots: int = 6):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.register_buffer("keys", torch.zeros(slots, dim))
        self.register_buffer("values", torch.zeros(slots, dim))
        self.register_buffer("filled", torch.zeros(slots))

    def forward(self, x, pos):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        self.keys.index_copy_(0, pos, k)
        self.values.index_copy_(0, pos, v)
        self.filled.index_fill_(0, pos, 1.0)
        scores = (q @ self.keys.T).masked_fill(self.filled == 0, float("-inf"))
        return scores.softmax(-1) @ self.values


def _model():
    torch.manual_seed(0)
    return _CachedAttention().eval()


def _steps():
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(1, 8, generator=g), torch.tensor([i])) for i in range(4)]


def _np(x):
    return torch.as_tensor(np.asarray(x))


@pytest.fixture(scope="module")
def expected():
    """PyTorch's outputs over the decode steps (each step sees the cache the earlier ones wrote)."""
    model = _model()
    with torch.no_grad():
        return [model(x, p) for x, p in _steps()]


@pytest.mark.parametrize("target", TARGETS)
def test_decoding_with_an_in_place_cache_matches_pytorch(target, expected, tmp_path):
    x0, p0 = _steps()[0]
    art = convert(_model(), (x0, p0), target=target)
    for (x, p), want in zip(_steps(), expected):
        torch.testing.assert_close(_np(art(x, p)), want, rtol=1e-5, atol=1e-6)
    if target == "tpu":
        return
    assert any("writes in place" in n for n in art.notes)
    if target == "stablehlo":  # the module's outputs carry the new values; a reloaded one writes them too
        art.save(tmp_path / "m")
        assert json.loads((tmp_path / "m" / "signature.json").read_text())["mutated_buffers"] == [
            "keys", "values", "filled"]
        fresh = convert(_model(), (x0, p0), target=target)
        fresh.save(tmp_path / "fresh")
        loaded = load(tmp_path / "fresh")
        for (x, p), want in zip(_steps(), expected):
            torch.testing.assert_close(_np(loaded(x, p)), want, rtol=1e-5, atol=1e-6)
        return
    art.reset_state()  # starts over from the converted (zero) cache
    torch.testing.assert_close(_np(art(x0, p0)), expected[0], rtol=1e-5, atol=1e-6)
    # the file alone: the buffers are inputs after the model's own, their new values outputs after its own
    cls = OnnxArtifact if target == "onnx" else LiteRTArtifact
    loaded = cls.load(art.save(tmp_path / f"m.{target}"))
    state = [torch.zeros(6, 8), torch.zeros(6, 8), torch.zeros(6)]
    for (x, p), want in zip(_steps(), expected):
        out, *state = loaded(x, p, *state)
        torch.testing.assert_close(_np(out), want, rtol=1e-5, atol=1e-6)


def test_litert_signatures_of_one_model_share_its_cache(expected):
    # a prefill signature writes two positions, the decode signature continues from them (one KV cache)
    model = _model()
    (x0, p0), (x1, p1), (x2, p2), _ = _steps()
    prefill = prepare(model, (torch.cat([x0, x1]), torch.cat([p0, p1])), target="litert")
    decode = prepare(model, (x2, p2), target="litert")
    art = build_litert(signatures={"prefill": prefill, "decode": decode})
    art(torch.cat([x0, x1]), torch.cat([p0, p1]), signature="prefill")
    torch.testing.assert_close(_np(art(x2, p2, signature="decode")), expected[2], rtol=1e-5, atol=1e-6)

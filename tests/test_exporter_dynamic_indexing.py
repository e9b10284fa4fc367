"""Dynamic dims through indexing that transformers encoders and routers use: a gather along a dynamic batch (RoBERTa's
position ids; ``topk`` values), a position buffer sliced to a dynamic length (DistilBERT), a tensor repeated a
dynamic number of times (BLOOM's ALiBi bias), exported with ``dynamic_shapes`` and run at several sizes against
PyTorch; a channels-last global pool with a dynamic batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.export import Dim

from converter import convert


class _Indexing(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("positions", torch.arange(64.0)[None, :, None])

    def forward(self, x, idx):
        picked = torch.gather(x, 1, idx)  # a gather whose batch dim is dynamic (lax batching dims)
        top = torch.topk(x, 2, dim=-1).values
        tiled = self.positions[:, :3, 0].repeat(x.shape[0], 2)  # repeats that are a dynamic dim
        return picked + top.sum(-1, keepdim=True), x + self.positions[:, : x.shape[1], 0], tiled  # (x.shape[1] <= 64)


@pytest.mark.parametrize("target", ["stablehlo", "onnx", "litert"])
def test_indexing_with_dynamic_batch_and_length(target):
    batch, length = Dim("batch", max=8), Dim("length", min=2, max=32)
    g = torch.Generator().manual_seed(0)
    x, idx = torch.randn(2, 6, generator=g), torch.randint(0, 6, (2, 3), generator=g)
    art = convert(_Indexing().eval(), (x, idx), target=target,
                  dynamic_shapes=({0: batch, 1: length}, {0: batch}))
    for b, n in ((1, 4), (3, 9)):
        x, idx = torch.randn(b, n, generator=g), torch.randint(0, n, (b, 3), generator=g)
        for got, want in zip(art(x, idx), _Indexing()(x, idx), strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), want, rtol=1e-6, atol=1e-6)


class _ChannelsLastPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(1)

    def forward(self, x):
        return self.pool(self.conv(x)).flatten(1)


@pytest.mark.parametrize("target", ["stablehlo", "onnx", "litert"])
def test_a_channels_last_global_pool_with_a_dynamic_batch(target):
    # a channels-last model's global pool (timm's ConvNeXt) captures as mean(keepdim) then as_strided re-striding the
    # size-1 dims, with the batch dynamic: a reshape (as_strided had needed static sizes)
    model = _ChannelsLastPool().eval().to(memory_format=torch.channels_last)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 4, 4, generator=g).to(memory_format=torch.channels_last)
    art = convert(model, (x,), target=target, dynamic_shapes=({0: Dim("batch", max=8)},))
    for b in (1, 3):
        x = torch.randn(b, 3, 4, 4, generator=g).to(memory_format=torch.channels_last)
        torch.testing.assert_close(torch.as_tensor(np.asarray(art(x))), model(x), rtol=1e-6, atol=1e-6)

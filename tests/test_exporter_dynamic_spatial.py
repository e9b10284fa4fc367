"""Strided and adaptive pooling and transposed convolutions over dynamic spatial dims: a CNN's ``max_pool2d(3, 2,
1)`` and average pools over a dynamic image size and 1-d pools over a dynamic length; a classifier head's adaptive
average and max pools to a fixed size (VGG's ``AdaptiveAvgPool2d((7, 7))``); a decoder's transposed convolutions
(padded, grouped, dilated, 1-d and 2-d) and a constant ``index_select`` along a dynamic dim; each exported with
``dynamic_shapes`` and run at other sizes against PyTorch on every target."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from converter.api import build
from tests.targets import ALL, one_capture

#: one worker: each model's capture serves every target
pytestmark = pytest.mark.xdist_group("exporter-dynamic-spatial")


class _Pools(nn.Module):
    def forward(self, image, line):
        return (F.max_pool2d(image, 3, 2, 1), F.avg_pool2d(image, 3, 2, 1, count_include_pad=False),
                F.avg_pool2d(image, 2), F.max_pool1d(line, 4, 3), F.max_pool1d(line, 3, 2, 1),
                F.avg_pool1d(line, 3, 2, 1))


@one_capture
def _pools():
    image = {2: Dim("H", min=6, max=64), 3: Dim("W", min=6, max=64)}
    return _Pools(), (torch.randn(2, 3, 8, 10), torch.randn(2, 4, 12)), (image, {2: Dim("L", min=7, max=64)})


@pytest.mark.parametrize("target", ALL)
def test_strided_pools_over_a_dynamic_image_size_and_length(target):
    # The lowering's high padding depended on the size: "Symbolic dimension comparison ... is inconclusive" in
    # every file target. max_pool1d's C++ entry made torch.export specialize the length ("Constraints violated").
    art = build(_pools(), target=target)
    for h, w, n in ((7, 9, 7), (16, 6, 31), (64, 11, 64)):
        g = torch.Generator().manual_seed(h * w * n)
        x, line = torch.randn(2, 3, h, w, generator=g), torch.randn(2, 4, n, generator=g)
        for got, want in zip(art(x, line), _Pools()(x, line), strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), want, rtol=1e-6, atol=1e-6)


class _Adaptive(nn.Module):
    def forward(self, image, line):
        return (F.adaptive_avg_pool2d(image, (7, 3)), F.adaptive_max_pool2d(image, (3, 2)),
                F.adaptive_avg_pool1d(line, 4), F.adaptive_max_pool1d(line, 1))


@one_capture
def _adaptive():
    image = {2: Dim("H", min=2, max=64), 3: Dim("W", min=2, max=64)}
    return _Adaptive(), (torch.randn(2, 3, 8, 10), torch.randn(2, 4, 12)), (image, {2: Dim("L", min=2, max=64)})


@pytest.mark.parametrize("target", ALL)
def test_adaptive_pools_to_a_fixed_size_over_dynamic_sizes(target):
    # refused: "adaptive pooling needs static spatial sizes" (output sizes above 1)
    art = build(_adaptive(), target=target)
    for h, w, n in ((2, 9, 3), (16, 5, 31), (61, 64, 64)):
        g = torch.Generator().manual_seed(h * w * n)
        x, line = torch.randn(2, 3, h, w, generator=g), torch.randn(2, 4, n, generator=g)
        for got, want in zip(art(x, line), _Adaptive()(x, line), strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), want, rtol=1e-5, atol=1e-6)


class _Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.grouped = nn.ConvTranspose2d(4, 4, 4, stride=2, padding=1, groups=2)
        self.dilated = nn.ConvTranspose2d(3, 2, 3, stride=2, padding=2, dilation=2)
        self.line = nn.ConvTranspose1d(4, 2, 3, stride=3, padding=2)

    def forward(self, image, line):
        return (self.grouped(self.up(image)), self.dilated(image), self.line(line),
                line.index_select(-1, torch.tensor([0, 2, 5])))


@one_capture
def _decoder():
    image = {2: Dim("H", min=6, max=64), 3: Dim("W", min=6, max=64)}
    return _Decoder().eval(), (torch.randn(2, 3, 8, 10), torch.randn(2, 4, 12)), (image, {2: Dim("L", min=7, max=64)})


@pytest.mark.parametrize("target", ALL)
def test_transposed_convolutions_and_a_constant_index_over_dynamic_sizes(target):
    # LiteRT: the crop after TRANSPOSE_CONV was a SLICE whose size is the dynamic one, and the constant index's
    # clamp read the dynamic bound as a number ("Symbolic dimension ... used in a context that requires a constant")
    model = _Decoder().eval()
    art = build(_decoder(), target=target)
    for h, w, n in ((7, 9, 7), (16, 6, 31)):
        g = torch.Generator().manual_seed(h * w * n)
        x, line = torch.randn(2, 3, h, w, generator=g), torch.randn(2, 4, n, generator=g)
        with torch.no_grad():
            want = model(x, line)
        for got, expected in zip(art(x, line), want, strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), expected, rtol=1e-5, atol=1e-5)

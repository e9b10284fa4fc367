"""Strided pooling over dynamic spatial dims: a CNN's ``max_pool2d(3, 2, 1)`` and average pools over a dynamic
image size, and 1-d pools over a dynamic length, exported with ``dynamic_shapes`` and run at other sizes against
PyTorch on every target."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from converter.api import build
from tests.targets import ALL, one_capture

#: one worker: the model's capture serves every target
pytestmark = pytest.mark.xdist_group("exporter-dynamic-pooling")


class _Pools(nn.Module):
    def forward(self, image, line):
        return (F.max_pool2d(image, 3, 2, 1), F.avg_pool2d(image, 3, 2, 1, count_include_pad=False),
                F.avg_pool2d(image, 2), F.max_pool1d(line, 4, 3), F.max_pool1d(line, 3, 2, 1), F.avg_pool1d(line, 3, 2, 1))


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

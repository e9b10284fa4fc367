"""Strided and adaptive pooling and transposed convolutions over dynamic spatial dims: a CNN's ``max_pool2d(3, 2,
1)`` and average pools over a dynamic image size and 1-d pools over a dynamic length; a classifier head's adaptive
average and max pools to a fixed size (VGG's ``AdaptiveAvgPool2d((7, 7))``); a decoder's transposed convolutions
(padded, grouped, dilated, 1-d and 2-d) and a constant ``index_select`` along a dynamic dim; each exported with
``dynamic_shapes`` and run at other sizes against PyTorch on every target."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from converter.api import build
from tests.targets import (ALL, assert_image_and_line_match, image_and_line, image_and_line_sample,
                           one_capture)

#: one worker: each model's capture serves every target
pytestmark = pytest.mark.xdist_group("exporter-dynamic-spatial")


class _Pools(nn.Module):
    def forward(self, image, line):
        return (F.max_pool2d(image, 3, 2, 1), F.avg_pool2d(image, 3, 2, 1, count_include_pad=False),
                F.avg_pool2d(image, 2), F.max_pool1d(line, 4, 3), F.max_pool1d(line, 3, 2, 1),
                F.avg_pool1d(line, 3, 2, 1))


@one_capture
def _pools():
    return _Pools(), image_and_line_sample(), image_and_line((6, 64), (7, 64))


@pytest.mark.parametrize("target", ALL)
def test_strided_pools_over_a_dynamic_image_size_and_length(target):
    # The lowering's high padding depended on the size: "Symbolic dimension comparison ... is inconclusive" in
    # every file target. max_pool1d's C++ entry made torch.export specialize the length ("Constraints violated").
    assert_image_and_line_match(build(_pools(), target=target), _Pools(), ((7, 9, 7), (16, 6, 31), (64, 11, 64)),
                                1e-6, 1e-6)


class _Adaptive(nn.Module):
    def forward(self, image, line):
        return (F.adaptive_avg_pool2d(image, (7, 3)), F.adaptive_max_pool2d(image, (3, 2)),
                F.adaptive_avg_pool1d(line, 4), F.adaptive_max_pool1d(line, 1))


@one_capture
def _adaptive():
    return _Adaptive(), image_and_line_sample(), image_and_line((2, 64), (2, 64))


@pytest.mark.parametrize("target", ALL)
def test_adaptive_pools_to_a_fixed_size_over_dynamic_sizes(target):
    # refused: "adaptive pooling needs static spatial sizes" (output sizes above 1)
    assert_image_and_line_match(build(_adaptive(), target=target), _Adaptive(),
                                ((2, 9, 3), (16, 5, 31), (61, 64, 64)), 1e-5, 1e-6)


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
    return _Decoder().eval(), image_and_line_sample(), image_and_line((6, 64), (7, 64))


@pytest.mark.parametrize("target", ALL)
def test_transposed_convolutions_and_a_constant_index_over_dynamic_sizes(target):
    # LiteRT: the crop after TRANSPOSE_CONV was a SLICE whose size is the dynamic one, and the constant index's
    # clamp read the dynamic bound as a number ("Symbolic dimension ... used in a context that requires a constant")
    assert_image_and_line_match(build(_decoder(), target=target), _Decoder().eval(), ((7, 9, 7), (16, 6, 31)),
                                1e-5, 1e-5)

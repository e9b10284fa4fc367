"""Resizing over dynamic spatial dims: ``F.interpolate`` in (bi)linear and nearest mode by a scale factor (2, 3,
1.5, 0.75, 0.5), with ``align_corners``, and to a fixed size, on a dynamic image size (a segmentation or detection
decoder exported for any image size), and the 1-d nearest and linear modes over a dynamic length, exported with ``dynamic_shapes`` and run
at other sizes against PyTorch on every target; a bicubic resize, whose sizes torch computes with float arithmetic,
and a scale factor whose float64 size product rounds (1.7), are refused by name."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from converter.api import build
from tests.targets import (ALL, assert_image_and_line_match, image_and_line, image_and_line_sample,
                           one_capture)

#: one worker: the model's capture serves every target
pytestmark = pytest.mark.xdist_group("exporter-dynamic-resize")


class _Resizes(nn.Module):
    def forward(self, image, line):
        return (F.interpolate(image, scale_factor=2, mode="bilinear"),
                F.interpolate(image, scale_factor=3, mode="bilinear", align_corners=True),
                F.interpolate(image, size=(5, 7), mode="bilinear"), F.interpolate(image, size=(5, 7)),
                F.interpolate(image, scale_factor=(1.5, 0.5)), F.interpolate(image, scale_factor=0.75, mode="bilinear"),
                F.interpolate(line, scale_factor=2, mode="nearest"),
                F.interpolate(line, scale_factor=2, mode="linear", align_corners=True))


@one_capture
def _resizes():
    return _Resizes(), image_and_line_sample(), image_and_line((4, 64), (2, 64))  # (the 0.5 scale's output >= 2)


@pytest.mark.parametrize("target", ALL)
def test_linear_and_nearest_resizes_over_dynamic_sizes(target):
    # bilinear, nearest to a size or by a fractional factor refused a dynamic size ("dynamic spatial sizes are only
    # supported for nearest upsampling by an integer scale factor"); the 1-d modes, which torch decomposes with a
    # float scale (sym_float of the length), failed with "TypeError: float() argument must be a string or a real
    # number, not '_DimExpr'"
    assert_image_and_line_match(build(_resizes(), target=target), _Resizes(), ((5, 9, 2), (16, 5, 31), (64, 4, 64)),
                                1e-5, 1e-5)


class _Bicubic(nn.Module):
    def forward(self, image):
        return F.interpolate(image, scale_factor=2, mode="bicubic")  # (the line the error names)


def test_a_bicubic_resize_over_a_dynamic_size_is_refused_with_the_users_line():
    # (it failed with "TypeError: type DynamicJaxprTracer doesn't define __trunc__ method")
    import inspect

    from converter import convert
    from converter.errors import UnsupportedOpError

    lines, first = inspect.getsourcelines(_Bicubic.forward)
    line = first + next(i for i, text in enumerate(lines) if "(the line the error names)" in text)
    with pytest.raises(UnsupportedOpError, match=rf"unsupported op trunc for target 'onnx' at {re.escape(__file__)}:"
                                                 rf"{line} in forward, .*a size computed with float arithmetic on a "
                                                 r"dynamic dim"):
        convert(_Bicubic(), (torch.randn(1, 3, 8, 8),), target="onnx",
                dynamic_shapes=({2: Dim("H", min=2, max=64), 3: Dim("W", min=2, max=64)},))


def test_a_scale_factor_whose_size_product_rounds_is_refused_over_a_dynamic_size():
    # floor(10 * 1.7) is 17 in torch's float64 arithmetic, where the exact product is below 17
    from converter import convert
    from converter.errors import UnsupportedOpError

    class Resize(nn.Module):
        def forward(self, image):
            return F.interpolate(image, scale_factor=1.7, mode="bilinear")

    with pytest.raises(UnsupportedOpError, match=r"aten\.upsample_bilinear2d\.vec .*dynamic spatial sizes are "
                                                 r"supported .* by a scale factor that is a short binary fraction"):
        convert(Resize(), (torch.randn(1, 3, 8, 8),), target="onnx",
                dynamic_shapes=({2: Dim("H", min=2, max=64), 3: Dim("W", min=2, max=64)},))

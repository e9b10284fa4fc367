"""Derived dynamic dims (``2 * Dim("h")``, ``2 * h + 1``: what torch.export's "Suggested fixes" propose for a size
that must be even) and a dim shared by several inputs, through every target: exported, run at other sizes against
PyTorch, and a call whose sizes fit no value of the dim (an odd size, two sizes of one batch) refused by name, by
the built artifact and by a reloaded file."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.export import Dim

from converter.api import build
from converter.errors import InputError
from tests.targets import ALL, one_capture

#: one worker: the model's capture serves every target
pytestmark = pytest.mark.xdist_group("exporter-derived-dims")


class _Halves(nn.Module):
    def forward(self, image, line, rows):
        return (F.interpolate(F.max_pool2d(image, 2), scale_factor=2) - image, line[:, 1:] + line[:, :-1],
                torch.arange(line.shape[1]), rows * 3)


@one_capture
def _halves():
    h, w, batch = Dim("h", min=2, max=32), Dim("w", min=2, max=32), Dim("batch", max=8)
    sample = (torch.randn(2, 3, 8, 6), torch.randn(2, 9), torch.randn(2, 5))
    return _Halves(), sample, ({0: batch, 2: 2 * h, 3: 2 * w}, {1: 2 * h + 1}, {0: batch})


def _inputs(batch, h, w, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, 3, 2 * h, 2 * w, generator=g), torch.randn(2, 2 * h + 1, generator=g), \
        torch.randn(batch, 5, generator=g)


@pytest.mark.parametrize("target", ALL)
def test_derived_and_shared_dims_run_at_other_sizes_and_refuse_sizes_that_fit_no_dim(target, tmp_path):
    # ONNX and LiteRT refused the export ("dynamic dim '2*s39' of input x is not a plain symbol"); ONNX Runtime, the
    # LiteRT interpreter and the tpu target ran two batch sizes (and an odd size on the floor of h) without a word
    art = build(_halves(), target=target)
    for batch, h, w in ((1, 3, 7), (4, 16, 2)):
        args = _inputs(batch, h, w, seed=h * w)
        for got, want in zip(art(*args), _Halves()(*args), strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), want, rtol=1e-6, atol=1e-6)
    odd = (torch.randn(1, 3, 9, 4), torch.randn(2, 10), torch.randn(1, 5))
    two_h = (torch.randn(1, 3, 8, 4), torch.randn(2, 11), torch.randn(1, 5))
    two_batches = (torch.randn(2, 3, 8, 4), torch.randn(2, 9), torch.randn(3, 5))
    reloaded = [art]
    if target in ("onnx", "litert"):  # (a reloaded file checks them too)
        from exporters.litert.artifact import LiteRTArtifact
        from exporters.onnx.artifact import OnnxArtifact

        path = art.save(str(tmp_path / ("model.onnx" if target == "onnx" else "model.tflite")))
        reloaded.append((OnnxArtifact if target == "onnx" else LiteRTArtifact).load(path))
    for artifact in reloaded:
        for args, says in ((odd, r"size 9 at dim 2, where .* takes sizes 2\*d for a dynamic dim d"),
                           (two_h, r"size 11 at dim 1, where .* takes 2\*d \+ 1 for the dynamic dim d that input "
                                   r"'\w+' gives 2\*d = 8 at dim 2 \(d = 4\)"),
                           (two_batches, r"size 3 at dim 0, where .* takes d for the dynamic dim d that input '\w+' "
                                         r"gives d = 2 at dim 0")):
            # (a StableHLO module refuses them with jax.export's own words)
            with pytest.raises(InputError, match=says if target != "stablehlo" else "cannot take these input shapes"):
                artifact(*args)


class _SizeArithmetic(nn.Module):
    def forward(self, x):
        first, second = x.chunk(2, dim=1)  # (halves of a 2 * h length)
        return F.pad(x, (0, 0, 0, (8 - x.shape[1] % 8) % 8)), second - first  # (padded to a multiple of 8)


@one_capture
def _size_arithmetic():
    return _SizeArithmetic(), (torch.randn(2, 6, 3),), ({1: 2 * Dim("h", min=1, max=32)},)


@pytest.mark.parametrize("target", ALL)
def test_a_pad_to_a_multiple_and_halves_of_a_dynamic_length(target):
    # ONNX / LiteRT: the pad's size, a dim expression, was read as a number ("Symbolic dimension 'mod(...)' used in a
    # context that requires a constant"); every file target: chunk's split of a dynamic size ("'_DimExpr' object
    # cannot be interpreted as an integer")
    art = build(_size_arithmetic(), target=target)
    for n in (2, 16, 22, 64):
        x = torch.randn(2, n, 3, generator=torch.Generator().manual_seed(n))
        for got, want in zip(art(x), _SizeArithmetic()(x), strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), want, rtol=0, atol=0)

"""Torch ops an op-database sweep found broken in the ONNX target, converted whole and run in
ONNX Runtime: out-of-range scatter indices (dropped), zero-size reshapes, 64-bit constants
folded at export time, integer matmul and max pooling, complex operands (refused), and bfloat16/float8
inputs and outputs (run through OrtValues), integer shifts, Tensor.repeat,
cumulative products, logcumsumexp, cummax/cummin and mode, transposed convolutions padded past their kernel,
pools padded past theirs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from converter.api import convert
from converter.errors import UnsupportedOpError
from tests.ops.harness import FnModule

aten = torch.ops.aten

CASES = {
    # the bin of 5.0 (out of range) is an index past the end: its update is dropped
    "histc_out_of_range": (lambda x: torch.histc(x, bins=3, min=0, max=3), torch.tensor([0.5, 5.0])),
    "nonzero_static_overflow": (lambda x: torch.nonzero_static(x, size=2), torch.tensor([1, 1, 1])),
    "unsqueeze_empty": (lambda x: x.unsqueeze(0), torch.zeros(0, 2)),
    "reshape_to_zero_dims": (lambda x: x.reshape(3, 0, 2, 0), torch.zeros(3, 0)),
    "replication_pad1d_backward": (lambda g, x: aten.replication_pad1d_backward(g, x, [1, 2]), torch.ones(1, 1, 5),
                                   torch.ones(1, 1, 2)),
    "embedding_bag_padding_idx": (lambda i, w: F.embedding_bag(i, w, mode="mean", padding_idx=2),
                                  torch.tensor([[1, 2, 4], [2, 2, 2]]), torch.ones(10, 3)),
    "ndtri_float64_empty": (torch.special.ndtri, torch.zeros(0, 2, dtype=torch.float64)),
    # statically empty results are constants: ONNX Runtime's Expand to a 0 dim kept the 1, and the max / argmax /
    # median of an empty batch (a Gather of partial slices) was refused
    "empty_results": (lambda e, x: (x.expand(0, 4) + 1, e.max(-1)[0], e.argmax(-1), e.median(-1)[0], e.sum(0)),
                      torch.zeros(0, 4), torch.randn(1, 4)),
    "int_mm": (torch._int_mm, torch.arange(-1024, 1024).reshape(32, 64).to(torch.int8),
               torch.arange(1024).reshape(64, 16).to(torch.int8)),
    "max_pool1d_int64_with_indices": (lambda x: F.max_pool1d(x, 2, return_indices=True),
                                      torch.arange(8).flip(0).reshape(1, 1, 8)),
    # (jnp.signbit, an arithmetic shift of the float's bits: ONNX had no rule for it)
    "float_floor_division_and_copysign": (lambda a, b: (a // b, torch.div(a, b, rounding_mode="floor"),
                                                        torch.copysign(a, b)),
                                          torch.tensor([-7.5, 7.5, -0.0, 5.0, 0.0]),
                                          torch.tensor([2.0, -2.0, 3.0, -0.5, -1.0])),
    "int_shifts": (lambda a: (a << 3, a >> 1, a >> 40), torch.tensor([-5, 3, 7, -(2 ** 40)])),
    "repeat_and_tile": (lambda x: (x.repeat(2, 1, 3), torch.tile(x, (2,)), (x > 0).repeat(1, 2)), torch.randn(2, 4)),
    # ONNX has CumSum only: the other scans are log-step scans (values exact in float: powers of two)
    "cumulative_scans": (lambda x, i: (torch.cumprod(x, 1), torch.cumprod(i, 0), torch.logcumsumexp(x, 1),
                                       torch.logcumsumexp(x.flip(1), 1), *torch.mode(i, 1), *torch.cummax(x, 1),
                                       *torch.cummin(i, 1)),
                         torch.tensor([[0.5, -2.0, 1.0, 4.0, -0.25, 2.0, 1.0], [1.0, 0.5, 0.5, -1.0, 8.0, 0.0, 2.0]]),
                         torch.tensor([[2, -1, 3, 3, 0], [1, 1, -2, 4, 4]])),
    # stride-1 transposed convolutions padded past their kernel's reach: a Conv with negative padding (a crop)
    "conv_transpose_cropping": (lambda x, w, g: (F.conv_transpose2d(x, w, padding=3),
                                                 F.conv_transpose2d(x, g, padding=(1, 2), dilation=2, groups=2),
                                                 F.conv_transpose1d(x[:, :, 0], w[:, :, 1], padding=3)),
                                torch.randn(1, 4, 7, 6, generator=torch.Generator().manual_seed(0)),
                                torch.randn(4, 3, 3, 3, generator=torch.Generator().manual_seed(1)),
                                torch.randn(4, 2, 1, 1, generator=torch.Generator().manual_seed(2))),
    # a dilated window in ceil mode pads past the kernel's size, which ONNX Runtime's MaxPool refuses (a Pad first)
    "max_pool_padded_past_the_kernel": (lambda x: (F.max_pool2d(x, 2, 2, 1, dilation=2, ceil_mode=True),
                                                   F.max_pool2d(x.int(), 2, 2, 1, dilation=3, ceil_mode=True)),
                                        torch.randn(1, 2, 6, 7, generator=torch.Generator().manual_seed(0)) * 9),
}


@pytest.mark.parametrize("name", list(CASES))
def test_torch_op_runs_in_onnx_runtime_like_torch(name):
    fn, *args = CASES[name]
    with torch.no_grad():
        want = fn(*args)
    want = [w.numpy() for w in (want if isinstance(want, (tuple, list)) else [want])]
    got = convert(FnModule(fn, tuple(args), {}).eval(), tuple(args), target="onnx").run_raw(*[a.numpy() for a in args])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_any_and_all_over_a_dynamic_dim_of_size_zero_are_false_and_true():
    # ONNX's ReduceMax / ReduceMin over no elements give the type's lowest / highest value: int32's lowest made
    # "any" of nothing True (the bools are reduced as uint8 now, whose extremes are 0 and 255)
    class AnyAll(torch.nn.Module):
        def forward(self, x):
            return (x > 0).any(-1), (x > 0).all(-1)

    x = torch.tensor([[1.0, -1.0], [1.0, 1.0], [-1.0, -1.0]])
    art = convert(AnyAll().eval(), (x,), target="onnx", dynamic_shapes=({1: torch.export.Dim("n", min=0, max=8)},))
    for x in (x, torch.zeros(3, 0)):
        assert [g.tolist() for g in art(x)] == [w.tolist() for w in AnyAll()(x)]
    assert [w.tolist() for w in AnyAll()(torch.zeros(3, 0))] == [[False] * 3, [True] * 3]


def test_complex_input_is_refused_naming_the_dtype():
    z = torch.ones(3, dtype=torch.complex64)
    with pytest.raises(UnsupportedOpError, match=r"input 0 \(complex64\).*view_as_real"):
        convert(FnModule(torch.linalg.vector_norm, (z,), {}).eval(), (z,), target="onnx")


def test_bfloat16_and_float8_inputs_and_outputs_round_trip_through_onnx_runtime():
    # ONNX Runtime's NumPy conversion has no type for them: the artifact passes their bits through OrtValues
    class Casts(torch.nn.Module):
        def forward(self, x, y):
            z = x.float() * y
            return z.to(torch.bfloat16), z.sum(), z.to(torch.float8_e4m3fn)

    x = torch.tensor([[0.5, -1.25, 3.0], [1e-3, 7.0, -0.0]], dtype=torch.bfloat16)
    y = torch.tensor([[2.0, 3.0, -1.0], [5.0, 0.5, 4.0]])
    art = convert(Casts().eval(), (x, y), target="onnx")
    got, want = art(x, y), Casts()(x, y)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert torch.equal(g.float(), w.float())
    raw = art.run_raw(x.float().numpy().astype("bfloat16"), y.numpy())  # (ml_dtypes arrays in and out)
    assert [r.dtype.name for r in raw] == ["bfloat16", "float32", "float8_e4m3fn"]

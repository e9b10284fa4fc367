"""PyTorch ops that used to fall outside the LiteRT exporter: reflection / replication pads,
3-D and grouped transposed convolutions, integer bitwise and/or, vector norms, ``Tensor.repeat``, backward
ops (add_any), 3-D and dilated pooling, transposed convolutions padded past their kernel,
max-mode embedding bags (a scatter-max), convolutions with kernels computed at run time; with dynamic shapes,
the separable window reductions and negative padding (a crop). Each model is converted once, run in the LiteRT
Interpreter, compared with PyTorch, and its op list checked."""

from __future__ import annotations

import copy
import inspect

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from converter.api import convert
from converter.errors import UnsupportedOpError
from tests.litert.conftest import check_model


class EdgePads(nn.Module):
    """Reflection and replication pads of 1-D, 2-D (after a conv: NHWC inside) and 3-D values."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x: torch.Tensor, v: torch.Tensor) -> tuple:
        y = self.conv(x)
        return (F.pad(y, (1, 2, 2, 1), mode="reflect"), F.pad(y, (0, 3, 1, 0), mode="replicate"),
                F.pad(v, (3, 1), mode="reflect"), F.pad(x[:, None], (1, 0, 2, 1, 1, 1), mode="replicate"))


class Convs(nn.Module):
    """Conv3d (grouped, padded, strided), grouped / dilated ConvTranspose2d, ConvTranspose3d
    (cropped with ReLU, grouped, dilated)."""

    def __init__(self):
        super().__init__()
        self.c3 = nn.Conv3d(4, 6, 3, stride=(1, 2, 2), padding=1, groups=2)
        self.c3b = nn.Conv3d(4, 2, (2, 3, 3), bias=False)
        self.t2 = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.t2d = nn.ConvTranspose2d(4, 3, 3, stride=2, dilation=2)
        self.t3 = nn.ConvTranspose3d(4, 6, 3, stride=(1, 2, 2), padding=1, output_padding=(0, 1, 1))
        self.t3g = nn.ConvTranspose3d(4, 2, (2, 3, 3), stride=2, groups=2, dilation=(1, 2, 2), bias=False)

    def forward(self, v: torch.Tensor, x: torch.Tensor) -> tuple:
        return (torch.relu(self.c3(v)), self.c3b(v), self.t2(x), self.t2d(x), torch.relu(self.t3(v)),
                self.t3g(v))


class Bitwise(nn.Module):
    """and / or / xor of int64 (full range), int32 and bool tensors."""

    def forward(self, a: torch.Tensor, b: torch.Tensor, m: torch.Tensor) -> tuple:
        c, d = a.to(torch.int32), b.to(torch.int32)
        return a & b, a | b, a ^ b, a & 0xFF, c & d, c | d, m & (a > 0), m | (b > 0)


class Norms(nn.Module):
    """Vector norms (``linalg_vector_norm``): F.normalize, ord 1 / inf / 3, Tensor.norm."""

    def forward(self, x: torch.Tensor) -> tuple:
        return (F.normalize(x, dim=-1), torch.linalg.vector_norm(x, ord=1, dim=0),
                torch.linalg.vector_norm(x, ord=float("inf"), dim=1, keepdim=True),
                torch.linalg.vector_norm(x, ord=3.0, dim=1), x.norm(dim=1))


class Repeats(nn.Module):
    """``Tensor.repeat`` / ``torch.tile`` (lax.tile) of float, int64 and bool values, of a conv's output (NHWC
    inside) and of a parameter."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 1)
        self.pos = nn.Parameter(torch.randn(1, 4))

    def forward(self, x: torch.Tensor, i: torch.Tensor) -> tuple:
        return (self.conv(x).repeat(1, 2, 1, 3), x[0].repeat(2, 1, 1, 1), torch.tile(i, (3, 1)), (i > 0).repeat(2, 2),
                self.pos.repeat(3, 1) + i[:1].float())


class BackwardOps(nn.Module):
    """Backward ops whose lowering is a ``jax.vjp`` (their jaxprs sum cotangents with ``add_any``)."""

    def forward(self, g: torch.Tensor, x: torch.Tensor, gu: torch.Tensor) -> tuple:
        aten = torch.ops.aten
        return (aten.replication_pad1d_backward(g, x, [1, 2]),
                aten.upsample_bilinear2d_backward(gu, [4, 6], [1, 1, 2, 3], False, None, None))


class Pool3d(nn.Module):
    """3-D max / average pooling (padded, ceil mode, without the padding in the count, adaptive) after a CONV_3D:
    TFLite pools 2-D only, so each is separable strided slices."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv3d(3, 4, 3, padding=1)

    def forward(self, v: torch.Tensor) -> tuple:
        y = torch.relu(self.conv(v))
        return (F.max_pool3d(y, 3, 2, 1), F.max_pool3d(v, (2, 3, 2), (2, 2, 1), (1, 1, 0), ceil_mode=True),
                F.avg_pool3d(v, 3, 2, 1, ceil_mode=True, count_include_pad=False), F.adaptive_avg_pool3d(y, (2, 3, 3)))


class DilatedPools(nn.Module):
    """Dilated max pooling, 1-D / 2-D (padded, ceil mode) / 3-D: TFLite's pools take no dilation, so each is
    separable strided slices ``dilation`` apart."""

    def forward(self, x: torch.Tensor) -> tuple:
        return (F.max_pool1d(x.flatten(2), 3, 2, 1, dilation=3, ceil_mode=True), F.max_pool2d(x, 2, 1, 1, dilation=2),
                F.max_pool2d(x, 3, 2, 0, dilation=2, ceil_mode=True), F.max_pool3d(x[:, None], 2, 1, 0, dilation=2))


class CroppedTransposedConvs(nn.Module):
    """Stride-1 transposed convolutions padded past their kernel's reach, 1-D / 2-D (dilated, grouped) / 3-D: a
    convolution with negative padding, a SLICE before it (TFLite's PAD takes no negative pad)."""

    def __init__(self):
        super().__init__()
        self.t1, self.t2 = nn.ConvTranspose1d(3, 2, 3, padding=3), nn.ConvTranspose2d(3, 3, 1, padding=1, dilation=2,
                                                                                        groups=3)
        self.t3 = nn.ConvTranspose3d(3, 2, 3, padding=(3, 2, 3))

    def forward(self, x: torch.Tensor) -> tuple:
        return self.t1(x[:, :, 0]), self.t2(x), self.t3(x[:, :, None].expand(-1, -1, 6, -1, -1))


class MaxBags(nn.Module):
    """``EmbeddingBag(mode="max")``, 2-D indices and 1-D indices with offsets (an empty bag: zeros): a scatter-max,
    which TFLite has no op for (a one-hot comparison, REDUCE_MAX and MAXIMUM)."""

    def __init__(self):
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 3, mode="max")

    def forward(self, i: torch.Tensor, flat: torch.Tensor) -> tuple:
        return self.bag(i), self.bag(flat, torch.tensor([0, 2, 2, 5]))


class PredictedKernels(nn.Module):
    """Convolutions with kernels computed at run time (a hypernetwork): 2-D (padded, strided and dilated, a
    1-row kernel), depthwise and 1-D."""

    def __init__(self):
        super().__init__()
        self.gen, self.gen_dw = nn.Linear(4, 6 * 3 * 3 * 3), nn.Linear(4, 3 * 3 * 3)

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> tuple:
        w, wd = self.gen(z).view(6, 3, 3, 3), self.gen_dw(z).view(3, 1, 3, 3)
        return (F.conv2d(x, w, padding=1), F.conv2d(x, w, stride=2, dilation=2), F.conv2d(x, wd, padding=1, groups=3),
                F.conv2d(x, torch.tanh(w[:, :, :1, :]), padding=(0, 1)), F.conv1d(x[:, :, 0], w[:, :, 0], padding=1))


def _int64s(*shape: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-2**62, 2**62, shape, generator=g, dtype=torch.int64) * 2
    x.view(-1)[:4] = torch.tensor([-1, 0, 2**63 - 1, -2**63])
    return x


MODELS = {
    "edge_pads": (EdgePads, lambda: (torch.randn(2, 3, 7, 8), torch.randn(2, 3, 6)),
                  {"SLICE": 17, "CONCATENATION": 8, "GATHER": 0, "MIRROR_PAD": 0, "TRANSPOSE": 3}),
    "convs": (Convs, lambda: (torch.randn(1, 4, 4, 6, 6), torch.randn(1, 4, 5, 5)),
              # t3's bias and ReLU go through its crop into CONV_3D_TRANSPOSE (the two ADDs are the
              # biases of the grouped c3 and t2, after their CONCATENATION)
              {"CONV_3D": 3, "TRANSPOSE_CONV": 3, "CONV_3D_TRANSPOSE": 3, "SPLIT": 3, "ADD": 2, "RELU": 0}),
    "bitwise": (Bitwise, lambda: (_int64s(3, 4), _int64s(3, 4).flip(0), torch.rand(3, 4) > 0.5),
                {"BITCAST": 6, "RIGHT_SHIFT": 4, "BITWISE_XOR": 8, "LOGICAL_AND": 1, "LOGICAL_OR": 1}),
    "norms": (Norms, lambda: (torch.randn(3, 5),), {"ABS": 5, "SQRT": 2, "REDUCE_MAX": 1, "POW": 2}),
    "repeats": (Repeats, lambda: (torch.randn(2, 3, 4, 5), torch.randint(-5, 5, (2, 4))),
                {"TILE": 4}),  # (the parameter's repeat is folded into a constant)
    "predicted_kernels": (PredictedKernels, lambda: (torch.randn(2, 3, 8, 9), torch.randn(4)),
                          {"CONV_2D": 4, "DEPTHWISE_CONV_2D": 1}),
    "pool3d": (Pool3d, lambda: (torch.randn(2, 3, 5, 6, 7),), {"CONV_3D": 1, "MAX_POOL_2D": 0, "AVERAGE_POOL_2D": 0}),
    "dilated_pools": (DilatedPools, lambda: (torch.randn(2, 3, 7, 8),), {"MAX_POOL_2D": 0, "STRIDED_SLICE": 19}),
    "cropped_transposed_convs": (CroppedTransposedConvs, lambda: (torch.randn(2, 3, 7, 8),), {"SLICE": 4, "PAD": 0}),
    "max_bags": (MaxBags, lambda: (torch.tensor([[1, 2, 4], [2, 2, 9]]), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])),
                 {"REDUCE_MAX": 2, "EQUAL": 2, "SCATTER_ND": 0}),
    "backward_ops": (BackwardOps, lambda: (torch.randn(1, 1, 8), torch.randn(1, 1, 5), torch.randn(1, 1, 4, 6)), {}),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_op_gap_model_matches_pytorch(name):
    cls, make_args, expect = MODELS[name]
    torch.manual_seed(0)
    art, _, _ = check_model(cls().eval(), make_args())
    for op, count in expect.items():
        assert art.ops[op] == count, f"{name}: {op} ×{art.ops[op]}, expected {count}; ops {dict(art.ops)}"


class LocalResponse(nn.Module):
    """``LocalResponseNorm``: an average over a window of channels of the 5-D squared input (separable slices)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.local_response_norm(x, 3)


@pytest.mark.parametrize("cls,shape", [(Pool3d, (3, 5, 6, 7)), (DilatedPools, (3, 7, 8)), (LocalResponse, (4, 5, 6))])
def test_separable_window_reductions_run_with_a_dynamic_batch(cls, shape):
    torch.manual_seed(0)
    model = cls().eval()
    art = convert(model, (torch.randn(2, *shape),), target="litert",
                  dynamic_shapes=({0: torch.export.Dim("batch", max=8)},))
    assert art.ops["STRIDED_SLICE"] > 0, dict(art.ops)
    for n in (1, 3):
        x = torch.randn(n, *shape)
        with torch.no_grad():
            want = model(x)
        for g, w in zip(*(o if isinstance(o, (tuple, list)) else (o,) for o in (art(x), want))):
            torch.testing.assert_close(torch.as_tensor(g), w, rtol=1e-4, atol=1e-5)


class NegativePads(nn.Module):
    """Crops by negative padding: of a dynamic length (from both ends, from the start only), and of static dims
    beside a dynamic batch (``Unfold``'s im2col of a padded input)."""

    def forward(self, x: torch.Tensor, s: torch.Tensor) -> tuple:
        return F.pad(s, (-1, -2)), F.pad(s, (-2, 1)), F.unfold(x, 2, padding=1, stride=2)


def test_negative_padding_runs_with_dynamic_dims():
    model = NegativePads()
    batch, length = torch.export.Dim("batch", max=8), torch.export.Dim("length", min=5, max=32)
    art = convert(model, (torch.randn(2, 2, 6, 6), torch.randn(3, 9)), target="litert",
                  dynamic_shapes=({0: batch}, {1: length}))
    for n, m in ((1, 5), (3, 12)):
        x, v = torch.randn(n, 2, 6, 6), torch.randn(3, m)
        for g, w in zip(art(x, v), model(x, v)):
            torch.testing.assert_close(torch.as_tensor(g), w, rtol=1e-5, atol=1e-6)


class Shift(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a << b  # no TFLite builtin shifts left


def test_unexpressible_integer_op_names_op_and_source_line():
    a = torch.arange(6).reshape(2, 3)
    with pytest.raises(UnsupportedOpError) as e:
        convert(Shift(), (a, a % 3), target="litert")
    msg = str(e.value)
    assert e.value.target == "litert" and "aten.__lshift__" in msg and "shift_left" in msg, msg
    line = inspect.getsourcelines(Shift.forward)[1] + 1
    assert f"test_op_gaps.py:{line}" in msg and "\n" not in msg


class DuplicateWrites(nn.Module):
    """``index_put`` with repeated positions: runtime indices (rows) and constant ones (columns)."""

    def forward(self, x: torch.Tensor, rows: torch.Tensor, vals: torch.Tensor) -> torch.Tensor:
        y = x.clone()
        y[rows] = vals
        cols = torch.tensor([1, 3, 1, 0, 3])
        y[:, cols] = torch.arange(5, dtype=x.dtype) * 10.0
        return y


def test_scatter_with_duplicate_indices_keeps_the_last_write_like_torch():
    x, rows, vals = torch.randn(6, 5), torch.tensor([4, 1, 4, 0, 1, 4]), torch.randn(6, 5)
    model = DuplicateWrites()
    art = convert(model, (x, rows, vals), target="litert")
    want = model(x, rows, vals)
    got = art(x, rows, vals)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    rows2 = torch.tensor([2, 2, 2, 5, 3, 5])  # other duplicates at run time, same shape
    torch.testing.assert_close(art(x, rows2, vals), model(x, rows2, vals), rtol=0, atol=0)
    assert art.ops["REDUCE_ANY"] == 1  # the runtime duplicate check; the constant one folded away


class RenormedEmbedding(nn.Module):
    """``Embedding(max_norm=...)`` renormalizes the looked-up rows in place: a replacing scatter whose index rows
    (the token ids) repeat."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 6, max_norm=1.0)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.emb(ids).mean(1)


def test_scatter_with_a_dynamic_number_of_duplicate_indices_keeps_the_last_write():
    batch = torch.export.Dim("batch", max=8)
    art = convert(DuplicateWrites(), (torch.randn(6, 5), torch.tensor([4, 1, 4]), torch.randn(3, 5)), target="litert",
                  dynamic_shapes=(None, {0: batch}, {0: batch}))
    for rows in (torch.tensor([2, 2, 5, 2, 0]), torch.tensor([1, 3])):
        x, vals = torch.randn(6, 5), torch.randn(len(rows), 5)
        torch.testing.assert_close(art(x, rows, vals), DuplicateWrites()(x, rows, vals), rtol=0, atol=0)
    torch.manual_seed(0)
    model = RenormedEmbedding().eval()
    ids = torch.randint(0, 10, (4, 5), generator=torch.Generator().manual_seed(1))
    art = convert(copy.deepcopy(model), (ids,), target="litert", dynamic_shapes=({0: batch},))
    for n in (4, 3):
        torch.testing.assert_close(torch.as_tensor(art(ids[:n])), copy.deepcopy(model)(ids[:n]), rtol=1e-5, atol=1e-6)


def test_max_bags_run_with_a_dynamic_batch_and_number_of_indices():
    torch.manual_seed(0)
    model = MaxBags().eval()
    art = convert(model, (torch.randint(0, 10, (2, 3)), torch.randint(0, 10, (8,))), target="litert",
                  dynamic_shapes=({0: torch.export.Dim("bags", max=8)}, {0: torch.export.Dim("n", min=6, max=64)}))
    for bags, n in ((1, 6), (5, 13)):
        i, flat = torch.randint(0, 10, (bags, 3)), torch.randint(0, 10, (n,))
        with torch.no_grad():
            want = model(i, flat)
        for g, w in zip(art(i, flat), want):
            torch.testing.assert_close(torch.as_tensor(g), w, rtol=0, atol=0)

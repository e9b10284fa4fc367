"""Sampling and patch ops: ``grid_sampler_2d`` / ``grid_sampler_3d`` (``F.grid_sample``) and their gradients,
``col2im`` (``F.fold``), ``_pdist_forward`` (``torch.pdist``).

Grid sampling follows ATen's ``GridSampler.h`` exactly: a grid coordinate in
``[-1, 1]`` is unnormalized to a pixel coordinate (``align_corners`` picks corner or
edge centres), folded back by the padding mode (``zeros``: out-of-range taps read 0,
``border``: clamp, ``reflection``: mirror then clamp), then interpolated bilinearly,
by nearest neighbour (round half to even, like ``nearbyint``) or bicubically (torch's
``A = -0.75`` cubic convolution, padding applied per tap). All taps are ``gather``-ed
at once from the flattened ``H*W`` plane of each image.
"""

from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import difference, masked_vjp, opmath_dtype, pnorm
from converter.lowering.registry import lowering

aten = torch.ops.aten

_BILINEAR, _NEAREST, _BICUBIC = 0, 1, 2
_ZEROS, _BORDER, _REFLECTION = 0, 1, 2
_CUBIC_A = -0.75


def _unnormalize(coord, size: int, align_corners: bool):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, twice_low: int, twice_high: int):
    """ATen's ``reflect_coordinates``: mirror ``coord`` into ``[low, high]`` (given doubled)."""
    if twice_low == twice_high:
        return jnp.zeros_like(coord)
    low = twice_low / 2
    span = (twice_high - twice_low) / 2
    coord = jnp.abs(coord - low)
    extra = jnp.fmod(coord, span)
    flips = jnp.floor(coord / span)
    return jnp.where(jnp.fmod(flips, 2) == 0, extra + low, span - extra + low)


def _pad_coordinates(coord, size: int, padding_mode: int, align_corners: bool):
    """ATen's ``compute_coordinates``: apply the border/reflection padding to a pixel coordinate."""
    if padding_mode == _BORDER:
        return jnp.clip(coord, 0, size - 1)
    if padding_mode == _REFLECTION:
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
        return jnp.clip(coord, 0, size - 1)
    return coord


def _taps(flat, coords: list, weights: list, sizes: tuple):
    """``sum_t weights[t] * input[n, :, coords[0][t], coords[1][t], ...]`` with one ``gather`` for all taps.

    ``coords`` holds, per spatial dim, one integer coordinate map ``(N, *out)`` per tap;
    out-of-bounds taps read 0.
    """
    n, c = flat.shape[0], flat.shape[1]
    stacked = [jnp.stack(cs) for cs in coords]  # per dim: (T, N, *out)
    valid = functools.reduce(jnp.logical_and, [(i >= 0) & (i < size) for i, size in zip(stacked, sizes)])
    lin = functools.reduce(lambda acc, pair: acc * pair[1] + pair[0], zip(stacked, sizes), 0)
    wt = jnp.where(valid, jnp.stack(weights), jnp.zeros((), flat.dtype))
    lin = jnp.where(valid, lin, 0)
    taps = len(weights)
    lin = jnp.moveaxis(lin, 0, 1).reshape((n, 1, -1))  # (N, 1, T*prod(out))
    vals = jnp.take_along_axis(flat, lin, axis=2).reshape((n, c, taps, -1))
    wt = jnp.moveaxis(wt, 0, 1).reshape((n, 1, taps, -1))
    return jnp.sum(vals * wt, axis=2)


def _cubic_weights(t):
    """torch's ``get_cubic_upsample_coefficients`` for the 4 taps around ``t`` in [0, 1)."""
    a = _CUBIC_A

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    return far(t + 1), near(t), near(1 - t), far(2 - t)


def _grid_sample(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool):
    n, c, h, w = input.shape
    ho, wo = grid.shape[1], grid.shape[2]
    acc = opmath_dtype(input.dtype)
    flat = input.astype(acc).reshape((n, c, h * w))
    gx, gy = grid[..., 0].astype(acc), grid[..., 1].astype(acc)
    x, y = _unnormalize(gx, w, align_corners), _unnormalize(gy, h, align_corners)
    if interpolation_mode == _BICUBIC:
        x0, y0 = jnp.floor(x), jnp.floor(y)
        wx, wy = _cubic_weights(x - x0), _cubic_weights(y - y0)
        iys, ixs, weights = [], [], []
        for i in range(4):
            yy = _pad_coordinates(y0 - 1 + i, h, padding_mode, align_corners).astype(jnp.int64)
            for j in range(4):
                xx = _pad_coordinates(x0 - 1 + j, w, padding_mode, align_corners).astype(jnp.int64)
                iys.append(yy), ixs.append(xx), weights.append(wx[j] * wy[i])
        out = _taps(flat, [iys, ixs], weights, (h, w))
    else:
        x = _pad_coordinates(x, w, padding_mode, align_corners)
        y = _pad_coordinates(y, h, padding_mode, align_corners)
        if interpolation_mode == _NEAREST:
            out = _taps(flat, [[jnp.round(y).astype(jnp.int64)], [jnp.round(x).astype(jnp.int64)]],
                        [jnp.ones_like(x)], (h, w))
        else:
            x0, y0 = jnp.floor(x), jnp.floor(y)
            tx, ty = x - x0, y - y0
            ix, iy = x0.astype(jnp.int64), y0.astype(jnp.int64)
            out = _taps(flat, [[iy, iy, iy + 1, iy + 1], [ix, ix + 1, ix, ix + 1]],
                        [(1 - tx) * (1 - ty), tx * (1 - ty), (1 - tx) * ty, tx * ty], (h, w))
    return out.reshape((n, c, ho, wo)).astype(input.dtype)


def _check_modes(ctx, op, interpolation_mode: int, padding_mode: int) -> None:
    if interpolation_mode not in (_BILINEAR, _NEAREST, _BICUBIC) or padding_mode not in (_ZEROS, _BORDER,
                                                                                        _REFLECTION):
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason=f"unknown interpolation_mode {interpolation_mode} or "
                                        f"padding_mode {padding_mode}")


@lowering(aten.grid_sampler_2d.default)
def lower_grid_sampler_2d_default(ctx, input, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler_2d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor

    Elementwise coordinate math (float32 for float16/bfloat16), then ONE ``gather`` of
    all taps (4 bilinear, 1 nearest, 16 bicubic) along the flattened spatial dim and a
    weighted ``reduce_sum`` over them; out-of-bounds taps get weight 0 (``select``).
    """
    _check_modes(ctx, aten.grid_sampler_2d.default, interpolation_mode, padding_mode)
    return _grid_sample(input, grid, interpolation_mode, padding_mode, align_corners)


@lowering(aten.grid_sampler_2d_backward.default)
def lower_grid_sampler_2d_backward_default(ctx, grad_output, input, grid, interpolation_mode, padding_mode,
                                           align_corners, output_mask):
    """grid_sampler_2d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)

    ``jax.vjp`` of the grid_sampler_2d lowering (the gathers transpose to
    ``scatter``-adds) for the inputs selected by ``output_mask``. As in torch, the grid
    gradient is 0 for nearest sampling and where border/reflection padding clamps.
    """
    _check_modes(ctx, aten.grid_sampler_2d_backward.default, interpolation_mode, padding_mode)

    def sample(x, grid_):
        return _grid_sample(x, grid_, interpolation_mode, padding_mode, align_corners)

    return tuple(masked_vjp(sample, [input, grid], output_mask[:2], grad_output))


def _grid_sample_3d(input, grid, interpolation_mode: int, padding_mode: int, align_corners: bool):
    """:func:`_grid_sample` over a volume: ``grid[..., (x, y, z)]`` index (W, H, D); trilinear
    (8 taps) or nearest."""
    n, c, d, h, w = input.shape
    acc = opmath_dtype(input.dtype)
    flat = input.astype(acc).reshape((n, c, d * h * w))
    sizes = (d, h, w)
    # pixel coordinates in (z, y, x) order, padded
    pos = [_pad_coordinates(_unnormalize(grid[..., k].astype(acc), size, align_corners), size, padding_mode,
                            align_corners) for k, size in zip((2, 1, 0), sizes)]
    if interpolation_mode == _NEAREST:
        out = _taps(flat, [[jnp.round(p).astype(jnp.int64)] for p in pos], [jnp.ones_like(pos[0])], sizes)
    else:
        low = [jnp.floor(p) for p in pos]
        frac = [p - lo for p, lo in zip(pos, low)]
        coords, weights = [[], [], []], []
        for corner in itertools.product((0, 1), repeat=3):
            for k in range(3):
                coords[k].append(low[k].astype(jnp.int64) + corner[k])
            weights.append(functools.reduce(lambda a, b: a * b,
                                            [f if bit else 1 - f for f, bit in zip(frac, corner)]))
        out = _taps(flat, coords, weights, sizes)
    return out.reshape((n, c) + grid.shape[1:4]).astype(input.dtype)


def _check_modes_3d(ctx, op, interpolation_mode: int, padding_mode: int) -> None:
    _check_modes(ctx, op, interpolation_mode, padding_mode)
    if interpolation_mode == _BICUBIC:
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason="bicubic interpolation only supports 4D input (as in torch)")


@lowering(aten.grid_sampler_3d.default)
def lower_grid_sampler_3d_default(ctx, input, grid, interpolation_mode, padding_mode, align_corners):
    """grid_sampler_3d(Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners) -> Tensor

    ``F.grid_sample`` of a 5-D input: as grid_sampler_2d over (D, H, W), trilinear (8 taps) or
    nearest, one ``gather`` of all taps from the flattened volume.
    """
    _check_modes_3d(ctx, aten.grid_sampler_3d.default, interpolation_mode, padding_mode)
    return _grid_sample_3d(input, grid, interpolation_mode, padding_mode, align_corners)


@lowering(aten.grid_sampler_3d_backward.default)
def lower_grid_sampler_3d_backward_default(ctx, grad_output, input, grid, interpolation_mode, padding_mode,
                                           align_corners, output_mask):
    """grid_sampler_3d_backward(Tensor grad_output, Tensor input, Tensor grid, int interpolation_mode, int padding_mode, bool align_corners, bool[2] output_mask) -> (Tensor, Tensor)

    ``jax.vjp`` of the grid_sampler_3d lowering for the inputs selected by ``output_mask``.
    """
    _check_modes_3d(ctx, aten.grid_sampler_3d_backward.default, interpolation_mode, padding_mode)

    def sample(x, grid_):
        return _grid_sample_3d(x, grid_, interpolation_mode, padding_mode, align_corners)

    return tuple(masked_vjp(sample, [input, grid], output_mask[:2], grad_output))


# ----------------------------------------------------------------------------- col2im
@lowering(aten.col2im.default)
def lower_col2im_default(ctx, self, output_size, kernel_size, dilation, padding, stride):
    """col2im(Tensor self, SymInt[2] output_size, int[2] kernel_size, int[2] dilation, int[2] padding, int[2] stride) -> Tensor

    ``F.fold``: the transpose (``jax.vjp``) of ``conv_general_dilated_patches`` (im2col,
    channel-major ``(C, kh, kw)`` columns like ``F.unfold``), i.e. one grouped
    transposed convolution with a one-hot kernel that adds every column entry back to
    its pixel. Unbatched ``(C*kh*kw, L)`` inputs get a batch dim of 1 and lose it again.
    """
    unbatched = self.ndim == 2
    cols = self[None] if unbatched else self
    k, d, p, s = (list(v) * (2 // len(v)) for v in (kernel_size, dilation, padding, stride))
    n, ckk = cols.shape[0], cols.shape[1]
    c = ckk // (k[0] * k[1])
    blocks = [(o + 2 * pp - dd * (kk - 1) - 1) // ss + 1 for o, pp, dd, kk, ss in zip(output_size, p, d, k, s)]
    acc = opmath_dtype(self.dtype)

    def im2col(img):
        return jax.lax.conv_general_dilated_patches(img, tuple(k), tuple(s), [(pp, pp) for pp in p],
                                                    rhs_dilation=tuple(d),
                                                    dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                                    precision=jax.lax.Precision.HIGHEST)

    zeros = jnp.zeros((n, c) + tuple(output_size), acc)
    out = masked_vjp(im2col, [zeros], [True], cols.astype(acc).reshape((n, ckk) + tuple(blocks)))[0]
    out = out.astype(self.dtype)
    return out[0] if unbatched else out


# ----------------------------------------------------------------------------- pdist
@lowering(aten._pdist_forward.default)
def lower__pdist_forward_default(ctx, self, p=2.0):
    """_pdist_forward(Tensor self, float p=2.) -> Tensor

    The ``N*(N-1)/2`` row distances ``||x[i] - x[j]||_p`` for ``i < j`` in row-major
    order: two constant-index ``gather``s of the rows, a subtraction and a p-norm
    reduction (``p=0``: count of non-zero differences, ``p=inf``: max). ``N`` must be
    static (the pair indices are built at conversion time).
    """
    rows = self.shape[0]
    if not isinstance(rows, int):
        raise UnsupportedOpError(str(aten._pdist_forward.default), ctx.target, ctx.location,
                                 reason="pdist needs a static number of rows")
    i, j = np.triu_indices(rows, 1)
    acc = opmath_dtype(self.dtype)
    x = self.astype(acc)
    diff = jnp.abs(difference(x[jnp.asarray(i)], x[jnp.asarray(j)]))
    return pnorm(diff, p).astype(self.dtype)



@lowering(aten._pdist_backward.default)
def lower__pdist_backward_default(ctx, grad, self, p, pdist):
    """_pdist_backward(Tensor grad, Tensor self, float p, Tensor pdist) -> Tensor

    torch's per-norm derivative of each pair's distance with the saved ``pdist``
    (``p=2``: ``grad * d / dist``; ``p=1``: ``grad * sign(d)``; ``p=inf``: ``grad * sign(d)``
    where ``|d| == dist``; ``p<2``: ``sign(d) |d|^(p-1) grad / dist^(p-1)``; otherwise
    ``d |d|^(p-2) grad / dist^(p-1)``; 0 where ``dist == 0``; ``p=0``: 0), added to row
    ``i`` and subtracted from row ``j`` with two ``scatter``-adds.
    """
    rows = self.shape[0]
    if not isinstance(rows, int):
        raise UnsupportedOpError(str(aten._pdist_backward.default), ctx.target, ctx.location,
                                 reason="pdist needs a static number of rows")
    acc = opmath_dtype(self.dtype)
    if p == 0 or rows < 2:
        return jnp.zeros(self.shape, self.dtype)
    i, j = (jnp.asarray(a) for a in np.triu_indices(rows, 1))
    x = self.astype(acc)
    d = difference(x[i], x[j])
    g, dist = grad.astype(acc)[:, None], pdist.astype(acc)[:, None]
    zero = jnp.zeros((), acc)
    safe = jnp.where(dist == 0, jnp.ones((), acc), dist)
    if p == 1:
        r = jnp.sign(d) * g
    elif p == float("inf"):
        r = jnp.where(jnp.abs(d) == dist, jnp.sign(d) * g, zero)
    elif p == 2:
        r = jnp.where(dist == 0, zero, g * d / safe)
    elif p < 2:
        bad = (dist == 0) | ((d == 0) & (p < 1))
        r = jnp.where(bad, zero, jnp.sign(d) * jnp.abs(d) ** (p - 1) * g / safe ** (p - 1))
    else:
        r = jnp.where(dist == 0, zero, d * jnp.abs(d) ** (p - 2) * g / safe ** (p - 1))
    out = jnp.zeros(self.shape, acc).at[i].add(r).at[j].add(-r)
    return out.astype(self.dtype)

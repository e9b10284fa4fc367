"""Upsampling: nearest and bilinear 2d (preserved composites) and antialiased bilinear.

torch.export keeps ``F.interpolate(mode="nearest"|"bilinear")`` on 4-d inputs as
``upsample_nearest2d.vec`` / ``upsample_bilinear2d.vec`` (preserved) and
``antialias=True`` as ``_upsample_bilinear2d_aa``; the 1d/3d modes, ``nearest-exact``,
``bicubic`` and ``trilinear`` decompose into arange/index/arithmetic.

Source indices and interpolation weights are computed at trace time with NumPy in
torch's CPU arithmetic (float32 for float32/float16/bfloat16 inputs, float64 for
float64), so rounding decisions match PyTorch exactly; the program holds them as
constants (``gather`` for indices, ``dot_general`` for antialias weight matrices).
Nearest upsampling by an integer factor is a ``repeat`` (broadcast + reshape) instead,
which also works for dynamic spatial sizes; every other mode needs static ones.
"""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import opmath_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _np_float(dtype):
    return np.float64 if dtype == jnp.float64 else np.float32


def _require_static(ctx, sizes) -> None:
    if not all(isinstance(s, int) for s in sizes):
        raise UnsupportedOpError(str(ctx.node.target if ctx.node is not None else "upsample"), ctx.target,
                                 ctx.location, reason="dynamic spatial sizes are only supported for nearest "
                                                      "upsampling by an integer scale factor")


def _sizes(ctx, x, output_size, scale_factors):
    """Output sizes and per-dim scales (None: derive from sizes) for the ``.vec`` overloads."""
    if output_size is not None:
        return list(output_size), [None, None]
    outs = []
    for size, f in zip(x.shape[-2:], scale_factors):
        if float(f).is_integer():
            outs.append(size * int(f))  # == floor(size * f); also for a symbolic size
        else:
            _require_static(ctx, [size])
            outs.append(int(math.floor(size * f)))
    return outs, list(scale_factors)


def _scale(in_size: int, out_size: int, scale, ft, align_corners: bool = False):
    """torch's ``area_pixel_compute_scale`` / ``compute_scales_value`` in type ``ft``."""
    if align_corners:
        return ft(in_size - 1) / ft(out_size - 1) if out_size > 1 else ft(0)
    if scale is not None and scale > 0:
        return ft(1.0 / scale)
    return ft(in_size) / ft(out_size)


def _nearest_indices(in_size: int, out_size: int, scale) -> np.ndarray:
    """torch's ``nearest_idx`` (float32 arithmetic)."""
    j = np.arange(out_size, dtype=np.int64)
    if out_size == in_size:
        return j
    if out_size == 2 * in_size:
        return j >> 1
    s = _scale(in_size, out_size, scale, np.float32)
    return np.minimum(np.floor(j.astype(np.float32) * s).astype(np.int64), in_size - 1)


def _repeat_factor(in_size, out_size, scale):
    """``k`` when torch's nearest indices are exactly ``j // k`` (then ``repeat`` replaces the gather).

    That holds for ``out = k * in`` with integer ``k`` whenever float32(1/k) >= 1/k (torch
    computes ``floor(j * float32(1/k))``); k = 41, 47, 55, 61… round below and differ.
    """
    if scale is not None and scale > 0:
        if not float(scale).is_integer():
            return None
        k = int(scale)
    elif isinstance(in_size, int) and isinstance(out_size, int) and in_size > 0 and out_size % in_size == 0:
        k = out_size // in_size
    else:
        return None
    if k < 1 or (isinstance(in_size, int) and isinstance(out_size, int) and out_size != k * in_size):
        return None
    return k if k <= 2 or Fraction(float(np.float32(1.0 / k))) >= Fraction(1, k) else None


def _nearest(ctx, x, out_sizes, scales):
    for ax, o, s in zip((x.ndim - 2, x.ndim - 1), out_sizes, scales):
        k = _repeat_factor(x.shape[ax], o, s)
        if k is not None:
            x = x if k == 1 else jnp.repeat(x, k, axis=ax)  # broadcast + reshape
            continue
        _require_static(ctx, [x.shape[ax], o])
        x = jnp.take(x, jnp.asarray(_nearest_indices(x.shape[ax], o, s)), axis=ax)
    return x


@lowering(aten.upsample_nearest2d.vec, composite=True)
def lower_upsample_nearest2d_vec(ctx, input, output_size, scale_factors):
    """upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors) -> Tensor

    Composite ``aten.upsample_nearest2d`` (LiteRT RESIZE_NEAREST_NEIGHBOR): per spatial dim
    a ``repeat`` for an integer factor, else a ``gather`` with torch's indices
    ``min(floor(j * scale), in - 1)``, where scale is ``1/scale_factor`` when given, else
    ``in/out``.
    """
    out_sizes, scales = _sizes(ctx, input, output_size, scale_factors)
    return _nearest(ctx, input, out_sizes, scales)


@lowering(aten.upsample_nearest2d.default)
def lower_upsample_nearest2d_default(ctx, self, output_size, scales_h=None, scales_w=None):
    """upsample_nearest2d(Tensor self, SymInt[2] output_size, float? scales_h=None, float? scales_w=None) -> Tensor

    As upsample_nearest2d.vec with explicit output size and optional scales.
    """
    return _nearest(ctx, self, list(output_size), [scales_h, scales_w])


def _linear_weights(in_size: int, out_size: int, scale, align_corners: bool, ft):
    """torch's ``compute_indices_weights_linear``: (i0, i1, lambda0, lambda1)."""
    s = _scale(in_size, out_size, scale, ft, align_corners)
    j = np.arange(out_size).astype(ft)
    if align_corners:
        src = s * j
    else:
        src = np.maximum(s * (j + ft(0.5)) - ft(0.5), ft(0))
    i0 = np.minimum(np.floor(src).astype(np.int64), in_size - 1)
    lam = np.clip(src - i0.astype(ft), ft(0), ft(1)).astype(ft)
    i1 = np.where(i0 < in_size - 1, i0 + 1, i0)
    return i0, i1, (ft(1) - lam).astype(ft), lam


def _lerp(x, ax, in_size, out_size, scale, align_corners, ft):
    i0, i1, l0, l1 = _linear_weights(in_size, out_size, scale, align_corners, ft)
    shape = [1] * x.ndim
    shape[ax] = out_size
    a = jnp.take(x, jnp.asarray(i0), axis=ax) * jnp.asarray(l0, x.dtype).reshape(shape)
    b = jnp.take(x, jnp.asarray(i1), axis=ax) * jnp.asarray(l1, x.dtype).reshape(shape)
    return a + b


@lowering(aten.upsample_bilinear2d.vec, composite=True)
def lower_upsample_bilinear2d_vec(ctx, input, output_size, align_corners, scale_factors):
    """upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners, float[]? scale_factors) -> Tensor

    Composite ``aten.upsample_bilinear2d`` (LiteRT RESIZE_BILINEAR): per spatial dim
    (width first, like torch's kernel) two constant-index ``gather``s blended with
    constant weights. Source coordinate ``j * (in-1)/(out-1)`` with ``align_corners``,
    else ``max((j + 0.5) * scale - 0.5, 0)``; float16/bfloat16 blend in float32.
    """
    out_sizes, scales = _sizes(ctx, input, output_size, scale_factors)
    return bilinear_resize(ctx, input, out_sizes, scales, align_corners)


def bilinear_resize(ctx, input, out_sizes, scales, align_corners):
    """torch's bilinear resize of the last two dims to ``out_sizes`` (``scales``: the per-dim
    scale factors torch was given, or None); also the forward of its backward's ``jax.vjp``."""
    _require_static(ctx, list(input.shape[-2:]) + list(out_sizes))
    dtype = ctx.out_dtype or input.dtype
    acc = opmath_dtype(dtype)
    ft = _np_float(acc)
    x = input.astype(acc)
    for ax, o, s in ((x.ndim - 1, out_sizes[1], scales[1]), (x.ndim - 2, out_sizes[0], scales[0])):
        x = _lerp(x, ax, x.shape[ax], o, s, align_corners, ft)
    return x.astype(dtype)



def _aa_matrix(in_size: int, out_size: int, scale, align_corners: bool) -> np.ndarray:
    """torch's antialiased bilinear weights (``_compute_indices_min_size_weights_aa``)."""
    s = float(_scale(in_size, out_size, scale, np.float64, align_corners))
    support = s if s >= 1.0 else 1.0  # interp_size / 2 = 1 for bilinear, widened when downsampling
    invscale = 1.0 / s if s >= 1.0 else 1.0
    m = np.zeros((out_size, in_size), np.float64)
    for i in range(out_size):
        center = s * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        j = np.arange(xmin, xmax)
        w = np.maximum(1.0 - np.abs((j - center + 0.5) * invscale), 0.0)
        total = w.sum()
        m[i, xmin:xmax] = w / total if total != 0 else w
    return m


@lowering(aten._upsample_bilinear2d_aa.default)
def lower__upsample_bilinear2d_aa_default(ctx, self, output_size, align_corners, scales_h=None, scales_w=None):
    """_upsample_bilinear2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    Antialiased bilinear resize (``F.interpolate(..., antialias=True)``): per spatial
    dim a ``dot_general`` (precision HIGHEST) with a constant ``(out, in)`` matrix of
    torch's normalized triangle-filter weights, whose support widens by the scale
    when downsampling.
    """
    _require_static(ctx, list(self.shape[-2:]) + list(output_size))
    dtype = ctx.out_dtype or self.dtype
    acc = opmath_dtype(dtype)
    x = self.astype(acc)
    for ax, o, s in ((x.ndim - 1, output_size[1], scales_w), (x.ndim - 2, output_size[0], scales_h)):
        m = jnp.asarray(_aa_matrix(x.shape[ax], o, s, align_corners), acc)
        x = jnp.moveaxis(jax.lax.dot_general(x, m, (((ax,), (1,)), ((), ())), precision=jax.lax.Precision.HIGHEST),
                         -1, ax)
    return x.astype(dtype)

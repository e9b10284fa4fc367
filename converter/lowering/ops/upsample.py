"""Upsampling: nearest and bilinear 2d (preserved composites) and antialiased bilinear and bicubic.

torch.export keeps ``F.interpolate(mode="nearest"|"bilinear")`` on 4-d inputs as
``upsample_nearest2d.vec`` / ``upsample_bilinear2d.vec`` (preserved) and
``antialias=True`` as ``_upsample_bilinear2d_aa`` / ``_upsample_bicubic2d_aa``; the 1d/3d modes, ``nearest-exact``,
``bicubic`` and ``trilinear`` decompose into arange/index/arithmetic.

Source indices and interpolation weights are computed at trace time with NumPy in
torch's CPU arithmetic (float32 for float32/float16/bfloat16 inputs, float64 for
float64), so rounding decisions match PyTorch exactly; the program holds them as
constants (``gather`` for indices, ``dot_general`` for antialias weight matrices).
Nearest upsampling by an integer factor is a ``repeat`` (broadcast + reshape) instead. Dynamic spatial
sizes take nearest and (bi)linear resizing of floats, their indices and weights then computed in the program
(a scale factor's output size ``floor(size * f)`` is ``(size * p) // 2^e`` of the dim where ``f = p / 2^e``
with a short ``p``: 0.5, 0.75, 1.5, whose float64 products are exact); the other modes need static ones.
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
                                 ctx.location, reason="dynamic spatial sizes are supported for nearest and "
                                                      "(bi)linear resizing of floats, by a scale factor that is "
                                                      "a short binary fraction (2, 0.5, 1.5) or to a fixed size")


def _sizes(ctx, x, output_size, scale_factors):
    """Output sizes and per-dim scales (None: derive from sizes) for the ``.vec`` overloads."""
    if output_size is not None:
        return list(output_size), [None, None]
    outs = []
    for size, f in zip(x.shape[-2:], scale_factors):
        if float(f).is_integer():
            outs.append(size * int(f))  # == floor(size * f); also for a symbolic size
        elif isinstance(size, int):
            outs.append(int(math.floor(size * f)))
        else:  # torch's floor(size * f) in float64, exact there when f = p / 2^e has a short p: (size * p) // 2^e
            ratio = Fraction(float(f))
            if ratio.numerator > 1 << 20:  # (1.7: the float64 product rounds, floor(10 * 1.7) is 17, not 16)
                _require_static(ctx, [size])
            outs.append((size * ratio.numerator) // ratio.denominator)
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


def _nearest_exact_indices(in_size: int, out_size: int, scale) -> np.ndarray:
    """torch's ``nearest_idx`` for mode ``nearest-exact``: ``floor((j + 0.5) * scale)`` (float32)."""
    s = _scale(in_size, out_size, scale, np.float32)
    j = np.arange(out_size, dtype=np.float32)
    return np.minimum(np.floor((j + np.float32(0.5)) * s).astype(np.int64), in_size - 1)


def _nearest(ctx, x, out_sizes, scales):
    return nearest_resize(ctx, x, out_sizes, scales)


def nearest_resize(ctx, x, out_sizes, scales, exact=False):
    """torch's nearest (or ``nearest-exact``) resize of the last ``len(out_sizes)`` dims:
    a ``repeat`` per dim with an integer factor (plain nearest), else a constant-index ``gather``."""
    first = x.ndim - len(out_sizes)
    for ax, o, s in zip(range(first, x.ndim), out_sizes, scales):
        k = None if exact else _repeat_factor(x.shape[ax], o, s)
        if k is not None:
            x = x if k == 1 else jnp.repeat(x, k, axis=ax)  # broadcast + reshape
            continue
        if not (isinstance(x.shape[ax], int) and isinstance(o, int)):
            x = jnp.take(x, _nearest_indices_dynamic(x.shape[ax], o, s, exact), axis=ax)
            continue
        idx = (_nearest_exact_indices if exact else _nearest_indices)(x.shape[ax], o, s)
        x = jnp.take(x, jnp.asarray(idx), axis=ax)
    return x


def _nearest_indices_dynamic(in_size, out_size, scale, exact: bool):
    """:func:`_nearest_indices` (or ``nearest-exact``'s) of a dynamic size (a jax.export dim), computed in the
    program in float32 as torch computes them: ``min(floor(j * s), in - 1)`` (``floor((j + 0.5) * s)``), ``s`` the
    step ``1 / scale`` when a scale was given, else ``in / out``."""
    j = jax.lax.iota(jnp.float32, out_size)
    size = jnp.asarray(in_size)
    step = _step_in_program(size, out_size, scale, jnp.float32)
    src = (j + np.float32(0.5)) * step if exact else j * step
    return jnp.minimum(jnp.floor(src).astype(jnp.int32), (size - 1).astype(jnp.int32))


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


@lowering(aten.upsample_bilinear2d.default)
def lower_upsample_bilinear2d_default(ctx, self, output_size, align_corners, scales_h=None, scales_w=None):
    """upsample_bilinear2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    As upsample_bilinear2d.vec with an explicit output size and optional scales (what the tpu device runs:
    torch's decomposition of it rounded a uint8 image's float result, where the CPU computes in fixed point).
    """  # noqa: E501 (the first line is the exact schema)
    return bilinear_resize(ctx, self, list(output_size), [scales_h, scales_w], align_corners)


def bilinear_resize(ctx, input, out_sizes, scales, align_corners):
    """torch's (bi/tri)linear resize of the last ``len(out_sizes)`` dims (``scales``: the
    per-dim scale factors torch was given, or None), last dim first like torch's kernel;
    also the forward of the backward rows' ``jax.vjp``."""
    n = len(out_sizes)
    dtype = ctx.out_dtype or input.dtype
    static = all(isinstance(v, int) for v in list(input.shape[-n:]) + list(out_sizes))
    if not static and not jnp.issubdtype(dtype, jnp.inexact):
        _require_static(ctx, list(input.shape[-n:]) + list(out_sizes))
    if n == 2 and not jnp.issubdtype(dtype, jnp.inexact):  # a uint8 image: torch's fixed-point separable kernel
        return _fixed_point_resize(input, out_sizes, scales,
                                   lambda i, o, sc: _aa_matrix(i, o, sc, align_corners, 2, _triangle, False), dtype)
    acc = opmath_dtype(dtype)
    ft = _np_float(acc)
    x = input.astype(acc)
    for i in reversed(range(n)):
        ax = x.ndim - n + i
        lerp = _lerp if static else _lerp_dynamic
        x = lerp(x, ax, x.shape[ax], out_sizes[i], scales[i], align_corners, ft)
    return x.astype(dtype)


def _step_in_program(size, out_size, scale, ft):
    """:func:`_scale` (without ``align_corners``) of a dynamic size (``size``: the input size as an array): ``1 /
    scale`` when a scale was given, else ``in / out``, in ``ft``."""
    if scale is not None and scale > 0:
        return ft(1.0 / scale)
    return size.astype(ft) / jnp.asarray(out_size).astype(ft)


def _lerp_dynamic(x, ax, in_size, out_size, scale, align_corners, ft):
    """:func:`_lerp` of a dynamic size (a jax.export dim): torch's source coordinates and weights computed in the
    program, in ``ft`` as torch's kernel computes them (the step ``1 / scale`` when a scale was given, else
    ``in / out``, or ``(in - 1) / (out - 1)`` with ``align_corners``), where the static path holds constants."""
    ft = jnp.float64 if ft is np.float64 else jnp.float32
    j = jax.lax.iota(ft, out_size)
    size = jnp.asarray(in_size)
    if align_corners:
        wide = jnp.asarray(out_size) - 1
        step = jnp.where(wide > 0, (size - 1).astype(ft) / jnp.maximum(wide, 1).astype(ft), 0).astype(ft)
        src = step * j
    else:
        src = jnp.maximum(_step_in_program(size, out_size, scale, ft) * (j + ft(0.5)) - ft(0.5), ft(0))
    last = (size - 1).astype(jnp.int32)
    i0 = jnp.minimum(jnp.floor(src).astype(jnp.int32), last)
    lam = jnp.clip(src - i0.astype(ft), ft(0), ft(1))
    i1 = jnp.where(i0 < last, i0 + 1, i0)
    shape = [1] * x.ndim
    shape[ax] = out_size
    return (jnp.take(x, i0, axis=ax) * (ft(1) - lam).astype(x.dtype).reshape(shape)
            + jnp.take(x, i1, axis=ax) * lam.astype(x.dtype).reshape(shape))



def _cubic_taps(in_size: int, out_size: int, scale, align_corners: bool, ft):
    """torch's bicubic taps (``upsample_bicubic2d``, A = -0.75): for each output position the
    four clamped source indices and their weights, each an ``(4, out)`` array."""
    s = _scale(in_size, out_size, scale, ft, align_corners)
    j = np.arange(out_size).astype(ft)
    src = s * j if align_corners else s * (j + ft(0.5)) - ft(0.5)  # no clamp at 0 for cubic
    i0 = np.floor(src)
    t = (src - i0).astype(ft)
    a = ft(-0.75)

    def near(x):  # |x| <= 1
        return ((a + ft(2)) * x - (a + ft(3))) * x * x + ft(1)

    def far(x):  # 1 < |x| < 2
        return ((a * x - ft(5) * a) * x + ft(8) * a) * x - ft(4) * a

    weights = np.stack([far(t + ft(1)), near(t), near(ft(1) - t), far(ft(2) - t)]).astype(ft)
    idx = np.clip(i0.astype(np.int64)[None, :] + np.arange(-1, 3)[:, None], 0, in_size - 1)
    return idx, weights


@lowering(aten.upsample_bicubic2d.default)
def lower_upsample_bicubic2d_default(ctx, self, output_size, align_corners, scales_h=None, scales_w=None):
    """upsample_bicubic2d(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    :func:`bicubic_resize` (what the tpu device runs; torch.export decomposes it: torch's decomposition rounded a
    uint8 image's float result, where the CPU computes in fixed point).
    """  # noqa: E501 (the first line is the exact schema)
    return bicubic_resize(ctx, self, list(output_size), [scales_h, scales_w], align_corners)


def bicubic_resize(ctx, input, out_sizes, scales, align_corners):
    """torch's bicubic resize of the last two dims (separable 4-tap filters, width first, clamped
    borders), in float32 for float16/bfloat16; the forward of its backward row's ``jax.vjp``."""
    _require_static(ctx, list(input.shape[-2:]) + list(out_sizes))
    dtype = ctx.out_dtype or input.dtype
    if not jnp.issubdtype(dtype, jnp.inexact):  # a uint8 image: torch's fixed-point separable kernel
        return _fixed_point_resize(input, out_sizes, scales, lambda n, o, sc: _cubic_matrix(n, o, sc, align_corners),
                                   dtype)
    acc = opmath_dtype(dtype)
    ft = _np_float(acc)
    x = input.astype(acc)
    for ax, o, sc in ((x.ndim - 1, out_sizes[1], scales[1]), (x.ndim - 2, out_sizes[0], scales[0])):
        idx, w = _cubic_taps(x.shape[ax], o, sc, align_corners, ft)
        shape = [1] * x.ndim
        shape[ax] = o
        x = sum(jnp.take(x, jnp.asarray(idx[k]), axis=ax) * jnp.asarray(w[k], acc).reshape(shape) for k in range(4))
    return x.astype(dtype)


def _triangle(x: np.ndarray) -> np.ndarray:
    return np.maximum(1.0 - np.abs(x), 0.0)


def _keys_cubic(x: np.ndarray) -> np.ndarray:
    """Keys' cubic convolution kernel with a = -0.5 (torch's antialiased bicubic filter, as PIL's)."""
    a, x = -0.5, np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _aa_matrix(in_size: int, out_size: int, scale, align_corners: bool, taps: int = 2,
               kernel=_triangle, antialias: bool = True) -> np.ndarray:
    """torch's separable resize weights (``_compute_indices_min_size_weights_aa``): ``kernel`` over
    ``taps`` input pixels, normalized per output; antialiased, its support widens by the scale when downsampling;
    without antialiasing (a uint8 image's bilinear resize) ``align_corners`` centers the taps on the corners."""
    s = float(_scale(in_size, out_size, scale, np.float64, align_corners))
    wide = antialias and s >= 1.0
    support = taps / 2 * s if wide else taps / 2
    invscale = 1.0 / s if wide else 1.0
    delta = 0.5 if align_corners and not antialias else 0.0
    m = np.zeros((out_size, in_size), np.float64)
    for i in range(out_size):
        center = s * (i + 0.5 - delta) + delta
        xmin = max(int(center - support + 0.5), 0)
        xmax = min(int(center + support + 0.5), in_size)
        j = np.arange(xmin, xmax)
        w = kernel((j - center + 0.5) * invscale)
        total = w.sum()
        m[i, xmin:xmax] = w / total if total != 0 else w
    return m


def _fixed_point_pass(x, m: np.ndarray, ax: int, dtype):
    """One pass of torch's uint8 resize (``_compute_indices_int16_weights_aa``, Pillow's): the weights ``m`` times
    ``2^p`` rounded half away from zero (``p`` the precision, below 22, that keeps the largest weight times 2^(p+1)
    under 2^15), each output ``(2^(p-1) + sum of pixel * weight) >> p`` saturated, in int32 (as gathered taps:
    exact in every target)."""
    largest = m.max()
    p = next((q for q in range(22) if int(0.5 + largest * (1 << (q + 1))) >= (1 << 15)), 22)
    v = m * (1 << p)
    w = np.where(v < 0, np.trunc(v - 0.5), np.trunc(v + 0.5)).astype(np.int32)
    k = max(int(np.count_nonzero(w, axis=1).max()), 1)
    idx, wk = np.zeros((k, m.shape[0]), np.int64), np.zeros((k, m.shape[0]), np.int32)
    for i, row in enumerate(w):
        nz = np.nonzero(row)[0]
        idx[:len(nz), i], wk[:len(nz), i] = nz, row[nz]
    shape = [1] * x.ndim
    shape[ax] = m.shape[0]
    acc = jnp.full((), 1 << (p - 1), jnp.int32)
    for t in range(k):
        acc = acc + jnp.take(x, jnp.asarray(idx[t]), axis=ax) * jnp.asarray(wk[t]).reshape(shape)
    info = jnp.iinfo(dtype)
    return jnp.clip(jnp.right_shift(acc, p), info.min, info.max)


def _fixed_point_resize(x, out_sizes, scales, matrix, dtype):
    """A uint8 image's 2-D resize as torch's CPU computes it: width then height, each a :func:`_fixed_point_pass`
    of the weights ``matrix(in_size, out_size, scale)`` (saturated to the image's range between them), a dim of
    unchanged size skipped."""
    x = x.astype(jnp.int32)
    for ax, o, sc in ((x.ndim - 1, out_sizes[1], scales[1]), (x.ndim - 2, out_sizes[0], scales[0])):
        if o != x.shape[ax]:
            x = _fixed_point_pass(x, matrix(x.shape[ax], o, sc), ax, dtype)
    return x.astype(dtype)


def _cubic_matrix(in_size: int, out_size: int, scale, align_corners: bool) -> np.ndarray:
    """The ``(out, in)`` weights of :func:`_cubic_taps` (a clamped tap's weight added to its border pixel's)."""
    idx, w = _cubic_taps(in_size, out_size, scale, align_corners, np.float64)
    m = np.zeros((out_size, in_size), np.float64)
    for k in range(4):
        np.add.at(m, (np.arange(out_size), idx[k]), w[k])
    return m


def _aa_resize(ctx, x, output_size, align_corners, scales_h, scales_w, taps, kernel):
    _require_static(ctx, list(x.shape[-2:]) + list(output_size))
    dtype = ctx.out_dtype or x.dtype
    if not jnp.issubdtype(dtype, jnp.inexact):  # (uint8 images)
        return _fixed_point_resize(x, output_size, (scales_h, scales_w),
                                   lambda n, o, sc: _aa_matrix(n, o, sc, align_corners, taps, kernel), dtype)
    acc = opmath_dtype(dtype)
    x = x.astype(acc)
    for ax, o, s in ((x.ndim - 1, output_size[1], scales_w), (x.ndim - 2, output_size[0], scales_h)):
        m = jnp.asarray(_aa_matrix(x.shape[ax], o, s, align_corners, taps, kernel), acc)
        x = jnp.moveaxis(jax.lax.dot_general(x, m, (((ax,), (1,)), ((), ())), precision=jax.lax.Precision.HIGHEST),
                         -1, ax)
    return x.astype(dtype)


@lowering(aten._upsample_bilinear2d_aa.default)
def lower__upsample_bilinear2d_aa_default(ctx, self, output_size, align_corners, scales_h=None, scales_w=None):
    """_upsample_bilinear2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    Antialiased bilinear resize (``F.interpolate(..., antialias=True)``): per spatial
    dim a ``dot_general`` (precision HIGHEST) with a constant ``(out, in)`` matrix of
    torch's normalized triangle-filter weights, whose support widens by the scale
    when downsampling.
    """
    return _aa_resize(ctx, self, output_size, align_corners, scales_h, scales_w, 2, _triangle)


@lowering(aten._upsample_bicubic2d_aa.default)
def lower__upsample_bicubic2d_aa_default(ctx, self, output_size, align_corners, scales_h=None, scales_w=None):
    """_upsample_bicubic2d_aa(Tensor self, SymInt[2] output_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    Antialiased bicubic resize (``F.interpolate(..., mode="bicubic", antialias=True)``, torchvision's
    ``resize(antialias=True)``): as the bilinear one, with Keys' cubic kernel (a = -0.5) over 4 taps.
    """
    return _aa_resize(ctx, self, output_size, align_corners, scales_h, scales_w, 4, _keys_cubic)

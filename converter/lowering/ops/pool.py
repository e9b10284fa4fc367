"""Pooling: max (with indices), average, adaptive average and adaptive max, 2d and 3d.

torch.export lowers the 1d variants to the 2d ops between ``unsqueeze``/``squeeze``,
``adaptive_avg_pool2d(x, 1)`` to ``mean.dim``, ``lp_pool`` to ``avg_pool`` + elementwise.
Inputs may be batched ``(N, C, *spatial)`` or unbatched ``(C, *spatial)``: pooling runs
over the last 2 (or 3) dims. Indices follow torch: an index into the flattened
spatial dims of the input, per channel.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import opmath_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _expand(v, n: int, default=None) -> list:
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        v = default
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def _out_size(size, k: int, s: int, p: int, d: int, ceil_mode: bool):
    """torch's ``pooling_output_shape``."""
    out = (size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _lowest(dtype):
    return -jnp.inf if jnp.issubdtype(dtype, jnp.floating) else jnp.iinfo(dtype).min


def _uses_output(ctx, index: int) -> bool:
    """Whether the FX graph reads output ``index`` of a multi-output node (unknown: True)."""
    node = ctx.node
    if node is None:
        return True
    for user in node.users:
        if getattr(user.target, "__name__", "") != "getitem" or user.args[1] == index:
            return True
    return False


def _window(x, n: int, k, s, p, d, ceil_mode: bool):
    """Per spatial dim (lo, hi) pads, output sizes, and the number of leading dims."""
    lead = x.ndim - n
    sizes = x.shape[lead:]
    outs = [_out_size(sz, kk, ss, pp, dd, ceil_mode) for sz, kk, ss, pp, dd in zip(sizes, k, s, p, d)]
    # hi pad: what the last window needs (>= 0; a larger pad only adds windows we slice off). Of a dynamic size,
    # its bound: the last window starts at (o - 1) * s <= size + 2p - d(k - 1) - 1 (+ s - 1 in ceil mode), so it
    # ends within p (+ s - 1) of the input's end (a pad that depends on the size has no static value).
    pads = [(pp, max((o - 1) * ss + dd * (kk - 1) + 1 - sz - pp, 0) if isinstance(sz, int)
             else pp + (ss - 1 if ceil_mode else 0))
            for sz, o, kk, ss, pp, dd in zip(sizes, outs, k, s, p, d)]
    return pads, outs, lead


def _reduce(x, init, op, n, k, s, pads, d, outs):
    lead = x.ndim - n
    y = jax.lax.reduce_window(x, np.asarray(init, x.dtype), op, (1,) * lead + tuple(k), (1,) * lead + tuple(s),
                              ((0, 0),) * lead + tuple(pads), window_dilation=(1,) * lead + tuple(d))
    return y[(slice(None),) * lead + tuple(slice(0, o) for o in outs)]


def _max_pool(ctx, op, n, x, kernel_size, stride, padding, dilation, ceil_mode):
    k = _expand(kernel_size, n)
    s = _expand(stride, n, default=k)
    p, d = _expand(padding, n), _expand(dilation, n)
    if any(pp * 2 > kk for pp, kk in zip(p, k)):
        raise UnsupportedOpError(str(op), ctx.target, ctx.location, reason="pad should be at most half of kernel size")
    pads, outs, lead = _window(x, n, k, s, p, d, ceil_mode)
    low = _lowest(x.dtype)
    values = _reduce(x, low, jax.lax.max, n, k, s, pads, d, outs)
    idx_shape = x.shape[:lead] + tuple(outs)
    if not _uses_output(ctx, 1):
        # The graph never reads the indices (the usual max_pool2d): a constant keeps the
        # op's two-output signature and is dead code for XLA and the exporters.
        return values, jnp.zeros(idx_shape, jnp.int64)
    xp = jnp.pad(x, ((0, 0),) * lead + tuple(pads), constant_values=low)
    cands, offsets = [], list(np.ndindex(*k))
    for off in offsets:
        start = (0,) * lead + tuple(o * dd for o, dd in zip(off, d))
        limit = tuple(xp.shape[:lead]) + tuple(st + (o - 1) * ss + 1 for st, o, ss in zip(start[lead:], outs, s))
        cands.append(jax.lax.slice(xp, start, limit, (1,) * lead + tuple(s)))
    sizes = x.shape[lead:]
    stacked, real = jnp.stack(cands, axis=-1), True
    bases, steps = [], []
    for i in range(n):
        off_i = jnp.asarray(np.array([o[i] for o in offsets], np.int64)) * d[i]
        base = jax.lax.broadcasted_iota(jnp.int64, idx_shape, lead + i) * s[i] - p[i]
        at = base[..., None] + off_i
        real = real & (at >= 0) & (at < sizes[i])
        bases.append(base), steps.append(off_i)
    # the window's first maximum, or last NaN, like torch's scan: an argmax of the window itself, not a search
    # for elements equal to ``values``. XLA may compute a fused producer of ``x`` (a norm's output) once for the
    # reduce_window and again for these slices, a rounding apart: no element then equalled the maximum, and the
    # window's first element was reported (wrong max-pool gradients in fused eager and torch.compile). Padding
    # holds the dtype's lowest value, which an all -inf / all INT_MIN window ties with: its first input element.
    best = _torch_argmax(stacked, real)
    best = jnp.where(jnp.take_along_axis(real, best[..., None], axis=-1)[..., 0], best, jnp.argmax(real, axis=-1))
    flat = jnp.zeros(idx_shape, jnp.int64)
    for i in range(n):
        mult = math.prod(sizes[i + 1:]) if i + 1 < n else 1
        flat = flat + (bases[i] + steps[i][best]) * mult
    return values, flat


def _torch_argmax(windows, real=True):
    """The index along the last axis that torch's CPU max-pool kernels report: the first maximum, or the last NaN
    (their scan takes an element that is greater than the maximum so far, or NaN). ``real`` marks the elements
    that are input, not padding."""
    best = jnp.argmax(windows, axis=-1)
    if not jnp.issubdtype(windows.dtype, jnp.floating):
        return best
    nan = jnp.isnan(windows) & real
    last_nan = windows.shape[-1] - 1 - jnp.argmax(jnp.flip(nan, axis=-1), axis=-1)
    return jnp.where(jnp.any(nan, axis=-1), last_nan, best)


@lowering(aten.max_pool2d_with_indices.default)
def lower_max_pool2d_with_indices_default(ctx, self, kernel_size, stride=(), padding=0, dilation=1,
                                          ceil_mode=False):
    """max_pool2d_with_indices(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)

    Values: ``reduce_window`` max over a ``-inf``-padded input (XLA/LiteRT MAX_POOL).
    Indices, only when the graph reads them: one strided ``slice`` per kernel offset,
    ``argmax`` over the stack (the first maximum, or the last NaN, as torch's CPU
    kernel reports them), mapped back to the flattened ``H*W`` input position.
    """
    return _max_pool(ctx, aten.max_pool2d_with_indices.default, 2, self, kernel_size, stride, padding, dilation,
                     ceil_mode)


@lowering(aten.max_pool3d_with_indices.default)
def lower_max_pool3d_with_indices_default(ctx, self, kernel_size, stride=(), padding=0, dilation=1,
                                          ceil_mode=False):
    """max_pool3d_with_indices(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, int[3] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)

    As max_pool2d_with_indices over three spatial dims (indices into ``D*H*W``).
    """
    return _max_pool(ctx, aten.max_pool3d_with_indices.default, 3, self, kernel_size, stride, padding, dilation,
                     ceil_mode)


def _avg_pool(ctx, n, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override):
    k = _expand(kernel_size, n)
    s = _expand(stride, n, default=k)
    p = _expand(padding, n)
    d = [1] * n
    pads, outs, lead = _window(x, n, k, s, p, d, ceil_mode)
    dtype = ctx.out_dtype or x.dtype
    acc = opmath_dtype(dtype) if jnp.issubdtype(dtype, jnp.floating) else jnp.int64
    total = _reduce(x.astype(acc), 0, jax.lax.add, n, k, s, pads, d, outs)
    if divisor_override:
        div = jnp.asarray(divisor_override, acc)
    else:
        div = jnp.ones((), jnp.int64)
        for i, (sz, o) in enumerate(zip(x.shape[lead:], outs)):
            start = jnp.arange(o, dtype=jnp.int64) * s[i] - p[i]
            end = jnp.minimum(start + k[i], sz + p[i])
            cnt = end - start if count_include_pad else jnp.minimum(end, sz) - jnp.maximum(start, 0)
            div = div[..., None] * cnt if i else cnt
        div = div.astype(acc)
    if jnp.issubdtype(acc, jnp.integer):
        return jax.lax.div(total, jnp.broadcast_to(div, total.shape)).astype(dtype)  # C++ truncation
    return (total / div).astype(dtype)


@lowering(aten.avg_pool2d.default)
def lower_avg_pool2d_default(ctx, self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                             divisor_override=None):
    """avg_pool2d(Tensor self, int[2] kernel_size, int[2] stride=[], int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor

    ``reduce_window`` add over the zero-padded input (float16/bfloat16 summed in
    float32), divided by torch's divisor: ``divisor_override``, else the window clipped
    to the padded extent (``count_include_pad``) or to the input. Integer inputs divide
    with truncation, like torch's C++ kernel.
    """
    return _avg_pool(ctx, 2, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


@lowering(aten.avg_pool3d.default)
def lower_avg_pool3d_default(ctx, self, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
                             divisor_override=None):
    """avg_pool3d(Tensor self, int[3] kernel_size, int[3] stride=[], int[3] padding=0, bool ceil_mode=False, bool count_include_pad=True, int? divisor_override=None) -> Tensor

    As avg_pool2d over three spatial dims.
    """
    return _avg_pool(ctx, 3, self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _bounds(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """torch's adaptive-pool windows: [floor(j*in/out), ceil((j+1)*in/out))."""
    j = np.arange(out_size, dtype=np.int64)
    return (j * in_size) // out_size, -((-(j + 1) * in_size) // out_size)


def _dynamic_windows(in_size, out_size: int, dtype):
    """``(out, in)`` indicator of torch's adaptive-pool windows (:func:`_bounds`) for a dynamic ``in_size`` (a
    jax.export dim), computed in the program: 1 where input ``i`` is in output ``j``'s window."""
    j = jax.lax.broadcasted_iota(jnp.int64, (out_size, in_size), 0)
    i = jax.lax.broadcasted_iota(jnp.int64, (out_size, in_size), 1)
    n = jnp.asarray(in_size, jnp.int64)
    lo, hi = (j * n) // out_size, -((-(j + 1) * n) // out_size)
    return ((i >= lo) & (i < hi)).astype(dtype)


def _static(ctx, sizes) -> list[int]:
    if not all(isinstance(sz, int) for sz in sizes):
        op = ctx.node.target if ctx.node is not None else "adaptive pooling"
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason="adaptive pooling needs static spatial sizes")
    return list(sizes)


@lowering(aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default)
def lower__adaptive_avg_pool2d_default(ctx, self, output_size):
    """_adaptive_avg_pool2d(Tensor self, SymInt[2] output_size) -> Tensor

    Also _adaptive_avg_pool3d. Separable, one spatial dim at a time: when the input
    size is a multiple of the output size, ``reshape`` + ``reduce_sum`` / window size;
    otherwise a ``dot_general`` (precision HIGHEST) with a constant averaging matrix
    holding torch's windows ``[floor(j*in/out), ceil((j+1)*in/out))``.

    Raises:
        RuntimeError: an empty non-batch dimension (torch's message; its windows would average nothing).
    """
    n = len(output_size)
    for d in range(1, self.ndim):
        if isinstance(self.shape[d], int) and self.shape[d] == 0:
            name = "adaptive_avg_pool2d" if n == 2 else "adaptive_avg_pool3d"
            raise RuntimeError(f"{name}(): Expected input to have non-zero size for non-batch dimensions, but input "
                               f"has sizes {list(self.shape)} with dimension {d} being empty")
    dtype = ctx.out_dtype or self.dtype
    acc = opmath_dtype(dtype)
    y = self.astype(acc)
    lead = self.ndim - n
    for i, o in enumerate(output_size):
        ax = lead + i
        size = y.shape[ax]
        if isinstance(size, int) and isinstance(o, int) and o > 0 and size % o == 0 or size == o:
            if size != o:
                f = size // o
                y = y.reshape(y.shape[:ax] + (o, f) + y.shape[ax + 1:]).sum(axis=ax + 1) / f
            continue
        if not isinstance(size, int):  # a dynamic size: the averaging matrix is built in the program
            m = _dynamic_windows(size, o, acc)
            y = jnp.moveaxis(jax.lax.dot_general(y, m / jnp.sum(m, axis=1, keepdims=True), (((ax,), (1,)), ((), ())),
                                                 precision=jax.lax.Precision.HIGHEST), -1, ax)
            continue
        lo, hi = _bounds(size, o)
        m = np.zeros((o, size), np.float64)
        for j in range(o):
            m[j, lo[j]:hi[j]] = 1.0 / (hi[j] - lo[j])
        y = jax.lax.dot_general(y, jnp.asarray(m, acc), (((ax,), (1,)), ((), ())),
                                precision=jax.lax.Precision.HIGHEST)
        y = jnp.moveaxis(y, -1, ax)
    return y.astype(dtype)


@lowering(aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default)
def lower_adaptive_max_pool2d_default(ctx, self, output_size):
    """adaptive_max_pool2d(Tensor self, int[2] output_size) -> (Tensor, Tensor)

    Also adaptive_max_pool3d. Each spatial dim is ``gather``-ed into ``(out, kmax)``
    windows (shorter windows repeat their last element, which changes neither the max nor
    the first-max index); ``reduce_max`` gives the values and, when the graph reads
    them, ``argmax`` (the first maximum, or the last NaN, as torch's CPU kernel) plus a
    constant table gives torch's flattened-spatial indices.
    """
    n = len(output_size)
    lead = self.ndim - n
    if not all(isinstance(v, int) for v in self.shape[lead:]) and not _uses_output(ctx, 1):
        return _dynamic_adaptive_max(self, lead, output_size)
    sizes = _static(ctx, self.shape[lead:])
    y, tables = self, []
    for i, (size, o) in enumerate(zip(sizes, output_size)):
        lo, hi = _bounds(size, o)
        kmax = int((hi - lo).max())
        idx = np.minimum(lo[:, None] + np.arange(kmax)[None, :], hi[:, None] - 1)  # (o, kmax)
        tables.append(idx)
        ax = lead + 2 * i
        y = jnp.take(y, jnp.asarray(idx.reshape(-1)), axis=ax)
        y = y.reshape(y.shape[:ax] + (o, kmax) + y.shape[ax + 1:])
    # axes now: lead, o1, k1, o2, k2, ... → lead, o1, o2, ..., k1*k2*...
    perm = list(range(lead)) + [lead + 2 * i for i in range(n)] + [lead + 2 * i + 1 for i in range(n)]
    y = jnp.transpose(y, perm)
    ks = [t.shape[1] for t in tables]
    y = y.reshape(y.shape[:lead + n] + (math.prod(ks),))
    values = jnp.max(y, axis=-1)
    if not _uses_output(ctx, 1):
        return values, jnp.zeros(values.shape, jnp.int64)
    # flat[o1..on, k1..kn] = sum_i table_i[o_i, k_i] * stride_i
    flat = np.zeros(tuple(output_size) + tuple(ks), np.int64)
    for i, t in enumerate(tables):
        mult = math.prod(sizes[i + 1:])
        shape = [1] * (2 * n)
        shape[i], shape[n + i] = t.shape
        flat = flat + t.reshape(shape) * mult
    flat = jnp.asarray(flat.reshape(tuple(output_size) + (-1,)))
    best = _torch_argmax(y)  # (a repeated last element maps to itself: the last NaN stays the last)
    index = jnp.take_along_axis(jnp.broadcast_to(flat, y.shape), best[..., None], axis=-1)[..., 0]
    return values, index


def _dynamic_adaptive_max(x, lead: int, output_size):
    """adaptive max pooling's values over dynamic spatial sizes (its indices unread), one dim at a time (a window's
    maximum is the maximum of its rows' maxima): each input element masked into every window that holds it (the
    others the lowest value, a NaN kept), the maximum taken over the input dim."""
    y = x
    for i, o in enumerate(output_size):
        ax = lead + i
        inside = _dynamic_windows(y.shape[ax], o, jnp.bool_)  # (o, in)
        z = jnp.expand_dims(jnp.moveaxis(y, ax, -1), -2)  # (..., 1, in)
        z = jnp.max(jnp.where(inside, z, jnp.asarray(_lowest(y.dtype), y.dtype)), axis=-1)  # (..., o)
        y = jnp.moveaxis(z, -1, ax)
    return y, jnp.zeros(y.shape, jnp.int64)


@lowering(aten.max_unpool2d.default, aten.max_unpool3d.default)
def lower_max_unpool2d_default(ctx, self, indices, output_size, stride=None, padding=None):
    """max_unpool2d(Tensor self, Tensor indices, SymInt[2] output_size) -> Tensor

    Also max_unpool3d (whose ``stride`` and ``padding`` do not change the result). Each plane of ``self``
    (the dims before the last 2 or 3) is scattered into a zero plane of ``output_size``'s elements at the
    flattened positions ``indices`` gives, as torch's kernel writes them (a duplicated index keeps one of its
    values). An index outside its plane is dropped here: the runtime refuses it first, with the CPU's message
    (``tpu_runtime.bounds``), in eager and in compiled graphs, where torch's decomposition would write it into
    the next plane.
    """
    n = len(output_size)
    lead = tuple(self.shape[:-n])
    planes, plane = math.prod(lead), math.prod(self.shape[-n:])
    size = math.prod(output_size)
    out = jnp.zeros((planes, size), self.dtype)
    if planes and plane and size:
        rows = jnp.arange(planes)[:, None]
        out = out.at[rows, indices.reshape(planes, plane)].set(self.reshape(planes, plane), mode="drop")
    return out.reshape(lead + tuple(output_size))

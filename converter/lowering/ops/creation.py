"""Tensor creation: arange, full, full_like, empty*, tril/triu_indices, window functions (scalar_tensor: convert.py).

zeros/ones/new_zeros/new_full, zeros_like/ones_like, eye, linspace, tril/triu
all decompose into these (plus elementwise ops) before lowering.

``empty*`` ops return zeros: PyTorch leaves the memory uninitialized, so any
value is correct, and zeros keep the program deterministic (DESIGN.md: same
model + inputs → byte-identical artifacts).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.lowering.dtypes import to_jax_dtype
from converter.lowering.helpers import check_fits
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _scalar_dtype(ctx, value, dtype):
    """torch's dtype for a factory: explicit ``dtype``, else from the python scalar."""
    if ctx.out_dtype is not None:
        return ctx.out_dtype
    if dtype is not None:
        return to_jax_dtype(dtype)
    if isinstance(value, bool):
        return jnp.bool_
    if isinstance(value, int):
        return jnp.int64
    return jnp.float32


def _arange_length(start, end, step):
    """torch's rule: ``ceil((end - start) / step)``, kept symbolic for integer SymInt bounds."""
    if all(isinstance(v, (int, float)) for v in (start, end, step)):
        if any(isinstance(v, float) for v in (start, end, step)):
            return max(math.ceil((end - start) / step), 0)
        return max(-((start - end) // step), 0)
    if step > 0:  # symbolic integer bounds (e.g. arange(x.shape[0]))
        return (end - start + step - 1) // step
    return (start - end - step - 1) // (-step)


@lowering(aten.arange.start_step)
def lower_arange_start_step(ctx, start, end, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    """arange.start_step(Scalar start, Scalar end, Scalar step=1, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Emits ``iota`` * step + start: exact int64 for integer results, computed in
    float64 then cast for float results (torch's CPU accumulation). Length is
    ``ceil((end - start) / step)`` from the given numbers; an integer result steps from the truncated
    start by the truncated step, as torch's CPU kernel (``arange(0, 5, 1.5, dtype=int32)`` is 0, 1, 2, 3).
    arange.default/.start decompose to this.
    """
    integral = all(not isinstance(v, float) for v in (start, end, step))
    out = ctx.out_dtype or (jnp.int64 if integral else jnp.float32)
    n = ctx.out_shape[0] if ctx.out_shape and isinstance(ctx.out_shape[0], int) else _arange_length(start, end, step)
    if jnp.issubdtype(out, jnp.integer):  # (an integer result steps by the truncated step, as the CPU: 1.5 → 1)
        start, step = (int(v) if isinstance(v, float) else v for v in (start, step))
        return (jax.lax.iota(jnp.int64, n) * step + start).astype(out)
    return (jax.lax.iota(jnp.float64, n) * step + start).astype(out)


@lowering(aten.linspace.default)
def lower_linspace_default(ctx, start, end, steps, *, dtype=None, layout=None, device=None, pin_memory=None):
    """linspace(Scalar start, Scalar end, int steps, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    torch's CPU kernel: the first half ``start + step * i``, the rest ``end - step * (steps - 1 - i)``,
    so both ends are exact; ``start``, ``end`` and ``step`` in the result's dtype (float64 for integers, then
    truncated), each value rounded once as its fused multiply-add is (computed in float64 for a float32
    result); float16 and bfloat16 round every operation to the dtype, as the CPU's half types compute. Its
    decomposition differed by 1-3 ulp, moving ``torch.histogram``'s points that lie on an edge into another bin.
    """  # noqa: E501 (the first line is the exact schema)
    return linspace_values(start, end, steps, ctx.out_dtype or jnp.float32)


def linspace_values(start, end, steps: int, out):
    """torch's CPU ``linspace`` of ``steps`` values of dtype ``out`` (``start``/``end``: scalars or 0-d arrays):
    see :func:`lower_linspace_default`; also ``torch.histogram``'s bin edges."""
    if out in (jnp.float16, jnp.bfloat16):
        return _half_linspace(start, end, steps, out)
    complex_ = jnp.issubdtype(out, jnp.complexfloating)
    if jnp.issubdtype(out, jnp.integer):
        calc, wide = jnp.float64, jnp.float64
    elif complex_:
        calc = wide = out
    else:
        calc = jnp.float64 if out == jnp.float64 else jnp.float32
        wide = jnp.float64
    s = jnp.asarray(start, out).astype(calc)
    e = jnp.asarray(end, out).astype(calc)
    # (the quotient in float64, rounded once: XLA's float32 division by a constant multiplies by its reciprocal)
    step = ((e - s).astype(wide) / jnp.asarray(max(steps - 1, 1), wide)).astype(calc)
    i = jax.lax.iota(wide, steps)
    s, e, step = s.astype(wide), e.astype(wide), step.astype(wide)
    first = i < max(steps // 2, 1)  # (one step: the start)
    k = jnp.where(first, i, -(steps - 1 - i))
    base = jnp.where(first, s, e)
    if calc == jnp.float64:  # float64 has no wider type: the product's rounding error, added back
        return _fma_f64(step, k, base).astype(out)
    return (base + step * k).astype(out)


def _half_linspace(start, end, steps: int, out):
    """``linspace`` in float16/bfloat16 as torch's CPU kernel computes it: in the dtype itself, each operation
    (``end - start``, the division into a step, the index's conversion, ``step * k``, the sum) rounded to it
    (``lax.reduce_precision``: XLA may otherwise keep float32 between operations)."""
    fi = jnp.finfo(out)

    def rounded(v):
        return jax.lax.reduce_precision(v, fi.nexp, fi.nmant)

    s, e = jnp.asarray(start, out).astype(jnp.float32), jnp.asarray(end, out).astype(jnp.float32)
    step = rounded(rounded(e - s) / rounded(jnp.float32(max(steps - 1, 1))))
    i = jax.lax.iota(jnp.float32, steps)
    first = i < max(steps // 2, 1)
    product = rounded(step * rounded(jnp.where(first, i, steps - 1 - i)))
    return jnp.where(first, rounded(s + product), rounded(e - product)).astype(out)


def _fma_f64(a, k, c):
    """``a * k + c`` rounded once (nearly always), for float64 ``a``, ``c`` and small integers ``k``: Veltkamp's
    split of ``a`` makes both partial products exact, then the sum's error is added back (Knuth's TwoSum)."""
    t = a * 134217729.0  # 2^27 + 1
    hi = t - (t - a)
    lo = a - hi
    p = a * k
    perr = (hi * k - p) + lo * k
    total = p + c
    bp = total - p
    serr = (p - (total - bp)) + (c - bp)
    return total + (serr + perr)


@lowering(aten.full.default)
def lower_full_default(ctx, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Emits ``broadcast`` of a constant. zeros/ones/new_zeros/new_ones/new_full decompose to this. An int the
    dtype cannot hold is refused, as by torch.
    """
    out = _scalar_dtype(ctx, fill_value, dtype)
    fill_value = check_fits(fill_value, out)
    return jnp.full(tuple(size), fill_value, dtype=out)


@lowering(aten.full_like.default)
def lower_full_like_default(ctx, self, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
                            memory_format=None):
    """full_like(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    Emits ``broadcast`` of a constant in ``self``'s shape. zeros_like, ones_like,
    fill_ and zero_ decompose to this.
    """
    out = ctx.out_dtype or (to_jax_dtype(dtype) if dtype is not None else self.dtype)
    return jnp.full(self.shape, fill_value, dtype=out)


@lowering(aten.empty.memory_format)
def lower_empty_memory_format(ctx, size, *, dtype=None, layout=None, device=None, pin_memory=None,
                              memory_format=None):
    """empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    Zeros (torch's contents are undefined; zeros keep outputs deterministic).
    """
    return jnp.zeros(tuple(size), ctx.out_dtype or to_jax_dtype(dtype or torch.float32))


@lowering(aten.empty_strided.default)
def lower_empty_strided_default(ctx, size, stride, *, dtype=None, layout=None, device=None, pin_memory=None):
    """empty_strided(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Zeros; the stride is a memory-layout detail with no meaning for JAX values.
    """
    return jnp.zeros(tuple(size), ctx.out_dtype or to_jax_dtype(dtype or torch.float32))


@lowering(aten.empty_permuted.default)
def lower_empty_permuted_default(ctx, size, physical_layout, *, dtype=None, layout=None, device=None,
                                 pin_memory=None):
    """empty_permuted(SymInt[] size, int[] physical_layout, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Zeros of the logical ``size`` (physical_layout only orders memory). empty_like decomposes to this.
    """
    return jnp.zeros(tuple(size), ctx.out_dtype or to_jax_dtype(dtype or torch.float32))


@lowering(aten.new_empty_strided.default)
def lower_new_empty_strided_default(ctx, self, size, stride, *, dtype=None, layout=None, device=None,
                                    pin_memory=None):
    """new_empty_strided(Tensor self, SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Zeros in ``self``'s dtype unless ``dtype`` is given.
    """
    return jnp.zeros(tuple(size), ctx.out_dtype or (to_jax_dtype(dtype) if dtype is not None else self.dtype))


def _tri_indices(ctx, fn, row, col, offset, dtype):
    out = ctx.out_dtype or (to_jax_dtype(dtype) if dtype is not None else jnp.int64)
    return jnp.asarray(np.stack(fn(row, offset, col)).reshape(2, -1), dtype=out)


@lowering(aten.tril_indices.default)
def lower_tril_indices_default(ctx, row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    """tril_indices(int row, int col, int offset=0, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    A ``(2, n)`` constant computed at conversion time (row-major, as torch).
    """
    return _tri_indices(ctx, np.tril_indices, row, col, offset, dtype)


@lowering(aten.triu_indices.default)
def lower_triu_indices_default(ctx, row, col, offset=0, *, dtype=None, layout=None, device=None, pin_memory=None):
    """triu_indices(int row, int col, int offset=0, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    A ``(2, n)`` constant computed at conversion time (row-major, as torch).
    """
    return _tri_indices(ctx, np.triu_indices, row, col, offset, dtype)


def _window(ctx, fn, window_length, args, dtype):
    """A window function's values, computed by torch on the CPU at conversion time (the formula, its
    float rounding and its ``periodic`` convention are torch's own) as a constant."""
    if not isinstance(window_length, int):
        raise TypeError(f"{fn.__name__}: the window length must be a static int, got {window_length!r}")
    values = fn(window_length, *args, dtype=dtype if dtype is not None else torch.get_default_dtype())
    out = ctx.out_dtype or to_jax_dtype(values.dtype)
    return jnp.asarray(values.to(torch.float64).numpy(), dtype=out)


@lowering(aten.hann_window.default, aten.hann_window.periodic)
def lower_hann_window(ctx, window_length, *args, dtype=None, layout=None, device=None, pin_memory=None):
    """hann_window(int window_length, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Also hann_window.periodic(int window_length, bool periodic, ...). A constant (see :func:`_window`).
    """
    return _window(ctx, torch.hann_window, window_length, args, dtype)


@lowering(aten.hamming_window.default, aten.hamming_window.periodic, aten.hamming_window.periodic_alpha,
          aten.hamming_window.periodic_alpha_beta)
def lower_hamming_window(ctx, window_length, *args, dtype=None, layout=None, device=None, pin_memory=None):
    """hamming_window(int window_length, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Also hamming_window.periodic / .periodic_alpha / .periodic_alpha_beta(int window_length, bool periodic,
    float alpha=0.54, float beta=0.46, ...). A constant (see :func:`_window`).
    """
    return _window(ctx, torch.hamming_window, window_length, args, dtype)


@lowering(aten.blackman_window.default, aten.blackman_window.periodic)
def lower_blackman_window(ctx, window_length, *args, dtype=None, layout=None, device=None, pin_memory=None):
    """blackman_window(int window_length, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Also blackman_window.periodic(int window_length, bool periodic, ...). A constant (see :func:`_window`).
    """
    return _window(ctx, torch.blackman_window, window_length, args, dtype)


@lowering(aten.bartlett_window.default, aten.bartlett_window.periodic)
def lower_bartlett_window(ctx, window_length, *args, dtype=None, layout=None, device=None, pin_memory=None):
    """bartlett_window(int window_length, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Also bartlett_window.periodic(int window_length, bool periodic, ...). A constant (see :func:`_window`).
    """
    return _window(ctx, torch.bartlett_window, window_length, args, dtype)


@lowering(aten.kaiser_window.default, aten.kaiser_window.periodic, aten.kaiser_window.beta)
def lower_kaiser_window(ctx, window_length, *args, dtype=None, layout=None, device=None, pin_memory=None):
    """kaiser_window(int window_length, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Also kaiser_window.periodic(int window_length, bool periodic, ...) and kaiser_window.beta(int
    window_length, bool periodic, float beta, ...). A constant (see :func:`_window`).
    """
    return _window(ctx, torch.kaiser_window, window_length, args, dtype)

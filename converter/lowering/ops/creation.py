"""Tensor creation: arange, full, full_like, empty*, tril/triu_indices (scalar_tensor: convert.py).

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
    ``ceil((end - start) / step)``. arange.default/.start decompose to this.
    """
    integral = all(not isinstance(v, float) for v in (start, end, step))
    out = ctx.out_dtype or (jnp.int64 if integral else jnp.float32)
    n = ctx.out_shape[0] if ctx.out_shape and isinstance(ctx.out_shape[0], int) else _arange_length(start, end, step)
    if integral and jnp.issubdtype(out, jnp.integer):
        return (jax.lax.iota(jnp.int64, n) * step + start).astype(out)
    return (jax.lax.iota(jnp.float64, n) * step + start).astype(out)


@lowering(aten.full.default)
def lower_full_default(ctx, size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    """full(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Emits ``broadcast`` of a constant. zeros/ones/new_zeros/new_ones/new_full decompose to this. An int the
    dtype cannot hold is refused, as by torch.
    """
    out = _scalar_dtype(ctx, fill_value, dtype)
    check_fits(fill_value, out)
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

"""Comparisons, logical and bitwise ops, shifts, where, isnan/isinf, clamp, maximum/minimum.

Comparisons promote both sides to torch's common dtype first (an int tensor
compared with 2.5 compares as float32) and return bool. Logical ops treat any
non-zero value (NaN included) as True. ``masked_fill``, ``where.Scalar*``,
``clamp_min``/``clamp_max``, ``isfinite``/``isposinf`` and ``sgn`` do not survive
the core-ATen decomposition (they become where.self, clamp, eq…), so they need
no lowering of their own.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.lowering.dtypes import scalar_type_name
from converter.lowering.helpers import check_fits, promote
from converter.lowering.ops.elementwise import bcast, out_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _common(self, other):
    """Both operands in torch's common dtype (comparisons do not compute in opmath: exact; a python int outside
    an integer dtype's range wraps around into it, as in torch: ``int8 == 300`` compares with 44)."""
    return promote(self, other, wrap=True)


@lowering(aten.eq.Tensor, aten.eq.Scalar)
def lower_eq_tensor(ctx, self, other):
    """eq.Tensor(Tensor self, Tensor other) -> Tensor

    Also eq.Scalar. Emits ``compare EQ`` in the common dtype.
    """
    a, b = _common(self, other)
    return a == b


@lowering(aten.ne.Tensor, aten.ne.Scalar)
def lower_ne_tensor(ctx, self, other):
    """ne.Tensor(Tensor self, Tensor other) -> Tensor

    Also ne.Scalar. Emits ``compare NE`` (NaN != NaN is True).
    """
    a, b = _common(self, other)
    return a != b


@lowering(aten.lt.Tensor, aten.lt.Scalar)
def lower_lt_tensor(ctx, self, other):
    """lt.Tensor(Tensor self, Tensor other) -> Tensor

    Also lt.Scalar. Emits ``compare LT``.
    """
    a, b = _ordered("lt", self, other)
    return a < b


@lowering(aten.le.Tensor, aten.le.Scalar)
def lower_le_tensor(ctx, self, other):
    """le.Tensor(Tensor self, Tensor other) -> Tensor

    Also le.Scalar. Emits ``compare LE``.
    """
    a, b = _ordered("le", self, other)
    return a <= b


@lowering(aten.gt.Tensor, aten.gt.Scalar)
def lower_gt_tensor(ctx, self, other):
    """gt.Tensor(Tensor self, Tensor other) -> Tensor

    Also gt.Scalar. Emits ``compare GT``.
    """
    a, b = _ordered("gt", self, other)
    return a > b


@lowering(aten.ge.Tensor, aten.ge.Scalar)
def lower_ge_tensor(ctx, self, other):
    """ge.Tensor(Tensor self, Tensor other) -> Tensor

    Also ge.Scalar. Emits ``compare GE``.
    """
    a, b = _ordered("ge", self, other)
    return a >= b


def _ordered(name, self, other):
    """:func:`_common` for an ordering comparison.

    Raises:
        NotImplementedError: a complex operand (complex numbers have no order: torch's message)."""
    a, b = _common(self, other)
    if jnp.issubdtype(a.dtype, jnp.complexfloating):
        raise NotImplementedError(f'"{name}" not implemented for \'{scalar_type_name(a.dtype)}\'')
    return a, b


def _truth(x):
    """torch's truth value of a tensor element: non-zero (NaN is True)."""
    return x if x.dtype == jnp.bool_ else x != 0


def _logical_result(ctx, value):
    """Logical ops return bool unless torch recorded another dtype (``out=`` variants)."""
    dt = ctx.out_dtype
    return value if dt is None else value.astype(dt)


@lowering(aten.logical_and.default)
def lower_logical_and_default(ctx, self, other):
    """logical_and(Tensor self, Tensor other) -> Tensor

    Emits ``and`` on the operands' truth values.
    """
    return _logical_result(ctx, _truth(self) & _truth(other))


@lowering(aten.logical_or.default)
def lower_logical_or_default(ctx, self, other):
    """logical_or(Tensor self, Tensor other) -> Tensor

    Emits ``or`` on the operands' truth values.
    """
    return _logical_result(ctx, _truth(self) | _truth(other))


@lowering(aten.logical_xor.default)
def lower_logical_xor_default(ctx, self, other):
    """logical_xor(Tensor self, Tensor other) -> Tensor

    Emits ``xor`` on the operands' truth values.
    """
    return _logical_result(ctx, _truth(self) ^ _truth(other))


@lowering(aten.logical_not.default)
def lower_logical_not_default(ctx, self):
    """logical_not(Tensor self) -> Tensor

    Emits ``not`` on the truth value (``x == 0``).
    """
    return _logical_result(ctx, ~_truth(self))


@lowering(aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_and.Scalar_Tensor)
def lower_bitwise_and_tensor(ctx, self, other):
    """bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor

    Also bitwise_and.Scalar and .Scalar_Tensor. Emits ``and`` (logical on bool; see :func:`_on_bits`).
    """
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other), wrap=True)
    return _on_bits(ctx, a, b, jnp.bitwise_and)


@lowering(aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_or.Scalar_Tensor)
def lower_bitwise_or_tensor(ctx, self, other):
    """bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor

    Also bitwise_or.Scalar and .Scalar_Tensor. Emits ``or`` (logical on bool; see :func:`_on_bits`).
    """
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other), wrap=True)
    return _on_bits(ctx, a, b, jnp.bitwise_or)


def _on_bits(ctx, a, b, op):
    """``op(a, b)`` (``and``/``or``); for signed integers on the runtime's CPU backend, computed on their
    unsigned bits (the same bits out): XLA:CPU's compiler (jaxlib 0.10.2) crashes the process with a
    segmentation fault on ``and``/``or`` of two signed integers that are converts of another integer type
    (``x.to(torch.int8) & y.to(torch.int8)`` in one fused or compiled graph)."""
    dtype = jnp.dtype(a.dtype)
    if dtype.kind != "i" or ctx.target != "tpu" or jax.default_backend() != "cpu":
        return op(a, b)
    bits = jnp.dtype(f"uint{dtype.itemsize * 8}")
    unsigned = op(jax.lax.bitcast_convert_type(a, bits), jax.lax.bitcast_convert_type(b, bits))
    return jax.lax.bitcast_convert_type(unsigned, dtype)


@lowering(aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, aten.bitwise_xor.Scalar_Tensor)
def lower_bitwise_xor_tensor(ctx, self, other):
    """bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor

    Also bitwise_xor.Scalar and .Scalar_Tensor. Emits ``xor`` (logical on bool).
    """
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other), wrap=True)
    return a ^ b


@lowering(aten.bitwise_not.default)
def lower_bitwise_not_default(ctx, self):
    """bitwise_not(Tensor self) -> Tensor

    Emits ``not`` (logical not on bool).
    """
    return ~self


def _shift_left(ctx, self, other):
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other), wrap=True)
    # XLA and torch agree: a shift by a negative amount or by >= the bit width gives 0.
    return jax.lax.shift_left(*bcast(a, b))


def _shift_right(ctx, self, other):
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other), wrap=True)
    # Arithmetic for signed types (an out-of-range shift fills with the sign bit, as
    # torch does), logical for unsigned ones.
    a, b = bcast(a, b)
    if jnp.issubdtype(a.dtype, jnp.unsignedinteger):
        return jax.lax.shift_right_logical(a, b)
    return jax.lax.shift_right_arithmetic(a, b)


@lowering(aten.__lshift__.Tensor, aten.__lshift__.Scalar)
def lower___lshift___tensor(ctx, self, other):
    """__lshift__.Tensor(Tensor self, Tensor other) -> Tensor

    Also __lshift__.Scalar (``a << b``). Emits ``shift_left``.
    """
    return _shift_left(ctx, self, other)


@lowering(aten.bitwise_left_shift.Tensor, aten.bitwise_left_shift.Tensor_Scalar,
          aten.bitwise_left_shift.Scalar_Tensor)
def lower_bitwise_left_shift_tensor(ctx, self, other):
    """bitwise_left_shift.Tensor(Tensor self, Tensor other) -> Tensor

    Also .Tensor_Scalar and .Scalar_Tensor. Emits ``shift_left``.
    """
    return _shift_left(ctx, self, other)


@lowering(aten.__rshift__.Tensor, aten.__rshift__.Scalar)
def lower___rshift___tensor(ctx, self, other):
    """__rshift__.Tensor(Tensor self, Tensor other) -> Tensor

    Also __rshift__.Scalar (``a >> b``). Emits ``shift_right_arithmetic``
    (``shift_right_logical`` for unsigned types).
    """
    return _shift_right(ctx, self, other)


@lowering(aten.bitwise_right_shift.Tensor, aten.bitwise_right_shift.Tensor_Scalar,
          aten.bitwise_right_shift.Scalar_Tensor)
def lower_bitwise_right_shift_tensor(ctx, self, other):
    """bitwise_right_shift.Tensor(Tensor self, Tensor other) -> Tensor

    Also .Tensor_Scalar and .Scalar_Tensor. Emits ``shift_right_arithmetic``
    (``shift_right_logical`` for unsigned types).
    """
    return _shift_right(ctx, self, other)


@lowering(aten.where.self)
def lower_where_self(ctx, condition, self, other):
    """where.self(Tensor condition, Tensor self, Tensor other) -> Tensor

    Emits ``select`` after broadcasting; ``self``/``other`` take torch's promoted
    dtype. ``masked_fill`` and the where.Scalar* overloads decompose to this.
    """
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other))
    return jnp.where(_truth(condition), a, b)


@lowering(aten.isnan.default)
def lower_isnan_default(ctx, self):
    """isnan(Tensor self) -> Tensor

    Emits ``x != x`` (of either part of a complex value); always False for integer and bool tensors.
    """
    return jnp.isnan(self) if jnp.issubdtype(self.dtype, jnp.inexact) else jnp.zeros(self.shape, jnp.bool_)


@lowering(aten.isinf.default)
def lower_isinf_default(ctx, self):
    """isinf(Tensor self) -> Tensor

    Emits ``|x| == inf`` (of either part of a complex value); always False for integer and bool tensors.
    """
    return jnp.isinf(self) if jnp.issubdtype(self.dtype, jnp.inexact) else jnp.zeros(self.shape, jnp.bool_)


def _clamp(x, lo, hi):
    # max then min, as torch: NaN in x (or in a bound) propagates, and min > max gives max.
    if lo is not None:
        x = jnp.maximum(x, lo)
    if hi is not None:
        x = jnp.minimum(x, hi)
    return x


@lowering(aten.clamp.default)
def lower_clamp_default(ctx, self, min=None, max=None):  # noqa: A002 (schema names)
    """clamp(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor

    ``min(max(x, min), max)``; clamp_min/clamp_max decompose to this. A float
    bound on an integer tensor gives float32 (torch's promotion).
    """
    dt = out_dtype(ctx, self, min, max)
    lo = None if min is None else jnp.asarray(check_fits(min, dt), dt)  # (uint8 takes -1 as 255, as torch)
    hi = None if max is None else jnp.asarray(check_fits(max, dt), dt)
    return _clamp(self.astype(dt), lo, hi)


@lowering(aten.clamp.Tensor)
def lower_clamp_tensor(ctx, self, min=None, max=None):  # noqa: A002 (schema names)
    """clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor

    ``min(max(x, min), max)`` with broadcasting tensor bounds; clamp_min.Tensor
    and clamp_max.Tensor decompose to this.
    """
    dt = out_dtype(ctx, self, min, max)
    lo = None if min is None else min.astype(dt)
    hi = None if max is None else max.astype(dt)
    return _clamp(self.astype(dt), lo, hi)


@lowering(aten.maximum.default)
def lower_maximum_default(ctx, self, other):
    """maximum(Tensor self, Tensor other) -> Tensor

    Emits ``max`` (NaN propagates, as in torch).

    Raises:
        RuntimeError: complex operands (torch's message: they have no order).
    """
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other))
    if jnp.issubdtype(a.dtype, jnp.complexfloating):
        raise RuntimeError("maximum not implemented for complex tensors.")
    return jnp.maximum(a, b)


@lowering(aten.minimum.default)
def lower_minimum_default(ctx, self, other):
    """minimum(Tensor self, Tensor other) -> Tensor

    Emits ``min`` (NaN propagates, as in torch).

    Raises:
        RuntimeError: complex operands (torch's message: they have no order).
    """
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other))
    if jnp.issubdtype(a.dtype, jnp.complexfloating):
        raise RuntimeError("minimum not implemented for complex tensors.")
    return jnp.minimum(a, b)


@lowering(aten.fmax.default)
def lower_fmax_default(ctx, self, other):
    """fmax(Tensor self, Tensor other) -> Tensor

    ``max`` that ignores a NaN operand (NaN only when both are NaN).
    """
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other))
    return jnp.fmax(a, b)


@lowering(aten.fmin.default)
def lower_fmin_default(ctx, self, other):
    """fmin(Tensor self, Tensor other) -> Tensor

    ``min`` that ignores a NaN operand (NaN only when both are NaN).
    """
    a, b = promote(self, other, dtype=out_dtype(ctx, self, other))
    return jnp.fmin(a, b)

"""Elementwise binary arithmetic: add, sub, mul, div, remainder, fmod, pow, atan2, hypot, …

Torch semantics, not NumPy's: the result dtype is the one torch.export recorded
(torch type promotion: int / int is float32, a python float turns an int tensor
into float32, a 0-d tensor only wins when of a higher kind); float16/bfloat16
compute in float32 and round once, as torch's CPU kernels do ("opmath");
integer division and remainder follow torch's sign rules.

The small helpers at the top are shared with the sibling families ``unary``,
``compare``, ``activation`` and ``convert``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.dtypes import is_floating, is_integer
from converter.lowering.helpers import check_fits, is_array, promote, result_type, wrapped_int
from converter.lowering.registry import lowering

aten = torch.ops.aten

_HALF = (np.dtype(jnp.float16), np.dtype(jnp.bfloat16))


def out_dtype(ctx, *args, floating: bool = False):
    """The op's result dtype: what torch.export recorded, else torch's promotion of ``args``.

    ``floating`` makes an integer/bool promotion result float32, as torch does for
    ops such as true division, ``exp`` or ``atan2``.
    """
    dt = ctx.out_dtype
    if dt is None:
        dt = result_type(*args)
        if floating and not is_floating(dt):
            dt = jnp.float32
    return dt


def opmath(dtype):
    """The dtype torch's CPU kernels compute in: float32 for float16/bfloat16, else ``dtype``."""
    return jnp.float32 if np.dtype(dtype) in _HALF else dtype


def operands(ctx, *args, floating: bool = False):
    """Promote ``args`` to the opmath of the result dtype; return ``(*arrays, result_dtype)`` (a python int
    outside an integer dtype's range wraps around into it, as in torch's arithmetic)."""
    dt = out_dtype(ctx, *args, floating=floating)
    return (*promote(*args, dtype=opmath(dt), wrap=True), dt)


def bcast(a, b):
    """Broadcast two arrays to one shape (``lax`` binary ops do not broadcast)."""
    return jnp.broadcast_arrays(a, b) if a.shape != b.shape else (a, b)


def _scaled(b, alpha):
    """``alpha * b`` with alpha=1 left out (bool tensors only allow alpha=1); a python int alpha outside an integer
    ``b``'s range wraps around into it, as torch casts it (``uint8 + uint8 * -3``)."""
    if type(alpha) is bool and b.dtype != jnp.bool_:  # (torch's alpha checks)
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if type(alpha) is float and (jnp.issubdtype(b.dtype, jnp.integer) or b.dtype == jnp.bool_):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")
    if not is_array(alpha) and alpha == 1:
        return b
    if type(alpha) is int and jnp.issubdtype(b.dtype, jnp.integer):
        alpha = wrapped_int(alpha, b.dtype)
    return b * jnp.asarray(alpha, b.dtype)


@lowering(aten.add.Tensor, aten.add.Scalar)
def lower_add_tensor(ctx, self, other, alpha=1):
    """add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor

    Also add.Scalar. Emits ``add`` (and ``mul`` when alpha != 1); bool + bool is
    ``or`` as in torch; float16/bfloat16 add in float32 and round once.
    """
    a, b, dt = _rounded_operands(ctx, self, other)
    return (a + _scaled(b, _rounded_scalar(alpha, dt))).astype(dt)


@lowering(aten.sub.Tensor, aten.sub.Scalar)
def lower_sub_tensor(ctx, self, other, alpha=1):
    """sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor

    Also sub.Scalar (``rsub`` decomposes to sub.Tensor). Emits ``sub`` (and
    ``mul`` when alpha != 1).

    Raises:
        RuntimeError: an operand is bool (torch's message: use ``~`` or ``^``).
    """
    bools = [type(x) is bool or (is_array(x) and x.dtype == jnp.bool_) for x in (self, other)]
    if all(bools):
        raise RuntimeError("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                           "`logical_xor()` operator instead.")
    if any(bools):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                           "to invert a mask, use the `~` or `logical_not()` operator instead.")
    a, b, dt = _rounded_operands(ctx, self, other)
    return (a - _scaled(b, _rounded_scalar(alpha, dt))).astype(dt)


@lowering(aten.mul.Tensor, aten.mul.Scalar)
def lower_mul_tensor(ctx, self, other):
    """mul.Tensor(Tensor self, Tensor other) -> Tensor

    Also mul.Scalar. Emits ``mul`` (bool * bool is ``and``). A floating value times a bool tensor multiplies by
    ``select(mask, 1, 0)`` (:func:`~converter.lowering.helpers.astype`), so ``inf * False`` is NaN and
    ``-2 * False`` is -0, as IEEE and the CPU give.
    """
    a, b, dt = operands(ctx, self, other)
    return (a * b).astype(dt)


@lowering(aten.div.Tensor, aten.div.Scalar, aten.true_divide.Tensor, aten.true_divide.Scalar)
def lower_div_tensor(ctx, self, other):
    """div.Tensor(Tensor self, Tensor other) -> Tensor

    Also div.Scalar and their ``true_divide`` aliases (``torch.compile`` with dynamic shapes keeps
    ``true_divide`` for a tensor divided by a symbolic float). True division: integer and bool
    inputs divide as float32 (torch's default dtype). Emits ``div``.
    """
    a, b, dt = operands(ctx, self, other, floating=True)
    return (a / b).astype(dt)


def _floor_div_float(a, b):
    """torch's ``div_floor_floating`` (c10/util/generic_math.h), the Python ``//`` rule.

    Not ``floor(a / b)``: 1.0 // 0.1 is 9.0. Division by zero gives ``a / b``.
    """
    a, b = bcast(a, b)
    mod = jax.lax.rem(a, b)
    div = (a - mod) / b
    div = jnp.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    floordiv = jnp.floor(div)
    floordiv = jnp.where(div - floordiv > 0.5, floordiv + 1, floordiv)
    floordiv = jnp.where(div == 0, jnp.copysign(jnp.zeros_like(div), a / b), floordiv)
    return jnp.where(b == 0, a / b, floordiv)


def _floor_div_int(a, b):
    """Integer floor division: truncating ``div`` corrected by one when signs differ."""
    a, b = bcast(a, b)
    q = jax.lax.div(a, b)
    r = jax.lax.rem(a, b)
    return jnp.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)


@lowering(aten.div.Tensor_mode, aten.div.Scalar_mode)
def lower_div_tensor_mode(ctx, self, other, *, rounding_mode=None):
    """div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor

    Also div.Scalar_mode; ``//`` and floor_divide decompose to it. ``None``: true
    division; ``"trunc"``: ``trunc(a / b)``, the quotient rounded to the result's dtype first
    (integers: ``div``, which truncates);
    ``"floor"``: torch's floor division (Python rule, see ``_floor_div_float``).
    Deviation: integer division by zero gives -1 (XLA) where torch raises.
    """
    if rounding_mode is None:
        return lower_div_tensor(ctx, self, other)
    a, b, dt = operands(ctx, self, other)
    if rounding_mode == "trunc":
        # (half precision: the quotient rounded to the dtype, then truncated, as the CPU's kernel: 17.95 → 18)
        out = jax.lax.div(*bcast(a, b)) if not is_floating(a.dtype) else jnp.trunc((a / b).astype(dt))
    elif rounding_mode == "floor":
        out = _floor_div_int(a, b) if not is_floating(a.dtype) else _floor_div_float(a, b)
    else:
        raise UnsupportedOpError(str(aten.div.Tensor_mode), ctx.target, ctx.location,
                                 reason=f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    return out.astype(dt)


def _remainder(a, b):
    """torch's remainder: C ``fmod`` moved onto the divisor's side (sign of the divisor)."""
    a, b = bcast(a, b)
    r = jax.lax.rem(a, b)
    return jnp.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)


@lowering(aten.remainder.Tensor, aten.remainder.Scalar)
def lower_remainder_tensor(ctx, self, other):
    """remainder.Tensor(Tensor self, Tensor other) -> Tensor

    Also remainder.Scalar. Python ``%``: the result has the divisor's sign. Emits
    ``rem``, ``add``, ``select``. Deviation: integer remainder by zero is the
    dividend (XLA) where torch raises; float remainder by zero is NaN as in torch.
    """
    a, b, dt = _rounded_operands(ctx, self, other)
    return _remainder(a, b).astype(dt)


def _rounded_operands(ctx, *args, floating: bool = False):
    """:func:`operands`, each operand first cast to a float16/bfloat16 result's dtype, as torch's CPU kernels of add,
    sub, pow, atan2, hypot, remainder and fmod take a python scalar or a 0-d tensor of another dtype (its
    TensorIterator casts inputs to the common dtype; ``mul``, ``div``, ``lerp``, ``addcmul`` read such a scalar
    unrounded, in float32): bf16 ``100 % 1.3`` divides by 1.296875 (the remainder is 0.14, not the 1.2 of 1.3),
    ``1.01 - x`` subtracts from 1.0078125."""
    dt = out_dtype(ctx, *args, floating=floating)
    if np.dtype(dt) in _HALF:
        args = promote(*args, dtype=dt, wrap=True)
    return operands(ctx, *args, floating=floating)


def _rounded_scalar(x, dt):
    """A scalar operand (a python number, or the traced scalar the runtime passes for one) as the CPU's add/sub
    (``alpha``) and pow (the exponent) kernels take it: cast to a float16/bfloat16 result's dtype ``dt`` (then
    computed in float32: a product of two half values is exact there)."""
    if np.dtype(dt) not in _HALF:
        return x
    if is_array(x):
        return x.astype(dt)
    return float(np.asarray(x, dt)) if type(x) in (int, float) else x


@lowering(aten.remainder.Scalar_Tensor)
def lower_remainder_scalar_tensor(ctx, self, other):
    """remainder.Scalar_Tensor(Scalar self, Tensor other) -> Tensor

    ``scalar % tensor``; same rule as remainder.Tensor.
    """
    a, b, dt = _rounded_operands(ctx, self, other)
    return _remainder(a, b).astype(dt)


@lowering(aten.fmod.Tensor, aten.fmod.Scalar)
def lower_fmod_tensor(ctx, self, other):
    """fmod.Tensor(Tensor self, Tensor other) -> Tensor

    Also fmod.Scalar. C ``fmod``: the result has the dividend's sign. Emits ``rem``.
    """
    a, b, dt = _rounded_operands(ctx, self, other)
    return jax.lax.rem(*bcast(a, b)).astype(dt)


def _int_pow(base, exp):
    """torch's integer ``pow`` (``powi``): square-and-multiply over every exponent bit
    (wrapping like C), and for negative exponents 1 for base 1, ±1 for base -1, else 0."""
    bits = jnp.iinfo(exp.dtype).bits
    base, exp = jnp.broadcast_arrays(base, exp)

    def step(_, carry):
        acc, b, e = carry
        acc = jnp.where((e & 1) == 1, acc * b, acc)
        return acc, b * b, jax.lax.shift_right_logical(e, jnp.ones_like(e))

    acc, _, _ = jax.lax.fori_loop(0, bits, step, (jnp.ones_like(base), base, exp))
    if jnp.issubdtype(exp.dtype, jnp.unsignedinteger):
        return acc
    one = jnp.ones_like(base)
    neg = jnp.where(base == 1, one, jnp.where(base == -1, jnp.where((exp & 1) == 1, -one, one), jnp.zeros_like(base)))
    return jnp.where(exp < 0, neg, acc)


@lowering(aten.pow.Tensor_Tensor, aten.pow.Scalar)
def lower_pow_tensor_tensor(ctx, self, exponent):
    """pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor

    Also pow.Scalar (``scalar ** tensor``). Floats: ``pow``. Integers: exact
    square-and-multiply (a ``fori_loop`` over the exponent's bits) with torch's rules
    for negative exponents.
    """
    a, b, dt = _rounded_operands(ctx, self, exponent)
    if is_integer(dt):
        return _int_pow(a, b).astype(dt)
    return _power(a, b).astype(dt)


def _power(x, e):
    """``x ** e``; for complex, ``0 ** e`` is 0 when ``e``'s real part is positive, as torch's CPU kernel (XLA's
    complex ``pow`` goes through ``log(0)`` and gives NaN)."""
    out = jnp.power(x, e)
    if not jnp.issubdtype(out.dtype, jnp.complexfloating):
        return out
    return jnp.where((x == 0) & (jnp.real(e) > 0), jnp.zeros((), out.dtype), out)


@lowering(aten.pow.Tensor_Scalar)
def lower_pow_tensor_scalar(ctx, self, exponent):
    """pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor

    Follows torch's fast paths: exponent 2/3 → ``mul``, 0.5 → ``sqrt``, -0.5 →
    ``rsqrt``, -1 → ``div``, -2 → ``1/(x*x)``; other integral exponents on integer
    tensors → ``integer_pow``; otherwise ``pow``.
    """
    dt = out_dtype(ctx, self, exponent)
    x = self.astype(opmath(dt))
    exponent = _rounded_scalar(exponent, dt)
    if is_array(exponent):
        e = jnp.asarray(exponent, x.dtype)
        return (_int_pow(x, e) if is_integer(dt) else _power(x, e)).astype(dt)
    if is_integer(dt):
        if type(exponent) is int and exponent < 0 and not isinstance(exponent, bool):
            raise RuntimeError("Integers to negative integer powers are not allowed.")
        check_fits(exponent, dt)  # torch refuses an exponent the dtype cannot hold
        e = int(exponent)
        return (jax.lax.integer_pow(x, e) if e >= 0 else _int_pow(x, jnp.asarray(e, x.dtype))).astype(dt)
    fast = {0: jnp.ones_like, 1: lambda v: v, 2: lambda v: v * v, 3: lambda v: v * v * v, 0.5: jnp.sqrt,
            -0.5: jax.lax.rsqrt, -1: lambda v: 1 / v, -2: lambda v: 1 / (v * v)}
    f = fast.get(exponent) if not isinstance(exponent, bool) else None
    out = f(x) if f is not None else _power(x, jnp.asarray(exponent, x.dtype))
    return out.astype(dt)


@lowering(aten.atan2.default)
def lower_atan2_default(ctx, self, other):
    """atan2(Tensor self, Tensor other) -> Tensor

    Emits ``atan2``; integer inputs give float32.
    """
    a, b, dt = _rounded_operands(ctx, self, other, floating=True)
    return jnp.arctan2(a, b).astype(dt)


@lowering(aten.hypot.default)
def lower_hypot_default(ctx, self, other):
    """hypot(Tensor self, Tensor other) -> Tensor

    Overflow-safe ``sqrt(a*a + b*b)`` (``jnp.hypot``: scales by the larger operand).
    """
    a, b, dt = _rounded_operands(ctx, self, other, floating=True)
    return jnp.hypot(a, b).astype(dt)


@lowering(aten.copysign.Tensor, aten.copysign.Scalar)
def lower_copysign_tensor(ctx, self, other):
    """copysign.Tensor(Tensor self, Tensor other) -> Tensor

    Also copysign.Scalar. ``|self|`` with the sign bit of ``other`` (-0.0 counts as
    negative); integer inputs give float32.
    """
    a, b, dt = operands(ctx, self, other, floating=True)
    return jnp.copysign(a, b).astype(dt)


@lowering(aten.ldexp.Tensor)
def lower_ldexp_tensor(ctx, self, other):
    """ldexp.Tensor(Tensor self, Tensor other) -> Tensor

    ``self * 2**other`` as torch defines it (``mul`` and ``exp2``).
    """
    a, b, dt = operands(ctx, self, other, floating=True)
    return (a * jnp.exp2(b)).astype(dt)


@lowering(aten.nextafter.default)
def lower_nextafter_default(ctx, self, other):
    """nextafter(Tensor self, Tensor other) -> Tensor

    The next representable value after ``self`` towards ``other``, in the result
    dtype itself (no opmath: the step depends on the dtype).
    """
    dt = out_dtype(ctx, self, other)
    a, b = promote(self, other, dtype=dt)
    return jnp.nextafter(a, b)


def _gcd(a, b):
    """Euclid's algorithm on ``|a|``, ``|b|`` in their integer dtype, as torch's ``calc_gcd`` (``abs`` of
    the most negative value wraps to itself, so ``gcd(INT_MIN, INT_MIN)`` is ``INT_MIN``)."""
    a, b = jnp.abs(a), jnp.abs(b)

    def step(ab):
        a, b = ab
        live = a != 0
        return jnp.where(live, jax.lax.rem(b, jnp.where(live, a, 1)), a), jnp.where(live, a, b)

    return jax.lax.while_loop(lambda ab: jnp.any(ab[0] != 0), step, (a, b))[1]


@lowering(aten.gcd.default)
def lower_gcd_default(ctx, self, other):
    """gcd(Tensor self, Tensor other) -> Tensor

    Integer dtypes only (torch refuses floats). Emits a ``while`` loop of ``rem``/``select``
    (Euclid) until every element is done, in int32 for the narrower types (C's integer
    promotion, as torch's kernel computes), wrapped into the dtype.
    """
    dt = out_dtype(ctx, self, other)
    a, b = promote(self, other, dtype=_c_int(dt))
    return _gcd(*bcast(a, b)).astype(dt)


@lowering(aten.lcm.default)
def lower_lcm_default(ctx, self, other):
    """lcm(Tensor self, Tensor other) -> Tensor

    ``|a / gcd(a, b) * b|`` computed as C does (int32 for narrower types), then wrapped into the
    dtype as torch's result is; 0 where the gcd is 0.
    """
    dt = out_dtype(ctx, self, other)
    a, b = bcast(*promote(self, other, dtype=_c_int(dt)))
    g = _gcd(a, b)
    return jnp.where(g == 0, jnp.zeros_like(a), jnp.abs(jax.lax.div(a, jnp.where(g == 0, 1, g)) * b)).astype(dt)


def _c_int(dt):
    """The type C arithmetic on ``dt`` happens in (integer promotion: int32 for the narrower types).

    Raises:
        TypeError: ``dt`` is not an integer type (torch's ``gcd``/``lcm`` refuse floats and bool; the runtime then
            raises the CPU's own error).
    """
    if not jnp.issubdtype(dt, jnp.integer):
        raise TypeError(f"gcd/lcm take integer tensors, not {np.dtype(dt)}")
    return jnp.int32 if np.dtype(dt).itemsize < 4 else dt

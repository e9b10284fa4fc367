"""``torch.special`` functions beyond the elementwise basics of ``unary``: scaled and
first-order Bessel functions, ``erfcx``, ``log_ndtr``, ``ndtri``, the Hurwitz zeta, the
regularized incomplete gamma functions, ``frexp``.

Each is the matching ``jax.scipy.special`` function (or a closed form), computed in
the opmath of the result dtype and rounded once, as ``unary``'s functions are. They are
what ``torch.distributions`` reaches (``Gamma.cdf`` → ``igamma``, ``VonMises`` → ``i0e`` /
``i1e``) and what Kaiser windows and probit links use.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.lowering.ops.elementwise import operands
from converter.lowering.ops.unary import _float_unary
from converter.lowering.registry import lowering

aten = torch.ops.aten
special = jax.scipy.special


@lowering(aten.special_i0e.default)
def lower_special_i0e_default(ctx, self):
    """special_i0e(Tensor self) -> Tensor

    Exponentially scaled modified Bessel function of order 0, ``exp(-|x|) i0(x)``.
    """
    return _float_unary(ctx, self, special.i0e)


@lowering(aten.special_i1.default, aten.special_modified_bessel_i1.default)
def lower_special_i1_default(ctx, self):
    """special_i1(Tensor self) -> Tensor

    Modified Bessel function of the first kind, order 1 (also ``special_modified_bessel_i1``).
    """
    return _float_unary(ctx, self, special.i1)


@lowering(aten.special_i1e.default)
def lower_special_i1e_default(ctx, self):
    """special_i1e(Tensor self) -> Tensor

    Exponentially scaled modified Bessel function of order 1, ``exp(-|x|) i1(x)``.
    """
    return _float_unary(ctx, self, special.i1e)


@lowering(aten.special_modified_bessel_i0.default)
def lower_special_modified_bessel_i0_default(ctx, self):
    """special_modified_bessel_i0(Tensor self) -> Tensor

    ``i0`` under its ``torch.special`` name.
    """
    return _float_unary(ctx, self, special.i0)


@lowering(aten.special_erfcx.default)
def lower_special_erfcx_default(ctx, self):
    """special_erfcx(Tensor self) -> Tensor

    Scaled complementary error function ``exp(x²) erfc(x)`` (finite where ``erfc`` underflows).
    """
    return _float_unary(ctx, self, special.erfcx)


@lowering(aten.special_log_ndtr.default)
def lower_special_log_ndtr_default(ctx, self):
    """special_log_ndtr(Tensor self) -> Tensor

    Log of the standard normal CDF, accurate in the far left tail (``jax.scipy.special.log_ndtr``) and, for
    positive inputs, as ``log1p(-erfc(x/√2)/2)``, as PyTorch computes it: jax's float32 formula takes the log
    of ``ndtr(x)`` rounded near 1 there (6.5% off at x = 4.94).
    """
    def log_ndtr(x):
        right = jnp.log1p(-0.5 * jax.lax.erfc(jnp.maximum(x, 0) * (0.5 ** 0.5)))
        return jnp.where(x > 0, right, special.log_ndtr(x))

    return _float_unary(ctx, self, log_ndtr)


@lowering(aten.special_ndtri.default)
def lower_special_ndtri_default(ctx, self):
    """special_ndtri(Tensor self) -> Tensor

    Inverse of the standard normal CDF (``±inf`` at 1 and 0, NaN outside [0, 1]).
    """
    return _float_unary(ctx, self, special.ndtri)


@lowering(aten.special_spherical_bessel_j0.default)
def lower_special_spherical_bessel_j0_default(ctx, x):
    """special_spherical_bessel_j0(Tensor x) -> Tensor

    ``sin(x) / x``, 1 at 0 and 0 at ±inf (as torch).
    """
    def j0(v):
        safe = jnp.where(v == 0, 1, v)
        return jnp.where(v == 0, 1, jnp.where(jnp.isinf(v), 0, jnp.sin(safe) / safe))

    return _float_unary(ctx, x, j0)


def _float_binary(ctx, a, b, fn):
    a, b, dt = operands(ctx, a, b, floating=True)
    return fn(a, b).astype(dt)


@lowering(aten.special_zeta.default, aten.special_zeta.other_scalar, aten.special_zeta.self_scalar)
def lower_special_zeta_default(ctx, self, other):
    """special_zeta(Tensor self, Tensor other) -> Tensor

    Hurwitz zeta ``Σₖ (k + other)^-self`` (also the scalar overloads), with torch's (Cephes') values
    where the series has none: ``inf`` at ``self == 1`` and for a non-positive integer ``other``,
    ``nan`` for ``self < 1`` and for a non-positive ``other`` with a non-integer ``self``.
    """
    return _float_binary(ctx, self, other, _zeta)


def _zeta(x, q):
    z = special.zeta(x, q)
    pole = q <= 0
    z = jnp.where(pole & (q == jnp.floor(q)), jnp.inf, jnp.where(pole & (x != jnp.floor(x)), jnp.nan, z))
    return jnp.where(x == 1, jnp.inf, jnp.where(x < 1, jnp.nan, z))


@lowering(aten.igamma.default)
def lower_igamma_default(ctx, self, other):
    """igamma(Tensor self, Tensor other) -> Tensor

    Regularized lower incomplete gamma ``P(self, other)`` (``jax.scipy.special.gammainc``), with torch's values at
    the edges of its domain (:func:`_gamma_edges`: ``P(0, x > 0) = 1``, ``P(a, 0) = 0``, ``P(inf, x) = 0``…).
    """
    return _float_binary(ctx, self, other, lambda a, x: _gamma_edges(a, x, special.gammainc(a, x), lower=True))


@lowering(aten.igammac.default)
def lower_igammac_default(ctx, self, other):
    """igammac(Tensor self, Tensor other) -> Tensor

    Regularized upper incomplete gamma ``Q(self, other) = 1 - P(self, other)``, with torch's values at the edges
    of its domain (:func:`_gamma_edges`).
    """
    return _float_binary(ctx, self, other, lambda a, x: _gamma_edges(a, x, special.gammaincc(a, x), lower=False))


def _gamma_edges(a, x, value, lower: bool):
    """``value`` (``P(a, x)`` when ``lower``, else ``Q(a, x)``) where torch's ``calc_igamma`` / ``calc_igammac``
    take boundary values, checked in their order: NaN for a negative ``a`` or ``x``; at ``a == 0``, ``P = 1`` /
    ``Q = 0`` for ``x > 0`` (else NaN); at ``x == 0``, ``P = 0`` / ``Q = 1``; at an infinite ``a``, NaN for an
    infinite ``x`` else ``P = 0`` / ``Q = 1``; at an infinite ``x``, ``P = 1`` / ``Q = 0``."""
    one, zero = (1.0, 0.0) if lower else (0.0, 1.0)  # P's values at x → inf / x = 0 (Q's are the other way)
    a_inf, x_inf = jnp.isinf(a), jnp.isinf(x)
    out = jnp.where(x_inf, one, value)
    out = jnp.where(a_inf, jnp.where(x_inf, jnp.nan, zero), out)
    out = jnp.where(x == 0, zero, out)
    out = jnp.where(a == 0, jnp.where(x > 0, one, jnp.nan), out)
    return jnp.where((x < 0) | (a < 0), jnp.nan, out).astype(value.dtype)


@lowering(aten.frexp.Tensor)
def lower_frexp_tensor(ctx, self):
    """frexp.Tensor(Tensor self) -> (Tensor mantissa, Tensor exponent)

    ``self = mantissa * 2**exponent`` with ``|mantissa|`` in [0.5, 1); ``exponent`` is int32; zeros,
    infinities and NaN give themselves and exponent 0. Computed on the bits (:func:`_frexp_bits`), so
    subnormal inputs split exactly as the CPU's ``std::frexp`` splits them: a backend that flushes
    subnormals to zero (XLA on the CPU) would see them as 0 in any arithmetic.
    """
    return _frexp_bits(self)


#: Per float dtype: (signed integer dtype of its width, mantissa bits, exponent bias).
_FLOAT_LAYOUT = {
    jnp.dtype(jnp.float16): (jnp.int16, 10, 15),
    jnp.dtype(jnp.bfloat16): (jnp.int16, 7, 127),
    jnp.dtype(jnp.float32): (jnp.int32, 23, 127),
    jnp.dtype(jnp.float64): (jnp.int64, 52, 1023),
}


def _frexp_bits(x):
    """``frexp`` of ``x`` on its bit pattern (see :func:`lower_frexp_tensor`).

    A subnormal is ``frac * 2**(1 - bias - mbits)`` for its integer fraction field ``frac``: converting
    ``frac`` to the float type is exact and gives a normal number, whose own fields give the mantissa and
    the exponent's offset. Only masks, right shifts of non-negative words, integer adds and selects: every
    exporter has them."""
    idt, mbits, bias = _FLOAT_LAYOUT[jnp.dtype(x.dtype)]
    bits = jax.lax.bitcast_convert_type(x, idt)
    magnitude = bits & jnp.iinfo(idt).max
    sign = bits & jnp.iinfo(idt).min
    field, frac = _float_fields(magnitude, mbits)
    sub_field, sub_frac = _float_fields(jax.lax.bitcast_convert_type(frac.astype(x.dtype), idt), mbits)
    subnormal = field == 0
    special = (subnormal & (frac == 0)) | (field == (jnp.iinfo(idt).max >> mbits))  # zeros, inf, NaN
    exponent = jnp.where(subnormal, sub_field.astype(jnp.int32) - (2 * bias + mbits - 2),
                         field.astype(jnp.int32) - (bias - 1))
    frac = jnp.where(subnormal, sub_frac, frac)
    mantissa = jax.lax.bitcast_convert_type(sign | jnp.asarray((bias - 1) << mbits, idt) | frac, x.dtype)
    return jnp.where(special, x, mantissa), jnp.where(special, 0, exponent).astype(jnp.int32)


def _float_fields(magnitude, mbits):
    """The biased exponent and the fraction field of a sign-cleared float bit pattern."""
    return magnitude >> mbits, magnitude & ((1 << mbits) - 1)

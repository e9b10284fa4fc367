"""Elementwise unary math: neg, abs, sign, exp/log family, roots, trig, erf, rounding, …

Integer and bool inputs of the float-valued functions give float32, as torch's
type promotion does; float16/bfloat16 compute in float32 and round once, as
torch's CPU kernels do. (``sigmoid`` and ``tanh`` live in ``activation``.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.lowering.dtypes import is_floating
from converter.lowering.ops.elementwise import opmath, out_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _float_unary(ctx, x, fn):
    """Apply ``fn`` in the opmath of the (floating) result dtype and round to it."""
    dt = out_dtype(ctx, x, floating=True)
    return fn(x.astype(opmath(dt))).astype(dt)


@lowering(aten.neg.default)
def lower_neg_default(ctx, self):
    """neg(Tensor self) -> Tensor

    Emits ``neg`` (integers wrap: -INT_MIN == INT_MIN, as in torch).
    """
    return -self


@lowering(aten.abs.default)
def lower_abs_default(ctx, self):
    """abs(Tensor self) -> Tensor

    Emits ``abs``; a bool tensor is refused, as by torch's CPU and CUDA kernels.
    """
    if self.dtype == jnp.bool_:
        raise NotImplementedError("\"abs\" not implemented for 'Bool'")
    return jnp.abs(self)


@lowering(aten.sign.default)
def lower_sign_default(ctx, self):
    """sign(Tensor self) -> Tensor

    ``(x > 0) - (x < 0)`` as torch computes it, so sign(NaN) is 0 (``lax.sign``
    would give NaN) and sign(-0.0) is 0. ``sgn`` decomposes to this for real inputs.
    """
    if self.dtype == jnp.bool_:
        return self
    return (self > 0).astype(self.dtype) - (self < 0).astype(self.dtype)


@lowering(aten.signbit.default)
def lower_signbit_default(ctx, self):
    """signbit(Tensor self) -> Tensor

    True where the sign bit is set (-0.0 and negative NaNs included); integers: ``x < 0``.
    """
    if is_floating(self.dtype):
        return jnp.signbit(self)
    return self < 0 if self.dtype != jnp.bool_ else jnp.zeros(self.shape, jnp.bool_)


@lowering(aten.exp.default)
def lower_exp_default(ctx, self):
    """exp(Tensor self) -> Tensor

    Emits ``exp``.
    """
    return _float_unary(ctx, self, jnp.exp)


@lowering(aten.exp2.default)
def lower_exp2_default(ctx, self):
    """exp2(Tensor self) -> Tensor

    Emits ``exp2`` (``exp(x * ln 2)`` in XLA).
    """
    return _float_unary(ctx, self, jnp.exp2)


@lowering(aten.expm1.default)
def lower_expm1_default(ctx, self):
    """expm1(Tensor self) -> Tensor

    Emits ``exponential_minus_one`` (accurate near 0).
    """
    return _float_unary(ctx, self, jnp.expm1)


@lowering(aten.log.default)
def lower_log_default(ctx, self):
    """log(Tensor self) -> Tensor

    Emits ``log`` (log(0) = -inf, log(x<0) = NaN).
    """
    return _float_unary(ctx, self, jnp.log)


@lowering(aten.log2.default)
def lower_log2_default(ctx, self):
    """log2(Tensor self) -> Tensor

    Emits ``log(x) / ln 2``.
    """
    return _float_unary(ctx, self, jnp.log2)


@lowering(aten.log10.default)
def lower_log10_default(ctx, self):
    """log10(Tensor self) -> Tensor

    Emits ``log(x) / ln 10``.
    """
    return _float_unary(ctx, self, jnp.log10)


@lowering(aten.log1p.default)
def lower_log1p_default(ctx, self):
    """log1p(Tensor self) -> Tensor

    Emits ``log_plus_one`` (accurate near 0).
    """
    return _float_unary(ctx, self, jnp.log1p)


@lowering(aten.sqrt.default)
def lower_sqrt_default(ctx, self):
    """sqrt(Tensor self) -> Tensor

    Emits ``sqrt``.
    """
    return _float_unary(ctx, self, jnp.sqrt)


@lowering(aten.rsqrt.default)
def lower_rsqrt_default(ctx, self):
    """rsqrt(Tensor self) -> Tensor

    Emits ``rsqrt`` (rsqrt(0) = inf).
    """
    return _float_unary(ctx, self, jax.lax.rsqrt)


@lowering(aten.reciprocal.default)
def lower_reciprocal_default(ctx, self):
    """reciprocal(Tensor self) -> Tensor

    Emits ``1 / x``; integer inputs give float32.
    """
    return _float_unary(ctx, self, lambda x: 1 / x)


@lowering(aten.sin.default)
def lower_sin_default(ctx, self):
    """sin(Tensor self) -> Tensor

    Emits ``sine``.
    """
    return _float_unary(ctx, self, jnp.sin)


@lowering(aten.cos.default)
def lower_cos_default(ctx, self):
    """cos(Tensor self) -> Tensor

    Emits ``cosine``.
    """
    return _float_unary(ctx, self, jnp.cos)


@lowering(aten.tan.default)
def lower_tan_default(ctx, self):
    """tan(Tensor self) -> Tensor

    Emits ``tan``.
    """
    return _float_unary(ctx, self, jnp.tan)


@lowering(aten.asin.default)
def lower_asin_default(ctx, self):
    """asin(Tensor self) -> Tensor

    Emits ``asin`` (NaN outside [-1, 1]).
    """
    return _float_unary(ctx, self, jnp.arcsin)


@lowering(aten.acos.default)
def lower_acos_default(ctx, self):
    """acos(Tensor self) -> Tensor

    Emits ``acos`` (NaN outside [-1, 1]).
    """
    return _float_unary(ctx, self, jnp.arccos)


@lowering(aten.atan.default)
def lower_atan_default(ctx, self):
    """atan(Tensor self) -> Tensor

    Emits ``atan``.
    """
    return _float_unary(ctx, self, jnp.arctan)


@lowering(aten.sinh.default)
def lower_sinh_default(ctx, self):
    """sinh(Tensor self) -> Tensor

    Emits ``sinh``.
    """
    return _float_unary(ctx, self, jnp.sinh)


@lowering(aten.cosh.default)
def lower_cosh_default(ctx, self):
    """cosh(Tensor self) -> Tensor

    Emits ``cosh``.
    """
    return _float_unary(ctx, self, jnp.cosh)


@lowering(aten.asinh.default)
def lower_asinh_default(ctx, self):
    """asinh(Tensor self) -> Tensor

    Emits ``asinh``.
    """
    return _float_unary(ctx, self, jnp.arcsinh)


@lowering(aten.acosh.default)
def lower_acosh_default(ctx, self):
    """acosh(Tensor self) -> Tensor

    Emits ``acosh`` (NaN below 1).
    """
    return _float_unary(ctx, self, jnp.arccosh)


@lowering(aten.atanh.default)
def lower_atanh_default(ctx, self):
    """atanh(Tensor self) -> Tensor

    Emits ``atanh`` (±inf at ±1, NaN outside).
    """
    return _float_unary(ctx, self, jnp.arctanh)


@lowering(aten.erf.default)
def lower_erf_default(ctx, self):
    """erf(Tensor self) -> Tensor

    Emits ``erf``.
    """
    return _float_unary(ctx, self, jax.lax.erf)


@lowering(aten.erfc.default)
def lower_erfc_default(ctx, self):
    """erfc(Tensor self) -> Tensor

    Emits ``erfc`` (accurate in the tails, unlike ``1 - erf``).
    """
    return _float_unary(ctx, self, jax.lax.erfc)


@lowering(aten.erfinv.default)
def lower_erfinv_default(ctx, self):
    """erfinv(Tensor self) -> Tensor

    Emits ``erf_inv`` (±inf at ±1, NaN outside [-1, 1]).
    """
    return _float_unary(ctx, self, jax.lax.erf_inv)


@lowering(aten.lgamma.default)
def lower_lgamma_default(ctx, self):
    """lgamma(Tensor self) -> Tensor

    Emits ``lgamma`` (inf at the poles 0, -1, -2, …).
    """
    return _float_unary(ctx, self, jax.lax.lgamma)


def _digamma(x):
    # torch: digamma(±0) = ∓inf (the pole's one-sided limit); lax.digamma gives NaN there.
    return jnp.where(x == 0, jnp.copysign(jnp.full_like(x, jnp.inf), -x), jax.lax.digamma(x))


@lowering(aten.digamma.default)
def lower_digamma_default(ctx, self):
    """digamma(Tensor self) -> Tensor

    Emits ``digamma``; at ±0 gives ∓inf as torch does (lax gives NaN); NaN at the
    negative integers.
    """
    return _float_unary(ctx, self, _digamma)


@lowering(aten.polygamma.default)
def lower_polygamma_default(ctx, n, self):
    """polygamma(int n, Tensor self) -> Tensor

    The n-th derivative of digamma: ``digamma`` for n = 0 (with torch's values at ±0),
    else ``jax.scipy.special.polygamma`` (digamma's derivative in backward is polygamma(1)),
    which is right only for x > 0 (it is a Hurwitz zeta); negative x use the reflection
    ``ψ⁽ⁿ⁾(x) = (-1)ⁿ ψ⁽ⁿ⁾(1 - x) - π dⁿ/dxⁿ cot(πx)``, the derivative taken by nested
    ``jvp`` (elementwise ops only; the cotangent of ``x - round(x)``, exact). For n >= 2 the poles (0, -1, -2…)
    give ``(-1)^(n+1) inf``, as torch; ``polygamma(1, inf) = 0``.
    """
    if n == 0:
        return _float_unary(ctx, self, _digamma)
    return _float_unary(ctx, self, lambda x: _polygamma(n, x))


def _polygamma(n: int, x):
    def cot(t):  # of t - round(t), exact: π·t's rounding (π·(-3.002)) cost 1e-4 relative near the poles; at
        # the poles themselves, of t, whose rounding gives torch's large finite trigamma there
        r = jnp.where(t == jnp.floor(t), t, t - jnp.floor(t + 0.5))
        return jnp.cos(jnp.pi * r) / jnp.sin(jnp.pi * r)

    d = cot
    for _ in range(n):
        d = (lambda f: lambda t: jax.jvp(f, (t,), (jnp.ones_like(t),))[1])(d)
    neg = x < 0
    direct = jax.scipy.special.polygamma(n, jnp.where(neg, 1 - x, x))
    value = jnp.where(neg, (-1) ** n * direct - jnp.pi * d(x), direct)
    if n < 2:  # (torch's trigamma gives large finite values at the negative poles: so does this; 0 at inf)
        return jnp.where(x == jnp.inf, jnp.zeros_like(value), value)
    pole = (x <= 0) & (x == jnp.floor(x))  # 0, -1, -2…: (-1)^(n+1) inf, as torch
    return jnp.where(pole, jnp.asarray((-1) ** (n + 1) * jnp.inf, value.dtype), value)


@lowering(aten.i0.default)
def lower_i0_default(ctx, self):
    """i0(Tensor self) -> Tensor

    Modified Bessel function of the first kind, order 0 (``jax.scipy.special.i0``:
    ``exp(|x|) * i0e(x)``).
    """
    return _float_unary(ctx, self, jax.scipy.special.i0)


def _integral_passthrough(ctx, x, fn):
    """Rounding ops: integer and bool tensors are returned unchanged, as in torch."""
    if not is_floating(x.dtype):
        return x
    return _float_unary(ctx, x, fn)


@lowering(aten.floor.default)
def lower_floor_default(ctx, self):
    """floor(Tensor self) -> Tensor

    Emits ``floor``; integer tensors pass through.
    """
    return _integral_passthrough(ctx, self, jnp.floor)


@lowering(aten.ceil.default)
def lower_ceil_default(ctx, self):
    """ceil(Tensor self) -> Tensor

    Emits ``ceil``; integer tensors pass through.
    """
    return _integral_passthrough(ctx, self, jnp.ceil)


@lowering(aten.trunc.default)
def lower_trunc_default(ctx, self):
    """trunc(Tensor self) -> Tensor

    Emits ``sign(x) * floor(|x|)`` (``jnp.trunc``); ``fix`` and ``frac`` decompose
    to it; integer tensors pass through.
    """
    return _integral_passthrough(ctx, self, jnp.trunc)


@lowering(aten.round.default)
def lower_round_default(ctx, self):
    """round(Tensor self) -> Tensor

    Emits ``round_nearest_even`` (half to even: round(2.5) = 2, as torch's
    ``nearbyint``); integer tensors pass through.
    """
    return _integral_passthrough(ctx, self, jnp.round)


@lowering(aten.round.decimals)
def lower_round_decimals(ctx, self, *, decimals=0):
    """round.decimals(Tensor self, *, int decimals) -> Tensor

    torch's kernel: ``nearbyint(x * 10**d) / 10**d`` for d >= 0, else
    ``nearbyint(x / 10**-d) * 10**-d``, with ``10**|d|`` in the opmath dtype.
    """
    if not is_floating(self.dtype):
        return self
    scale = float(10 ** abs(decimals))

    def rnd(x):
        p = jnp.asarray(scale, x.dtype)
        return jnp.round(x / p) * p if decimals < 0 else jnp.round(x * p) / p

    return _float_unary(ctx, self, rnd)


def _nan_to_num_real(x, nan, posinf, neginf):
    info = jnp.finfo(x.dtype)
    with np.errstate(over="ignore"):  # (a replacement beyond the dtype's range rounds to inf, as on the CPU: silently)
        nan, big, small = (np.asarray(v, x.dtype) for v in (0.0 if nan is None else nan,
                                                            info.max if posinf is None else posinf,
                                                            info.min if neginf is None else neginf))
    x = jnp.where(jnp.isnan(x), nan, x)
    return jnp.where(jnp.isposinf(x), big, jnp.where(jnp.isneginf(x), small, x))


@lowering(aten.nan_to_num.default)
def lower_nan_to_num_default(ctx, self, nan=None, posinf=None, neginf=None):
    """nan_to_num(Tensor self, float? nan=None, float? posinf=None, float? neginf=None) -> Tensor

    NaN → ``nan`` (0), +inf → ``posinf`` (the dtype's largest), -inf → ``neginf`` (its lowest), each value rounded
    to the dtype as the CPU's kernel casts it; a complex tensor's real and imaginary parts each so (torch's
    decomposition refuses complex inputs; the CPU does not); integers and bools unchanged.
    """
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        re = _nan_to_num_real(jnp.real(self), nan, posinf, neginf)
        im = _nan_to_num_real(jnp.imag(self), nan, posinf, neginf)
        return jax.lax.complex(re, im)
    if not jnp.issubdtype(self.dtype, jnp.floating):
        return self
    return _nan_to_num_real(self, nan, posinf, neginf)

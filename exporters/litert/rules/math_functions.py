"""Elementwise math functions TFLite has no builtin for (exp2, tan, the inverse trigonometric and the hyperbolic
functions, away-from-zero round, is_finite, erf), built from ATAN2 / EXP / LOG / SIN / COS / FLOOR / arithmetic
builtins. erfc, log1p and expm1 are built for both exporters in :mod:`exporters.expansions`."""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
from jax.extend.core import primitives as lax

from exporters.litert.emitter import Emitter, Val
from exporters.litert.rules import rule
from exporters.litert.rules.elementwise import elementwise, like, scalar, unary_tensor
from exporters.litert.rules.kernels import emit_like


@rule(lax.exp2_p)
def lower_exp2(em: Emitter, eqn: Any, x: Val) -> Val:
    """exp2(x) → EXP(x * ln 2)."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, unary_tensor(em, "EXP", emit_like(em, "MUL", [t, scalar(em, math.log(2), x.dtype)], t)))


class _Ops:
    """Elementwise builtins on tensors like ``t`` (its shape and layout), for the composed functions below."""

    def __init__(self, em: Emitter, t: Any, dtype: Any):
        self.em, self.t, self.dtype = em, t, dtype

    def c(self, value: float) -> Any:
        return scalar(self.em, value, self.dtype)

    def __call__(self, code: str, *xs: Any) -> Any:
        return emit_like(self.em, code, list(xs), self.t)

    def cmp(self, code: str, a: Any, b: Any) -> Any:
        return emit_like(self.em, code, [a, b], self.t, np.bool_)

    def select(self, cond: Any, a: Any, b: Any) -> Any:
        return self.em.emit_like("SELECT_V2", [cond, a, b], self.t)

    def poly(self, t: Any, coeffs: tuple) -> Any:
        """``Σ coeffs[k] · t^k`` (Horner)."""
        acc = self.c(coeffs[-1])
        for k in reversed(coeffs[:-1]):
            acc = self("ADD", self("MUL", acc, t), self.c(k))
        return acc

    def nan_through(self, t: Any, out: Any) -> Any:
        """``out`` with NaN where ``t`` is NaN (XNNPACK's EXP gives 0 for NaN)."""
        return self.select(self.cmp("NOT_EQUAL", t, t), t, out)

    def log1p(self, d: Any) -> Any:
        """log(1 + d) to float precision: its series to d⁹ for |d| < 0.1 (LOG loses the digits below float epsilon
        of 1 + d, and is off by a unit of 1 near 1), LOG(1 + d) beyond."""
        series = self("MUL", d, self.poly(d, tuple((-1) ** k / (k + 1) for k in range(9))))
        small = self.cmp("LESS", unary_tensor(self.em, "ABS", d), self.c(0.1))
        return self.select(small, series, unary_tensor(self.em, "LOG", self("ADD", d, self.c(1.0))))


def _function(em: Emitter, eqn: Any, x: Val, body: Any) -> Val:
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, body(_Ops(em, t, x.dtype), t))


@rule(lax.atan_p)
def lower_atan(em: Emitter, eqn: Any, x: Val) -> Val:
    """atan(x) → ATAN2(x, 1)."""
    return _function(em, eqn, x, lambda f, t: f("ATAN2", t, f.c(1.0)))


def _root_one_minus_square(f: _Ops, t: Any) -> Any:
    return unary_tensor(f.em, "SQRT", f("MUL", f("SUB", f.c(1.0), t), f("ADD", f.c(1.0), t)))  # (NaN past ±1)


@rule(lax.asin_p)
def lower_asin(em: Emitter, eqn: Any, x: Val) -> Val:
    """asin(x) → ATAN2(x, sqrt((1 - x)(1 + x)))."""
    return _function(em, eqn, x, lambda f, t: f("ATAN2", t, _root_one_minus_square(f, t)))


@rule(lax.acos_p)
def lower_acos(em: Emitter, eqn: Any, x: Val) -> Val:
    """acos(x) → ATAN2(sqrt((1 - x)(1 + x)), x)."""
    return _function(em, eqn, x, lambda f, t: f("ATAN2", _root_one_minus_square(f, t), t))


_LN2 = math.log(2.0)


@rule(lax.sinh_p)
def lower_sinh(em: Emitter, eqn: Any, x: Val) -> Val:
    """sinh(x) → ``(e^|x| - e^-|x|) / 2`` with x's sign (``e^(|x| - ln 2)`` past 80, where e^|x| overflows first);
    the series to x⁹ below 1, where the difference cancels."""
    def body(f: _Ops, t: Any) -> Any:
        a = unary_tensor(em, "ABS", t)
        e = unary_tensor(em, "EXP", a)
        mid = f("MUL", f("SUB", e, f("DIV", f.c(1.0), e)), f.c(0.5))
        mid = f.select(f.cmp("LESS", a, f.c(80.0)), mid, unary_tensor(em, "EXP", f("SUB", a, f.c(_LN2))))
        x2 = f("MUL", a, a)
        series = f.c(1 / 362880)
        for k in (1 / 5040, 1 / 120, 1 / 6, 1.0):
            series = f("ADD", f("MUL", series, x2), f.c(k))
        out = f.select(f.cmp("LESS", a, f.c(1.0)), f("MUL", series, a), mid)
        return f.nan_through(t, f("MUL", unary_tensor(em, "SIGN", t), out))
    return _function(em, eqn, x, body)


@rule(lax.cosh_p)
def lower_cosh(em: Emitter, eqn: Any, x: Val) -> Val:
    """cosh(x) → ``(e^|x| + e^-|x|) / 2`` (``e^(|x| - ln 2)`` past 80, where e^|x| overflows first)."""
    def body(f: _Ops, t: Any) -> Any:
        a = unary_tensor(em, "ABS", t)
        e = unary_tensor(em, "EXP", a)
        mid = f("MUL", f("ADD", e, f("DIV", f.c(1.0), e)), f.c(0.5))
        return f.nan_through(t, f.select(f.cmp("LESS", a, f.c(80.0)), mid,
                                         unary_tensor(em, "EXP", f("SUB", a, f.c(_LN2)))))
    return _function(em, eqn, x, body)


@rule(lax.asinh_p)
def lower_asinh(em: Emitter, eqn: Any, x: Val) -> Val:
    """asinh(x) → ``log1p(|x| + x² / (1 + sqrt(1 + x²)))`` with x's sign (``log|x| + ln 2`` past 1e9, where x²
    overflows first)."""
    def body(f: _Ops, t: Any) -> Any:
        a = unary_tensor(em, "ABS", t)
        x2 = f("MUL", a, a)
        d = f("ADD", a, f("DIV", x2, f("ADD", f.c(1.0), unary_tensor(em, "SQRT", f("ADD", f.c(1.0), x2)))))
        big = f("ADD", unary_tensor(em, "LOG", a), f.c(_LN2))
        out = f.select(f.cmp("LESS", a, f.c(1e9)), f.log1p(d), big)
        return f("MUL", unary_tensor(em, "SIGN", t), out)
    return _function(em, eqn, x, body)


@rule(lax.acosh_p)
def lower_acosh(em: Emitter, eqn: Any, x: Val) -> Val:
    """acosh(x) → ``log1p((x - 1) + sqrt((x - 1)(x + 1)))`` (``log x + ln 2`` past 1e9; NaN below 1)."""
    def body(f: _Ops, t: Any) -> Any:
        m = f("SUB", t, f.c(1.0))
        d = f("ADD", m, unary_tensor(em, "SQRT", f("MUL", m, f("ADD", t, f.c(1.0)))))
        big = f("ADD", unary_tensor(em, "LOG", t), f.c(_LN2))
        out = f.select(f.cmp("LESS", t, f.c(1e9)), f.log1p(d), big)
        return f.select(f.cmp("LESS", t, f.c(1.0)), f.c(np.nan), out)
    return _function(em, eqn, x, body)


@rule(lax.atanh_p)
def lower_atanh(em: Emitter, eqn: Any, x: Val) -> Val:
    """atanh(x) → ``log1p(2|x| / (1 - |x|)) / 2`` with x's sign (±inf at ±1, NaN past them)."""
    def body(f: _Ops, t: Any) -> Any:
        a = unary_tensor(em, "ABS", t)
        d = f("DIV", f("MUL", a, f.c(2.0)), f("SUB", f.c(1.0), a))
        out = f("MUL", f.log1p(d), f.c(0.5))
        out = f.select(f.cmp("EQUAL", a, f.c(1.0)), f.c(np.inf), out)
        return f("MUL", unary_tensor(em, "SIGN", t), out)
    return _function(em, eqn, x, body)


@rule(lax.tan_p)
def lower_tan(em: Emitter, eqn: Any, x: Val) -> Val:
    """tan → SIN / COS."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, emit_like(em, "DIV", [unary_tensor(em, "SIN", t), unary_tensor(em, "COS", t)], t))


@rule(lax.round_p)
def lower_round(em: Emitter, eqn: Any, x: Val) -> Val:
    """round → ROUND (half to even); away-from-zero rounding → ``sign(x) * (f + (|x| - f >= 0.5))`` with
    ``f = floor(|x|)`` (``|x| - f`` is exact; ``floor(|x| + 0.5)`` is not: 0.49999997 + 0.5 rounds to 1)."""
    if eqn.params.get("rounding_method") == jax.lax.RoundingMethod.TO_NEAREST_EVEN:
        return elementwise(em, eqn, "ROUND", [x])
    t = em.tensor_of(x, x.perm)
    a = unary_tensor(em, "ABS", t)
    fl = unary_tensor(em, "FLOOR", a)
    half = emit_like(em, "GREATER_EQUAL", [emit_like(em, "SUB", [a, fl], t), scalar(em, 0.5, x.dtype)], t, np.bool_)
    up = emit_like(em, "ADD", [fl, em.cast(half, x.dtype)], t)
    return like(em, eqn, x, emit_like(em, "MUL", [unary_tensor(em, "SIGN", t), up], t))


@rule(lax.is_finite_p)
def lower_is_finite(em: Emitter, eqn: Any, x: Val) -> Val:
    """is_finite(x) → ``x - x == 0`` (NaN and ±inf give NaN)."""
    t = em.tensor_of(x, x.perm)
    d = emit_like(em, "SUB", [t, t], t)
    return like(em, eqn, x, emit_like(em, "EQUAL", [d, scalar(em, 0, x.dtype)], t, np.bool_))


# Rational approximation of erf used by XLA/Eigen for float32 (|error| < 2e-7 on [-4, 4]).
_ERF_ALPHA = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
              -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_BETA = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
             -1.42647390514189e-02)


def erf_tensor(em: Emitter, t: Any, dtype: Any) -> Any:
    """Emit erf(t) as a clamp and two polynomials (TFLite has no ERF builtin)."""
    c = emit_like(em, "MAXIMUM", [emit_like(em, "MINIMUM", [t, scalar(em, 4.0, dtype)], t),
                                 scalar(em, -4.0, dtype)], t)
    x2 = emit_like(em, "MUL", [c, c], t)
    f = _Ops(em, t, dtype)  # (the coefficients are listed from the highest power down)
    p = emit_like(em, "MUL", [c, f.poly(x2, _ERF_ALPHA[::-1])], t)
    return emit_like(em, "DIV", [p, f.poly(x2, _ERF_BETA[::-1])], t)


@rule(lax.erf_p)
def lower_erf(em: Emitter, eqn: Any, x: Val) -> Val:
    """erf → rational approximation (see :func:`erf_tensor`)."""
    em.note("erf outside GELU is computed with XLA's float32 rational approximation (no TFLite ERF builtin)")
    return like(em, eqn, x, erf_tensor(em, em.tensor_of(x, x.perm), x.dtype))

"""Elementwise math functions TFLite has no builtin for (exp2, log1p, expm1, tan, away-from-zero round,
is_finite, erf, erfc), built from EXP / LOG / SIN / COS / FLOOR / arithmetic builtins."""

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


@rule(lax.log1p_p)
def lower_log1p(em: Emitter, eqn: Any, x: Val) -> Val:
    """log1p(x) → LOG(1 + x)."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, unary_tensor(em, "LOG", emit_like(em, "ADD", [t, scalar(em, 1, x.dtype)], t)))


@rule(lax.expm1_p)
def lower_expm1(em: Emitter, eqn: Any, x: Val) -> Val:
    """expm1(x) → EXP(x) - 1."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, emit_like(em, "SUB", [unary_tensor(em, "EXP", t), scalar(em, 1, x.dtype)], t))


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

    def poly(coeffs: tuple) -> Any:
        acc = None
        for k in coeffs:
            acc = scalar(em, k, dtype) if acc is None else emit_like(em, 
                "ADD", [emit_like(em, "MUL", [acc, x2], t), scalar(em, k, dtype)], t)
        return acc

    p = emit_like(em, "MUL", [c, poly(_ERF_ALPHA)], t)
    return emit_like(em, "DIV", [p, poly(_ERF_BETA)], t)


@rule(lax.erf_p)
def lower_erf(em: Emitter, eqn: Any, x: Val) -> Val:
    """erf → rational approximation (see :func:`erf_tensor`)."""
    em.note("erf outside GELU is computed with XLA's float32 rational approximation (no TFLite ERF builtin)")
    return like(em, eqn, x, erf_tensor(em, em.tensor_of(x, x.perm), x.dtype))


@rule(lax.erfc_p)
def lower_erfc(em: Emitter, eqn: Any, x: Val) -> Val:
    """erfc → 1 - erf."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, emit_like(em, "SUB", [scalar(em, 1.0, x.dtype), erf_tensor(em, t, x.dtype)], t))

"""Primitives both exporters build from others, written once as JAX functions of the same semantics.

Neither ONNX nor TFLite has an operator for these; each is written here with primitives both exporters have
rules for (elementwise arithmetic, ``exp``, ``floor``, ``erf``, comparisons, selects), and the shared walker
(:class:`~exporters.jaxpr_walk.JaxprTranslator`) translates its jaxpr through the target's own rules. A rule an
exporter has for the primitive itself comes first.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import primitives as lax

from exporters.rule_table import Unsupported

#: ``erfc(z) ≈ t·exp(-z² + P(t))`` with ``t = 1 / (1 + z/2)`` for ``z ≥ 0`` (Chebyshev fit, relative error
#: below 1.1e-7 for every z ≥ 0: W. H. Press et al., Numerical Recipes, §6.2); P's coefficients, lowest first.
_ERFC_TAIL = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398,
              1.48851587, -0.82215223, 0.17087277)


def _poly(t: Any, coeffs: tuple) -> Any:
    acc = jnp.full_like(t, coeffs[-1])
    for c in reversed(coeffs[:-1]):
        acc = acc * t + c
    return acc


def erfc(x: Any, **_: Any) -> Any:
    """``erfc(x)`` to a relative ~4e-6 in float32 over its whole range (``1 - erf`` is 0 past x ≈ 4, and
    its relative error grows from x ≈ 1: ``log_ndtr``, ``erfcx`` and the normal CDF's tails read it).

    ``1 - erf(|x|)`` below 0.5, the tail formula :data:`_ERFC_TAIL` above; ``z²`` in the exponent is split
    as ``h² + (z - h)(z + h)`` with ``h`` = z to 12 bits, whose square is exact, so the rounding of ``z²``
    (up to 4e-6 of ``exp``'s argument near z = 9) does not reach the result; ``erfc(-x) = 2 - erfc(x)``."""
    z = jnp.abs(x)
    t = 1 / (1 + 0.5 * z)
    h = jnp.floor(z * 4096) / 4096
    tail = t * jnp.exp(-h * h) * jnp.exp((h - z) * (z + h) + _poly(t, _ERFC_TAIL))
    beyond = 27.5 if x.dtype == jnp.float64 else 10.0  # (erfc underflows there: 0, not inf * 0)
    tail = jnp.where(z > beyond, jnp.zeros_like(z), tail)
    positive = jnp.where(z < 0.5, 1 - jax.lax.erf(z), tail)
    return jnp.where(x < 0, 2 - positive, positive)


def _series_terms(x: Any) -> int:
    return 17 if x.dtype == jnp.float64 else 9  # (|x| < 0.1: the first term left out is below the dtype's epsilon)


def log1p(x: Any, **_: Any) -> Any:
    """``log1p(x)``: its series for ``|x| < 0.1`` (``log(1 + x)`` loses every digit of x below the epsilon of 1),
    ``log(1 + x)`` beyond."""
    series = x * _poly(x, tuple((-1) ** k / (k + 1) for k in range(_series_terms(x))))
    return jnp.where(jnp.abs(x) < 0.1, series, jnp.log(1 + x))


def expm1(x: Any, **_: Any) -> Any:
    """``expm1(x)``: its series for ``|x| < 0.1`` (``exp(x) - 1`` loses the digits below the epsilon of 1),
    ``exp(x) - 1`` beyond; NaN passed through (LiteRT's XNNPACK ``EXP`` gives 0 for NaN)."""
    series = x * _poly(x, tuple(1 / math.factorial(k + 1) for k in range(_series_terms(x))))
    return jnp.where(x != x, x, jnp.where(jnp.abs(x) < 0.1, series, jnp.exp(x) - 1))


#: ``erfinv(x) = x · P(w)`` with ``w = -log((1 - x)(1 + x))``: P in ``w - 2.5`` below w = 5, in ``sqrt(w) - 3`` above
#: (M. Giles, "Approximating the erfinv function", GPU Computing Gems, 2011: single precision; 2.5e-7 relative
#: against SciPy in float32). Coefficients from the highest power down.
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                   -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                0.00943887047, 1.00167406, 2.83297682)


def erf_inv(x: Any, **_: Any) -> Any:
    """``erfinv(x)`` for float32 and narrower (:data:`_ERFINV_CENTRAL`); ``±inf`` at ±1, NaN beyond.

    Raises:
        Unsupported: a float64 input (the approximation has float32's digits only)."""
    if x.dtype == jnp.float64:
        raise Unsupported("erfinv of float64: the exported approximation has float32 precision only")
    w = -jnp.log((1 - x) * (1 + x))
    central = _poly(w - 2.5, _ERFINV_CENTRAL[::-1])
    tail = _poly(jnp.sqrt(jnp.maximum(w, 5.0)) - 3, _ERFINV_TAIL[::-1])
    out = jnp.where(w < 5, central, tail) * x
    a = jnp.abs(x)
    return jnp.where(a == 1, x * jnp.inf, jnp.where(a > 1, jnp.nan, out))


#: Primitive → a JAX function of its operands (and its params as keywords: ``accuracy`` is ignored) computing it.
EXPANSIONS: dict[Any, Callable] = {
    lax.erfc_p: erfc,
    lax.log1p_p: log1p,
    lax.expm1_p: expm1,
    lax.erf_inv_p: erf_inv,
}

_TRACED: dict = {}


def expansion_jaxpr(eqn: Any) -> Any:
    """The ClosedJaxpr of ``eqn``'s expansion for its operand types (traced once per primitive, types and params)."""
    fn = EXPANSIONS[eqn.primitive]
    avals = tuple(jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars)
    try:
        key = (eqn.primitive, tuple((a.shape, np.dtype(a.dtype)) for a in avals), tuple(sorted(eqn.params.items())))
        hash(key)
    except TypeError:  # (an unhashable param: traced each time)
        key = None
    closed = _TRACED.get(key) if key is not None else None
    if closed is None:
        with jax.enable_x64(True):  # (64-bit values stay 64-bit)
            closed = jax.make_jaxpr(lambda *xs: fn(*xs, **eqn.params))(*avals)
        if key is not None:
            _TRACED[key] = closed
    return closed


__all__ = ["EXPANSIONS", "expansion_jaxpr", "erfc", "log1p", "expm1", "erf_inv"]

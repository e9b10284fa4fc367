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
from jax._src.lax import special as jax_special
from jax.extend.core import primitives as lax

from exporters.linalg_expansions import LINALG_EXPANSIONS
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


#: Lanczos' approximation ``Γ(z + 1) = √(2π) tᶻ⁺¹ᐟ² e⁻ᵗ A(z)``, ``t = z + g + 1/2``, ``A(z) = c₀ + Σᵢ cᵢ/(z + i)``
#: with g = 7 and these nine ``cᵢ`` (P. Godfrey's set; ~1e-15 relative over the right half-plane).
_LANCZOS_G = 7.0
_LANCZOS = (0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313, -176.61502916214059,
            12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6, 1.5056327351493116e-7)


def _lanczos(x: Any) -> tuple:
    """For ``x ≥ 1/2``: ``(t, A, A')`` of :data:`_LANCZOS` at ``z = x - 1``."""
    z = x - 1
    a, da = jnp.full_like(x, _LANCZOS[0]), jnp.zeros_like(x)
    for i, c in enumerate(_LANCZOS[1:], start=1):
        r = 1 / (z + i)
        a, da = a + c * r, da - c * r * r
    return z + _LANCZOS_G + 0.5, a, da


def _reflected(x: Any) -> tuple:
    """``(x < 1/2, the reflected argument 1 - x there (else x), πr)`` with ``r = x - round(x)`` in [-1/2, 1/2]:
    ``sin(πx) = ±sin(πr)`` and ``tan(πx) = tan(πr)``, without the rounding of ``πx`` for large ``|x|``."""
    left = x < 0.5
    return left, jnp.where(left, 1 - x, x), math.pi * (x - jnp.floor(x + 0.5))


def lgamma(x: Any, **_: Any) -> Any:
    """``lgamma(x) = log|Γ(x)|``: :data:`_LANCZOS` for ``x ≥ 1/2``, the reflection
    ``log π - log|sin πx| - lgamma(1 - x)`` below; ``inf`` at the poles (0, -1, -2, …) and at ``±inf``, as
    torch's. ``(z + 1/2)·log t - t`` is evaluated as ``(z + 1/2 - t / log t)·log t`` (no overflow before the
    result does)."""
    left, y, pr = _reflected(x)
    t, a, _ = _lanczos(y)
    log_t = jnp.log(t)
    right = 0.5 * math.log(2 * math.pi) + (y - 0.5 - t / log_t) * log_t + jnp.log(a)
    out = jnp.where(left, math.log(math.pi) - jnp.log(jnp.abs(jnp.sin(pr))) - right, right)
    return jnp.where(jnp.isinf(x), jnp.inf, out)


def digamma(x: Any, **_: Any) -> Any:
    """``digamma(x) = Γ'(x)/Γ(x)``: the derivative of :data:`_LANCZOS`' logarithm, ``log t - g/t + A'/A``, for
    ``x ≥ 1/2``, the reflection ``digamma(1 - x) - π/tan(πx)`` below; torch's values at the poles: ``∓inf`` at
    ``±0``, NaN at the negative integers (and at ``-inf``), ``inf`` at ``inf``."""
    left, y, pr = _reflected(x)
    t, a, da = _lanczos(y)
    right = jnp.log(t) - _LANCZOS_G / t + da / a
    out = jnp.where(left, right - math.pi * jnp.cos(pr) / jnp.sin(pr), right)
    out = jnp.where((x < 0) & (x == jnp.floor(x)), jnp.nan, jnp.where(x == jnp.inf, jnp.inf, out))
    return jnp.where(x == 0, -1 / x, out)  # (∓inf at ±0, without reading the sign bit)


#: Chebyshev series of the exponentially scaled modified Bessel functions, fitted here (coefficients of
#: ``numpy.polynomial.chebyshev.chebinterpolate`` of ``scipy.special.i0e``/``i1e`` in float64, degree 24 and
#: 18; ~1e-14 relative): ``i0e(x)`` and ``i1e(x)/x`` in ``x/4 - 1`` for ``0 ≤ x ≤ 8``, ``√x·i0e(x)`` and
#: ``√x·i1e(x)`` in ``16/x - 1`` for ``x ≥ 8``. Lowest order first.
_I0E_NEAR = (0.33839763720473803, -0.3046826723431984, 0.1716209015222088, -0.094901097048047667, 0.049305284239670726,
             -0.023737414805899498, 0.010546460394595043, -0.0043243099950506002, 0.001639475616941416,
             -0.00057637557453864144, 0.00018850288509596183, -5.7541950100894569e-05, 1.6448448070793013e-05,
             -4.416738358539455e-06, 1.1173875393169319e-06, -2.6707938558391076e-07, 6.0469950495728854e-08,
             -1.3000250281269609e-08, 2.6598239579368931e-09, -5.18979578499815e-10, 9.6757905175992714e-11,
             -1.7267950855236432e-11, 2.9543317227360561e-12, -4.848571937987659e-13, 7.4219637916888783e-14)
_I0E_FAR = (0.40224520550705445, 0.0033691164782556626, 6.8897583469133171e-05, 2.8913705208440185e-06,
            2.0489185895291116e-07, 2.2666689905143382e-08, 3.3962320295247882e-09, 4.9406024008777801e-10,
            1.18892644267688e-11, -3.1499154162199711e-11, -1.3215668325765244e-11, -1.7941817622245611e-12,
            7.1807472249032028e-13, 3.8528391003916043e-13, 1.5659987926291682e-14, -4.1504811283749934e-14,
            -9.2995786510049289e-15, 3.7659933651100702e-15, 2.2248285085580441e-15)
_I1E_NEAR = (0.12629359322181682, -0.17641651835783401, 0.10264365868984708, -0.052945981208094982,
             0.024726449030626502, -0.010564084894626187, 0.0041564229443128856, -0.0015135724506312536,
             0.00051228595616860005, -0.00016176081582594128, 4.7815651075567573e-05, -1.3273163656099299e-05,
             3.4702513081999176e-06, -8.5687202654383598e-07, 2.0032947546331058e-07, -4.4450591412284463e-08,
             9.3815375272983903e-09, -1.8872498779295338e-09, 3.6255913042039205e-10, -6.6634917489940739e-11,
             1.1736110540523076e-11, -1.9838001904782377e-12, 3.2207788026615986e-13, -5.0064396454683561e-14,
             7.0470326787633682e-15)
_I1E_FAR = (0.38928811750914005, -0.0097610974913614774, -0.00011058893876265452, -3.8825648088827863e-06,
            -2.5122362381034764e-07, -2.6314688463345777e-08, -3.8353803831711459e-09, -5.5897435948920901e-10,
            -1.897486261682209e-11, 3.2526016967512751e-11, 1.4125905123980949e-11, 2.035637740243302e-12,
            -7.1979995063779704e-13, -4.083612103437866e-13, -2.0772857118644377e-14, 4.2702683494529707e-14,
            1.072533874578671e-14, -3.8039746791104048e-15, -2.0378435780948596e-15)


def _chebyshev(t: Any, coeffs: tuple) -> Any:
    """``Σₖ cₖ Tₖ(t)`` by Clenshaw's recurrence, the terms below the dtype's precision left out."""
    floor = float(jnp.finfo(t.dtype).eps) * 1e-2 * abs(coeffs[0])
    n = max(k for k, c in enumerate(coeffs) if abs(c) >= floor) + 1
    b1, b2 = jnp.zeros_like(t), jnp.zeros_like(t)
    for c in reversed(coeffs[1:n]):
        b1, b2 = 2 * t * b1 - b2 + c, b1
    return t * b1 - b2 + coeffs[0]


def _scaled_bessel(x: Any, near: tuple, far: tuple) -> tuple:
    a = jnp.abs(x)
    big = jnp.maximum(a, 8.0)
    return a <= 8, _chebyshev(a / 4 - 1, near), _chebyshev(16 / big - 1, far) / jnp.sqrt(big)


def bessel_i0e(x: Any, **_: Any) -> Any:
    """``i0e(x) = e^-|x| I₀(x)`` (:data:`_I0E_NEAR`)."""
    inside, near, far = _scaled_bessel(x, _I0E_NEAR, _I0E_FAR)
    return jnp.where(inside, near, far)


def bessel_i1e(x: Any, **_: Any) -> Any:
    """``i1e(x) = e^-|x| I₁(x)``, odd (:data:`_I1E_NEAR`)."""
    inside, near, far = _scaled_bessel(x, _I1E_NEAR, _I1E_FAR)
    return jnp.where(inside, x * near, jnp.where(x < 0, -far, far))


#: ``B₂ⱼ/(2j)!`` for j = 1..12: the Euler–Maclaurin correction terms of :func:`zeta`.
_ZETA_BERNOULLI = (
    1 / 12, -1 / 720, 1 / 30240, -1 / 1209600, 1 / 47900160, -691 / 1307674368000, 1 / 74724249600,
    -3617 / 10670622842880000, 43867 / 5109094217170944000, -174611 / 802857662698291200000,
    77683 / 14101100039391805440000, -236364091 / 1693824136731743669452800000)
_ZETA_TERMS = 9


def zeta(x: Any, q: Any, **_: Any) -> Any:
    """The Hurwitz zeta ``Σₖ (q + k)^-x`` for ``x > 1``, ``q > 0`` (elsewhere the lowering chooses torch's values):
    the first :data:`_ZETA_TERMS` terms, then Euler–Maclaurin's integral, half term and twelve corrections at
    ``a = q + 9`` (:data:`_ZETA_BERNOULLI`)."""
    total = jnp.zeros_like(q)
    for k in range(_ZETA_TERMS):
        total = total + jnp.power(q + k, -x)
    a = q + _ZETA_TERMS
    head = jnp.power(a, -x)
    total = total + jnp.power(a, 1 - x) / (x - 1) + 0.5 * head  # (a^(1-x) itself: a·a^-x underflows first)
    term = x * head / a  # x(x+1)…(x+2j-2)·a^(-x-2j+1), one product (the rising factorial alone overflows)
    for j, b in enumerate(_ZETA_BERNOULLI):
        total = total + b * term
        term = term * ((x + 2 * j + 1) * (x + 2 * j + 2) / (a * a))
    return jnp.where(q == jnp.inf, jnp.nan, total)  # (NaN at q = inf, as torch's and XLA's)



def polygamma(m: Any, x: Any, **_: Any) -> Any:
    """``polygamma(m, x)``, the m-th derivative of digamma: :func:`digamma` for ``m = 0``, else
    ``(-1)^(m+1) m! ζ(m + 1, x)`` (:func:`zeta`; for ``x > 0``: the lowering reflects negative x); NaN for a
    negative or fractional ``m``, as ``lax.polygamma``."""
    m = jnp.broadcast_to(m, x.shape)
    sign = jnp.where(jnp.floor(m / 2) * 2 == m, -1.0, 1.0).astype(x.dtype)
    out = sign * jnp.exp(lgamma(m + 1)) * zeta(m + 1, x)
    out = jnp.where(m == 0, digamma(x), out)
    return jnp.where((m < 0) | (m != jnp.floor(m)), jnp.nan, out)

def igamma(a: Any, x: Any, **_: Any) -> Any:
    """The regularized lower incomplete gamma function ``P(a, x)``: JAX's own implementation (a series or a
    continued fraction, each a ``while`` loop until every element converges: a loop in the exported file)."""
    return jax_special.igamma_impl(a, x, dtype=a.dtype)


def igammac(a: Any, x: Any, **_: Any) -> Any:
    """The regularized upper incomplete gamma function ``Q(a, x) = 1 - P(a, x)``: JAX's own implementation
    (see :func:`igamma`)."""
    return jax_special.igammac_impl(a, x, dtype=a.dtype)


#: Primitive → a JAX function of its operands (and its params as keywords: ``accuracy`` is ignored) computing it.
EXPANSIONS: dict[Any, Callable] = {
    lax.erfc_p: erfc,
    lax.log1p_p: log1p,
    lax.expm1_p: expm1,
    lax.erf_inv_p: erf_inv,
    lax.lgamma_p: lgamma,
    lax.digamma_p: digamma,
    lax.bessel_i0e_p: bessel_i0e,
    lax.bessel_i1e_p: bessel_i1e,
    lax.zeta_p: zeta,
    lax.polygamma_p: polygamma,
    lax.igamma_p: igamma,
    lax.igammac_p: igammac,
    **LINALG_EXPANSIONS,  # (LU and triangular solves of small matrices, unrolled)
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


__all__ = ["EXPANSIONS", "expansion_jaxpr", "erfc", "log1p", "expm1", "erf_inv", "lgamma", "digamma", "bessel_i0e",
           "bessel_i1e", "zeta", "polygamma", "igamma", "igammac"]

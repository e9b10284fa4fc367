"""Bessel functions of integer order 0 and 1 that JAX lacks: ``torch.special.bessel_j0/j1``,
``bessel_y0/y1``, ``modified_bessel_k0/k1`` and their exponentially scaled forms; and ``airy_ai``,
from the Bessel functions of order ±1/3 (its Maclaurin series for |x| ≤ 2).

Computed from integral representations with fixed quadratures (static loops, no data-dependent
control flow), and asymptotic expansions for large arguments:

* ``J_n(x) = (1/2π) ∫₀^{2π} cos(nτ − x sin τ) dτ``: the trapezoid rule on the full period
  (exact to rounding once the point count exceeds |x| by a margin: 128 points for |x| ≤ 40);
* ``Y_n(x) = (1/π) ∫₀^π sin(x sin τ − nτ) dτ − (1/π) ∫₀^∞ (e^{nt} + (−1)ⁿ e^{−nt}) e^{−x sinh t} dt``
  (Gauss–Legendre, 96 nodes, the second integral cut where ``x sinh t = 100``) for 1 ≤ x ≤ 40, the
  power series around 0 (with its logarithm) below 1;
* ``K_n(x) = ∫₀^∞ e^{−x cosh t} cosh(nt) dt``: the trapezoid rule (256 steps) up to where
  ``x (cosh t − 1) = 60`` (an even, analytic integrand: the error falls exponentially with the step);
* above 40, Hankel's expansions of J and Y (ten terms, coefficients from their product formula).

As torch: ``K_n``, ``Y_n`` are NaN for x < 0 and infinite at 0 (``Y_n`` → −∞), ``K_n(∞) = 0``;
``J_1(−x) = −J_1(x)``. In float64 these agree with SciPy's to ~1e-12 (K: ~1e-14), torch's CPU kernels to ~1e-8
(torch's own float64 J0/Y0 are that far from SciPy's).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.lowering.ops.unary import _float_unary
from converter.lowering.registry import lowering

aten = torch.ops.aten
lax = jax.lax

_SMALL, _LARGE = 1.0, 40.0
_GL_T, _GL_W = np.polynomial.legendre.leggauss(96)  # nodes and weights on [-1, 1]
_EULER = 0.5772156649015329


def _hankel(x, n: int):
    """``(P, Q, χ)`` of Hankel's expansion at ``x`` (> 0): ``J = √(2/πx)(P cos χ − Q sin χ)``,
    ``Y = √(2/πx)(P sin χ + Q cos χ)``."""
    mu = 4.0 * n * n
    p, q, term = jnp.zeros_like(x), jnp.zeros_like(x), jnp.ones_like(x)
    for k in range(10):
        if k:
            term = term * (mu - (2 * k - 1) ** 2) / (k * 8.0 * x)
        sign = -1.0 if (k // 2) % 2 else 1.0
        if k % 2 == 0:
            p = p + sign * term
        else:
            q = q + sign * term
    return p, q, x - (n / 2 + 0.25) * math.pi


def _j(x, n: int):
    """``J_n(|x|)`` (the caller applies J₁'s odd sign)."""
    a = jnp.abs(x)
    small = jnp.minimum(a, _LARGE)
    points = 128

    def body(k, acc):
        tau = (2 * math.pi / points) * k
        return acc + jnp.cos(n * tau - small * jnp.sin(tau))

    trap = lax.fori_loop(0, points, body, jnp.zeros_like(a)) / points
    big = jnp.maximum(a, _LARGE)
    p, q, chi = _hankel(big, n)
    asym = jnp.sqrt(2 / (math.pi * big)) * (p * jnp.cos(chi) - q * jnp.sin(chi))
    return jnp.where(a <= _LARGE, trap, asym)


def _gauss(f, lo, hi, like):
    """``∫_lo^hi f`` by 96-node Gauss–Legendre (``lo``/``hi`` arrays or numbers, ``like``'s dtype)."""
    nodes, weights = jnp.asarray(_GL_T, like.dtype), jnp.asarray(_GL_W, like.dtype)
    half, mid = (hi - lo) / 2, (hi + lo) / 2

    def body(i, acc):
        return acc + weights[i] * f(mid + half * nodes[i])

    return half * lax.fori_loop(0, len(_GL_T), body, jnp.zeros_like(like))


def _y(x, n: int):
    """``Y_n(x)``: series below 1, integrals up to 40, Hankel above; NaN below 0, −∞ at 0."""
    mid = jnp.clip(x, _SMALL, _LARGE)
    first = _gauss(lambda t: jnp.sin(mid * jnp.sin(t) - n * t), 0.0, math.pi, mid)
    sign = 1.0 if n % 2 == 0 else -1.0
    second = _gauss(lambda t: (jnp.exp(n * t) + sign * jnp.exp(-n * t)) * jnp.exp(-mid * jnp.sinh(t)),
                    0.0, jnp.arcsinh(100 / mid), mid)
    integral = (first - second) / math.pi
    s = jnp.clip(x, 1e-30, _SMALL)
    z = -(s * s) / 4
    lead = 2 / math.pi * (jnp.log(s / 2) + _EULER) * _j(s, n)
    series, term, harmonic = jnp.zeros_like(s), jnp.ones_like(s), 0.0
    if n == 0:  # Y0 = (2/π)(ln(x/2)+γ) J0 − (2/π) Σ_{k≥1} H_k (−x²/4)^k / (k!)²
        for k in range(1, 12):
            term, harmonic = term * z / (k * k), harmonic + 1 / k
            series = series + harmonic * term
        small = lead - 2 / math.pi * series
    else:  # Y1 = (2/π)(ln(x/2)+γ) J1 − 2/(πx) − (x/2π) Σ_{k≥0} (H_k + H_{k+1}) (−x²/4)^k / (k!(k+1)!)
        for k in range(12):
            if k:
                term, harmonic = term * z / (k * (k + 1)), harmonic + 1 / k
            series = series + (2 * harmonic + 1 / (k + 1)) * term
        small = lead - 2 / (math.pi * s) - s / (2 * math.pi) * series
    big = jnp.maximum(x, _LARGE)
    p, q, chi = _hankel(big, n)
    asym = jnp.sqrt(2 / (math.pi * big)) * (p * jnp.sin(chi) + q * jnp.cos(chi))
    out = jnp.where(x < _SMALL, small, jnp.where(x <= _LARGE, integral, asym))
    return jnp.where(x > 0, out, jnp.where(x == 0, -jnp.inf, jnp.nan))


def _k(x, n: int, scaled: bool):
    """``K_n(x)`` (``e^x K_n(x)`` when ``scaled``); NaN below 0, ∞ at 0."""
    pos = jnp.where(x > 0, x, 1)
    steps = 256
    h = jnp.arccosh(1 + 60 / pos) / steps

    def body(k, acc):
        t = h * k
        return acc + jnp.where(k == 0, 0.5, 1.0) * jnp.exp(-pos * (jnp.cosh(t) - 1)) * jnp.cosh(n * t)

    s = h * lax.fori_loop(0, steps + 1, body, jnp.zeros_like(pos))
    out = jnp.where(pos == jnp.inf, 0, s if scaled else s * jnp.exp(-pos))
    return jnp.where(x > 0, out, jnp.where(x == 0, jnp.inf, jnp.nan))


@lowering(aten.special_bessel_j0.default)
def lower_special_bessel_j0_default(ctx, self):
    """special_bessel_j0(Tensor self) -> Tensor

    Bessel function of the first kind of order 0 (module docstring).
    """
    return _float_unary(ctx, self, lambda v: _j(v, 0))


@lowering(aten.special_bessel_j1.default)
def lower_special_bessel_j1_default(ctx, self):
    """special_bessel_j1(Tensor self) -> Tensor

    Bessel function of the first kind of order 1 (odd in x).
    """
    return _float_unary(ctx, self, lambda v: jnp.sign(v) * _j(v, 1))


@lowering(aten.special_bessel_y0.default)
def lower_special_bessel_y0_default(ctx, self):
    """special_bessel_y0(Tensor self) -> Tensor

    Bessel function of the second kind of order 0.
    """
    return _float_unary(ctx, self, lambda v: _y(v, 0))


@lowering(aten.special_bessel_y1.default)
def lower_special_bessel_y1_default(ctx, self):
    """special_bessel_y1(Tensor self) -> Tensor

    Bessel function of the second kind of order 1.
    """
    return _float_unary(ctx, self, lambda v: _y(v, 1))


@lowering(aten.special_modified_bessel_k0.default)
def lower_special_modified_bessel_k0_default(ctx, self):
    """special_modified_bessel_k0(Tensor self) -> Tensor

    Modified Bessel function of the second kind of order 0.
    """
    return _float_unary(ctx, self, lambda v: _k(v, 0, False))


@lowering(aten.special_modified_bessel_k1.default)
def lower_special_modified_bessel_k1_default(ctx, self):
    """special_modified_bessel_k1(Tensor self) -> Tensor

    Modified Bessel function of the second kind of order 1.
    """
    return _float_unary(ctx, self, lambda v: _k(v, 1, False))


@lowering(aten.special_scaled_modified_bessel_k0.default)
def lower_special_scaled_modified_bessel_k0_default(ctx, x):
    """special_scaled_modified_bessel_k0(Tensor x) -> Tensor

    ``exp(x) K_0(x)`` (finite where ``K_0`` underflows).
    """
    return _float_unary(ctx, x, lambda v: _k(v, 0, True))


@lowering(aten.special_scaled_modified_bessel_k1.default)
def lower_special_scaled_modified_bessel_k1_default(ctx, x):
    """special_scaled_modified_bessel_k1(Tensor x) -> Tensor

    ``exp(x) K_1(x)``.
    """
    return _float_unary(ctx, x, lambda v: _k(v, 1, True))


def _j_frac(z, nu: float):
    """``J_ν(z)`` for non-integer ν and 1 ≤ z: Schläfli's integral (Gauss–Legendre) up to 40, Hankel above."""
    mid = jnp.clip(z, _SMALL, _LARGE)
    first = _gauss(lambda t: jnp.cos(nu * t - mid * jnp.sin(t)), 0.0, math.pi, mid)
    second = _gauss(lambda t: jnp.exp(-mid * jnp.sinh(t) - nu * t), 0.0, jnp.arcsinh(100 / mid), mid)
    integral = (first - math.sin(nu * math.pi) * second) / math.pi
    big = jnp.maximum(z, _LARGE)
    p, q, chi = _hankel(big, nu)
    return jnp.where(z <= _LARGE, integral, jnp.sqrt(2 / (math.pi * big)) * (p * jnp.cos(chi) - q * jnp.sin(chi)))


#: Ai(0) and −Ai′(0)
_AI0, _AI1 = 0.3550280538878172, 0.2588194037928068


def _airy_ai(x):
    """Ai(x): the Maclaurin series for |x| ≤ 2, ``√(x/3)/π · K_{1/3}(ζ)`` above, ``√|x|/3 ·
    (J_{1/3}(ζ) + J_{−1/3}(ζ))`` below (ζ = 2|x|^{3/2}/3)."""
    s = jnp.clip(x, -2.0, 2.0)
    cube, f, g, tf, tg = s ** 3, jnp.ones_like(s), s, jnp.ones_like(s), s
    for k in range(1, 16):  # f = Σ 3^k (1/3)_k x^{3k} / (3k)!, g = Σ 3^k (2/3)_k x^{3k+1} / (3k+1)!
        tf = tf * cube / ((3 * k - 1) * 3 * k)
        tg = tg * cube / (3 * k * (3 * k + 1))
        f, g = f + tf, g + tg
    series = _AI0 * f - _AI1 * g
    a = jnp.maximum(jnp.abs(x), 2.0)
    zeta = 2 / 3 * a ** 1.5
    right = jnp.sqrt(a / 3) / math.pi * _k(zeta, 1 / 3, False)
    left = jnp.sqrt(a) / 3 * (_j_frac(zeta, 1 / 3) + _j_frac(zeta, -1 / 3))
    out = jnp.where(jnp.abs(x) <= 2, series, jnp.where(x > 0, right, left))
    return jnp.where(jnp.isinf(x), jnp.nan, out)  # as torch's kernel (the limits are 0)


@lowering(aten.special_airy_ai.default)
def lower_special_airy_ai_default(ctx, x):
    """special_airy_ai(Tensor x) -> Tensor

    The Airy function Ai (module docstring).
    """
    return _float_unary(ctx, x, _airy_ai)

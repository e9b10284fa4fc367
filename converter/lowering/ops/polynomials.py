"""Classical orthogonal polynomials of ``torch.special``: Chebyshev T/U/V/W (and their shifted
forms), Hermite H/He, Laguerre L, Legendre P, evaluated at ``x`` for a per-element degree ``n``.

Each is its three-term recurrence ``p_{k+1} = f(k, x, p_k, p_{k-1})`` run in one ``while_loop``
up to the largest degree present, every element keeping ``p`` at its own degree (``n < 0``
gives 0, as torch). The degree is a tensor (or scalar) of any dtype, truncated to an integer;
the values are computed in the opmath of the result dtype.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.lowering.ops.elementwise import operands
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _evaluate(ctx, x, n, p1, step):
    """``p_n(x)`` with ``p_0 = 1``, ``p_1 = p1(x)``, ``p_{k+1} = step(k, x, p_k, p_{k-1})``."""
    x, n, dt = operands(ctx, x, n, floating=True)
    x, n = jnp.broadcast_arrays(x, n)
    deg = jnp.trunc(n).astype(jnp.int32)
    one = jnp.ones_like(x)
    first = p1(x)
    out = jnp.where(deg == 0, one, jnp.where(deg == 1, first, jnp.zeros_like(x)))
    top = jnp.max(deg, initial=1)

    def body(carry):
        k, prev, cur, out = carry
        nxt = step(k.astype(x.dtype), x, cur, prev)
        return k + 1, cur, nxt, jnp.where(deg == k + 1, nxt, out)

    out = jax.lax.while_loop(lambda c: c[0] < top, body, (jnp.int32(1), one, first, out))[3]
    return jnp.where(deg < 0, jnp.zeros_like(out), out).astype(dt)


def _chebyshev(k, x, cur, prev):
    return 2 * x * cur - prev


def _family(ops_name):
    return (getattr(aten, ops_name).default, getattr(aten, ops_name).x_scalar, getattr(aten, ops_name).n_scalar)


@lowering(*_family("special_chebyshev_polynomial_t"))
def lower_special_chebyshev_polynomial_t(ctx, x, n):
    """special_chebyshev_polynomial_t(Tensor x, Tensor n) -> Tensor

    Chebyshev T: ``T_0 = 1``, ``T_1 = x``, ``T_{k+1} = 2x T_k - T_{k-1}`` (also the scalar overloads).
    """
    return _evaluate(ctx, x, n, lambda v: v, _chebyshev)


@lowering(*_family("special_chebyshev_polynomial_u"))
def lower_special_chebyshev_polynomial_u(ctx, x, n):
    """special_chebyshev_polynomial_u(Tensor x, Tensor n) -> Tensor

    Chebyshev U: ``U_0 = 1``, ``U_1 = 2x``, the Chebyshev recurrence.
    """
    return _evaluate(ctx, x, n, lambda v: 2 * v, _chebyshev)


@lowering(*_family("special_chebyshev_polynomial_v"))
def lower_special_chebyshev_polynomial_v(ctx, x, n):
    """special_chebyshev_polynomial_v(Tensor x, Tensor n) -> Tensor

    Chebyshev V: ``V_0 = 1``, ``V_1 = 2x - 1``, the Chebyshev recurrence.
    """
    return _evaluate(ctx, x, n, lambda v: 2 * v - 1, _chebyshev)


@lowering(*_family("special_chebyshev_polynomial_w"))
def lower_special_chebyshev_polynomial_w(ctx, x, n):
    """special_chebyshev_polynomial_w(Tensor x, Tensor n) -> Tensor

    Chebyshev W: ``W_0 = 1``, ``W_1 = 2x + 1``, the Chebyshev recurrence.
    """
    return _evaluate(ctx, x, n, lambda v: 2 * v + 1, _chebyshev)


def _shift(ctx, x):
    """``2x - 1``: torch's shifted forms evaluate the polynomial on [0, 1]; an integer ``x`` in the result's
    floating dtype first (in uint8, ``2 * 0 - 1`` wrapped to 255)."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        x = x.astype(ctx.out_dtype or jnp.float32)
    return x * 2 - 1


def _register_shifted(letter: str) -> None:
    """``special_shifted_chebyshev_polynomial_<letter>``: the Chebyshev polynomial of that letter at ``2x - 1``."""
    name = f"special_shifted_chebyshev_polynomial_{letter}"
    base = globals()[f"lower_special_chebyshev_polynomial_{letter}"]

    def lower(ctx, x, n):
        return base(ctx, _shift(ctx, x), n)

    lower.__name__ = lower.__qualname__ = f"lower_{name}"
    lower.__doc__ = (f"{name}(Tensor x, Tensor n) -> Tensor\n\n    "
                     f"``{letter.upper()}_n(2x - 1)`` (also the scalar overloads).\n    ")
    lowering(*_family(name))(lower)


for _letter in "tuvw":
    _register_shifted(_letter)


@lowering(*_family("special_hermite_polynomial_h"))
def lower_special_hermite_polynomial_h(ctx, x, n):
    """special_hermite_polynomial_h(Tensor x, Tensor n) -> Tensor

    Physicists' Hermite: ``H_0 = 1``, ``H_1 = 2x``, ``H_{k+1} = 2x H_k - 2k H_{k-1}``.
    """
    return _evaluate(ctx, x, n, lambda v: 2 * v, lambda k, v, cur, prev: 2 * v * cur - 2 * k * prev)


@lowering(*_family("special_hermite_polynomial_he"))
def lower_special_hermite_polynomial_he(ctx, x, n):
    """special_hermite_polynomial_he(Tensor x, Tensor n) -> Tensor

    Probabilists' Hermite: ``He_0 = 1``, ``He_1 = x``, ``He_{k+1} = x He_k - k He_{k-1}``.
    """
    return _evaluate(ctx, x, n, lambda v: v, lambda k, v, cur, prev: v * cur - k * prev)


@lowering(*_family("special_laguerre_polynomial_l"))
def lower_special_laguerre_polynomial_l(ctx, x, n):
    """special_laguerre_polynomial_l(Tensor x, Tensor n) -> Tensor

    Laguerre: ``L_0 = 1``, ``L_1 = 1 - x``, ``L_{k+1} = ((2k + 1 - x) L_k - k L_{k-1}) / (k + 1)``.
    """
    return _evaluate(ctx, x, n, lambda v: 1 - v, lambda k, v, cur, prev: ((2 * k + 1 - v) * cur - k * prev) / (k + 1))


@lowering(*_family("special_legendre_polynomial_p"))
def lower_special_legendre_polynomial_p(ctx, x, n):
    """special_legendre_polynomial_p(Tensor x, Tensor n) -> Tensor

    Legendre: ``P_0 = 1``, ``P_1 = x``, ``P_{k+1} = ((2k + 1) x P_k - k P_{k-1}) / (k + 1)``.
    """
    return _evaluate(ctx, x, n, lambda v: v, lambda k, v, cur, prev: ((2 * k + 1) * v * cur - k * prev) / (k + 1))
